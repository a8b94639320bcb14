"""3-D convolutions on "tpu" without the CPU (csrc/core/lower/nn_conv.c).

Before, the lowering knew 1-D and 2-D convolutions only, and nn.Conv3d and
nn.ConvTranspose3d, forward and backward, ran on the CPU through the fallback. Each case
is checked against the CPU: float64 on "tpu" against float64 on the CPU (PyTorch's float64
tolerances), float32 within a bound derived from the CPU's own float32 error against
float64, and a few training steps with the weights updated in place."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tpuc  # noqa: F401
from tpu_testing import assert_trains_as_on_the_cpu, no_fallback  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("no_fallback")

EPS32 = torch.finfo(torch.float32).eps

# (input shape, weight shape, keyword arguments); weights as F.conv3d / F.conv_transpose3d take them
CONV = [
    ((2, 4, 5, 6, 7), (6, 4, 2, 3, 2), {}),
    ((2, 4, 5, 6, 7), (6, 2, 2, 3, 2), {"stride": (1, 2, 1), "padding": (1, 0, 2),
                                        "dilation": (2, 1, 1), "groups": 2}),
    ((1, 3, 4, 5, 6), (5, 3, 3, 3, 3), {"padding": "same"}),
    ((3, 4, 5, 6), (2, 3, 1, 2, 3), {"stride": 2}),  # unbatched [C, D, H, W]
]
TRANSPOSED = [
    ((2, 4, 3, 4, 5), (4, 3, 2, 3, 2), {}),
    ((2, 4, 5, 6, 7), (4, 3, 2, 3, 2), {"stride": (2, 2, 1), "padding": (1, 0, 1),
                                        "output_padding": (1, 1, 1), "dilation": (1, 1, 2),
                                        "groups": 2}),
]
CASES = [(F.conv3d, *c) for c in CONV] + [(F.conv_transpose3d, *c) for c in TRANSPOSED]
IDS = [f"{fn.__name__}-{i}" for i, (fn, *_) in enumerate(CASES)]


def _run(fn, x, w, b, kw, device, dtype):
    """The output and the gradients of input, weight and bias of a weighted sum."""
    ins = [t.detach().to(device, dtype).requires_grad_() for t in (x, w, b)]
    y = fn(ins[0], ins[1], ins[2], **kw)
    wsum = torch.linspace(-1, 2, y.numel(), dtype=torch.float64).reshape(y.shape)
    (y * wsum.to(device, dtype)).sum().backward()
    return [t.detach().cpu().double() for t in (y, *(i.grad for i in ins))]


@pytest.mark.parametrize("fn,xs,ws,kw", CASES, ids=IDS)
def test_matches_the_cpu_in_float64_and_float32(fn, xs, ws, kw) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(xs, generator=g, dtype=torch.float64)
    w = torch.randn(ws, generator=g, dtype=torch.float64)
    groups = kw.get("groups", 1)
    cout = ws[0] if fn is F.conv3d else ws[1] * groups
    b = torch.randn(cout, generator=g, dtype=torch.float64)
    ref = _run(fn, x, w, b, kw, "cpu", torch.float64)
    got = _run(fn, x, w, b, kw, "tpu", torch.float64)
    for name, r, t in zip(("output", "input grad", "weight grad", "bias grad"), ref, got):
        torch.testing.assert_close(t, r, msg=lambda m, n=name: f"float64 {n}: {m}")
    cpu32 = _run(fn, x, w, b, kw, "cpu", torch.float32)
    got32 = _run(fn, x, w, b, kw, "tpu", torch.float32)
    for name, r, c, t in zip(("output", "input grad", "weight grad", "bias grad"), ref, cpu32, got32):
        # "tpu" may sum in another order: 4x the CPU's own float32 error against float64,
        # plus a few ulps of the largest magnitude
        bound = 4 * (c - r).abs().max().item() + 16 * EPS32 * r.abs().max().item()
        err = (t - r).abs().max().item()
        assert err <= bound, f"float32 {name}: error {err:.3g} > bound {bound:.3g}"


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_training_steps_match_the_cpu(mode: str) -> None:
    """Conv3d -> ConvTranspose3d, 4 SGD steps with momentum in float64, the parameters read
    back after every step (in place updates, the next forward reads them)."""

    def make() -> torch.nn.Module:
        torch.manual_seed(1)
        return torch.nn.Sequential(torch.nn.Conv3d(2, 4, 3, stride=2, padding=1),
                                   torch.nn.SiLU(),
                                   torch.nn.ConvTranspose3d(4, 2, 3, stride=2, padding=1,
                                                            output_padding=1))

    x = torch.randn(2, 2, 6, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert_trains_as_on_the_cpu(make, lambda m, d: (m(x.to(d)) - x.to(d)).pow(2).mean(), mode)
