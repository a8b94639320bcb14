"""Pinned host memory for "tpu": Tensor.pin_memory() (the device defaults to the
accelerator, "tpu"), is_pinned() for the tensor and its views, DataLoader(pin_memory=True),
and non_blocking copies in both directions giving the CPU's values."""
from __future__ import annotations

import threading

import torch
from torch.utils.data import DataLoader, TensorDataset


def test_pin_memory_and_is_pinned() -> None:
    assert torch.accelerator.current_accelerator().type == "tpu"
    t = torch.arange(10.0)
    assert not t.is_pinned()
    p = t.pin_memory()
    assert p.is_pinned() and p.device.type == "cpu"
    assert p[3:].is_pinned()  # a view inside the block
    assert p.data_ptr() % 4096 == 0  # page-aligned
    torch.testing.assert_close(p, t, rtol=0, atol=0)
    assert not t.is_pinned()  # pinning copies
    empty = torch.empty(0).pin_memory()
    assert empty.is_pinned()


def test_pinned_blocks_are_freed() -> None:
    stats = torch._C._host_memory_stats if hasattr(torch._C, "_host_memory_stats") else None
    ptrs = []
    for _ in range(3):
        p = torch.ones(1 << 16).pin_memory()
        ptrs.append(p.data_ptr())
        assert p.is_pinned()
        del p
    # a freed block is not pinned any more (nothing keeps or caches it)
    q = torch.ones(1 << 16)
    assert not q.is_pinned()
    del stats


def test_pin_memory_from_threads() -> None:
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for i in range(50):
                p = torch.full((257,), float(i)).pin_memory()
                assert p.is_pinned() and p[0].item() == i
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors


def test_non_blocking_copies() -> None:
    src = torch.randn(64, 33).pin_memory()
    d = src.to("tpu", non_blocking=True)
    y = (d * 2).to("cpu", non_blocking=True)
    torch.tpu.synchronize()
    torch.testing.assert_close(y, src * 2, rtol=0, atol=0)
    z = torch.empty(64, 33).pin_memory()
    z.copy_(d, non_blocking=True)
    torch.tpu.synchronize()
    torch.testing.assert_close(z, src, rtol=0, atol=0)


def test_dataloader_pin_memory() -> None:
    data = TensorDataset(torch.arange(40.0).reshape(20, 2), torch.arange(20))
    loader = DataLoader(data, batch_size=4, pin_memory=True)
    seen = 0
    for x, y in loader:
        assert x.is_pinned() and y.is_pinned()
        xd = x.to("tpu", non_blocking=True)
        torch.testing.assert_close(xd.cpu(), data.tensors[0][seen:seen + 4], rtol=0, atol=0)
        seen += 4
    assert seen == 20
