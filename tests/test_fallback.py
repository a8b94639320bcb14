"""Ops without a lowering run on the CPU: correct (in-place and out=
included, through views too), counted per op in torch.tpu.stats(), warned
about once, and an error under TPUC_FALLBACK=error."""
from __future__ import annotations

import warnings

import pytest
import torch

from tpu_testing import assert_same, quiet_fallback_warnings  # noqa: F401
from tpuc import _C


# Ops that no lowering will ever cover: a library of our own, with CPU
# kernels only (functional, in-place and out=). They reach the device's boxed
# kernel like any aten op without a lowering.
_lib = torch.library.Library("tpuc_test", "DEF")
_lib.define("scale(Tensor self, float s) -> Tensor")
_lib.define("scale_(Tensor(a!) self, float s) -> Tensor(a!)")
_lib.define("scale.out(Tensor self, float s, *, Tensor(a!) out) -> Tensor(a!)")
_lib.impl("scale", lambda t, s: t * s + 1, "CPU")
_lib.impl("scale_", lambda t, s: t.mul_(s).add_(1), "CPU")


def _scale_out(t: torch.Tensor, s: float, *, out: torch.Tensor) -> torch.Tensor:
    out.resize_(t.shape)
    return out.copy_(t * s + 1)


_lib.impl("scale.out", _scale_out, "CPU")
scale = torch.ops.tpuc_test.scale


def count(op: str) -> int:
    return torch.tpu.stats()["fallbacks"].get(op, 0)


def test_data_dependent_ops_fall_back_and_are_counted() -> None:
    """unique has no lowering (its output size depends on the data): the CPU
    runs it, counted per call. nonzero, masked_select and boolean indexing
    have device implementations (tests/test_ops_dynamic.py) and are not."""
    a = torch.tensor([[0.0, 1.5, -2.0], [3.0, 0.0, 4.0], [1.5, 0.0, 3.0]])
    x = a.to("tpu")
    before = count("aten::_unique2")
    assert_same(torch.unique(x), torch.unique(a))
    assert count("aten::_unique2") == before + 1
    assert_same(torch.unique(x, return_counts=True)[1], torch.unique(a, return_counts=True)[1])
    assert count("aten::_unique2") == before + 2
    nz = count("aten::nonzero")
    assert_same(torch.nonzero(x), torch.nonzero(a))
    assert_same(x[x > 0], a[a > 0])
    assert count("aten::nonzero") == nz


def test_functional_op_without_lowering() -> None:
    a = torch.linspace(-1, 1, 12).reshape(3, 4)
    x = a.to("tpu")
    before = count("tpuc_test::scale")
    assert_same(scale(x, 2.0), a * 2 + 1)
    assert_same(scale(x.t(), 3.0), a.t() * 3 + 1)  # a non-contiguous input
    assert count("tpuc_test::scale") == before + 2


def test_out_variant_without_lowering() -> None:
    a = torch.linspace(-1, 1, 12).reshape(3, 4)
    x = a.to("tpu")
    before = count("tpuc_test::scale.out")
    # into a strided slice of a bigger tensor: only the slice changes
    out, ref = torch.full((3, 8), 5.0, device="tpu"), torch.full((3, 8), 5.0)
    res = scale.out(x, 2.0, out=out[:, 1::2])
    scale.out(a, 2.0, out=ref[:, 1::2])
    assert res.device.type == "tpu" and res.shape == (3, 4)
    assert_same(out, ref)
    # into an empty tensor: resized as on the CPU
    out0 = torch.empty(0, device="tpu")
    res0 = scale.out(x, 2.0, out=out0)
    assert res0 is out0
    assert_same(out0, a * 2 + 1)
    assert count("tpuc_test::scale.out") == before + 2


def test_inplace_without_lowering_through_a_view() -> None:
    a = torch.linspace(0.05, 0.95, 24).reshape(4, 6)
    x = a.to("tpu")
    before = count("tpuc_test::scale_")
    v = x[1:3, ::2]  # a strided view: the base must change where the view is
    r = torch.ops.tpuc_test.scale_(v, 2.0)
    torch.ops.tpuc_test.scale_(a[1:3, ::2], 2.0)
    assert r is v
    assert_same(x, a)
    torch.ops.tpuc_test.scale_(x.t(), -1.0)  # through a transpose
    torch.ops.tpuc_test.scale_(a.t(), -1.0)
    assert_same(x, a)
    assert count("tpuc_test::scale_") == before + 2


def test_everything_through_the_fallback_when_native_is_off() -> None:
    """TPUC_NATIVE=0: lowered ops too run on the CPU, and are counted."""
    before = _C._native_enabled()
    _C._set_native_enabled(False)
    try:
        a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        x = a.to("tpu")
        n, m = count("aten::add.Tensor"), count("aten::add_.Tensor")
        assert_same(x + x, a + a)
        x.t().add_(1)  # in-place through a transposed view
        a.t().add_(1)
        assert_same(x, a)
        assert count("aten::add.Tensor") >= n + 1  # taken whole (fallback.cpp)
        assert count("aten::add_.Tensor") >= m + 1
    finally:
        _C._set_native_enabled(before)


def test_warned_once_per_op() -> None:
    x = torch.tensor([1.0, 0.0, 2.0], device="tpu")
    _C._reset_fallback_counts()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.unique(x)
        torch.unique(x)
        torch.unique(x)
    msgs = [str(m.message) for m in w if "aten::_unique2" in str(m.message)]
    assert len(msgs) == 1, msgs
    assert "TPUC_FALLBACK=error" in msgs[0]
    assert count("aten::_unique2") == 3


def test_fallback_error_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.tensor([1.0, 0.0, 2.0], device="tpu")
    monkeypatch.setenv("TPUC_FALLBACK", "error")
    with pytest.raises(RuntimeError, match=r"aten::_unique2.*TPUC_FALLBACK=error"):
        torch.unique(x)
    monkeypatch.delenv("TPUC_FALLBACK")
    assert_same(torch.unique(x), torch.unique(torch.tensor([1.0, 0.0, 2.0])))


def test_random_ops_on_the_fallback_follow_the_tpu_generator() -> None:
    """On the CPU a random op draws from a generator derived from the tpu
    generator's (seed, offset): torch.tpu.manual_seed governs it too."""
    before = _C._native_enabled()
    _C._set_native_enabled(False)
    try:
        n = count("aten::exponential_")
        torch.tpu.manual_seed(11)
        p = torch.empty(100, device="tpu").exponential_().cpu()
        torch.tpu.manual_seed(11)
        q = torch.empty(100, device="tpu").exponential_().cpu()
        r = torch.empty(100, device="tpu").exponential_().cpu()
        assert torch.equal(p, q) and not torch.equal(q, r)
        assert bool((p > 0).all())
        assert count("aten::exponential_") == n + 3
        state = torch.tpu.get_rng_state()
        assert int.from_bytes(bytes(state[8:].tolist()), "little") == 200  # 2 x 100 draws
    finally:
        _C._set_native_enabled(before)


def test_the_warning_says_why() -> None:
    x = torch.tensor([1.0, 0.0, 2.0], device="tpu")
    _C._reset_fallback_counts()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.unique(x)
    msgs = [str(m.message) for m in w if "aten::_unique2" in str(m.message)]
    assert len(msgs) == 1, msgs
    assert "runs on the CPU (" in msgs[0] and "TPUC_FALLBACK" in msgs[0]
