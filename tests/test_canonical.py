"""Canonical signatures (docs/execution.md, "Fewer programs"; on by default off TPUs): a
pointwise op runs over merged dims (TPUC_CANONICAL; strict calls and the calls a fused chunk
records) and every storage's buffer is rank 1 (TPUC_FLAT_BUFFERS), so calls that compute the
same elements share one program. Both are rewrites of what is compiled, not of what is
computed: the same script runs in two fresh processes, rewrites on and off; pointwise results
must be equal bit for bit and training within the float64-derived bound, while the rewritten
process compiles fewer programs in strict mode."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(code: str, on: bool, out: str, eager: str = "strict") -> dict:
    # TPUC_HOST_FILL_MAX_KB=0: the zero_ calls below are programs here (fills upload by default)
    env = dict(os.environ, TPUC_CACHE_DIR="off", TPUC_EAGER=eager, TPUC_HOST_FILL_MAX_KB="0",
               TPUC_CANONICAL="1" if on else "0", TPUC_FLAT_BUFFERS="1" if on else "0")
    r = subprocess.run([sys.executable, "-c", code, out], capture_output=True, text=True,
                       timeout=600, env=env, cwd=HERE)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _both(code: str, tmp_path, eager: str = "strict") -> tuple[dict, dict, dict, dict]:
    a, b = str(tmp_path / "on.pt"), str(tmp_path / "off.pt")
    on, off = _run(code, True, a, eager), _run(code, False, b, eager)
    return on, off, torch.load(a), torch.load(b)


def _same_bits(x: dict, y: dict) -> None:
    assert x.keys() == y.keys()
    for k in x:
        assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape, k
        assert x[k].stride() == y[k].stride(), k
        xv = torch.view_as_real(x[k]) if x[k].is_complex() else x[k]
        yv = torch.view_as_real(y[k]) if y[k].is_complex() else y[k]
        if xv.is_floating_point():  # bits, so that -0.0 and NaNs compare too
            xv, yv = (t.contiguous().view(-1).view(torch.uint8) for t in (xv, yv))
        assert torch.equal(xv, yv), k


_OPS = r"""
import json, sys, torch
torch.manual_seed(0)
r = {}
def put(name, t):
    r[name] = t.cpu()
x3 = torch.randn(4, 6, 8, device="tpu")
x2 = torch.randn(24, 8, device="tpu")
w = torch.randn(8, device="tpu")
put("mul_bcast_3d", x3 * w)
put("mul_bcast_2d", x2 * w)
put("add_expanded", x3 + torch.randn(6, 1, device="tpu"))          # a middle dim broadcast
put("transposed", x3.transpose(1, 2).exp() + 1)                     # non-contiguous input
put("sliced", torch.sigmoid(x3[:, 1:5, ::2]))                       # a strided view
put("where", torch.where(x3 > 0, x3, torch.zeros(1, 1, 8, device="tpu")))
put("lerp", torch.lerp(x3, x3.flip(0), torch.rand(4, 6, 1, device="tpu")))
put("size_one", torch.randn(4, 1, 8, device="tpu").tanh())
put("one_element", torch.full((1, 1), 2.5, device="tpu") * torch.ones(1, 1, device="tpu"))
# type promotion: a 0-d tensor does not widen a dimensioned one; a [1, 1] tensor does
h = torch.randn(3, 5, device="tpu").half()
put("promo_0d", h + torch.tensor(1.5, device="tpu"))
put("promo_11", h + torch.full((1, 1), 1.5, device="tpu"))
put("promo_scalar", h * 3)
put("int_ops", torch.arange(24, device="tpu").view(2, 3, 4) // 3 % 5)
put("complex", torch.polar(x3.abs(), x3))
y = x3.clone(); y.mul_(2).add_(w); put("inplace", y)                 # in place, broadcast
z = torch.empty(4, 6, 8, device="tpu"); torch.mul(x3, 3, out=z); put("out", z)
v = x3.clone(); v[:, 2:4].zero_(); put("view_write", v)              # a partial write
q = torch.zeros(6, 4, device="tpu"); q.t().copy_(torch.ones(4, 6, device="tpu")); put("t_copy", q)
put("zero_a", torch.ones(16, 43, device="tpu").zero_())
put("zero_b", torch.ones(43, 16, device="tpu").zero_())
torch.save(r, sys.argv[1])
print(json.dumps({"compiles": torch.tpu.stats()["compiles"]}))
"""


@pytest.mark.parametrize("eager", ["strict", "fused"])
def test_pointwise_ops_equal_bit_for_bit_with_fewer_programs(tmp_path, eager: str) -> None:
    """Broadcasts (trailing, middle, 0-d, [1, 1]), strided and transposed inputs, in-place,
    out= and partial writes, integer and complex ops: equal bits either way, per op in strict
    mode and recorded into fused chunks; in strict mode the zero_ of [16, 43] and of
    [43, 16] share a program when the rewrites are on."""
    on, off, a, b = _both(_OPS, tmp_path, eager)
    _same_bits(a, b)
    assert a["promo_0d"].dtype == torch.float16 and a["promo_11"].dtype == torch.float32
    if eager == "strict":
        assert on["compiles"] < off["compiles"], (on, off)


F32_EPS = 2.0 ** -24


def _train(on: bool, eager: str = "strict") -> dict:
    env = dict(os.environ, TPUC_CACHE_DIR="off", TPUC_EAGER=eager,
               TPUC_CANONICAL="1" if on else "0", TPUC_FLAT_BUFFERS="1" if on else "0")
    r = subprocess.run([sys.executable, os.path.join(HERE, "train_check.py"), "transformer",
                        "--steps", "6"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_training_within_the_float64_bound_with_fewer_programs() -> None:
    """6 AdamW steps of the small transformer, rewrites on and off in strict mode and on in
    fused mode (parameters and optimizer state updated in place every step), each against
    the float64 CPU run with test_training's bound (a small multiple of the CPU's own
    float32 error). Not bit for bit: a reduction whose input arrives as a rank-1 buffer may
    be summed in another order by XLA (docs/execution.md says so); the pointwise programs
    themselves are equal bit for bit (the test above)."""
    on, off, fused = _train(True), _train(False), _train(True, "fused")
    for rep in (on, off, fused):
        assert rep["fallbacks"] == {}, rep["fallbacks"]
        assert rep["tpu_loss_err"] <= 8.0 * rep["cpu_loss_err"] + 64 * F32_EPS, rep
        assert rep["tpu_param_err"] <= 8.0 * rep["cpu_param_err"] + 64 * F32_EPS, rep
    assert sum(on["compiles_per_step"]) < sum(off["compiles_per_step"]), (on, off)


def test_user_kernels_get_inputs_in_their_shapes_with_either_buffer_rank() -> None:
    """tpuc.kernel passes each input as a buffer of exactly its tensor's shape: by default a
    storage's buffer is rank 1, and a reshaping program gives the kernel its [16, 128] input
    (test_kernel.py); test_kernel's own cases run again here with TPUC_FLAT_BUFFERS=0, where
    buffers keep the shape they were written at."""
    env = dict(os.environ, TPUC_FLAT_BUFFERS="0", TPUC_CACHE_DIR="off")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        os.path.join(HERE, "test_kernel.py"), "-k",
                        "values_and_gradients_eager or noncontiguous_input_and_view"],
                       capture_output=True, text=True, env=env, timeout=600, cwd=HERE)
    assert r.returncode == 0 and " passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
