"""torch.tpu.Event(enable_timing=True), as a CUDA benchmark script uses it: each record places a
marker behind the device's work (runtime/marker.c) and elapsed_time gives the device time
between two records in milliseconds. The checks are causal, not timings: a marker recorded
after a host moment completes after it; one waited for completed before the wait returned."""
from __future__ import annotations

import time

import pytest
import torch

from tpu_testing import quiet_fallback_warnings  # noqa: F401


def _ms(ns: int) -> float:
    return ns / 1e6


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_elapsed_time_is_bounded_by_what_the_host_saw(mode: str) -> None:
    x = torch.randn(256, 256, device="tpu")
    with torch.tpu.eager_mode(mode):
        (x @ x).sum().item()  # compiled before the timed part
        start = torch.tpu.Event(enable_timing=True)
        end = torch.tpu.Event(enable_timing=True)
        t0 = time.monotonic_ns()
        start.record()
        start.synchronize()
        t1 = time.monotonic_ns()  # the start marker's stamp lies in [t0, t1]
        y = x
        for _ in range(8):
            y = torch.tanh(y @ x / 64)
        value = y.sum().item()  # the work is done when this returns
        t2 = time.monotonic_ns()
        end.record()  # its marker completes after t2
        end.synchronize()
        t3 = time.monotonic_ns()
    ms = start.elapsed_time(end)
    assert _ms(t2 - t1) <= ms <= _ms(t3 - t0)
    want = x.cpu()
    for _ in range(8):
        want = torch.tanh(want @ x.cpu() / 64)
    assert value == pytest.approx(want.sum().item(), rel=1e-3)  # recording flushed nothing wrong


def test_three_events_add_up_and_a_device_synchronize_completes_them() -> None:
    """The common script: record, work, record, torch.tpu.synchronize(), elapsed_time.
    After the device synchronize, every marker answers query() True (no race with its
    completion callback) and the intervals add up to the whole."""
    x = torch.randn(64, 64, device="tpu")
    a, b, c = (torch.tpu.Event(enable_timing=True) for _ in range(3))
    a.record()
    y = x @ x
    b.record()
    z = y @ x
    c.record()
    torch.tpu.synchronize()
    assert a.query() and b.query() and c.query()
    ab, bc, ac = a.elapsed_time(b), b.elapsed_time(c), a.elapsed_time(c)
    assert ab >= 0 and bc >= 0
    assert ab + bc == pytest.approx(ac, abs=1e-6)
    torch.testing.assert_close(z.cpu(), (x.cpu() @ x.cpu()) @ x.cpu(), rtol=1e-4, atol=1e-4)


def test_events_made_every_way_are_tpu_events() -> None:
    e1 = torch.tpu.Event(enable_timing=True)
    e2 = torch.Event("tpu", enable_timing=True)
    e3 = torch.tpu.current_stream().record_event(torch.tpu.Event(enable_timing=True))
    for e in (e1, e2, e3):
        assert isinstance(e, torch.tpu.Event) and isinstance(e, torch.Event)
    assert not isinstance(torch.Event("cpu"), torch.tpu.Event)
    e1.record()
    e2.record()
    e2.synchronize()
    assert e1.elapsed_time(e2) >= 0 and e2.elapsed_time(e3) <= 0  # e3 was recorded first


def test_elapsed_time_errors_are_pytorchs() -> None:
    timed = torch.tpu.Event(enable_timing=True)
    plain = torch.tpu.Event()
    timed.record()
    plain.record()
    torch.tpu.synchronize()
    with pytest.raises(ValueError, match="enable_timing=True"):
        plain.elapsed_time(timed)
    with pytest.raises(ValueError, match="recorded"):
        timed.elapsed_time(torch.tpu.Event(enable_timing=True))
    assert plain.query()  # waits for the device: never a stale False


def test_re_recording_moves_the_marker() -> None:
    x = torch.randn(32, 32, device="tpu")
    a = torch.tpu.Event(enable_timing=True)
    b = torch.tpu.Event(enable_timing=True)
    a.record()
    b.record()
    b.synchronize()
    t_b = time.monotonic_ns()  # b's stamp is before this
    first = a.elapsed_time(b)
    (x @ x).sum().item()
    t = time.monotonic_ns()
    a.record()  # now after b
    a.synchronize()
    assert a.elapsed_time(b) <= 0 <= first
    assert b.elapsed_time(a) >= _ms(t - t_b) > 0  # a's new stamp is after t
