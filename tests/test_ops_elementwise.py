"""Elementwise ops, copies, factories and random ops on the device "tpu"
against PyTorch on the CPU, through the real PyTorch device: values, dtypes,
broadcasting, Python scalars, views, in-place and out= forms, gradients of
the activations — and every op runs natively (no new entry in
torch.tpu.stats()["fallbacks"])."""
from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

import tpuc  # noqa: F401  (registers "tpu")

DEV = "tpu"
BF16, I64, I32 = torch.bfloat16, torch.int64, torch.int32


def _fallbacks() -> dict[str, int]:
    return dict(torch.tpu.stats()["fallbacks"])


def _new_fallbacks(before: dict[str, int]) -> list[str]:
    return sorted(k for k, v in _fallbacks().items() if v > before.get(k, 0))


def dev(x):
    return x.to(DEV) if isinstance(x, torch.Tensor) else x


def _flat(x) -> list:
    if isinstance(x, (tuple, list)):  # return_types (values, indices) too
        return [t for v in x for t in _flat(v)]
    return [x]


def same(fn, *inputs, tol=None):
    """fn on CPU inputs and on tpu copies of them: same values, dtype and
    shape (and same inputs afterwards: in-place forms), and nothing fell back."""
    ins_d = [dev(x) for x in inputs]
    ins_c = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    before = _fallbacks()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = fn(*ins_d)
        fell = _new_fallbacks(before)
        want = fn(*ins_c)
    assert fell == [], f"fell back to the CPU: {fell}"
    tol = tol or {}
    gots, wants = _flat(got), _flat(want)
    assert len(gots) == len(wants)
    for g, w in zip(gots, wants):
        assert g.device.type == DEV
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        torch.testing.assert_close(g.cpu(), w, equal_nan=True, **tol)
    for a, b in zip(ins_d, ins_c):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(a.cpu(), b, equal_nan=True, **tol)


def r(*shape, dtype=torch.float32, lo=-2.0, hi=2.0):
    x = torch.rand(*shape, dtype=torch.float64) * (hi - lo) + lo
    return x.round().to(dtype) if not dtype.is_floating_point else x.to(dtype)


@pytest.fixture(autouse=True)
def seeded():
    """Each test sees the same data whichever tests run before it."""
    torch.manual_seed(0)


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
def test_arithmetic(dtype):
    a, b = r(3, 4, dtype=dtype), r(4, dtype=dtype, lo=0.5, hi=2)
    same(lambda a, b: a + b, a, b)
    same(lambda a, b: a - 2.5 * b, a, b)
    # PyTorch's CPU rounds alpha * b to bfloat16 first on short tensors (its scalar
    # loop), once on long ones (its vector loop); here it rounds once: a last-bit
    # difference after cancellation
    same(lambda a, b: torch.add(a, b, alpha=3), a, b,
         tol=dict(rtol=0.02, atol=0.02) if dtype == BF16 else None)
    same(lambda a, b: a * b / (b + 1), a, b)
    same(lambda a, b: (a // b, a % b, torch.fmod(a, b)), a, b)
    same(lambda a, b: (a ** 2, 2 ** a, b ** a, a.abs() ** 0.5), a, b)
    same(lambda a, b: (torch.atan2(a, b), torch.hypot(a, b), torch.logaddexp(a, b)), a, b)
    same(lambda a, b: (torch.maximum(a, b), torch.minimum(a, b), torch.copysign(b, a)), a, b)
    same(lambda a, b: (torch.xlogy(a, b), torch.lerp(a, b, 0.3), torch.lerp(a, b, b / 3)), a, b)
    same(lambda a, b: (torch.addcmul(a, a, b, value=0.5), torch.addcdiv(a, a, b, value=-2)), a, b)
    same(lambda a, b: torch.div(a, b, rounding_mode="trunc"), a, b)


def test_integer_arithmetic_and_promotion():
    a, b = r(3, 4, dtype=I64, lo=-20, hi=20), r(4, dtype=I32, lo=1, hi=6)
    same(lambda a, b: (a + b, a - b, a * b, a // b, a % b, a / b), a, b)
    same(lambda a, b: (a + 1.5, a * 2, a > 0.5, a.float() + b), a, b)
    same(lambda a, b: (a ** 2, torch.div(a, -b, rounding_mode="floor")), a, b)
    same(lambda a: (a & 6, a | 1, a ^ a.flip(0), ~a, a.bool() & (a > 3)), a)
    same(lambda a, f: a + f, a, torch.tensor(2.5))  # 0-dim float decides the category


def test_unary_math():
    x = r(4, 5, lo=0.1, hi=0.9)
    for fn in (torch.exp, torch.exp2, torch.expm1, torch.log, torch.log2, torch.log10, torch.log1p,
               torch.sqrt, torch.rsqrt, torch.reciprocal, torch.sin, torch.cos, torch.tan,
               torch.asin, torch.acos, torch.atan, torch.sinh, torch.cosh, torch.tanh,
               torch.asinh, torch.atanh, torch.sigmoid, torch.erf, torch.erfc, torch.erfinv,
               torch.neg, torch.abs, torch.sign, torch.sgn, torch.floor, torch.ceil,
               torch.round, torch.trunc, torch.frac):
        same(fn, x * 2 - 1 if fn not in (torch.log, torch.log2, torch.log10, torch.sqrt,
                                         torch.rsqrt) else x)
        same(fn, (x * 2 - 1).to(BF16) if fn not in (torch.log, torch.sqrt) else x.to(BF16))
    same(torch.acosh, x + 1)
    same(lambda x: torch.round(x * 100, decimals=1), x)
    same(lambda i: (torch.exp(i), torch.sqrt(i.abs()), i.neg(), i.abs()), r(5, dtype=I64, lo=-3, hi=3))


def test_in_place_views_and_out():
    a, b = r(4, 5), r(5)
    same(lambda a, b: a[1:].add_(b), a, b)
    same(lambda a, b: a.t().mul_(2).sub_(b[:4]), a, b)
    same(lambda a: a[:, ::2].exp_(), a)
    same(lambda a, b: torch.add(a, b, out=torch.empty(4, 5, device=a.device)), a, b)
    same(lambda a: torch.sigmoid(a, out=torch.empty(4, 5, device=a.device)), a)
    same(lambda a: a.clamp_(-0.5, 0.5), a)
    same(lambda a, b: a.masked_fill_(b > 0, -1.0), a, b)


def test_comparisons_logical_where():
    a, b = r(3, 4), r(4)
    same(lambda a, b: (a == b, a != b, a < b, a <= b, a > b, a >= b), a.round(), b.round())
    same(lambda a: (a > 0.5, a <= 0, a == 1), a)
    same(lambda a, b: (torch.logical_and(a > 0, b > 0), torch.logical_or(a, b),
                       torch.logical_xor(a, b), torch.logical_not(a)), a.round(), b.round())
    same(lambda a, b: (torch.where(a > 0, a, b), torch.where(a > 0, a, 0.0)), a, b)
    same(lambda a, b: a.masked_fill(a > b, float("-inf")), a, b)
    same(lambda a: (torch.isnan(a), torch.isinf(a), torch.isfinite(a), torch.nan_to_num(a)),
         torch.tensor([1.0, float("nan"), float("inf"), -float("inf")]))


def test_clamp():
    x, lo, hi = r(3, 4, lo=-3, hi=3), r(4, lo=-2, hi=0), r(3, 1, lo=0, hi=2)
    same(lambda x: (x.clamp(-1, 1), x.clamp(min=0.5), x.clamp(max=-0.5)), x)
    same(lambda x, lo, hi: (x.clamp(lo, hi), torch.clamp(x, min=lo)), x, lo, hi)
    same(lambda i: i.clamp(-2, 3), r(6, dtype=I64, lo=-9, hi=9))


@pytest.mark.parametrize("act", [F.relu, F.gelu, lambda x: F.gelu(x, approximate="tanh"), F.silu,
                                 F.elu, lambda x: F.leaky_relu(x, 0.2), F.softplus, F.hardtanh,
                                 F.hardsigmoid, F.hardswish, F.mish, torch.sigmoid, torch.tanh,
                                 lambda x: F.threshold(x, 0.1, -1.0), F.logsigmoid,
                                 F.softshrink, F.hardshrink, F.celu,
                                 lambda x: torch.logit(torch.sigmoid(x), eps=1e-3),
                                 lambda x: torch.lgamma(x.abs() + 0.5)])
def test_activations_forward_and_backward(act):
    x = r(4, 6, lo=-4, hi=4)
    g = torch.randn(4, 6)
    xc = x.clone().requires_grad_()
    xd = x.to(DEV).requires_grad_()
    before = _fallbacks()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yd = act(xd)
        yd.backward(g.to(DEV))
        fell = _new_fallbacks(before)
    yc = act(xc)
    yc.backward(g)
    assert fell == [], f"fell back to the CPU: {fell}"
    torch.testing.assert_close(yd.detach().cpu(), yc.detach())
    torch.testing.assert_close(xd.grad.cpu(), xc.grad)


def test_conversions_and_copies():
    x = r(3, 4, lo=-5, hi=5)
    same(lambda x: (x.to(BF16), x.to(I64), x.to(torch.bool), x.double(), x.half()), x)
    same(lambda x: (x.t().contiguous(), x[:, 1:3].clone(), x.t().to(I32)), x)
    same(lambda x, y: x.copy_(y), x, r(4))
    same(lambda x, y: x[1].copy_(y), x, r(4).to(I64))


def test_factories():
    def make(d):
        return (torch.arange(10, device=d), torch.arange(-3, 3, 0.5, device=d),
                torch.arange(2, 20, 3, dtype=I32, device=d), torch.linspace(-1, 1, 7, device=d),
                torch.eye(3, 4, device=d), torch.full((2, 3), 7.5, device=d),
                torch.zeros(2, 2, dtype=BF16, device=d), torch.ones(3, dtype=I64, device=d),
                torch.zeros_like(torch.empty(2, device=d)).fill_(3))
    before = _fallbacks()
    got = make(DEV)
    assert _new_fallbacks(before) == []
    for g, w in zip(got, make("cpu")):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w)


def test_random():
    before = _fallbacks()
    torch.manual_seed(1)
    a = torch.rand(100_000, device=DEV)
    n = torch.randn(100_000, device=DEV)
    torch.manual_seed(1)
    a2 = torch.rand(100_000, device=DEV)
    b = torch.bernoulli(torch.full((100_000,), 0.3, device=DEV))
    i = torch.randint(-3, 5, (100_000,), device=DEV)
    p = torch.randperm(1000, device=DEV)
    e = torch.empty(100_000, device=DEV).exponential_(2.0)
    u = torch.empty(100_000, device=DEV).uniform_(-1, 3)
    m = torch.normal(torch.zeros(1000, device=DEV), 2.0)
    assert _new_fallbacks(before) == []
    a, n, a2, b, i, p, e, u = (t.cpu() for t in (a, n, a2, b, i, p, e, u))
    assert torch.equal(a, a2)  # the same seed gives the same numbers
    assert 0 <= a.min() and a.max() < 1 and abs(a.mean() - 0.5) < 0.01
    assert abs(n.mean()) < 0.02 and abs(n.std() - 1) < 0.02
    assert abs(b.mean() - 0.3) < 0.01
    assert i.min() == -3 and i.max() == 4
    assert torch.equal(p.sort().values, torch.arange(1000))
    assert abs(e.mean() - 0.5) < 0.01
    assert -1 <= u.min() and u.max() < 3 and abs(u.mean() - 1) < 0.02
    assert m.shape == (1000,)
    c = torch.rand(1000, device=DEV).cpu()  # the generator advances: new numbers
    assert not torch.equal(c, a[:1000])


def _ulp32(v: torch.Tensor) -> torch.Tensor:
    """The float32 spacing at |v| (subnormal spacing near 0)."""
    a = v.abs().float()
    return (torch.nextafter(a, torch.tensor(float("inf"))) - a).double()


def _gelu_exact64(x: torch.Tensor, approximate: str) -> tuple[torch.Tensor, torch.Tensor]:
    """GELU and its derivative in float64 by forms that do not cancel in the tails (PyTorch's own
    float64 kernel returns -0 below x = -8, where the value is -7.6e-23 at -10)."""
    x = x.double()
    if approximate == "none":
        cdf = 0.5 * torch.special.erfc(-x / math.sqrt(2))
        return x * cdf, cdf + x * torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    beta, kappa = math.sqrt(2 / math.pi), 0.044715
    u2 = 2 * beta * (x + kappa * x**3)
    s, s_neg = torch.sigmoid(u2), torch.sigmoid(-u2)
    return x * s, s + 2 * x * s * s_neg * beta * (1 + 3 * kappa * x * x)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_is_accurate_in_both_tails(approximate):
    """GELU and its gradient, elementwise against float64, from -1e10 to 1e10: each value within
    4x the largest of the CPU's own error, 8 float32 ulps of the exact value (XLA's float32
    erfc and logistic err by a few ulps), and, where |x| < 2, one float32 rounding of the
    formula's terms (at most (1 + |x|) |grad|: float32 computes Phi(x) there as 1 - erf, and
    the derivative is a difference of terms near x = -0.75). Before, the exact GELU computed
    0.5 x (1 + erf(x / sqrt 2)) and XLA's erf stops short of -1: gelu(-10) was -8.9e-7 and
    gelu(-1e10) -894, where the CPU gives -0 (the exact value is -7.6e-23); the tanh form lost
    the tail the same way (tests/reliability/test_fuzz.py found it)."""
    x = torch.cat([torch.linspace(-20, 20, 4001), torch.tensor([-1e10, -1e4, -100.0, 100.0, 1e4, 1e10])])
    g = torch.linspace(0.5, 1.5, x.numel())

    def run(dev_x, dev_g):
        t = dev_x.clone().requires_grad_()
        y = F.gelu(t, approximate=approximate)
        y.backward(dev_g)
        return y.detach().cpu().double(), t.grad.cpu().double()

    exact_y, exact_d = _gelu_exact64(x, approximate)
    exact_g = exact_d * g.double()
    cpu_y, cpu_g = run(x, g)
    dev_y, dev_g = run(x.to(DEV), g.to(DEV))
    x64, g64 = x.double(), g.double()
    terms = torch.where(x64.abs() < 2, (1 + x64.abs()) * torch.finfo(torch.float32).eps, 0.0)
    for got, cpu, exact, scale in ((dev_y, cpu_y, exact_y, terms), (dev_g, cpu_g, exact_g, terms * g64)):
        bound = 4 * torch.maximum(torch.maximum((cpu - exact).abs(), 8 * _ulp32(exact)), scale)
        err = (got - exact).abs()
        worst = (err - bound).argmax()
        assert (err <= bound).all(), (f"x={x[worst].item()}: tpu {got[worst].item()}, "
                                      f"cpu {cpu[worst].item()}, exact {exact[worst].item()}")


def test_erf_reaches_one_and_the_normal_cdf_its_tail():
    """erf over [-12, 12], and special.ndtr and Normal.cdf in the lower tail (x <= -3.92, where
    float32's correctly rounded erf is -1), elementwise against float64: within 4x the largest
    of the CPU's own error and one float32 ulp of the exact value. XLA's erf stopped up to 5
    ulps short of +-1 (0.9999997 at x = 12), so ndtr(-10) = (1 + erf(-10 / sqrt 2)) / 2,
    PyTorch's formula, was 8.9e-8 where the CPU gives 0 (exact 7.6e-24), and every Normal.cdf
    below -5 was off by as much. (Between, ndtr's 1 + erf cancels: its error is erf's, checked
    by the first case.)"""
    x = torch.linspace(-12, 12, 24001)
    tail = x <= -3.92
    cdf64 = 0.5 * torch.special.erfc(-x.double() / math.sqrt(2))

    def normal_cdf(v):
        return torch.distributions.Normal(torch.tensor(0.0, device=v.device),
                                          torch.tensor(1.0, device=v.device)).cdf(v)

    for name, fn, exact, where in (("erf", torch.erf, torch.erf(x.double()), x == x),
                                   ("ndtr", torch.special.ndtr, cdf64, tail),
                                   ("Normal.cdf", normal_cdf, cdf64, tail)):
        got = fn(x.to(DEV)).cpu().double()[where]
        cpu = fn(x).double()[where]
        exact = exact[where]
        bound = 4 * torch.maximum((cpu - exact).abs(), _ulp32(exact))
        err = (got - exact).abs()
        worst = (err - bound).argmax()
        assert (err <= bound).all(), (f"{name} at x={x[where][worst].item()}: tpu {got[worst].item()}, "
                                      f"cpu {cpu[worst].item()}, exact {exact[worst].item()}")
    far = x.abs() >= 3.92
    assert torch.equal(torch.erf(x[far].to(DEV)).cpu(), torch.sign(x[far]))


def test_sinh_cosh_keep_their_precision_for_large_arguments():
    """sinh and cosh elementwise over [-89, 89] (float32) and [-700, 700] (float64): within 4x
    the largest of the CPU's own error and one ulp of the exact value (float32 against
    float64; float64 against the CPU's float64, itself within an ulp). XLA's forms rounded
    |x| - log 2 before the exponential: 24 float32 ulps at |x| = 39."""
    x = torch.linspace(-89, 89, 35601)
    x64 = torch.linspace(-700, 700, 14001, dtype=torch.float64)
    for fn in (torch.sinh, torch.cosh):
        exact = fn(x.double())
        got, cpu = fn(x.to(DEV)).cpu().double(), fn(x).double()
        bound = 4 * torch.maximum((cpu - exact).abs(), _ulp32(exact))
        err = (got - exact).abs()
        assert (err <= bound).all(), (fn.__name__, x[(err - bound).argmax()].item())
        want = fn(x64)
        got64 = fn(x64.to(DEV)).cpu()
        ulp64 = (torch.nextafter(want.abs(), torch.tensor(float("inf"), dtype=torch.float64)) - want.abs())
        assert ((got64 - want).abs() <= 4 * ulp64).all(), (fn.__name__, x64[((got64 - want).abs() / ulp64).argmax()].item())
