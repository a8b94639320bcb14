"""torch._assert_async on "tpu" is a deferred device-side assert, as on CUDA.

``aten::_assert_async`` and ``aten::_assert_async.msg`` run natively: the condition is
checked inside a program (the op's own in strict mode, the chunk's in fused mode, the
graph's under torch.compile), nothing is read on the host at the assert, and a false
condition raises RuntimeError with the assert's message (the CPU's words) at the next
synchronisation point: torch.tpu.synchronize(), .item(), .cpu(), printing. The reference
is the CPU: the same truthiness (NaN true, -0.0 and 0j false), the same messages, and a
condition that is not one element raises the CPU's error at the assert itself.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from tpu_testing import fallback_counts, new_fallbacks
from tpuc import _C

MSG = "position_ids exceed max_valid_pos=7"


@pytest.fixture(autouse=True)
def restore_mode() -> Iterator[None]:
    mode = torch.tpu.get_eager_mode()
    try:
        yield
    finally:
        torch.tpu.set_eager_mode(mode)
        try:
            torch.tpu.synchronize()  # no failure left for the next test
        except RuntimeError:
            pass


def cpu_error(cond: torch.Tensor, *msg: str) -> str:
    """The CPU's message for torch._assert_async(cond, *msg), or "" when it passes."""
    try:
        torch._assert_async(cond, *msg)
    except RuntimeError as e:
        return str(e)
    return ""


def host_names(prof: profile) -> list[str]:
    """The profiler's host reads and CPU fallbacks."""
    return [e.name for e in prof.events()
            if e.name == "tpuc::to_host" or e.name.startswith("tpuc::cpu_fallback")]


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_passing_asserts_read_nothing_on_the_host(mode: str) -> None:
    torch.tpu.set_eager_mode(mode)
    pos = torch.arange(8, device="tpu")
    x0 = torch.randn(8, 4)
    x = x0.to("tpu")
    torch.tpu.synchronize()
    before = fallback_counts()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            torch._assert_async(torch.all(pos <= 7), MSG)
            torch._assert_async(torch.all(pos >= 0))
            x = torch.tanh(x * 2)
    assert host_names(prof) == []  # no host read, no CPU fallback at the asserts
    assert new_fallbacks(before) == []
    if mode == "strict":  # each assert is a launch of its own check program
        names = [e.name for e in prof.events()]
        assert any(n.startswith("tpuc::execute aten::_assert_async.msg") for n in names), names
    torch.tpu.synchronize()  # they pass
    ref = x0
    for _ in range(3):
        ref = torch.tanh(ref * 2)
    torch.testing.assert_close(x.cpu(), ref, rtol=1e-6, atol=1e-6)


def test_fused_asserts_do_not_end_the_chunk() -> None:
    torch.tpu.set_eager_mode("fused")
    pos = torch.arange(8, device="tpu")
    x = torch.randn(8, 4, device="tpu")
    torch.tpu.synchronize()
    flushes = torch.tpu.stats()["flushes"]
    pending = _C._pending_ops()
    torch._assert_async(torch.all(pos <= 7), MSG)
    y = x * 3
    torch._assert_async(torch.all(pos >= 0))
    z = y + 1
    assert torch.tpu.stats()["flushes"] == flushes
    assert _C._pending_ops() >= pending + 6  # le, all, assert, mul, ge/all, assert, add
    torch.testing.assert_close(z.cpu(), x.cpu() * 3 + 1, rtol=1e-6, atol=1e-6)  # (fused: an FMA)
    assert torch.tpu.stats()["flushes"] == flushes + 1  # one program ran them all


def test_fused_steps_with_asserts_replay() -> None:
    torch.tpu.set_eager_mode("fused")
    w = torch.randn(16, 16, device="tpu")
    x = torch.randn(4, 16, device="tpu")
    lim = torch.tensor(100.0, device="tpu")

    def step() -> torch.Tensor:
        h = x
        for _ in range(4):  # one assert per "layer", as TorchTitan's RoPE
            h = torch.tanh(h @ w)
            torch._assert_async(torch.all(h.abs() <= lim), MSG)
        return h.sum()

    step().item()
    step().item()
    s0 = torch.tpu.stats()
    for _ in range(3):
        step().item()
    s1 = torch.tpu.stats()
    assert s1["fused_replays"] - s0["fused_replays"] == 3, list(s1["fused_replay_reasons"])
    assert s1["flushes"] - s0["flushes"] == 3  # one chunk per step
    assert new_fallbacks(s0["fallbacks"]) == []
    lim.fill_(0.01)  # the replayed chunk's check fails now
    loss = step()
    with pytest.raises(RuntimeError, match=re.escape(MSG)):
        loss.item()


SYNCS: dict[str, Callable[[torch.Tensor], object]] = {
    "synchronize": lambda t: torch.tpu.synchronize(),
    "item": lambda t: t.sum().item(),
    "cpu": lambda t: t.cpu(),
    "print": lambda t: repr(t),
}


@pytest.mark.parametrize("msg", [None, "", MSG], ids=["no-msg", "empty-msg", "msg"])
@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("sync", list(SYNCS))
def test_failing_assert_raises_at_the_next_sync(sync: str, mode: str, msg: str | None) -> None:
    torch.tpu.set_eager_mode(mode)
    args = () if msg is None else (msg,)
    want = cpu_error(torch.all(torch.arange(8) <= 6), *args)
    assert want  # the CPU raises
    pos = torch.arange(8, device="tpu")
    y = pos * 2
    torch.tpu.synchronize()
    torch._assert_async(torch.all(pos <= 6), *args)  # no raise here
    z = y + 1  # later work is still accepted
    with pytest.raises(RuntimeError, match=re.escape(want) + r".*device-side assert triggered"):
        SYNCS[sync](z)
    # reported once: the pending checks were cleared, later reads are unaffected
    torch.tpu.synchronize()
    assert z.cpu().tolist() == (torch.arange(8) * 2 + 1).tolist()


def test_debug_mode_raises_at_the_assert() -> None:
    torch.tpu.set_eager_mode("debug")
    pos = torch.arange(8, device="tpu")
    for args in [(), ("",), (MSG,)]:
        want = cpu_error(torch.all(torch.arange(8) <= 6), *args)
        with pytest.raises(RuntimeError, match=re.escape(want)):
            torch._assert_async(torch.all(pos <= 6), *args)
        torch._assert_async(torch.all(pos <= 7), *args)
    torch.tpu.synchronize()


CONDS = [
    torch.tensor(True), torch.tensor(False), torch.tensor(0.0), torch.tensor(-0.0),
    torch.tensor(float("nan")), torch.tensor(0.5, dtype=torch.bfloat16), torch.tensor(0, dtype=torch.int8),
    torch.tensor([3], dtype=torch.int32), torch.tensor([[0]], dtype=torch.int64),
    torch.tensor(0j), torch.tensor(1j), torch.tensor(2 + 0j, dtype=torch.complex128),
    torch.tensor([1.0, 0.0])[1:],  # a view into a larger storage
]


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("cond", CONDS, ids=lambda c: f"{c.dtype}-{c.tolist()}")
def test_truthiness_matches_the_cpu(cond: torch.Tensor, mode: str) -> None:
    torch.tpu.set_eager_mode(mode)
    want = cpu_error(cond, MSG)
    dev = cond.to("tpu")
    if cond.storage_offset():
        dev = torch.tensor([1.0, 0.0], device="tpu")[1:]
    torch._assert_async(dev, MSG)
    if want:
        with pytest.raises(RuntimeError, match=re.escape(want)):
            torch.tpu.synchronize()
    else:
        torch.tpu.synchronize()


@pytest.mark.parametrize("mode", ["strict", "fused", "debug"])
@pytest.mark.parametrize("shape", [(2,), (0,), (2, 3)])
def test_not_one_element_raises_like_the_cpu_at_once(shape: tuple[int, ...], mode: str) -> None:
    torch.tpu.set_eager_mode(mode)
    for args in [(), (MSG,)]:
        want = cpu_error(torch.ones(shape), *args)
        assert want.startswith("Boolean value of Tensor with")
        with pytest.raises(RuntimeError, match=re.escape(want)):
            torch._assert_async(torch.ones(shape, device="tpu"), *args)
    torch.tpu.synchronize()  # nothing was left pending


def test_failure_found_among_many_pending_checks() -> None:
    # beyond 64 kept results the ready ones are read without waiting, beyond 1024 the
    # oldest is waited for: the list stays bounded and the failure is still reported
    pos = torch.arange(8, device="tpu")
    ok, bad = torch.all(pos <= 7), torch.all(pos <= 6)
    torch._assert_async(bad, MSG)
    for _ in range(1100):
        torch._assert_async(ok, "fine")
    with pytest.raises(RuntimeError, match=re.escape(MSG)):
        torch.tpu.synchronize()
    for _ in range(1100):
        torch._assert_async(ok, "fine")
    torch.tpu.synchronize()


def test_compiled_graph_keeps_the_assert() -> None:
    # dynamo keeps torch._assert_async in the graph; the graph's program computes the check
    # and its replays report it like eager ops do (no fallback, no host read at the call)
    def f(x: torch.Tensor, lim: torch.Tensor) -> torch.Tensor:
        torch._assert_async(torch.all(x <= lim), MSG)
        return x * 2

    cf = torch.compile(f, backend="tpu")
    x = torch.arange(8.0, device="tpu")
    before = fallback_counts()
    s0 = torch.tpu.stats()
    for _ in range(4):  # (with compile-ahead on, the first two calls record: python/tpuc/dynamo.py)
        y = cf(x, torch.tensor(7.0, device="tpu"))
    torch.tpu.synchronize()
    s1 = torch.tpu.stats()
    assert new_fallbacks(before) == []
    assert s1["graph_replays"] - s0["graph_replays"] >= 2
    y = cf(x, torch.tensor(6.0, device="tpu"))  # a replay whose check fails
    assert torch.tpu.stats()["graph_replays"] - s1["graph_replays"] == 1
    with pytest.raises(RuntimeError, match=re.escape(MSG)):
        torch.tpu.synchronize()
    assert y.cpu().tolist() == (torch.arange(8.0) * 2).tolist()


def test_one_hot_decomposition_asserts_in_a_compiled_graph() -> None:
    # PyTorch's one_hot decomposition emits aten::_assert_async.msg for its class range
    g = torch.compile(lambda t: F.one_hot(t, 5).sum(0), backend="tpu")
    before = fallback_counts()
    got = g(torch.tensor([1, 4], device="tpu"))
    assert got.cpu().tolist() == F.one_hot(torch.tensor([1, 4]), 5).sum(0).tolist()
    assert new_fallbacks(before) == []
    want = cpu_error(torch.all(torch.tensor([1, 7]) < 5), "one_hot: Class values must be smaller than num_classes.")
    with pytest.raises(RuntimeError, match=re.escape(want)):
        g(torch.tensor([1, 7], device="tpu")).cpu()
