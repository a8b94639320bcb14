"""A seeded fuzzer of random ATen op calls on "tpu" against PyTorch on the CPU.

Each call draws an op from OPS, a dtype it supports, shapes (0-d, empty dims, 1-4 dims,
broadcasting pairs), a layout (contiguous, transposed, strided slice, an expanded view whose
elements overlap) and values (normal, integers, NaN / inf / huge / tiny mixed in), runs the
op on identical inputs on both devices and compares with the conformance tolerance policy's
default (torch.testing.assert_close's per-dtype tolerances, NaN equal to NaN): same dtype,
same shape, same values; an op the CPU rejects must raise on "tpu" too. KNOWN lists the
documented differences (skipped, each with its reason). Reproducible: a finding prints its
seed and call number, and `--seed S --only N` replays it.

    python -m tests.reliability.fuzz --seconds 1800        # make fuzz
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

F = torch.nn.functional
FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INTS = [torch.int64, torch.int32, torch.int16, torch.uint8]
ALL = FLOATS + INTS + [torch.bool]


@dataclass(frozen=True)
class Op:
    name: str
    fn: Callable[..., Any]
    arity: int = 1          # tensor inputs (broadcast-compatible shapes)
    dtypes: tuple = tuple(FLOATS)
    min_rank: int = 0
    extra: Callable[[random.Random, list[torch.Tensor]], tuple] | None = None


def _dim(r: random.Random, ts: list[torch.Tensor]) -> tuple:
    n = ts[0].dim()
    return (r.randrange(-n, n) if n else 0,)


OPS: list[Op] = [
    # elementwise unary
    *[Op(n, getattr(torch, n)) for n in ["abs", "neg", "exp", "log", "sqrt", "sin", "cos", "tanh",
                                          "sigmoid", "floor", "ceil", "round", "trunc", "reciprocal",
                                          "rsqrt", "expm1", "log1p", "erf", "exp2", "log2", "square"]],
    Op("relu", torch.relu), Op("gelu", F.gelu), Op("silu", F.silu), Op("softplus", F.softplus),
    Op("abs_int", torch.abs, dtypes=(torch.int64, torch.int32, torch.int16)),
    Op("neg_int", torch.neg, dtypes=(torch.int64, torch.int32)),
    Op("sign", torch.sign, dtypes=tuple(FLOATS + [torch.int64, torch.int32])),
    Op("isnan", torch.isnan), Op("isfinite", torch.isfinite), Op("isinf", torch.isinf),
    Op("nan_to_num", torch.nan_to_num),
    Op("logical_not", torch.logical_not, dtypes=tuple(ALL)),
    Op("bitwise_not", torch.bitwise_not, dtypes=(torch.int64, torch.int32, torch.uint8, torch.bool)),
    # binary (with broadcasting)
    *[Op(n, getattr(torch, n), arity=2) for n in ["add", "sub", "mul", "div", "maximum", "minimum",
                                                   "atan2", "hypot", "fmod", "remainder", "copysign"]],
    *[Op(n + "_int", getattr(torch, n), arity=2, dtypes=tuple(INTS))
      for n in ["add", "sub", "mul", "maximum", "minimum"]],
    Op("floor_divide_int", torch.floor_divide, arity=2, dtypes=(torch.int64, torch.int32)),
    Op("pow", torch.pow, arity=2, dtypes=(torch.float32, torch.float64)),
    *[Op(n, getattr(torch, n), arity=2, dtypes=tuple(ALL)) for n in ["eq", "ne", "lt", "le", "gt", "ge"]],
    *[Op(n, getattr(torch, n), arity=2, dtypes=tuple(ALL)) for n in ["logical_and", "logical_or", "logical_xor"]],
    Op("bitwise_and", torch.bitwise_and, arity=2, dtypes=(torch.int64, torch.int32, torch.uint8, torch.bool)),
    Op("where", lambda a, b: torch.where(a > 0, a, b), arity=2),
    Op("lerp", lambda a, b: torch.lerp(a, b, 0.3), arity=2, dtypes=(torch.float32, torch.float64)),
    Op("clamp", lambda a: a.clamp(-0.5, 0.7)),
    Op("clamp_int", lambda a: a.clamp(-3, 5), dtypes=(torch.int64, torch.int32)),
    Op("add_scalar", lambda a: a + 2.5), Op("mul_scalar_int", lambda a: a * 3, dtypes=tuple(INTS)),
    # reductions
    *[Op(n, lambda a, d, n=n: getattr(torch, n)(a, d), extra=_dim)
      for n in ["sum", "mean", "amax", "amin", "logsumexp", "cumsum", "argmax", "argmin"]],
    Op("sum_all", torch.sum), Op("prod_dim", lambda a, d: torch.prod(a, d), extra=_dim),
    Op("sum_int", lambda a, d: torch.sum(a, d), dtypes=tuple(INTS + [torch.bool]), extra=_dim),
    Op("var", lambda a, d: torch.var(a, d), dtypes=(torch.float32, torch.float64), extra=_dim),
    Op("std", lambda a, d: torch.std(a, d, correction=0), dtypes=(torch.float32, torch.float64), extra=_dim),
    Op("norm", lambda a: torch.linalg.vector_norm(a), dtypes=(torch.float32, torch.float64)),
    Op("softmax", lambda a, d: torch.softmax(a, d), extra=_dim, min_rank=1),
    Op("log_softmax", lambda a, d: torch.log_softmax(a, d), extra=_dim, min_rank=1),
    Op("any", lambda a, d: torch.any(a, d), dtypes=tuple(ALL), extra=_dim),
    Op("all", lambda a, d: torch.all(a, d), dtypes=tuple(ALL), extra=_dim),
    Op("max_dim", lambda a, d: torch.max(a, d).values, extra=_dim, min_rank=1),
    # shape and data movement
    Op("contiguous", lambda a: a.contiguous(), dtypes=tuple(ALL)),
    Op("transpose", lambda a: a.transpose(0, -1).contiguous(), dtypes=tuple(ALL), min_rank=1),
    Op("flip", lambda a, d: a.flip(d), dtypes=tuple(ALL), extra=_dim, min_rank=1),
    Op("roll", lambda a, d: a.roll(2, d), dtypes=tuple(ALL), extra=_dim, min_rank=1),
    Op("cat", lambda a, b: torch.cat([a.reshape(-1), b.reshape(-1)]), arity=2, dtypes=tuple(ALL)),
    Op("stack", lambda a, b: torch.stack([a, a * 1]), dtypes=tuple(FLOATS)),
    Op("reshape", lambda a: a.reshape(-1), dtypes=tuple(ALL)),
    Op("tril", lambda a: a.tril(), min_rank=2, dtypes=tuple(ALL)),
    Op("repeat", lambda a: a.repeat(*([2] * a.dim())), dtypes=tuple(ALL)),
    Op("to_dtype", lambda a: a.to(torch.float32), dtypes=tuple(ALL)),
    Op("to_int", lambda a: a.clamp(-100, 100).to(torch.int32), dtypes=tuple(FLOATS)),
    Op("sort", lambda a, d: torch.sort(a, d).values, extra=_dim, min_rank=1),
    Op("cumprod", lambda a, d: torch.cumprod(a, d), extra=_dim, dtypes=(torch.float32, torch.float64)),
    # indexing with in-range indices
    Op("index_select", lambda a, d: a.index_select(d, torch.arange(a.shape[d]).flip(0).to(a.device)),
       extra=_dim, min_rank=1, dtypes=tuple(ALL)),
    Op("gather", lambda a, d: a.gather(d, torch.zeros_like(a, dtype=torch.int64)), extra=_dim, min_rank=1),
    Op("masked_fill", lambda a: a.masked_fill(a > 0, -1.0)),
    # linear algebra
    Op("matmul", lambda a, b: a @ b.transpose(-1, -2), arity=2, min_rank=2,
       dtypes=(torch.float32, torch.float64)),
]

# (op, dtype or None) -> why a difference is expected and documented (docs/reliability.md)
KNOWN: dict[tuple[str, Any], str] = {
    # found by seed 0 call 42: linalg.vector_norm(tensor(1e30)) is inf on tpu (x*x overflows
    # float32 before the square root); the CPU kernel returns |x| for a one-element input
    # (with two elements it overflows too). Since p = 0, 1, 2 are built into the program
    # the one-element case matches (tests/reliability/test_fuzz.py::
    # test_norm_of_one_large_element); kept here for the other orders and the half types.
    ("norm", torch.float32): "squares overflow float32 for |x| > 1.8e19 (CPU avoids it)",
    ("norm", torch.float16): "the same overflow in float16 (|x| > 256)",
    ("norm", torch.bfloat16): "the same overflow in bfloat16",
    # found by seed 2 call 306: gelu(-100) was -8.9e-6 on tpu, -0 on the CPU (XLA's erf stops
    # short of -1); fixed 2026-12-07 (gelu as x Phi(x) with Phi from erfc; regression tests
    # tests/reliability/test_fuzz.py::test_gelu_large_negative_inputs and
    # tests/test_ops_elementwise.py::test_gelu_is_accurate_in_both_tails). Still different:
    # gelu(+inf) is inf on tpu, as the CPU's float64 and tanh kernels give it, where the CPU's
    # float32 kernel gives nan.
    ("gelu", None): "gelu(+inf): inf on tpu, nan from the CPU's float32 kernel (see above)",
}


def _shape(r: random.Random, min_rank: int) -> list[int]:
    rank = r.choice([min_rank, min_rank, 1, 2, 3, 4][: 6]) if min_rank == 0 else r.randint(min_rank, 4)
    rank = max(rank, min_rank)
    return [r.choice([0, 1, 1, 2, 3, 5, 7]) if r.random() < 0.1 else r.choice([1, 2, 3, 4, 6, 8])
            for _ in range(rank)]


def _values(r: random.Random, shape: list[int], dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype in INTS:
        lo, hi = (0, 255) if dtype == torch.uint8 else (-50, 50)
        return torch.randint(lo, hi, shape, generator=g).to(dtype)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * r.choice([1.0, 1.0, 10.0, 1e-3])
    if x.numel() and r.random() < 0.3:  # specials
        flat = x.view(-1)
        for _ in range(r.randint(1, 3)):
            flat[r.randrange(flat.numel())] = r.choice([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e30, -1e-30])
    return x.to(dtype)


def _layout(r: random.Random, t: torch.Tensor) -> torch.Tensor:
    """The same values seen through another layout (identical on both devices)."""
    k = r.random()
    if k < 0.55 or t.dim() == 0:
        return t
    if k < 0.7:  # non-contiguous: a transposed copy viewed back
        return t.transpose(0, -1).contiguous().transpose(0, -1)
    if k < 0.85:  # strided: every other element of a doubled tensor
        big = torch.repeat_interleave(t, 2, dim=0) if t.shape[0] else t
        return big[::2] if t.shape[0] else t
    # overlapping: an expanded size-1 dim (elements share memory)
    if t.shape[0] >= 1:
        return t[:1].expand(t.shape)
    return t


def _to(x: Any, device: str) -> Any:
    if isinstance(x, torch.Tensor):
        if device == "cpu":
            return x
        if x.dim() and 0 in x.stride() and x.numel():
            # an overlapping (expanded) layout: PyTorch refuses to copy into one, so the
            # distinct elements go up and are expanded on the device
            one = tuple(slice(0, 1) if s == 0 else slice(None) for s in x.stride())
            return x[one].contiguous().to(device).expand(x.shape)
        # keep the layout: copy the base storage, then view it the same way
        base = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=device)
        base.copy_(x)
        return base
    return x


def _compare(got: Any, ref: Any) -> None:
    if isinstance(ref, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.device.type == "tpu"
        assert got.dtype == ref.dtype, (got.dtype, ref.dtype)
        assert got.shape == ref.shape, (got.shape, ref.shape)
        torch.testing.assert_close(got.cpu(), ref, equal_nan=True)
    else:
        assert got == ref


def one_call(seed: int, n: int) -> str | None:
    """Runs call n of seed; None when it agrees, else a description of the finding."""
    r = random.Random(seed * 1_000_003 + n)
    g = torch.Generator().manual_seed(seed * 7919 + n)
    op = r.choice(OPS)
    dtype = r.choice(op.dtypes)
    if (op.name, dtype) in KNOWN or (op.name, None) in KNOWN:
        return None
    shape = _shape(r, op.min_rank)
    shapes = [shape]
    for _ in range(op.arity - 1):  # broadcasting: some dims become 1, or leading dims drop
        s = [1 if r.random() < 0.3 else d for d in shape]
        if r.random() < 0.2 and s:
            s = s[1:]
        shapes.append(s)
    ins = [_layout(r, _values(r, s, dtype, g)) for s in shapes]
    extra = op.extra(r, ins) if op.extra else ()
    desc = (f"seed {seed} call {n}: {op.name} dtype={dtype} shapes={[list(t.shape) for t in ins]} "
            f"strides={[t.stride() for t in ins]} extra={extra}")
    try:
        ref = op.fn(*ins, *extra)
        cpu_error = None
    except Exception as e:  # noqa: BLE001 - the CPU's rejection is the expectation
        ref, cpu_error = None, e
    dev = [_to(t, "tpu") for t in ins]
    for a, b in zip(ins, dev):
        assert torch.equal(a.cpu(), b.cpu()) or (a.is_floating_point() and torch.allclose(a, b.cpu(), equal_nan=True)), desc
    try:
        got = op.fn(*dev, *extra)
        if isinstance(got, torch.Tensor):
            got.cpu()
    except Exception as e:  # noqa: BLE001 - compared with the CPU below
        if cpu_error is not None:
            return None
        return f"{desc}\n  tpu raised {type(e).__name__}: {str(e)[:300]}"
    if cpu_error is not None:
        return f"{desc}\n  the CPU raised {type(cpu_error).__name__}: {cpu_error}, tpu did not"
    try:
        _compare(got, ref)
    except AssertionError as e:
        return f"{desc}\n  {str(e)[:600]}"
    return None


def fuzz(seed: int, calls: int | None, seconds: float | None) -> list[str]:
    findings = []
    t0 = time.perf_counter()
    n = 0
    while (calls is None or n < calls) and (seconds is None or time.perf_counter() - t0 < seconds):
        f = one_call(seed, n)
        if f:
            findings.append(f)
        n += 1
    return findings + [f"# {n} calls in {time.perf_counter() - t0:.0f} s"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--calls", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--only", type=int, default=None, help="replay one call")
    args = ap.parse_args(argv)
    import tpuc  # noqa: F401

    if args.only is not None:
        print(one_call(args.seed, args.only) or "agrees")
        return 0
    out = fuzz(args.seed, args.calls, args.seconds)
    print("\n".join(out))
    return 1 if len(out) > 1 else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)
