"""The sort family on the device "tpu" against PyTorch on the CPU: sort (every
overload, out= included), argsort, msort, topk, kthvalue, cummax/cummin and
logcumsumexp, forward and backward. Order as the CPU: NaN greatest, -0.0 ==
+0.0, ties in input order (stable). Every op must run natively: no new entry
in torch.tpu.stats()["fallbacks"]."""
from __future__ import annotations

import warnings

import pytest
import torch

import tpuc  # noqa: F401  (registers "tpu")
from tpu_testing import fallback_counts, new_fallbacks

DEV = "tpu"
F32, BF16, F16, F64 = torch.float32, torch.bfloat16, torch.float16, torch.float64
I64, I32, U8, BOOL = torch.int64, torch.int32, torch.uint8, torch.bool


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def _flat(x) -> list:
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _flat(v)]
    return [x]


def run_both(fn, *inputs):
    """fn on the CPU inputs and on tpu copies; asserts nothing fell back;
    returns (tpu results on the CPU, CPU results), flattened."""
    ins_d = [x.to(DEV) if isinstance(x, torch.Tensor) else x for x in inputs]
    before = fallback_counts()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = fn(*ins_d)
        fell = new_fallbacks(before)
    assert fell == [], f"fell back to the CPU: {fell}"
    want = fn(*inputs)
    gots, wants = _flat(got), _flat(want)
    assert len(gots) == len(wants)
    for g, w in zip(gots, wants):
        assert g.device.type == DEV
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
    return [g.cpu() for g in gots], wants


def exact(fn, *inputs):
    """Bit-for-bit the CPU's results (values, NaN positions, signs of zeros)."""
    gots, wants = run_both(fn, *inputs)
    for g, w in zip(gots, wants):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
        if g.is_floating_point():
            assert torch.equal(torch.signbit(g), torch.signbit(w))


def awkward(*shape, dtype=F32):
    """Values with many ties, NaNs, infinities and both zeros."""
    pool = torch.tensor([0.0, -0.0, 1.0, -1.0, 2.5, float("nan"), float("inf"), -float("inf"),
                         -float("nan"), 1.0, 3.0], dtype=F64)
    x = pool[torch.randint(len(pool), shape)]
    return x.to(dtype)


def ints(*shape, dtype=I64, lo=-3, hi=4):
    return torch.randint(lo, hi, shape).to(dtype)


FLOATS = [F32, BF16, F16, F64]


@pytest.mark.parametrize("dtype", FLOATS)
def test_sort_floats_exact(dtype):
    x = awkward(4, 9, dtype=dtype)
    for dim in (0, 1, -1):
        for desc in (False, True):
            exact(lambda x: torch.sort(x, dim=dim, descending=desc), x)
            exact(lambda x: torch.sort(x, dim=dim, descending=desc, stable=True), x)
    exact(lambda x: (torch.argsort(x, dim=1, descending=True, stable=True), torch.msort(x)), x)


@pytest.mark.parametrize("dtype", [I64, I32, U8, BOOL])
def test_sort_integers_and_bool(dtype):
    x = ints(3, 5, 7, dtype=dtype, lo=0 if dtype in (U8, BOOL) else -3, hi=2 if dtype == BOOL else 4)
    for dim in (0, 1, 2):
        exact(lambda x: torch.sort(x, dim=dim, descending=True, stable=True), x)
        exact(lambda x: torch.sort(x, dim), x)
    exact(lambda x: (torch.argsort(x, dim=0, stable=True), torch.msort(x)), x)


def test_sort_shapes_and_out():
    exact(lambda x: torch.sort(x), torch.tensor(3.5))  # rank 0
    exact(lambda x: torch.sort(x, 1), torch.randn(3, 0))  # empty
    exact(lambda x: torch.sort(x, 0, descending=True), torch.randn(1000))
    x = awkward(5, 6)

    def with_out(x, stable):
        v, i = torch.empty(0, device=x.device), torch.empty(0, dtype=I64, device=x.device)
        r = torch.sort(x, dim=0, descending=True, stable=stable, out=(v, i))
        assert r[0] is v and r[1] is i
        return v, i

    exact(lambda x: with_out(x, True), x)
    exact(lambda x: with_out(x, None), x)
    exact(lambda x: torch.sort(x.t(), 1), x)  # a strided input


def _gathered(gots, wants, x, dim):
    """topk/kthvalue: values as the CPU; the indices pick those values out of x
    (PyTorch does not fix which of equal elements is chosen)."""
    (gv, gi), (wv, _) = gots, wants
    torch.testing.assert_close(gv, wv, rtol=0, atol=0, equal_nan=True)
    keep = gv.dim() == x.dim()
    idx = gi if keep else gi.unsqueeze(dim)
    picked = x.gather(dim, idx)
    torch.testing.assert_close(picked if keep else picked.squeeze(dim), gv, rtol=0, atol=0,
                               equal_nan=True)


@pytest.mark.parametrize("dtype", [F32, BF16, F64, I64, I32])
def test_topk(dtype):
    x = awkward(6, 10, dtype=dtype) if dtype.is_floating_point else ints(6, 10, dtype=dtype)
    for dim in (0, 1):
        n = x.shape[dim]
        for k in (1, 3, n):
            for largest in (True, False):
                gots, wants = run_both(lambda x: torch.topk(x, k, dim, largest=largest), x)
                _gathered(gots, wants, x, dim)
    # distinct values: the indices are determined, and sorted=False still sorts
    y = torch.randperm(50).float().reshape(5, 10)
    exact(lambda y: torch.topk(y, 4, 1), y)
    gots, wants = run_both(lambda y: torch.topk(y, 4, 1, sorted=False), y)
    assert torch.equal(gots[0].sort(1).values, wants[0].sort(1).values)

    def with_out(y):
        v, i = torch.empty(0, device=y.device), torch.empty(0, dtype=I64, device=y.device)
        return torch.topk(y, 2, 0, largest=False, out=(v, i))

    exact(with_out, y)


@pytest.mark.parametrize("dtype", [F32, F16, F64, I64])
def test_kthvalue(dtype):
    x = awkward(5, 8, dtype=dtype) if dtype.is_floating_point else ints(5, 8, dtype=dtype)
    for dim in (0, 1):
        for k in (1, 3, x.shape[dim]):
            for keepdim in (False, True):
                gots, wants = run_both(lambda x: torch.kthvalue(x, k, dim, keepdim), x)
                _gathered(gots, wants, x, dim)
    y = torch.randperm(40).double().reshape(4, 10)
    exact(lambda y: torch.kthvalue(y, 7, 1), y)

    def with_out(y):
        v, i = torch.empty(0, dtype=y.dtype, device=y.device), torch.empty(0, dtype=I64, device=y.device)
        return torch.kthvalue(y, 2, 0, keepdim=True, out=(v, i))

    exact(with_out, y)


@pytest.mark.parametrize("dtype", [F32, BF16, F64, I64, I32, BOOL])
def test_cummax_cummin(dtype):
    if dtype.is_floating_point:
        x = awkward(4, 12, dtype=dtype)
    else:
        x = ints(4, 12, dtype=dtype, lo=0 if dtype == BOOL else -3, hi=2 if dtype == BOOL else 4)
    for dim in (0, 1, -1):
        exact(lambda x: (*torch.cummax(x, dim), *torch.cummin(x, dim)), x)
    exact(lambda x: torch.cummax(x, 0), x[0])  # rank 1
    exact(lambda x: torch.cummin(x, 0), x[0, 0])  # rank 0

    def with_out(x):
        v, i = torch.empty(0, dtype=x.dtype, device=x.device), torch.empty(0, dtype=I64, device=x.device)
        torch.cummax(x, 1, out=(v, i))
        return v, i

    exact(with_out, x)


@pytest.mark.parametrize("dtype", [F32, BF16, F64])
def test_logcumsumexp(dtype):
    x = torch.randn(5, 37, dtype=F64) * 3
    x[0, 3] = -float("inf")
    x[1, :4] = -float("inf")
    x[2, 5] = float("inf")
    x[2, 9] = float("inf")
    x[3, 7] = float("nan")
    x[4] = torch.linspace(-1000, 10, 37)  # terms far below the running total
    x = x.to(dtype)
    tol = dict(rtol=1.6e-2, atol=1e-5) if dtype == BF16 else dict(rtol=1e-5, atol=1e-5)
    for dim in (0, 1):
        gots, wants = run_both(lambda x: torch.logcumsumexp(x, dim), x)
        torch.testing.assert_close(gots[0], wants[0], equal_nan=True, **tol)

    def with_out(x):
        out = torch.empty(0, dtype=x.dtype, device=x.device)
        torch.logcumsumexp(x, 1, out=out)
        return out

    gots, wants = run_both(with_out, x)
    torch.testing.assert_close(gots[0], wants[0], equal_nan=True, **tol)
    gots, wants = run_both(lambda x: torch.logcumsumexp(x, 0), torch.tensor(2.0, dtype=dtype))
    torch.testing.assert_close(gots[0], wants[0])


def grads(fn, x, seed_grad=True):
    """Gradients of sum(fn(x) * w) on the CPU and on tpu (w random, fixed)."""
    def loss(xx, dev):
        out = fn(xx)
        out = out if isinstance(out, torch.Tensor) else out[0]
        w = torch.linspace(-1, 2, out.numel(), dtype=out.dtype).reshape(out.shape).to(dev)
        return (out * w).sum()

    xc = x.clone().requires_grad_()
    xd = x.to(DEV).requires_grad_()
    want = torch.autograd.grad(loss(xc, "cpu"), xc)[0]
    before = fallback_counts()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.autograd.grad(loss(xd, DEV), xd)[0]
        fell = new_fallbacks(before)
    assert fell == [], f"fell back to the CPU: {fell}"
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_backward():
    x = torch.randn(4, 9, dtype=F32)
    x[1, 2] = x[1, 5]  # a tie
    grads(lambda x: torch.sort(x, 1, descending=True).values, x)
    grads(lambda x: torch.sort(x, dim=0, stable=True).values, x)
    grads(lambda x: torch.msort(x), x)
    grads(lambda x: torch.topk(x, 3, 1).values, torch.randn(4, 9))
    grads(lambda x: torch.kthvalue(x, 2, 0).values, torch.randn(4, 9))
    grads(lambda x: torch.cummax(x, 1).values, x)
    grads(lambda x: torch.cummin(x, 0).values, x)
    grads(lambda x: torch.logcumsumexp(x, 1), x)
