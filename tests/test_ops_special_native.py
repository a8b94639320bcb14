"""Special functions, 3-D adaptive pooling, linalg.cross and logspace on the device "tpu"
(lower/special.c, nn_pool_nd.c, vector.c, copy.c) with no CPU fallback: values against a
float64 CPU reference, element by element, with a bound derived from the CPU's own error
in the same dtype; gradients through the device; exact results (gcd, lcm, nextafter,
frexp, pooling indices) compared exactly."""
from __future__ import annotations

import pytest
import torch

from tpu_testing import fallback_counts, new_fallbacks

DEV = "tpu"


def on_device(fn, *xs: torch.Tensor) -> object:
    """fn on tpu copies of xs, asserting nothing fell back to the CPU."""
    before = fallback_counts()
    got = fn(*[x.to(DEV) for x in xs])
    assert new_fallbacks(before) == []
    return got


def check_elementwise(fn, *xs: torch.Tensor, factor: float = 4.0, ulps: float = 8.0,
                      exact: torch.Tensor | None = None, floor: float = 0.0) -> None:
    """Each element of fn on tpu is within factor * (the CPU's error) + ulps * eps of
    the exact result (default: fn in float64 on the CPU), relative to that element's
    magnitude (at least `floor`: near a zero of the function the error follows its
    terms' scale); NaN/inf where the exact result, rounded to the dtype, has them."""
    if exact is None:
        exact = fn(*[x.double() for x in xs])
    cpu = fn(*xs)
    got = on_device(fn, *xs)
    assert got.device.type == DEV and got.dtype == cpu.dtype and got.shape == cpu.shape
    got = got.cpu().double()
    eps = torch.finfo(cpu.dtype).eps
    tiny = torch.finfo(cpu.dtype).tiny
    rounded = exact.to(cpu.dtype).double()
    special = ~torch.isfinite(rounded)
    assert torch.equal(got[special].nan_to_num(), rounded[special].nan_to_num())
    ok = ~special
    e_cpu = (cpu.double() - exact).abs()
    bound = factor * e_cpu + ulps * eps * exact.abs().clamp_min(floor) + tiny
    err = (got - exact).abs()
    bad = ok & ~(err <= bound)
    assert not bad.any(), (xs[0].flatten()[bad.flatten()][:5], got[bad][:5], exact[bad][:5])


def spread(dtype=torch.float32) -> torch.Tensor:
    """Points across every branch of the Bessel approximations: 0, tiny, both sides of
    the series/asymptotic thresholds (10, 18), large, signed."""
    torch.manual_seed(0)
    x = torch.cat([torch.tensor([0.0, 1e-30, 1e-5, 9.99, 10.0, 10.01, 17.99, 18.0, 18.01, 80.0]),
                   torch.linspace(0, 40, 301), torch.rand(200) * 700])
    return torch.cat([x, -x]).to(dtype)


BESSEL = [torch.i0, torch.special.i0e, torch.special.i1, torch.special.i1e,
          torch.special.modified_bessel_i0, torch.special.modified_bessel_i1]


@pytest.mark.parametrize("fn", BESSEL, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bessel(fn, dtype):
    check_elementwise(fn, spread(dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64, torch.bool])
def test_bessel_other_dtypes(dtype):
    """Half types and integers compute in float32 as the CPU: half results equal to the
    CPU's within the dtype's rounding of a float32 result."""
    x = torch.linspace(-12, 12, 97)
    x = (x > 0) if dtype == torch.bool else x.to(dtype)
    for fn in BESSEL[:4]:
        if not dtype.is_floating_point:  # a float32 result: against float64 as above
            check_elementwise(fn, x)
            continue
        cpu = fn(x)
        got = on_device(fn, x).cpu()
        assert got.dtype == cpu.dtype
        rtol = 2 * torch.finfo(cpu.dtype).eps
        torch.testing.assert_close(got, cpu, rtol=rtol, atol=0)


def test_bessel_grad():
    x = spread()[:300].clone().requires_grad_()
    for fn in BESSEL[:4]:
        w = torch.randn(x.shape)
        (g_cpu,) = torch.autograd.grad((fn(x.double()) * w).sum(), x)
        xd = x.detach().to(DEV).requires_grad_()
        before = fallback_counts()
        (g_dev,) = torch.autograd.grad((fn(xd) * w.to(DEV)).sum(), xd)
        assert new_fallbacks(before) == []
        torch.testing.assert_close(g_dev.cpu().double(), g_cpu.double(), rtol=2e-5, atol=1e-30)


@pytest.mark.parametrize("n", [0, 1, 2, 4])
def test_polygamma(n):
    x = torch.cat([torch.rand(100) * 20 + 0.05, -torch.rand(30) * 5 - 0.05])
    # the CPU's own float32 error near the poles is large; the bound follows it
    check_elementwise(lambda t: torch.polygamma(n, t), x, factor=8.0, ulps=64.0)
    # float64: the CPU's own trigamma is off by up to ~1e-10, so the reference is mpmath
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(40):
        exact = torch.tensor([float(mpmath.polygamma(n, v)) for v in x.double().tolist()],
                             dtype=torch.float64)
    check_elementwise(lambda t: torch.special.polygamma(n, t), x.double(), factor=8.0, ulps=64.0,
                      exact=exact)
    xd = x.clone().requires_grad_()
    (g_cpu,) = torch.autograd.grad(torch.polygamma(n, xd.double()).sum(), xd)
    xt = x.to(DEV).requires_grad_()
    before = fallback_counts()
    (g_dev,) = torch.autograd.grad(torch.polygamma(n, xt).sum(), xt)
    assert new_fallbacks(before) == []
    torch.testing.assert_close(g_dev.cpu().double(), g_cpu.double(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_polygamma_far_below_zero(n):
    """Below x = -15 the shift to positive x needs more terms than the lowering adds, so it
    reflects instead: trigamma(-26.05) was 2.9e37 on tpu (403.28), and n >= 2 gave inf or nan.
    mpmath's value is the reference (the CPU's float32 trigamma is off by 1e-5 relative there);
    at the poles, the CPU's signed infinities (n >= 2; the CPU's trigamma gives a large finite
    number from a rounded sine, tpu inf)."""
    mpmath = pytest.importorskip("mpmath")
    x = torch.tensor([-1e4 + 0.3, -500.7, -100.25, -26.05, -17.3, -16.5, -15.2, -1e6 - 0.5])
    for dtype in (torch.float32, torch.float64):
        xs = x.to(dtype)
        with mpmath.workdps(40):
            exact = torch.tensor([float(mpmath.polygamma(n, v)) for v in xs.double().tolist()],
                                 dtype=torch.float64)
        check_elementwise(lambda t: torch.polygamma(n, t), xs, factor=8.0, ulps=64.0, exact=exact)
    poles = torch.tensor([-20.0, -16.0, -1000.0])
    got = torch.polygamma(n, poles.to(DEV)).cpu()
    assert torch.equal(got, torch.full_like(poles, float("inf") if n % 2 else -float("inf")))
    if n >= 2:
        assert torch.equal(got, torch.polygamma(n, poles))


def test_lgamma_near_its_zeros_and_below_8():
    """float32 lgamma on (0, 8) elementwise against float64: within 4x the CPU's error plus 8
    ulps of the exact value. XLA's Lanczos sum cancels where lgamma is small: lgamma(1) and
    lgamma(2) were 4.8e-7 (exact 0), its relative error near them 5e-2 and 3.5e-5 on (2, 8);
    the lowering now shifts x next to 2 and sums lgamma's Taylor series there."""
    x = torch.cat([torch.linspace(0.001, 8, 20001),
                   torch.tensor([1e-30, 1e-8, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 7.9999995,
                                 1 - 2.0**-24, 1 + 2.0**-23, 2 - 2.0**-23, 2 + 2.0**-22])])
    check_elementwise(torch.lgamma, x, factor=4.0, ulps=8.0)
    ones_twos = torch.tensor([1.0, 2.0])
    assert torch.equal(torch.lgamma(ones_twos.to(DEV)).cpu(), torch.zeros(2))
    for dtype in (torch.bfloat16, torch.float16):  # computed in float32, rounded once
        check_elementwise(torch.lgamma, torch.linspace(0.01, 7.9, 2001).to(dtype), factor=4.0, ulps=1.0)


@pytest.mark.parametrize("p", [1, 3, 5])
def test_mvlgamma(p):
    x = torch.rand(50) * 10 + (p - 1) / 2 + 0.01
    # lgamma crosses zero at 1 and 2: there the error scales with its terms (about 1 each)
    check_elementwise(lambda t: torch.mvlgamma(t, p), x, factor=8.0, ulps=64.0, floor=float(p))
    xd = x.to(DEV).requires_grad_()
    before = fallback_counts()
    (g_dev,) = torch.autograd.grad(torch.mvlgamma(xd, p).sum(), xd)
    assert new_fallbacks(before) == []
    want = sum(torch.digamma(x.double() - i / 2) for i in range(p))
    torch.testing.assert_close(g_dev.cpu().double(), want, rtol=1e-4, atol=1e-5)


def test_mvlgamma_outside_domain():
    """PyTorch 2.13 no longer raises for x <= (p-1)/2 (lgamma's poles give inf there):
    out= and in-place match the CPU, and torch.mvlgamma is a composite on both."""
    x = torch.tensor([0.5, 1.0, 0.75, 3.0])
    want = torch.mvlgamma(x, 3, out=torch.empty(4))
    got = on_device(lambda t: torch.mvlgamma(t, 3, out=torch.empty(4, device=DEV)), x)
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    got = on_device(lambda t: t.mvlgamma_(3), x.clone())
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_nextafter_frexp(dtype):
    fi = torch.finfo(dtype)
    vals = [0.0, -0.0, 1.0, -1.0, fi.tiny, fi.tiny / 4, -fi.tiny / 2, fi.max, -fi.max, 3.5, 1e-3,
            float("inf"), float("-inf"), float("nan")]
    x = torch.tensor(vals, dtype=dtype)
    ys = [torch.full_like(x, v) for v in (0.0, 2.0, -2.0, float("inf"), float("nan"))] + [x]
    for y in ys:
        got = on_device(torch.nextafter, x, y).cpu()
        want = torch.nextafter(x, y)
        bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]
        num = ~want.isnan()
        assert torch.equal(got.view(bits)[num], want.view(bits)[num]), (y[0], got, want)
        assert torch.equal(got.isnan(), want.isnan())
    x = torch.cat([x, torch.randn(100, dtype=torch.float32).mul(1e3).to(dtype)])
    m, e = on_device(torch.frexp, x)
    wm, we = torch.frexp(x)
    fin = x.isfinite()
    assert m.dtype == wm.dtype and e.dtype == torch.int32
    assert torch.equal(m.cpu()[fin], wm[fin]) and torch.equal(e.cpu()[fin], we[fin])
    assert torch.equal(m.cpu()[~fin].nan_to_num(), wm[~fin].nan_to_num())


def test_frexp_grad():
    x = torch.randn(20) * 100
    xd = x.to(DEV).requires_grad_()
    before = fallback_counts()
    (g,) = torch.autograd.grad(torch.frexp(xd)[0].sum(), xd)
    assert new_fallbacks(before) == []
    assert torch.equal(g.cpu(), 1 / torch.frexp(x)[1].double().exp2().float())


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8])
def test_gcd_lcm(dtype):
    torch.manual_seed(0)
    info = torch.iinfo(dtype)
    a = torch.randint(info.min // 2 if info.min else 0, info.max // 2, (300,), dtype=dtype)
    b = torch.randint(info.min // 2 if info.min else 0, info.max // 2, (300,), dtype=dtype)
    # worst cases for Euclid: consecutive Fibonacci numbers that fit
    fib = [1, 1]
    while fib[-1] + fib[-2] <= info.max:
        fib.append(fib[-1] + fib[-2])
    a = torch.cat([a, torch.tensor([fib[-1], 0, 0, 12, 7], dtype=dtype)])
    b = torch.cat([b, torch.tensor([fib[-2], 0, 5, 18, 7], dtype=dtype)])
    for fn in (torch.gcd, torch.lcm):
        assert torch.equal(on_device(fn, a, b).cpu(), fn(a, b)), fn.__name__


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_adaptive_pool3d(dtype):
    """bfloat16: max pooling only on the device (the CPU's average sums in bfloat16 itself;
    lower/nn_pool_nd.c), the average is the CPU fallback's and still equal."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 9, 5).to(dtype)
    for out in [(3, 4, 2), (7, 9, 5), (1, 1, 1), (5, 2, 4)]:
        for fn in (torch.nn.functional.adaptive_avg_pool3d,
                   lambda t, o: torch.nn.functional.adaptive_max_pool3d(t, o, return_indices=True)):
            want = fn(x, out)
            if dtype == torch.bfloat16 and not isinstance(want, tuple):
                continue
            got = on_device(lambda t: fn(t, out), x)
            if isinstance(want, tuple):
                assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])
            else:
                tol = {torch.float32: 1e-6, torch.float64: 1e-14, torch.bfloat16: 1e-2}[dtype]
                torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol)
    xr = x[0].float().requires_grad_()  # unbatched, with gradients
    for fn in (torch.nn.functional.adaptive_avg_pool3d, torch.nn.functional.adaptive_max_pool3d):
        w = torch.randn(3, 3, 4, 2)
        (g_cpu,) = torch.autograd.grad((fn(xr, (3, 4, 2)) * w).sum(), xr)
        xd = xr.detach().to(DEV).requires_grad_()
        before = fallback_counts()
        (g_dev,) = torch.autograd.grad((fn(xd, (3, 4, 2)) * w.to(DEV)).sum(), xd)
        assert new_fallbacks(before) == []
        torch.testing.assert_close(g_dev.cpu(), g_cpu, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float16, torch.complex64])
def test_cross(dtype):
    torch.manual_seed(0)
    a = (torch.randn(4, 3, 5) * 10).to(dtype)
    b = (torch.randn(1, 3, 5) * 10).to(dtype)
    want = torch.linalg.cross(a, b, dim=1)
    got = on_device(lambda s, t: torch.linalg.cross(s, t, dim=1), a, b)
    torch.testing.assert_close(got.cpu(), want, rtol=0 if not dtype.is_floating_point else None,
                               atol=0 if not dtype.is_floating_point else None)
    if dtype == torch.float32:
        ad, bd = a.to(DEV).requires_grad_(), b.to(DEV).requires_grad_()
        before = fallback_counts()
        ga, gb = torch.autograd.grad(torch.linalg.cross(ad, bd, dim=1).square().sum(), (ad, bd))
        assert new_fallbacks(before) == []
        ac, bc = a.requires_grad_(), b.requires_grad_()
        wa, wb = torch.autograd.grad(torch.linalg.cross(ac, bc, dim=1).square().sum(), (ac, bc))
        torch.testing.assert_close(ga.cpu(), wa)
        torch.testing.assert_close(gb.cpu(), wb)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_logspace(dtype):
    """Float outputs (integer ones stay on the CPU: lower/copy.c, cp_logspace); float64
    within an ulp (XLA contracts a multiply-add the CPU rounds twice)."""
    for start, end, steps, base in [(-2, 3, 11, 10.0), (0, 5, 6, 2.0), (1.5, -1.5, 7, 3.0),
                                    (2, 2, 1, 10.0), (0, 1, 0, 10.0)]:
        want = torch.logspace(start, end, steps, base, dtype=dtype)
        before = fallback_counts()
        got = torch.logspace(start, end, steps, base, dtype=dtype, device=DEV)
        assert new_fallbacks(before) == []
        if dtype == torch.float64:
            torch.testing.assert_close(got.cpu(), want, rtol=4e-16, atol=0)
        else:
            assert torch.equal(got.cpu(), want), (start, end, steps, base, got, want)


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.0, 0.5, 0.7, 1.5, 2.5, float("inf")])
def test_cdist(p):
    """Forward and both gradients (float64, so the bound is a few ulp of the CPU's own
    formulas); 0.7 and 2.5 are runtime exponents, the others are built into the program;
    a row of x2 equal to one of x1 covers the zero-distance branches."""
    torch.manual_seed(0)
    a = torch.randn(2, 5, 4, dtype=torch.float64)
    b = torch.randn(2, 6, 4, dtype=torch.float64)
    b[0, 0] = a[0, 0]
    w = torch.randn(2, 5, 6, dtype=torch.float64)
    for mode in ("use_mm_for_euclid_dist_if_necessary", "donot_use_mm_for_euclid_dist"):
        ac, bc = a.clone().requires_grad_(), b.clone().requires_grad_()
        y = torch.cdist(ac, bc, p=p, compute_mode=mode)
        ga, gb = torch.autograd.grad((y * w).sum(), (ac, bc))
        ad, bd = a.to(DEV).requires_grad_(), b.to(DEV).requires_grad_()
        before = fallback_counts()
        yd = torch.cdist(ad, bd, p=p, compute_mode=mode)
        gad, gbd = torch.autograd.grad((yd * w.to(DEV)).sum(), (ad, bd))
        assert new_fallbacks(before) == []
        for got, want in ((yd, y), (gad, ga), (gbd, gb)):
            torch.testing.assert_close(got.cpu(), want, rtol=1e-13, atol=1e-13)
    a32 = torch.randn(3, 7, dtype=torch.float32)
    b32 = torch.randn(4, 7, dtype=torch.float32)
    torch.testing.assert_close(on_device(lambda s, t: torch.cdist(s, t, p=p), a32, b32).cpu(),
                               torch.cdist(a32, b32, p=p))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64])
def test_nanmedian(dtype):
    """Values and indices equal to the CPU's (ties among integers included), NaNs skipped, an
    all-NaN row NaN (its index is wherever the CPU's nth_element left a NaN: not compared),
    -0.0 kept."""
    torch.manual_seed(0)
    x = torch.randn(4, 7, 6).mul(5).to(dtype)
    if dtype.is_floating_point:
        x[0, 1, :] = float("nan")
        x[1, :3, 2] = float("nan")
        x[2, 0, 0] = -0.0
    for d in (0, 1, 2, -1):
        v, i = on_device(lambda t: torch.nanmedian(t, d), x)
        wv, wi = torch.nanmedian(x, d)
        assert torch.equal(v.cpu().nan_to_num(), wv.nan_to_num()) and torch.equal(v.cpu().isnan(), wv.isnan())
        keep = ~wv.isnan()
        assert torch.equal(i.cpu()[keep], wi[keep])
    got = on_device(torch.nanmedian, x).cpu()
    assert torch.equal(got.nan_to_num(), torch.nanmedian(x).nan_to_num())


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multi_margin_loss(p, reduction):
    """Forward and gradient in float64 equal to the CPU's within a few ulp, with and without
    class weights, batched and a single row."""
    torch.manual_seed(0)
    F = torch.nn.functional
    for shape, tgt in (((6, 5), torch.randint(0, 5, (6,))), ((5,), torch.tensor(3))):
        x = torch.randn(*shape, dtype=torch.float64)
        for w in (None, torch.rand(5, dtype=torch.float64)):
            kw = dict(p=p, margin=0.7, weight=w, reduction=reduction)
            xc = x.clone().requires_grad_()
            y = F.multi_margin_loss(xc, tgt, **kw)
            (gx,) = torch.autograd.grad(y.sum(), xc)
            xd = x.to(DEV).requires_grad_()
            kd = dict(kw, weight=None if w is None else w.to(DEV))
            before = fallback_counts()
            yd = F.multi_margin_loss(xd, tgt.to(DEV), **kd)
            (gd,) = torch.autograd.grad(yd.sum(), xd)
            # one row without reduction: PyTorch's Meta shape ([1]) is not the CPU's ([]),
            # so the forward stays on the CPU (lower/nn_margin.c)
            on_cpu = ["aten::multi_margin_loss"] if x.dim() == 1 and reduction == "none" else []
            assert sorted(new_fallbacks(before)) == on_cpu
            torch.testing.assert_close(yd.cpu(), y, rtol=1e-13, atol=1e-14)
            torch.testing.assert_close(gd.cpu(), gx, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss(reduction):
    """Labels up to the first -1 (repeats included), is_target, and the gradient, in
    float64 within a few ulp of the CPU's loops; batched and one row."""
    torch.manual_seed(0)
    F = torch.nn.functional
    tgt = torch.tensor([[3, 0, -1, 1, 2], [1, 1, 4, -1, 0], [-1, 2, 0, 0, 0], [4, 3, 2, 1, 0]])
    for x, t in ((torch.randn(4, 5, dtype=torch.float64), tgt), (torch.randn(5, dtype=torch.float64), tgt[0]),
                 (torch.randn((), dtype=torch.float64), torch.tensor(0))):
        xc = x.clone().requires_grad_()
        y = F.multilabel_margin_loss(xc, t, reduction=reduction)
        (gx,) = torch.autograd.grad(y.sum(), xc)
        xd = x.to(DEV).requires_grad_()
        before = fallback_counts()
        yd = F.multilabel_margin_loss(xd, t.to(DEV), reduction=reduction)
        (gd,) = torch.autograd.grad(yd.sum(), xd)
        fell = new_fallbacks(before)
        assert fell == [] or (x.dim() < 2 and reduction == "none"), fell
        torch.testing.assert_close(yd.cpu(), y, rtol=1e-13, atol=1e-14)
        torch.testing.assert_close(gd.cpu(), gx, rtol=1e-13, atol=1e-14)
    out, is_t = on_device(lambda s, t: torch.ops.aten.multilabel_margin_loss_forward(s, t, 1),
                          torch.randn(4, 5), tgt)
    assert torch.equal(is_t.cpu(), torch.ops.aten.multilabel_margin_loss_forward(torch.randn(4, 5), tgt, 1)[1])
