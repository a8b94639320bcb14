"""add, sub, mul, div (.Tensor, functional and in-place) have AutogradPrivateUse1 kernels
(csrc/torch/arith_autograd.cpp): a call that autograd has nothing to do for (no input with
autograd metadata, tpuc's kernel next below autograd) goes straight to tpuc's kernel, every
other call to PyTorch's own autograd kernel. Each case runs on the CPU and on "tpu" (twice
there, so the second call is a cache hit) and must agree: values, dtypes, requires_grad,
grad_fn, version counters, gradients (backward and forward AD), PyTorch's errors."""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.utils._python_dispatch import TorchDispatchMode

import tpuc  # noqa: F401

NAMES = ["add", "sub", "mul", "div"]


def _fn(name: str):
    return getattr(torch, name)


def _grad_fn(t: torch.Tensor) -> str | None:
    return None if t.grad_fn is None else type(t.grad_fn).__name__


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.device.type == "tpu"
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.requires_grad == want.requires_grad and got.is_leaf == want.is_leaf
    assert _grad_fn(got) == _grad_fn(want)
    assert got.is_inference() == want.is_inference()
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=0, atol=0)


def _on(t: torch.Tensor, dev: str) -> torch.Tensor:
    """A fresh leaf copy of t on dev (on the CPU .to() would return t itself)."""
    return t.detach().clone().to(dev)


def _error(f, *args) -> str:
    with pytest.raises(RuntimeError) as e:
        f(*args)
    return str(e.value)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("req", list(itertools.product([False, True], repeat=2)),
                         ids=lambda r: f"self{int(r[0])}other{int(r[1])}")
def test_functional_matches_cpu(name, grad_mode, req) -> None:
    torch.tpu.set_eager_mode("strict")
    a0, b0 = torch.randn(3, 4), torch.rand(4) + 1
    kw = {"alpha": 2} if name in ("add", "sub") else {}
    results = {}
    for dev in ("cpu", "tpu"):
        for _ in range(2 if dev == "tpu" else 1):
            a = _on(a0, dev).requires_grad_(req[0])
            b = _on(b0, dev).requires_grad_(req[1])
            with torch.set_grad_enabled(grad_mode):
                r = _fn(name)(a, b, **kw)
            grads = None
            if r.requires_grad:
                r.sum().backward()
                grads = [None if t.grad is None else t.grad.cpu() for t in (a, b)]
            results.setdefault(dev, []).append((r, grads))
    want, want_grads = results["cpu"][0]
    for got, grads in results["tpu"]:
        _same(got, want)
        assert (grads is None) == (want_grads is None)
        if grads is not None:
            for g, w in zip(grads, want_grads):
                assert (g is None) == (w is None)
                if g is not None:
                    torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_inplace_version_counters_and_history(name) -> None:
    torch.tpu.set_eager_mode("strict")
    a0, b0 = torch.randn(5), torch.rand(5) + 1
    out = {}
    for dev in ("cpu", "tpu"):
        for _ in range(2 if dev == "tpu" else 1):
            rows = []
            # no autograd metadata on either side: version bumped once, no history
            x, y = _on(a0, dev), _on(b0, dev)
            v = x._version
            r = getattr(x, name + "_")(y)
            rows.append((r is x, x._version - v, _grad_fn(x), x.requires_grad, x.cpu()))
            # other requires grad: x joins the graph (a non-leaf after the op)
            x, y = _on(a0, dev), _on(b0, dev).requires_grad_()
            getattr(x, name + "_")(y)
            x.sum().backward()
            rows.append((_grad_fn(x), x.requires_grad, x.is_leaf, y.grad.cpu()))
            # a non-leaf self that requires grad: history rebased
            w = _on(a0, dev).requires_grad_()
            x = w * 1
            getattr(x, name + "_")(_on(b0, dev))
            x.sum().backward()
            rows.append((_grad_fn(x), w.grad.cpu()))
            # a view of a base without autograd metadata: the base's counter moves
            base = _on(a0, dev)
            v = base._version
            getattr(base[1:4], name + "_")(_on(b0[1:4], dev))
            rows.append((base._version - v, base.cpu()))
            # an integer view (never differentiable): shares the base's counter
            ibase = torch.arange(6, dtype=torch.int64).to(dev) + 1
            v = ibase._version
            getattr(ibase[2:], "mul_" if name == "div" else name + "_")(3)
            rows.append((ibase._version - v, ibase.cpu()))
            out.setdefault(dev, []).append(rows)
    for rows in out["tpu"]:
        for got, want in zip(rows, out["cpu"][0]):
            for g, w in zip(got, want):
                if isinstance(w, torch.Tensor):
                    torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
                else:
                    assert g == w


@pytest.mark.parametrize("name", NAMES)
def test_inplace_errors_are_pytorchs(name) -> None:
    torch.tpu.set_eager_mode("strict")
    msgs = {}
    for dev in ("cpu", "tpu"):
        for _ in range(2 if dev == "tpu" else 1):
            other = torch.rand(4).to(dev) + 1
            leaf = _on(torch.randn(4), dev).requires_grad_()
            rows = [_error(getattr(leaf, name + "_"), other),           # a leaf that requires grad
                    _error(getattr(leaf[1:], name + "_"), other[1:])]   # a view of one
            with torch.no_grad():
                v = (leaf * 1)[1:]
            grad_other = _on(other, dev).requires_grad_()
            rows.append(_error(getattr(v, name + "_"), grad_other[1:]))  # a no-grad view, grad mode
            with torch.inference_mode():
                inf = torch.ones(4).to(dev)
            rows.append(_error(getattr(inf, name + "_"), other))   # an inference tensor outside
            rows.append(_error(getattr(torch.arange(4).to(dev), name + "_"), torch.randn(4).to(dev)))
            msgs.setdefault(dev, []).append(rows)
    for rows in msgs["tpu"]:
        assert rows == msgs["cpu"][0]


@pytest.mark.parametrize("name", NAMES)
def test_inference_tensors_and_inference_mode(name) -> None:
    torch.tpu.set_eager_mode("strict")
    a0, b0 = torch.randn(4), torch.rand(4) + 1
    res = {}
    for dev in ("cpu", "tpu"):
        for _ in range(2 if dev == "tpu" else 1):
            with torch.inference_mode():
                inf = _on(a0, dev)
                r_in = _fn(name)(inf, _on(b0, dev))          # in inference mode
                getattr(inf, name + "_")(_on(b0, dev))       # in place, allowed there
            r_out = _fn(name)(inf, _on(b0, dev))             # an inference tensor outside it
            grad_b = _on(b0, dev).requires_grad_()
            if name in ("add", "sub"):
                r_mix = _fn(name)(inf, grad_b)  # fine: nothing is saved for backward
            else:  # mul, div save self for backward: PyTorch's error
                r_mix = _error(_fn(name), inf, grad_b)
            res.setdefault(dev, []).append((r_in, inf, r_out, r_mix))
    for got in res["tpu"]:
        for g, w in zip(got, res["cpu"][0]):
            if isinstance(w, str):
                assert g == w
            else:
                _same(g, w)


@pytest.mark.parametrize("name", NAMES)
def test_forward_ad(name) -> None:
    torch.tpu.set_eager_mode("strict")
    a0, b0, t0 = torch.randn(4), torch.rand(4) + 1, torch.randn(4)
    res = {}
    for dev in ("cpu", "tpu"):
        for _ in range(2 if dev == "tpu" else 1):
            with fwAD.dual_level():
                dual = fwAD.make_dual(_on(b0, dev), _on(t0, dev))
                r = _fn(name)(_on(a0, dev), dual)
                plain = _on(a0, dev)
                getattr(plain, name + "_")(dual)  # a plain tensor gets a tangent in place
                rows = [fwAD.unpack_dual(r).tangent.cpu(), fwAD.unpack_dual(plain).tangent.cpu(),
                        r.detach().cpu(), plain.detach().cpu()]
            res.setdefault(dev, []).append(rows)
    for rows in res["tpu"]:
        for g, w in zip(rows, res["cpu"][0]):
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def test_dispatch_modes_still_see_the_ops() -> None:
    torch.tpu.set_eager_mode("strict")
    seen = {}
    for dev in ("cpu", "tpu"):
        a, b = torch.randn(3).to(dev), torch.rand(3).to(dev) + 1
        with _Ops() as m:
            for _ in range(2):
                ((a + b) * b - a / b).add_(a).mul_(b).sub_(a, alpha=2).div_(b)
        seen[dev] = m.seen
    assert seen["tpu"] == seen["cpu"] and "aten.add.Tensor" in seen["tpu"]


def test_the_kernels_are_tpucs() -> None:
    for op in ("add.Tensor", "add_.Tensor", "sub.Tensor", "sub_.Tensor",
               "mul.Tensor", "mul_.Tensor", "div.Tensor", "div_.Tensor"):
        table = torch._C._dispatch_dump_table(f"aten::{op}")
        row = next(line for line in table.splitlines() if line.startswith("AutogradPrivateUse1:"))
        assert "arith_autograd.cpp" in row
        other = next(line for line in table.splitlines() if line.startswith("AutogradOther:"))
        assert "VariableType" in other  # where the calls autograd works on go


def test_the_allocators_registry_of_live_storages() -> None:
    """Every tpu storage is registered while alive (getDeviceFromPtr answers from it), in an
    open-addressing set that storages join and leave on every op: grown past its first
    size, emptied in a shuffled order, it still holds exactly the live ones."""
    import random

    from tpuc import _C

    rng = random.Random(0)
    ts = [torch.empty(1, device="tpu") for _ in range(3000)]
    ptrs = [t.untyped_storage().data_ptr() for t in ts]
    assert len(set(ptrs)) == len(ptrs)
    order = list(range(len(ts)))
    rng.shuffle(order)
    freed = set(order[: len(order) * 2 // 3])
    for i in order[: len(order) * 2 // 3]:
        ts[i] = None
    for i, p in enumerate(ptrs):
        assert _C._device_of_storage_ptr(p) == (-1 if i in freed else 0)
    x = torch.randn(4)
    assert _C._device_of_storage_ptr(x.untyped_storage().data_ptr()) == -1  # a CPU pointer


def test_under_the_python_dispatcher_and_fake_tensors() -> None:
    """torch.compile's fake-tensor propagation runs with the Python dispatcher, which calls a
    kernel with the call's whole key set (its own keys included): the calls autograd works on
    must still reach PyTorch's autograd kernel once, not come back to tpuc's (BatchNorm's
    num_batches_tracked.add_(1) under torch.compile recursed without end)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    torch.tpu.set_eager_mode("strict")
    a0 = torch.randn(3)
    got = {}
    for dev in ("cpu", "tpu"):
        a = _on(a0, dev).requires_grad_()
        n = torch.zeros((), dtype=torch.int64).to(dev)
        with torch._C._EnablePythonDispatcher():
            r = (a + 1) * a - a / 2
            n.add_(1)
            r.sum().backward()
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fa = mode.from_tensor(_on(torch.randn(3), dev)).requires_grad_()
            fr = fa * 2 + fa
            fn = mode.from_tensor(torch.zeros((), dtype=torch.int64).to(dev))
            fn.add_(1)
            with torch._C._EnablePythonDispatcher():
                fr2 = fa.sub(fa, alpha=3).div(2)
        got[dev] = (r.detach().cpu(), a.grad.cpu(), n.cpu(), _grad_fn(r), fr.shape, _grad_fn(fr),
                    fr2.shape, _grad_fn(fr2), fn.shape)
    for g, w in zip(got["tpu"], got["cpu"]):
        if isinstance(w, torch.Tensor):
            torch.testing.assert_close(g, w)
        else:
            assert g == w
