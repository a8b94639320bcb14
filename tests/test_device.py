"""The device "tpu" as PyTorch sees it: registration through `import torch`,
the torch.tpu module, torch.accelerator, generators, statistics, and a
missing plugin (is_available() False, a RuntimeError naming the reason)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

from tpu_testing import quiet_fallback_warnings  # noqa: F401


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=full, timeout=180)


def test_import_torch_alone_registers_tpu() -> None:
    r = _python("""
        import torch
        x = torch.randn(4, 4, device="tpu")
        print(x.device, torch.tpu.is_available(), x.is_tpu, torch.accelerator.current_accelerator())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["tpu:0", "True", "True", "tpu"]


def test_import_tpuc_registers_without_autoload() -> None:
    r = _python("""
        import tpuc, torch
        print(torch.ones(2, device="tpu").sum().item())
    """, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "2.0"


def test_missing_plugin_makes_tpu_unavailable_with_the_reason() -> None:
    r = _python("""
        import torch  # must not fail
        print(torch.tpu.is_available(), torch.tpu.device_count())
        try:
            torch.randn(2, device="tpu")
        except RuntimeError as e:
            print("RuntimeError:", e)
        print(torch.ones(2).sum().item())  # the CPU still works
    """, TPUC_PJRT_PLUGIN="/nonexistent/plugin.so")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "False 0"
    assert lines[1].startswith("RuntimeError:") and "/nonexistent/plugin.so" in lines[1]
    assert lines[2] == "2.0"


def test_unknown_platform_reason_is_reported() -> None:
    r = _python("""
        import torch
        print(torch.tpu.is_available())
        print(torch.tpu.unavailable_reason())
    """, TPUC_PLATFORM="quantum")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "False"
    assert "TPUC_PLATFORM" in r.stdout.splitlines()[1]


def test_device_module_basics() -> None:
    assert torch.tpu.is_available()
    n = torch.tpu.device_count()
    assert n >= 1
    assert torch.tpu.current_device() == 0
    assert torch.tpu.unavailable_reason() == ""
    name = torch.tpu.get_device_name()
    props = torch.tpu.get_device_properties(0)
    assert name == props.name
    if props.platform == "cpu":
        assert "XLA CPU" in name
    assert torch.tpu.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    assert torch.tpu._is_in_bad_fork() is False
    with torch.tpu.device(0):
        assert torch.tpu.current_device() == 0
    torch.tpu.set_device("tpu:0")
    torch.tpu.synchronize()


def test_device_index_out_of_range() -> None:
    n = torch.tpu.device_count()
    with pytest.raises(RuntimeError, match="out of range"):
        torch.tpu.set_device(n)
    with pytest.raises(RuntimeError, match="out of range"):
        torch.empty(2, device=f"tpu:{n}")
    assert torch.tpu.current_device() == 0
    assert torch.ones(1, device="tpu").item() == 1.0


def test_accelerator_api_reports_tpu() -> None:
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator().type == "tpu"
    assert torch.accelerator.device_count() == torch.tpu.device_count()
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.synchronize()
    s = torch.accelerator.current_stream()
    assert s.device.type == "tpu"


def test_tensor_and_module_methods() -> None:
    x = torch.arange(3.0).tpu()
    assert x.is_tpu and x.device == torch.device("tpu", 0)
    m = torch.nn.Linear(2, 2).tpu()
    assert all(p.device.type == "tpu" for p in m.parameters())
    s = torch.UntypedStorage(8).tpu()
    assert s.device.type == "tpu" and s.is_tpu


def test_memory_statistics_track_live_buffers() -> None:
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    x = torch.ones(1024, device="tpu")  # written: one buffer of 4 KiB
    assert torch.tpu.memory_allocated() >= before + 4096
    assert torch.tpu.max_memory_allocated() >= torch.tpu.memory_allocated()
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    assert torch.accelerator.memory_allocated() == torch.tpu.memory_allocated()
    del x
    assert torch.tpu.memory_allocated() == before
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated()
    torch.tpu.empty_cache()


def test_stats_has_the_counters() -> None:
    (torch.ones(3, device="tpu") * 2).cpu()
    s = torch.tpu.stats()
    for key in ("executions", "compiles", "cache_hits", "cache_misses", "compile_seconds",
                "fast_hits", "fast_misses", "fallbacks"):
        assert key in s, key
    assert isinstance(s["fallbacks"], dict)


def test_manual_seed_makes_random_ops_repeatable() -> None:
    torch.tpu.manual_seed(1234)
    a = torch.randn(64, device="tpu").cpu()
    torch.tpu.manual_seed(1234)
    b = torch.randn(64, device="tpu").cpu()
    c = torch.randn(64, device="tpu").cpu()
    assert torch.equal(a, b)
    assert not torch.equal(b, c)
    assert torch.tpu.initial_seed() == 1234
    torch.manual_seed(7)  # torch's global seed reaches the tpu generators too
    d = torch.rand(8, device="tpu").cpu()
    torch.manual_seed(7)
    assert torch.equal(d, torch.rand(8, device="tpu").cpu())


def test_rng_state_round_trips_seed_and_offset() -> None:
    torch.tpu.manual_seed(99)
    torch.rand(10, device="tpu")  # draws 10 values: the offset moves by 12 (multiple of 4)
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    seed = int.from_bytes(bytes(state[:8].tolist()), "little")
    offset = int.from_bytes(bytes(state[8:].tolist()), "little")
    assert (seed, offset) == (99, 12)
    x = torch.rand(5, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    assert torch.equal(x, torch.rand(5, device="tpu").cpu())
    with pytest.raises(ValueError):
        torch.tpu.set_rng_state(torch.zeros(3, dtype=torch.uint8))


def test_explicit_generator() -> None:
    g = torch.Generator(device="tpu")
    assert g.device.type == "tpu"
    g.manual_seed(5)
    a = torch.randn(16, device="tpu", generator=g).cpu()
    g.manual_seed(5)
    b = torch.randn(16, device="tpu", generator=g).cpu()
    assert torch.equal(a, b)
    state = g.get_state()
    c = torch.randn(4, device="tpu", generator=g).cpu()
    g.set_state(state)
    assert torch.equal(c, torch.randn(4, device="tpu", generator=g).cpu())
    assert torch.tpu.default_generators[0].device.type == "tpu"


def test_current_device_is_per_thread() -> None:
    seen: list[int] = []

    def worker() -> None:
        seen.append(torch.tpu.current_device())
        seen.append(int(torch.ones(2, device="tpu").sum().item()))

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [0, 2]


def test_launch_blocking_switch() -> None:
    before = torch.tpu.launch_blocking()
    torch.tpu.set_launch_blocking(True)
    try:
        assert torch.tpu.launch_blocking()
        assert (torch.ones(3, device="tpu") + 1).sum().item() == 6.0
    finally:
        torch.tpu.set_launch_blocking(before)


def test_autocast() -> None:
    a = torch.randn(4, 4, generator=torch.Generator().manual_seed(0))
    x = a.to("tpu").requires_grad_()
    with torch.autocast("tpu", dtype=torch.bfloat16):
        y = x @ x  # lower precision
        z = torch.softmax(y, -1)  # fp32
        w = x + 1  # untouched
    assert (y.dtype, z.dtype, w.dtype) == (torch.bfloat16, torch.float32, torch.float32)
    ref = torch.softmax((a.bfloat16() @ a.bfloat16()).float(), -1)
    torch.testing.assert_close(z.cpu(), ref, rtol=1e-2, atol=1e-2)
    z.sum().backward()
    assert x.grad.dtype == torch.float32 and x.grad.device.type == "tpu"


def test_two_devices() -> None:
    r = _python("""
        import warnings
        import torch
        warnings.simplefilter("ignore")
        a = torch.arange(6.0).reshape(2, 3)
        x = a.to("tpu:1")
        assert torch.tpu.device_count() == 2 and x.device == torch.device("tpu:1")
        assert torch.equal((x * 2).cpu(), a * 2) and (x * 2).device == x.device
        y = x.to("tpu:0")
        assert y.device == torch.device("tpu:0") and torch.equal(y.cpu(), a)
        with torch.tpu.device(1):
            assert torch.empty(1, device="tpu").device == torch.device("tpu:1")
        assert torch.tpu.current_device() == 0
        try:
            x + y
            raise AssertionError("no error for tensors on two devices")
        except RuntimeError as e:
            assert "tpu:1 and tpu:0" in str(e), e
        x.requires_grad_()
        (x * x).sum().backward()
        assert x.grad.device == x.device and torch.equal(x.grad.cpu(), 2 * a)
        torch.tpu.synchronize(1)
        print("ok")
    """, TPUC_CPU_DEVICE_COUNT="2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
