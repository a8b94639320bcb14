"""native_layer_norm on "tpu" runs the core's lowering (lower/nn_norm.c: statistics, normalization,
weight and bias all in float32, one rounding to the 16-bit type at the end), not PyTorch's
composite, which applies weight and bias with addcmul in float16/bfloat16 after rounding the
normalized value (4 ulp from float64 at the conformance sweep's eps=-0.5 sample, the CPU 2.7).
Checked against float64 with a bound derived from the float32 computation."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tpu_testing import quiet_fallback_warnings  # noqa: F401

_UNIT = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}  # unit roundoff of the output type


def _bound(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, ns: tuple[int, ...], eps: float,
           ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Per element: the final rounding (u |ref|, plus the smallest normal's half-gap), plus the
    float32 computation's error: the normalized value carries a relative error of at most
    (n + 8) * 2^-24, times var / (var + eps) from the cancellation in var + eps, on |yhat * w|,
    and 2^-24 |b| from the last addition."""
    dims = tuple(range(x.dim() - len(ns), x.dim()))
    xd = x.double()
    n = 1
    for d in dims:
        n *= x.shape[d]
    mean = xd.mean(dims, keepdim=True)
    var = ((xd - mean) ** 2).mean(dims, keepdim=True)
    yhat = (xd - mean) / torch.sqrt(var + eps)
    cond = (var / (var + eps)).abs()
    f32 = (n + 8) * 2.0**-24 * (1 + cond) * (yhat * w.double()).abs() + 2.0**-24 * b.double().abs()
    return _UNIT[dtype] * ref.abs() + f32 + 2.0**-24


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape,ns,eps", [((2, 2, 3), (2, 3), -0.5), ((4, 8, 16), (8, 16), 1e-5),
                                          ((3, 33), (33,), 0.5)])
def test_layer_norm_16bit_close_to_float64(dtype: torch.dtype, shape: tuple[int, ...],
                                           ns: tuple[int, ...], eps: float) -> None:
    g = torch.Generator().manual_seed(sum(shape))
    x, w, b = (torch.empty(s, dtype=torch.float64).uniform_(-9, 9, generator=g).to(dtype)
               for s in (shape, ns, ns))
    ref = F.layer_norm(x.double(), ns, w.double(), b.double(), eps=eps)
    got = F.layer_norm(x.to("tpu"), ns, w.to("tpu"), b.to("tpu"), eps=eps).cpu()
    assert got.dtype == dtype
    err = (got.double() - ref).abs()
    bound = _bound(x, w, b, ns, eps, ref, dtype)
    assert bool((err <= bound).all()), (err - bound).max()
    # at least as close as the CPU's kernel on the whole (its error is the other side's)
    cpu_err = (F.layer_norm(x, ns, w, b, eps=eps).double() - ref).abs()
    assert err.max() <= cpu_err.max() + _UNIT[dtype] * ref.abs().max() * 2 ** -4


def test_conformance_sample() -> None:
    """The sweep's eps=-0.5 float16 sample (OpInfo layer_norm), no worse than the CPU."""
    from torch.testing._internal.common_methods_invocations import op_db

    op = next(o for o in op_db if o.name == "nn.functional.layer_norm")
    s = [s for s in op.sample_inputs("cpu", torch.float16) if s.kwargs.get("eps") == -0.5][0]
    x, ns, w, b = s.input, s.args[0], s.args[1], s.args[2]
    ref = F.layer_norm(x.double(), ns, w.double(), b.double(), eps=-0.5)
    got = F.layer_norm(x.to("tpu"), ns, w.to("tpu"), b.to("tpu"), eps=-0.5).cpu()
    cpu = F.layer_norm(x, ns, w, b, eps=-0.5)
    assert (got.double() - ref).abs().max() <= (cpu.double() - ref).abs().max()
    assert bool(((got.double() - ref).abs() <= _bound(x, w, b, ns, -0.5, ref, torch.float16)).all())
