"""add, sub, mul, div (.Tensor, functional and in-place) have unboxed kernels
(csrc/torch/arith.cpp) whose fast path is the boxed path's Meta-cache hit: each call below
runs twice, so the second takes the fast path, and must match PyTorch CPU exactly
(dtype, shape, values), keep in-place aliasing and version counters, feed autograd, and
hand everything else (errors, CPU fallback) to the boxed kernel as before."""
import pytest
import torch

import tpuc  # noqa: F401

OPS = [torch.add, torch.sub, torch.mul, torch.div]
INPLACE = ["add_", "sub_", "mul_", "div_"]


def _pair(op, a, b, **kw):
    want = op(a, b, **kw)
    ta = a.to("tpu") if isinstance(a, torch.Tensor) else a
    tb = b.to("tpu") if isinstance(b, torch.Tensor) and b.dim() > 0 else b
    for _ in range(2):  # the second call is a cache hit: the unboxed fast path
        got = op(ta, tb, **kw).cpu()
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.__name__)
def test_functional_promotion_and_broadcasting(op) -> None:
    torch.tpu.set_eager_mode("strict")
    f = torch.randn(3, 4)
    _pair(op, f, torch.randn(4))
    _pair(op, torch.arange(12, dtype=torch.int32).reshape(3, 4), f)
    _pair(op, f, 2)
    _pair(op, torch.arange(4, dtype=torch.int64) + 1, 3)
    _pair(op, f, torch.tensor(0.5, dtype=torch.float64))  # a 0-dim CPU tensor
    _pair(op, f.t(), f.t())  # strided
    if op in (torch.add, torch.sub):
        _pair(op, f, f, alpha=2)
        _pair(op, f, f, alpha=-0.25)


@pytest.mark.parametrize("name", INPLACE)
def test_inplace_aliasing_and_version_counter(name) -> None:
    torch.tpu.set_eager_mode("strict")
    a, b = torch.randn(5) + 3, torch.randn(5) + 3
    x, y = a.clone().to("tpu"), b.to("tpu")
    for _ in range(2):
        v = x._version
        r = getattr(x, name)(y)
        assert r is x and x._version == v + 1
        getattr(a, name)(b)
        torch.testing.assert_close(x.cpu(), a, rtol=0, atol=0)
    view = x[1:3]
    getattr(view, name)(2)
    getattr(a[1:3], name)(2)
    torch.testing.assert_close(x.cpu(), a, rtol=0, atol=0)
    getattr(x, name)(x)  # self aliases other
    getattr(a, name)(a)
    torch.testing.assert_close(x.cpu(), a, rtol=0, atol=0)


def test_errors_are_pytorchs() -> None:
    torch.tpu.set_eager_mode("strict")
    x = torch.randn(3, device="tpu")
    for _ in range(2):
        with pytest.raises(RuntimeError, match="must match the size of tensor b"):
            x + torch.randn(4, device="tpu")
        with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
            torch.arange(3, device="tpu").add_(x)
        with pytest.raises(RuntimeError, match="same device"):
            x + torch.randn(3)


def test_autograd_through_the_unboxed_kernels() -> None:
    torch.tpu.set_eager_mode("strict")
    a, b = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    ta = a.detach().to("tpu").requires_grad_()
    tb = b.detach().to("tpu").requires_grad_()
    for _ in range(2):
        (((a + b) * b - a / (b.abs() + 1)).sub(a, alpha=3)).sum().backward()
        (((ta + tb) * tb - ta / (tb.abs() + 1)).sub(ta, alpha=3)).sum().backward()
    torch.testing.assert_close(ta.grad.cpu(), a.grad, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(tb.grad.cpu(), b.grad, rtol=1e-6, atol=1e-6)


def test_dtype_the_core_cannot_take_falls_back() -> None:
    """complex128 or float64 may lack a lowering; whatever the core declines still runs,
    on the CPU, with the CPU's result."""
    torch.tpu.set_eager_mode("strict")
    a = torch.randn(4, dtype=torch.complex64)
    _pair(torch.mul, a, a)
    _pair(torch.add, torch.randn(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64))
