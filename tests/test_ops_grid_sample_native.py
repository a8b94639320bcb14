"""F.grid_sample on "tpu" without the CPU fallback (csrc/core/lower/nn_grid.c): grid_sampler_2d/3d
and their backwards, every interpolation x padding x align_corners, against the CPU.

float64 is compared with the CPU's float64 within 1e-10 (the two sides differ only in the order
of a few float64 operations, ~1e-14 here). float32 is compared with the CPU's float64 result on
the same (float32-valued) inputs, within bounds derived from float32's unit roundoff u = 2^-24
(see _bounds32): a pixel coordinate is computed with a relative error of a few u, which moves a
result by at most (slope of the weights) x (that error) x (the values), and summing K weighted
taps adds at most ~K u of the magnitudes summed. Random grid points are kept 0.05 pixel away from
integer and half-integer pixel coordinates, where a weight's derivative (bilinear, the clip) or
nearest's pick jumps, so a float32 rounding cannot move a point across one; the exact points
(integers: pixel centres, half-integers: pixel borders, inside, on and outside [-1, 1]) are
exact in both dtypes, so both sides take the same side of every jump there."""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

DEV = "tpu"

pytestmark = pytest.mark.usefixtures("tpu_no_fallbacks")  # tests/conftest.py

MODES = ["bilinear", "nearest", "bicubic"]
PADS = ["zeros", "border", "reflection"]
U32 = 2.0 ** -24


def _sizes(s: int, ac: bool) -> list[int]:
    """Input sizes whose pixel coordinates of dyadic grid values are exact in float32:
    (size - 1) a power of two with align_corners, size a power of two without."""
    return ([3, 5, 9] if ac else [2, 4, 8])[3 - s:]


def _grid_value(loc: torch.Tensor, size: int, ac: bool) -> torch.Tensor:
    """The grid value whose pixel coordinate is loc (float64)."""
    return 2 * loc / (size - 1) - 1 if ac else (2 * loc + 1) / size - 1


def _grid(s: int, n: int, out: list[int], ac: bool, g: torch.Generator) -> torch.Tensor:
    """[n, *out, s] float32 grid: random pixel coordinates in [-0.6 size - 1, 1.6 size + 1]
    kept 0.05 away from (half-)integers, and a last row of exact (half-)integer coordinates."""
    sizes = _sizes(s, ac)
    comps = []
    for d in range(s):
        size = sizes[s - 1 - d]  # grid component d addresses spatial dim s - 1 - d
        lo, hi = -0.6 * size - 1, 1.6 * size + 1
        twice = torch.randint(int(2 * lo), int(2 * hi), (n, *out), generator=g).double()
        loc = (twice + 0.5 + (torch.rand(n, *out, generator=g, dtype=torch.float64) - 0.5) * 0.8) / 2
        # the last row (along the first output dim): exact half-integers from -2 to size + 1
        k = torch.arange(loc[:, -1].numel(), dtype=torch.float64) * (d + 2) % (2 * size + 7) - 4
        loc[:, -1] = (k / 2).reshape(loc[:, -1].shape)
        comps.append(_grid_value(loc, size, ac))
    return torch.stack(comps, -1).float()


def _bounds32(x: torch.Tensor, go: torch.Tensor, s: int, mode: str, ac: bool) -> tuple[float, float, float]:
    """float32 bounds (output, input grad, grid grad) from u: see the module docstring. amp bounds
    sum |weights| (bicubic: 1.375 per dim), slope sum |d weight / d coordinate| (bilinear 2,
    bicubic < 3 per dim) and curv sum |d2 weight / d coordinate2| (< 8); L bounds |coordinate|."""
    sizes = _sizes(s, ac)
    L = 1.6 * max(sizes) + 2
    k = {"bilinear": 2, "nearest": 1, "bicubic": 4}[mode] ** s
    amp = 1.375 ** s if mode == "bicubic" else 1.0
    slope = 3.0 * amp
    curv = 8.0 * amp
    coord = 8 * L * U32  # the pixel coordinate's error (a few roundings of values <= L), doubled
    xmax = x.abs().max().item()
    fwd = xmax * (amp * (k + 8) * U32 * 2 + s * slope * coord)
    mass = go.abs().flatten(2).sum(-1).max().item()  # all of a plane's gradient on one pixel
    gin = mass * (amp * (k + 8) * U32 * 2 + s * slope * coord)
    gsum = go.abs().sum(1).max().item() * xmax  # per output point, over channels
    ggrid = max(sizes) / 2 * gsum * (slope * (k * x.shape[1] + 8) * U32 * 2 + s * curv * coord)
    return fwd, gin, ggrid


def _run(x: torch.Tensor, grid: torch.Tensor, go: torch.Tensor, dev: str, **kw):  # type: ignore[no-untyped-def]
    xi = x.to(dev).requires_grad_()
    gi = grid.to(dev).requires_grad_()
    y = F.grid_sample(xi, gi, **kw)
    (y * go.to(dev)).sum().backward()
    return y.detach().cpu(), xi.grad.cpu(), gi.grad.cpu()


def _check(s: int, mode: str, pad: str, ac: bool, seed: int, f32: bool) -> None:
    g = torch.Generator().manual_seed(seed)
    n, c = 2, 3
    out = [4, 5] if s == 2 else [3, 2, 4]
    x = torch.randn(n, c, *_sizes(s, ac), generator=g)
    grid = _grid(s, n, out, ac, g)
    go = torch.randn(n, c, *out, generator=g)
    kw = dict(mode=mode, padding_mode=pad, align_corners=ac)
    ref = _run(x.double(), grid.double(), go.double(), "cpu", **kw)
    got = _run(x.double(), grid.double(), go.double(), DEV, **kw)
    for name, a, b in zip(("output", "input grad", "grid grad"), got, ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=lambda m: f"float64 {name}: {m}")
    if not f32:
        return
    got = _run(x, grid, go, DEV, **kw)
    if mode == "nearest":  # the same pixel picked from the same float32 coordinates as the CPU
        assert torch.equal(got[0], F.grid_sample(x, grid, **kw))
    for name, a, b, tol in zip(("output", "input grad", "grid grad"), got, ref, _bounds32(x, go, s, mode, ac)):
        assert a.dtype == torch.float32
        err = (a.double() - b).abs().max().item()
        assert err <= tol, f"float32 {name}: {err:.3g} > bound {tol:.3g}"


@pytest.mark.parametrize("mode,pad,ac", list(itertools.product(MODES, PADS, [False, True])))
def test_2d_forward_and_backward(mode: str, pad: str, ac: bool) -> None:
    """float64 for all 18; float32 for every mode x padding with one align_corners each
    (alternating), which keeps the file's compiles within its time budget."""
    f32 = (MODES.index(mode) + PADS.index(pad) + ac) % 2 == 0
    _check(2, mode, pad, ac, seed=MODES.index(mode) * 6 + PADS.index(pad) * 2 + ac, f32=f32)


@pytest.mark.parametrize("mode,pad,ac", list(itertools.product(MODES[:2], PADS, [False, True])))
def test_3d_forward_and_backward(mode: str, pad: str, ac: bool) -> None:
    """grid_sampler_3d (trilinear and nearest; PyTorch has no 3-D bicubic): float64, and
    float32 for trilinear reflection without align_corners (the float32 path is the 2-D one's)."""
    f32 = (mode, pad, ac) == ("bilinear", "reflection", False)
    _check(3, mode, pad, ac, seed=100 + PADS.index(pad) * 2 + ac, f32=f32)


def test_nearest_rounds_half_to_even() -> None:
    """Coordinates exactly on pixel borders (x.5) go to the even pixel, as the CPU's nearbyint."""
    x = torch.arange(8.0).reshape(1, 1, 1, 8)
    loc = torch.tensor([0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5])
    grid = torch.stack([(2 * loc + 1) / 8 - 1, torch.zeros(7)], -1).reshape(1, 1, 7, 2)
    y = F.grid_sample(x.to(DEV), grid.to(DEV), mode="nearest", align_corners=False).cpu()
    assert y.flatten().tolist() == [0.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0]
    assert torch.equal(y, F.grid_sample(x, grid, mode="nearest", align_corners=False))


def test_output_mask() -> None:
    """The backward's output_mask: no input gradient when it is not asked for."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(1, 2, 4, 8, dtype=torch.float64, generator=g)
    grid = _grid(2, 1, [3, 3], False, g).double()
    go = torch.randn(1, 2, 3, 3, dtype=torch.float64, generator=g)
    op = torch.ops.aten.grid_sampler_2d_backward
    ref = op(go, x, grid, 0, 2, False, [True, True])
    gi, gg = op(go.to(DEV), x.to(DEV), grid.to(DEV), 0, 2, False, [False, True])
    assert gi is None
    torch.testing.assert_close(gg.cpu(), ref[1], rtol=1e-10, atol=1e-10)
    gi, gg = op(go.to(DEV), x.to(DEV), grid.to(DEV), 0, 2, False, [True, False])
    torch.testing.assert_close(gi.cpu(), ref[0], rtol=1e-10, atol=1e-10)
    assert gg.shape == grid.shape  # not asked for: PyTorch leaves its value unspecified


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_computes_in_float32(dtype: torch.dtype) -> None:
    """16-bit input and grid: the result is the float32 computation on the same values, rounded
    once (within a 16-bit ulp, 2^-8 relative for bfloat16, 2^-11 for float16)."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 4, 8, generator=g).to(dtype)
    grid = _grid(2, 2, [4, 5], False, g).to(dtype)
    ref = F.grid_sample(x.float(), grid.float(), mode="bicubic", padding_mode="border", align_corners=False)
    got = F.grid_sample(x.to(DEV), grid.to(DEV), mode="bicubic", padding_mode="border", align_corners=False)
    assert got.dtype == dtype
    rel = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -11
    torch.testing.assert_close(got.cpu().float(), ref, rtol=rel, atol=1e-5)


def test_parameter_updated_in_place() -> None:
    """A few optimizer steps on an input that is a parameter updated in place (SGD with
    momentum) and a fixed grid: every step's loss and parameter match the CPU's, so no stale
    input or gradient is used."""
    g = torch.Generator().manual_seed(11)
    x0 = torch.randn(1, 2, 4, 8, dtype=torch.float64, generator=g)
    grid = _grid(2, 1, [3, 6], False, g).double()
    target = torch.randn(1, 2, 3, 6, dtype=torch.float64, generator=g)
    runs = {}
    for dev in ("cpu", DEV):
        p = torch.nn.Parameter(x0.clone().to(dev))  # the CPU run must not update x0 itself
        opt = torch.optim.SGD([p], lr=0.5, momentum=0.9)
        gd, td = grid.to(dev), target.to(dev)
        losses = []
        for _ in range(4):
            opt.zero_grad()
            loss = ((F.grid_sample(p, gd, mode="bilinear", padding_mode="reflection", align_corners=False) - td) ** 2).sum()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        runs[dev] = (losses, p.detach().cpu())
    assert runs["cpu"][0] != [runs["cpu"][0][0]] * 4  # the steps changed the loss
    torch.testing.assert_close(runs[DEV][0], runs["cpu"][0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(runs[DEV][1], runs["cpu"][1], rtol=1e-12, atol=1e-12)
