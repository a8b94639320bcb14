"""torch.tpu.mem_get_info: (free, total) bytes as torch.cuda.mem_get_info, from
tpuc's accounting of live buffers, the device's size and tpuc's memory limit."""
from __future__ import annotations

import pytest
import torch

import tpuc.device as tdev

MiB = 1 << 20


def test_mem_get_info_bounds_and_device_arguments() -> None:
    free, total = torch.tpu.mem_get_info()
    assert total == torch.tpu.get_device_properties(0).total_memory > 0
    assert 0 <= free <= total - torch.tpu.memory_allocated()
    for dev in (0, "tpu", "tpu:0", torch.device("tpu", 0)):
        assert torch.tpu.mem_get_info(dev)[1] == total


def test_free_follows_allocations_exactly_under_a_limit() -> None:
    # Under a limit the free bytes are limit - bytes in use (tpuc's accounting),
    # so a 1 MiB tensor takes exactly 1 MiB from them.
    total = torch.tpu.get_device_properties(0).total_memory
    used = torch.tpu.memory_allocated()
    torch.tpu.set_per_process_memory_fraction((used + 16 * MiB) / total)
    try:
        limit = torch.tpu.memory_stats()["limit_bytes"]
        free0, _ = torch.tpu.mem_get_info()
        assert free0 == limit - used
        x = torch.ones(MiB // 4, dtype=torch.float32, device="tpu")
        torch.tpu.synchronize()
        free1, _ = torch.tpu.mem_get_info()
        assert free0 - free1 == MiB
        del x
        assert torch.tpu.mem_get_info()[0] == free0
    finally:
        torch.tpu.set_per_process_memory_fraction(1.0)


def test_unknown_size_raises_and_accelerate_falls_back(monkeypatch) -> None:
    monkeypatch.setattr(tdev, "_total_memory", lambda idx: 0)
    with pytest.raises(RuntimeError, match="does not report"):
        torch.tpu.mem_get_info()
    pytest.importorskip("psutil", reason="accelerate's fallback reads psutil")
    from tpuc.integrations.accelerate import _free_memory

    assert _free_memory(0) > 0
