"""Antialiased bilinear and bicubic resizing on "tpu" without the CPU
(csrc/core/lower/upsample.c, `_upsample_bilinear2d_aa` and `_upsample_bicubic2d_aa`).

`F.interpolate(..., antialias=True)` (and torchvision's Resize on tensors, antialias on by
default) ran on the CPU fallback, forward and backward. Each case here is checked against the
CPU: float64 on "tpu" against float64 on the CPU (PyTorch's float64 tolerances), float32 within
a bound derived from the CPU's own float32 error against float64, and training steps of a
model that resizes between two convolutions, its weights updated in place."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tpuc  # noqa: F401
from tpu_testing import assert_trains_as_on_the_cpu, no_fallback  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("no_fallback")

EPS32 = torch.finfo(torch.float32).eps

# (input shape, size, scale_factor, align_corners): down in both dims, up in one and down in
# the other, a scale factor (a runtime scalar), align_corners
CASES = [((2, 3, 17, 23), (8, 9), None, False),
         ((1, 2, 10, 12), (25, 5), None, False),
         ((1, 1, 16, 16), None, (0.37, 0.5), False),
         ((1, 2, 9, 11), (4, 6), None, True)]


def _run(x: torch.Tensor, gw: torch.Tensor, kw: dict, device: str, dtype: torch.dtype):
    xx = x.detach().to(device, dtype).requires_grad_()
    y = F.interpolate(xx, **kw)
    (y * gw.to(device, dtype)).sum().backward()
    return y.detach().cpu().double(), xx.grad.cpu().double()


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("shape,size,scale,align", CASES)
def test_matches_the_cpu(mode: str, shape, size, scale, align) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    kw = dict(size=size, scale_factor=scale, mode=mode, align_corners=align, antialias=True)
    out_shape = F.interpolate(x, **kw).shape
    gw = torch.randn(out_shape, generator=g, dtype=torch.float64)
    ref = _run(x, gw, kw, "cpu", torch.float64)
    got = _run(x, gw, kw, "tpu", torch.float64)
    cpu32 = _run(x, gw, kw, "cpu", torch.float32)
    got32 = _run(x, gw, kw, "tpu", torch.float32)
    for name, r, t, c, t32 in zip(("output", "input grad"), ref, got, cpu32, got32):
        torch.testing.assert_close(t, r, msg=lambda m, n=name: f"float64 {n}: {m}")
        # the same window, another summation order and the weights rounded once: 4x the CPU's
        # own float32 error against float64, plus a few ulps of the largest magnitude
        bound = 4 * (c - r).abs().max().item() + 16 * EPS32 * r.abs().max().item()
        err = (t32 - r).abs().max().item()
        assert err <= bound, f"float32 {name}: error {err:.3g} > bound {bound:.3g}"


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_training_steps_match_the_cpu(mode: str) -> None:
    """conv -> antialiased resize down -> conv, 4 SGD steps with momentum in float64, the
    parameters read back after every step."""
    def make() -> torch.nn.Module:
        torch.manual_seed(1)
        return torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.Tanh(),
                                   torch.nn.Conv2d(3, 2, 3, padding=1))

    x = torch.randn(2, 2, 20, 14, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    target = F.interpolate(x, size=(9, 6), mode="bilinear", antialias=True)

    def loss(m: torch.nn.Module, d: str) -> torch.Tensor:
        h = F.interpolate(m[:2](x.to(d)), size=(9, 6), mode="bicubic", antialias=True)
        return (m[2](h) - target.to(d)).pow(2).mean()

    assert_trains_as_on_the_cpu(make, loss, mode)
