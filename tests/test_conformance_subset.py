"""CI's slice of the OpInfo conformance sweep (tests/conformance, `make conformance`).

The ops a transformer's training step uses and one or more of each family given a lowering
since (FFT, factorisations, special functions, 3-D pooling, cross), float32, 2 sample inputs each, run through the
same worker subprocesses as the full sweep. Each must pass or be a listed known failure,
and must run natively wherever docs/op_coverage.json (the committed full sweep) says it did,
so a lowering that regresses to the CPU fallback fails here."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance import pool
from conformance.known_failures import KNOWN_FAILURES

COVERAGE = Path(__file__).resolve().parents[1] / "docs" / "op_coverage.json"

TRANSFORMER_OPS = [
    "add", "mul", "sub", "div.no_rounding_mode", "neg", "exp", "log", "sqrt", "rsqrt", "pow",
    "tanh", "sigmoid", "nn.functional.gelu", "nn.functional.silu", "nn.functional.relu",
    "softmax", "log_softmax", "nn.functional.layer_norm", "nn.functional.rms_norm",
    "nn.functional.cross_entropy", "nn.functional.embedding", "nn.functional.linear",
    "matmul", "mm", "bmm", "addmm", "sum", "mean", "amax", "var",
    "transpose", "permute", "reshape", "view", "flatten", "unsqueeze", "squeeze", "expand", "t",
    "contiguous", "cat", "stack", "where", "masked_fill", "nn.functional.dropout",
    "nn.functional.scaled_dot_product_attention", "tril", "triu", "index_select", "gather", "clamp",
]
# The FFT and factorisation families (lower/fft.c, lower/linalg.c, linalg_lu.c, linalg_qr.c; issue 34).
FFT_LINALG_OPS = [
    "fft.fft", "fft.ifft", "fft.rfft", "fft.irfft", "fft.fft2", "fft.hfft", "fft.rfftn", "stft",
    "linalg.cholesky", "linalg.cholesky_ex", "cholesky", "cholesky_solve", "cholesky_inverse",
    "linalg.solve_triangular", "triangular_solve", "linalg.lu_factor", "linalg.qr",
]
# Special functions, 3-D pooling, the tail (lower/special.c, special_poly.c, special_misc.c,
# nn_pool_nd.c, vector.c).
SPECIAL_POOL_OPS = ["i0", "special.chebyshev_polynomial_t", "special.zeta",
                    "nn.functional.adaptive_avg_pool3d", "linalg.cross"]
# The tail (issue 34): trace (lower/reduce.c), max_unpool (nn_pool_nd.c), torch.equal (a host bool).
TAIL_OPS = ["trace", "nn.functional.max_unpool2d", "equal"]
# Session 19 (issue 34): grid sampling (lower/nn_grid.c), float -> uint8 as the CPU converts
# (lower/util.c), hash_tensor (count.c, IR_RED_XOR).
TAIL_OPS += ["grid_sampler_2d", "byte", "hash_tensor"]
OPS = TRANSFORMER_OPS + FFT_LINALG_OPS + SPECIAL_POOL_OPS + TAIL_OPS
DTYPE = "float32"


@pytest.fixture(scope="module")
def outcomes() -> dict[str, dict[str, Any]]:
    results = pool.run([(op, DTYPE) for op in OPS], samples=2, workers=2, timeout_s=120)
    return {r["op"]: r for r in results}


@pytest.fixture(scope="module")
def committed() -> dict[str, Any]:
    return json.loads(COVERAGE.read_text())["ops"]


@pytest.mark.parametrize("op", OPS)
def test_op(op: str, outcomes: dict[str, dict[str, Any]], committed: dict[str, Any]) -> None:
    r = outcomes[op]
    if r["cls"] in ("mismatch", "error"):
        assert (op, DTYPE) in KNOWN_FAILURES, f"{op} {DTYPE}: {r['cls']}: {r['detail']}"
        return
    table = committed[op][DTYPE]
    if table["class"] == "native_pass":
        assert r["cls"] == "native_pass", f"{op} ran natively in the full sweep, now: {r['cls']} {r['detail']}"
    elif table["class"] == "skipped" and "ran natively" in table.get("detail", ""):  # random: shape/dtype
        assert r["cls"] == "skipped" and "ran natively" in r["detail"], f"{op}: {r['detail']}"
    else:
        assert r["cls"] != "skipped" or "random op" in r["detail"], f"{op}: skipped: {r['detail']}"
