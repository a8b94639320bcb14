"""torch.fft on the device "tpu" (lower/fft.c: _fft_r2c, _fft_c2r, _fft_c2c as
StableHLO fft): values against a float64 CPU reference with a bound derived from
the CPU's own float32 error, gradients through the device, out= forms, and no
CPU fallback for these ops."""
from __future__ import annotations

import pytest
import torch

from tpu_testing import fallback_counts, new_fallbacks

DEV = "tpu"


def rel_err(x: torch.Tensor, exact: torch.Tensor) -> float:
    """max |x - exact| / max |exact|, complex-aware, in float64."""
    x = x.cpu().to(torch.complex128 if x.is_complex() else torch.float64)
    exact = exact.to(torch.complex128 if exact.is_complex() else torch.float64)
    return ((x - exact).abs().max() / exact.abs().max().clamp_min(1e-30)).item()


def check(fn, *xs: torch.Tensor, factor: float = 8.0, floor_ulps: float = 64.0) -> None:
    """fn on tpu copies of xs is as accurate as fn on the CPU in the same dtype,
    both measured against fn on float64/complex128 copies: |tpu - f64| <=
    factor * |cpu - f64| + floor_ulps * eps (relative to the result's scale),
    and nothing fell back to the CPU."""
    wide = [x.to(torch.complex128 if x.is_complex() else torch.float64) for x in xs]
    exact = fn(*wide)
    cpu = fn(*xs)
    before = fallback_counts()
    got = fn(*[x.to(DEV) for x in xs])
    assert got.device.type == DEV
    assert new_fallbacks(before) == []
    assert got.dtype == cpu.dtype and got.shape == cpu.shape, (got.dtype, got.shape, cpu.shape)
    real = cpu.real.dtype if cpu.is_complex() else cpu.dtype
    eps = torch.finfo(real).eps / 2
    e_dev, e_cpu = rel_err(got, exact), rel_err(cpu, exact)
    assert e_dev <= factor * e_cpu + floor_ulps * eps, f"device {e_dev:.3g} vs the CPU's {e_cpu:.3g}"


def rnd(*shape: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype)


NORMS = [None, "forward", "ortho"]


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_one_dim(norm, dtype):
    torch.manual_seed(0)
    x = rnd(3, 16, dtype=dtype)
    check(lambda t: torch.fft.fft(t, norm=norm), x)
    check(lambda t: torch.fft.ifft(t, norm=norm), x)
    check(lambda t: torch.fft.fft(t, n=20, dim=0, norm=norm), x)  # padded, first dim
    check(lambda t: torch.fft.ifft(t, n=7, norm=norm), x)  # cut
    if dtype == torch.float32:
        check(lambda t: torch.fft.rfft(t, norm=norm), x)
        check(lambda t: torch.fft.rfft(t, n=15, dim=0, norm=norm), x)
        check(lambda t: torch.fft.ihfft(t, norm=norm), x)
    else:
        check(lambda t: torch.fft.irfft(t, norm=norm), x)  # 30 points
        check(lambda t: torch.fft.irfft(t, n=11, norm=norm), x)  # odd, cut input
        check(lambda t: torch.fft.irfft(t, n=40, dim=0, norm=norm), x)  # padded input
        check(lambda t: torch.fft.hfft(t, norm=norm), x)


@pytest.mark.parametrize("norm", NORMS)
def test_many_dims(norm):
    torch.manual_seed(1)
    x, z = rnd(4, 5, 6, 7), rnd(4, 5, 6, 8, dtype=torch.complex64)
    check(lambda t: torch.fft.fft2(t, norm=norm), z)
    check(lambda t: torch.fft.ifftn(t, dim=(2, 0), norm=norm), z)  # out of order, not trailing
    check(lambda t: torch.fft.fftn(t, norm=norm), z)  # 4 dims: two chunks
    check(lambda t: torch.fft.rfftn(t, norm=norm), x)  # 4 dims, odd last
    check(lambda t: torch.fft.rfft2(t, dim=(1, 0), norm=norm), x)
    check(lambda t: torch.fft.irfftn(t, norm=norm), z)
    check(lambda t: torch.fft.irfftn(t, s=(5, 9), dim=(0, 2), norm=norm), z)
    check(lambda t: torch.fft.hfftn(t, norm=norm), z)
    check(lambda t: torch.fft.ihfft2(t, norm=norm), x)


def test_float64_and_complex128():
    torch.manual_seed(2)
    x, z = rnd(2, 33, dtype=torch.float64), rnd(2, 8, 9, dtype=torch.complex128)
    for fn in (torch.fft.rfft, torch.fft.fft, lambda t: torch.fft.ifft2(t.to(torch.complex128))):
        check(fn, x)
    for fn in (torch.fft.irfft, torch.fft.fft2, lambda t: torch.fft.hfftn(t, s=(8, 16))):
        check(fn, z)


def test_out_and_onesided_false():
    torch.manual_seed(3)
    x = rnd(4, 12)
    before = fallback_counts()
    out = torch.empty(4, 12, dtype=torch.complex64, device=DEV)
    r = torch.fft.fft(x.to(DEV), out=out)
    assert r.data_ptr() == out.data_ptr()
    ref = torch.fft.fft(x.double())
    assert rel_err(out, ref) <= 8 * rel_err(torch.fft.fft(x), ref) + 64 * torch.finfo(torch.float32).eps
    # a real input through fft: _fft_r2c with onesided=False (the full spectrum)
    check(lambda t: torch.ops.aten._fft_r2c(t, [1], 0, False), x)
    # no dims: a copy
    z = rnd(3, 4, dtype=torch.complex64)
    assert torch.equal(torch.ops.aten._fft_c2c(z.to(DEV), [], 2, True).cpu(), z)
    assert new_fallbacks(before) == []


def grads(fn, x: torch.Tensor) -> torch.Tensor:
    x = x.detach().requires_grad_()
    y = fn(x)
    w = torch.ones_like(y) if not y.is_complex() else torch.complex(torch.ones_like(y.real), -torch.ones_like(y.real))
    g = torch.linspace(0.5, 1.5, y.numel(), dtype=y.real.dtype, device=y.device).reshape(y.shape)
    loss = (torch.view_as_real(y * w * g) if y.is_complex() else y * g).sum()
    loss.backward()
    return x.grad


@pytest.mark.parametrize("case", ["rfft", "irfft", "fftn", "ihfft", "hfft", "rfft2"])
def test_gradients(case):
    torch.manual_seed(4)
    fns = {
        "rfft": (lambda t: torch.fft.rfft(t, norm="ortho"), torch.float32),
        "irfft": (lambda t: torch.fft.irfft(t, n=14), torch.complex64),
        "fftn": (lambda t: torch.fft.fftn(t, dim=(0, 2), norm="forward"), torch.complex64),
        "ihfft": (lambda t: torch.fft.ihfft(t), torch.float32),
        "hfft": (lambda t: torch.fft.hfft(t, n=10), torch.complex64),
        "rfft2": (lambda t: torch.fft.rfft2(t), torch.float32),
    }
    fn, dtype = fns[case]
    x = rnd(3, 6, 8, dtype=dtype)
    check(lambda t: grads(fn, t), x)
