"""Ops without a lowering run on the CPU: correct (in-place and out=
included, through views too), counted per op in torch.tpu.stats(), warned
about once, and an error under TPUC_FALLBACK=error."""
from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch

from tpu_testing import assert_same, quiet_fallback_warnings  # noqa: F401
from tpuc import _C


def lowered() -> set[str]:
    return set(_C._op_names())


def first_unlowered(candidates: list[tuple[str, Callable]]) -> tuple[str, Callable]:
    """The first candidate op the core has no lowering for (the core grows;
    some of these will always stay on the CPU)."""
    have = lowered()
    for name, fn in candidates:
        if name not in have:
            return name, fn
    pytest.fail(f"every candidate has a lowering now: {[n for n, _ in candidates]}; add more")


def count(op: str) -> int:
    return torch.tpu.stats()["fallbacks"].get(op, 0)


def test_data_dependent_ops_fall_back_and_are_counted() -> None:
    a = torch.tensor([[0.0, 1.5, -2.0], [3.0, 0.0, 4.0]])
    x = a.to("tpu")
    before = count("aten::nonzero")
    r = torch.nonzero(x)
    assert_same(r, torch.nonzero(a))
    assert count("aten::nonzero") == before + 1
    torch.nonzero(x)
    assert count("aten::nonzero") == before + 2
    assert_same(torch.masked_select(x, x > 0), torch.masked_select(a, a > 0))
    assert count("aten::masked_select") >= 1
    assert_same(x[x > 0], a[a > 0])  # boolean indexing: the output's size depends on data
    vals = torch.unique(x)
    assert_same(vals, torch.unique(a))


OUT_CANDIDATES = [
    ("aten::special_i1e.out", lambda x, out: torch.special.i1e(x, out=out)),
    ("aten::special_i0e.out", lambda x, out: torch.special.i0e(x, out=out)),
    ("aten::i0.out", lambda x, out: torch.i0(x, out=out)),
    ("aten::erfinv.out", lambda x, out: torch.erfinv(x, out=out)),
    ("aten::lgamma.out", lambda x, out: torch.lgamma(x, out=out)),
    ("aten::digamma.out", lambda x, out: torch.digamma(x, out=out)),
]


def test_out_variant_without_lowering() -> None:
    name, fn = first_unlowered(OUT_CANDIDATES)
    a = torch.linspace(-0.9, 0.9, 12).reshape(3, 4)
    x = a.to("tpu")
    before = count(name)
    # into a strided slice of a bigger tensor: only the slice changes
    out, ref = torch.full((3, 8), 5.0, device="tpu"), torch.full((3, 8), 5.0)
    res = fn(x, out[:, 1::2])
    fn(a, ref[:, 1::2])
    assert res.device.type == "tpu"
    assert_same(out, ref)
    # into an empty tensor: resized as on the CPU
    out0 = torch.empty(0, device="tpu")
    fn(x, out0)
    assert_same(out0, fn(a, torch.empty(0)))
    assert count(name) == before + 2


INPLACE_CANDIDATES = [
    ("aten::logit_", lambda t: t.logit_(1e-3)),
    ("aten::hardtanh_", lambda t: torch.nn.functional.hardtanh_(t, -0.25, 0.25)),
    ("aten::index_fill_.int_Scalar", lambda t: t.index_fill_(1, torch.tensor([0, 2], device=t.device), -1.0)),
    ("aten::masked_fill_.Scalar", lambda t: t.masked_fill_(t > 0.3, 0.5)),
    ("aten::put_", lambda t: t.put_(torch.tensor([1, 5], device=t.device), torch.tensor([9.0, 8.0], device=t.device))),
]


def test_inplace_without_lowering_through_a_view() -> None:
    name, fn = first_unlowered(INPLACE_CANDIDATES)
    a = torch.linspace(0.05, 0.95, 24).reshape(4, 6)
    x = a.to("tpu")
    before = count(name)
    r = fn(x[1:3, ::2])  # a strided view: the base must change where the view is
    fn(a[1:3, ::2])
    assert r.device.type == "tpu" and r.shape == (2, 3)
    assert_same(x, a)
    assert count(name) == before + 1


def test_everything_through_the_fallback_when_native_is_off() -> None:
    """TPUC_NATIVE=0: lowered ops too run on the CPU, and are counted."""
    before = _C._native_enabled()
    _C._set_native_enabled(False)
    try:
        a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        x = a.to("tpu")
        n = count("aten::add.out")
        assert_same(x + x, a + a)
        x.t().add_(1)  # in-place through a transposed view
        a.t().add_(1)
        assert_same(x, a)
        assert count("aten::add.out") >= n + 2
    finally:
        _C._set_native_enabled(before)


def test_warned_once_per_op() -> None:
    x = torch.tensor([1.0, 0.0, 2.0], device="tpu")
    _C._reset_fallback_counts()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.nonzero(x)
        torch.nonzero(x)
        torch.nonzero(x)
    msgs = [str(m.message) for m in w if "aten::nonzero" in str(m.message)]
    assert len(msgs) == 1, msgs
    assert "TPUC_FALLBACK=error" in msgs[0]
    assert count("aten::nonzero") == 3


def test_fallback_error_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.tensor([1.0, 0.0, 2.0], device="tpu")
    monkeypatch.setenv("TPUC_FALLBACK", "error")
    with pytest.raises(RuntimeError, match=r"aten::nonzero.*TPUC_FALLBACK=error"):
        torch.nonzero(x)
    monkeypatch.delenv("TPUC_FALLBACK")
    assert_same(torch.nonzero(x), torch.nonzero(torch.tensor([1.0, 0.0, 2.0])))


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
