"""torch.special functions lowered natively (csrc/core/lower/special_poly.c,
special_misc.c): the orthogonal polynomials of a tensor degree, entr, xlog1py,
spherical_bessel_j0, erfcx, log_ndtr and ndtri, each against PyTorch's CPU
kernels with no CPU fallback.

Bounds come from the float64 reference, not from this machine: a float32
result may be at most twice as far from the CPU's float64 value as the CPU's
own float32 kernel is, plus 4 float32 ulp of the value's scale; a float64
result agrees with the CPU's float64 kernel to 64 ulp of the scale. Both
times the length of the recurrence for the polynomials (their rounding error
grows with the degree, up to 25 here), whose scale is the sum of the
magnitudes of their terms (the polynomial at |x|, or a bound above it)."""
from __future__ import annotations

import math

import pytest
import torch

import tpuc  # noqa: F401  (registers "tpu")
from tpu_testing import fallback_counts, new_fallbacks

DEV = "tpu"
EPS32 = torch.finfo(torch.float32).eps
EPS64 = torch.finfo(torch.float64).eps
# the XLA CPU plugin flushes subnormal results to 0: a scale floor at which the bounds below
# (64 ulp float64, 4 ulp float32) reach the smallest normal number
FLUSH = {torch.float64: torch.finfo(torch.float64).tiny / (64 * EPS64),
         torch.float32: torch.finfo(torch.float32).tiny / (4 * EPS32)}


def _native(fn, *args):
    before = fallback_counts()
    out = fn(*[a.to(DEV) if isinstance(a, torch.Tensor) else a for a in args])
    assert out.device.type == DEV
    out = out.cpu()
    assert new_fallbacks(before) == []
    return out


def _same_specials(got, want):
    """NaN where the CPU has NaN, the same infinities, finite elsewhere."""
    assert torch.equal(got.isnan(), want.isnan()), (got[got.isnan() != want.isnan()], want[got.isnan() != want.isnan()])
    inf = want.isinf()
    assert torch.equal(got.isinf(), inf)
    assert torch.equal(got[inf], want[inf])


def check32(fn, args, scale, length=1):
    """float32 on "tpu" against the CPU's float32 and float64 kernels."""
    got = _native(fn, *args)
    cpu32 = fn(*args)
    ref = fn(*[a.double() if isinstance(a, torch.Tensor) else a for a in args])
    assert got.dtype == torch.float32
    _same_specials(got, cpu32)
    ok = torch.isfinite(ref) & torch.isfinite(cpu32)
    err = (got.double() - ref).abs()[ok]
    bound = 2 * (cpu32.double() - ref).abs()[ok] + 4 * EPS32 * length * scale[ok]
    assert (err <= bound).all(), (err - bound).max()


def check64(fn, args, scale, length=1):
    got = _native(fn, *args)
    want = fn(*args)
    assert got.dtype == torch.float64
    _same_specials(got, want)
    ok = torch.isfinite(want)
    err = (got - want).abs()[ok]
    assert (err <= 64 * EPS64 * length * scale[ok]).all(), (err / scale[ok]).max() / EPS64


# ---- polynomials ----

CHEB = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
        "chebyshev_polynomial_w"]
POLYS = CHEB + ["shifted_" + c for c in CHEB] + [
    "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"]


def _poly_args(name, dtype):
    g = torch.Generator().manual_seed(3)
    lo, hi = (-0.2, 1.2) if name.startswith("shifted") else (-1.3, 1.3)
    if name.startswith("laguerre"):
        lo, hi = -4.0, 12.0
    if name.startswith("hermite"):
        lo, hi = -4.0, 4.0
    x = torch.rand(240, generator=g, dtype=torch.float64) * (hi - lo) + lo
    n = torch.randint(-2, 24, (240,), generator=g).double()
    n[::7] += 0.7  # fractional degrees truncate
    # the edge cases: endpoints, NaN, infinities, negative and non-finite degrees
    edge_x = [1.0, -1.0, 0.0, 0.5, float("nan"), float("inf"), -float("inf"), 0.3, 2.0, 1.0]
    # NaN x at degree 1 (from degree 2 on most CPU kernels return an uninitialised value)
    edge_n = [5.0, 7.0, 9.0, 12.0, 1.0, 2.0, 3.0, 140.0, -3.0, 0.0]
    # a degree past the unrolled bound: Chebyshev inside [-1, 1] is trigonometric, Hermite's is NaN
    edge_n[7] = 600.0 if name.startswith("hermite") else 140.0 if "chebyshev" in name else 20.0
    if name == "hermite_polynomial_h":  # the only kernel that defines a NaN or infinite degree
        edge_n[7], edge_n[9] = float("nan"), float("inf")
    x = torch.cat([x, torch.tensor(edge_x, dtype=torch.float64)]).to(dtype)
    n = torch.cat([n, torch.tensor(edge_n, dtype=torch.float64)]).to(dtype)
    return x, n


def _poly_scale(name, x, n):
    """|p_n(x)| bounded by the sum of its terms' magnitudes: the value at |x| (or a bit above)."""
    fn = getattr(torch.special, name)
    nn = n.double().nan_to_num(0, 0, 0).clamp(0, 64)
    xa = x.double().abs().nan_to_num(0, 0, 0)
    if name.startswith("shifted"):
        xa = (2 * x.double() - 1).abs().nan_to_num(0, 0, 0)
        fn = getattr(torch.special, name[len("shifted_"):])
    big = fn(xa.clamp_min(1.0) + 1.0, nn).abs() if not name.startswith(("laguerre", "hermite")) else None
    if name.startswith("laguerre"):
        big = torch.special.laguerre_polynomial_l(-xa, nn).abs()
    if name.startswith("hermite"):
        big = fn(xa.clamp_min(1.0) * 2, nn).abs() + fn(torch.zeros_like(xa), nn).abs()
    return (big + 2 * nn + 1).nan_to_num(1e300, 1e300, 1e300)


@pytest.mark.parametrize("name", POLYS)
def test_polynomials(name):
    fn = getattr(torch.special, name)
    x, n = _poly_args(name, torch.float64)
    check64(fn, (x, n), _poly_scale(name, x, n), length=26)
    x32, n32 = _poly_args(name, torch.float32)
    check32(fn, (x32, n32), _poly_scale(name, x32, n32).float().double(), length=26)


@pytest.mark.parametrize("name", ["chebyshev_polynomial_t", "legendre_polynomial_p",
                                  "hermite_polynomial_h", "laguerre_polynomial_l"])
def test_polynomial_high_degree_and_int_inputs(name):
    fn = getattr(torch.special, name)
    # degrees up to the unrolled bound (128 float32), integer inputs promote to float32
    x = torch.tensor([-0.9, -0.3, 0.2, 0.7, 0.999], dtype=torch.float64)
    n = torch.tensor([127, 128, 100, 64, 90], dtype=torch.float64)
    got = _native(fn, x, n)
    torch.testing.assert_close(got, fn(x, n), rtol=1e-9, atol=1e-9)
    xi, ni = torch.tensor([0, 1, 2, -1]), torch.tensor([3, 2, 5, 4])
    got = _native(fn, xi, ni)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, fn(xi, ni))


def test_hermite_above_its_limit_is_nan():
    x = torch.tensor([0.5, 0.5], dtype=torch.float32)
    n = torch.tensor([128.0, 129.0])
    got = _native(torch.special.hermite_polynomial_he, x, n)
    want = torch.special.hermite_polynomial_he(x, n)
    assert got[1].isnan() and want[1].isnan()


def test_degree_above_bound_raises_not_wrong():
    # |x| > 1 Chebyshev above the unrolled bound would need a longer recurrence: a run-time error
    x = torch.tensor([1.0001, 0.5], device=DEV)
    n = torch.tensor([300.0, 300.0], device=DEV)
    with pytest.raises(RuntimeError, match="unrolled bound"):
        torch.special.chebyshev_polynomial_t(x, n).cpu()
    # inside [-1, 1] the trigonometric form covers any degree
    x = torch.tensor([0.3, -0.5], dtype=torch.float64)
    n = torch.tensor([1000.0, 5000.0], dtype=torch.float64)
    torch.testing.assert_close(_native(torch.special.chebyshev_polynomial_t, x, n),
                               torch.special.chebyshev_polynomial_t(x, n))


# ---- entr, xlog1py, spherical_bessel_j0 ----

EDGE = [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e-30, -1e-3, 0.49, 0.5, 1e6]


def _xs(dtype, lo=-10.0, hi=10.0):
    g = torch.Generator().manual_seed(5)
    x = torch.rand(400, generator=g, dtype=torch.float64) * (hi - lo) + lo
    return torch.cat([x, torch.tensor(EDGE, dtype=torch.float64)]).to(dtype)


@pytest.mark.parametrize("name", ["entr", "spherical_bessel_j0"])
def test_unary_elementary(name):
    fn = getattr(torch.special, name)
    for dt in (torch.float64, torch.float32):
        x = _xs(dt)
        scale = x.double().abs().nan_to_num(0, 0, 0) * (x.double().abs().log().abs().nan_to_num(0, 0, 0) + 1) + 1
        (check64 if dt == torch.float64 else check32)(fn, (x,), scale)


def test_entr_xlog1py_half_and_grad():
    x = torch.tensor([0.0, 0.5, 2.0, -1.0, float("nan")], dtype=torch.float16)
    torch.testing.assert_close(_native(torch.special.entr, x), torch.special.entr(x), equal_nan=True)
    a = torch.tensor([0.0, 1.5, -2.0, 3.0], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([0.5, -0.5, 4.0, 1e-8], dtype=torch.float64, requires_grad=True)
    want = torch.autograd.grad(torch.special.xlog1py(a, b).sum(), (a, b))
    ad, bd = a.detach().to(DEV).requires_grad_(), b.detach().to(DEV).requires_grad_()
    got = torch.autograd.grad(torch.special.xlog1py(ad, bd).sum(), (ad, bd))
    for gg, w in zip(got, want):
        torch.testing.assert_close(gg.cpu(), w)


def test_xlog1py():
    for dt in (torch.float64, torch.float32):
        x, y = _xs(dt), _xs(dt, -0.99, 20.0).flip(0)
        x[:3] = torch.tensor([0.0, 0.0, 1.0], dtype=dt)
        y[:3] = torch.tensor([float("nan"), -1.0, float("inf")], dtype=dt)
        scale = x.double().abs().nan_to_num(0, 0, 0) * (y.double().log1p().abs().nan_to_num(0, 0, 0) + 1) + 1
        (check64 if dt == torch.float64 else check32)(torch.special.xlog1py, (x, y), scale)
    got = _native(torch.special.xlog1py, 2.0, torch.tensor([0.5, 1.0]))
    torch.testing.assert_close(got, torch.special.xlog1py(2.0, torch.tensor([0.5, 1.0])))


# ---- erfcx, log_ndtr, ndtri ----

@pytest.mark.parametrize("name", ["erfcx", "log_ndtr"])
def test_erfcx_log_ndtr(name):
    fn = getattr(torch.special, name)
    for dt in (torch.float64, torch.float32):
        x = torch.cat([_xs(dt, -30.0, 40.0), torch.tensor([-26.0, -26.8, -6.0, 2.99, 3.0, 3.01, 50.0, -40.0], dtype=dt)])
        ref = fn(x.double()).abs()
        # the CPU's erfcx below 0 is 2 exp(x*x) with x*x rounded: off by up to x^2/2 ulp itself
        # (this one splits the square), which the float64 scale allows for
        own = 1 + (x.double().clamp(max=0) ** 2 / 64 if name == "erfcx" and dt == torch.float64 else 0)
        scale = ref.nan_to_num(0, 0, 0) * own + FLUSH[dt]
        (check64 if dt == torch.float64 else check32)(fn, (x,), scale)


def test_ndtri():
    g = torch.Generator().manual_seed(9)
    for dt in (torch.float64, torch.float32):
        p = torch.cat([torch.rand(300, generator=g, dtype=torch.float64),
                       10 ** -(torch.rand(100, generator=g, dtype=torch.float64) * (300 if dt == torch.float64 else 37)),
                       torch.tensor([0.0, 1.0, 0.5, -0.1, 1.1, float("nan"), 0.135, 0.8647, 1e-300 if dt == torch.float64 else 1e-37,
                                     0.5 + 1e-9, 1 - 1e-12 if dt == torch.float64 else 1 - 1e-6], dtype=torch.float64)]).to(dt)
        ref = torch.special.ndtri(p.double()).abs()
        (check64 if dt == torch.float64 else check32)(torch.special.ndtri, (p,), ref.nan_to_num(0, 0, 0) + FLUSH[dt], *(() if dt != torch.float64 else (4,)))


# ---- modified Bessel K0, K1 (scaled too), zeta ----

@pytest.mark.parametrize("name", ["modified_bessel_k0", "modified_bessel_k1",
                                  "scaled_modified_bessel_k0", "scaled_modified_bessel_k1"])
def test_bessel_k(name):
    fn = getattr(torch.special, name)
    g = torch.Generator().manual_seed(11)
    for dt in (torch.float64, torch.float32):
        x = torch.cat([torch.rand(300, generator=g, dtype=torch.float64) * 40,
                       10 ** (torch.rand(60, generator=g, dtype=torch.float64) * 6 - 3),
                       torch.tensor([0.0, -1.0, float("nan"), float("inf"), 1.0, 18.0, 1e-200 if dt == torch.float64 else 1e-20,
                                     700.0, 800.0], dtype=torch.float64)]).to(dt)
        ref = fn(x.double()).abs()
        (check64 if dt == torch.float64 else check32)(fn, (x,), ref.nan_to_num(0, 0, 0) + FLUSH[dt])


def test_zeta():
    g = torch.Generator().manual_seed(13)
    for dt in (torch.float64, torch.float32):
        s = torch.cat([torch.rand(200, generator=g, dtype=torch.float64) * 12 - 2,
                       torch.tensor([1.0, 0.5, 2.0, 3.0, 2.0, 4.0, float("nan"), 2.5], dtype=torch.float64)]).to(dt)
        q = torch.cat([torch.rand(200, generator=g, dtype=torch.float64) * 12 - 2,
                       torch.tensor([2.0, 1.0, -3.0, -2.5, 0.0, -1.5, 1.0, -0.5], dtype=torch.float64)]).to(dt)
        ref = torch.special.zeta(s.double(), q.double()).abs()
        (check64 if dt == torch.float64 else check32)(torch.special.zeta, (s, q), ref.nan_to_num(0, 0, 0) + FLUSH[dt], 4)
