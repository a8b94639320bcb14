"""Faults around the device: the disk cache under a crash, a disk that refuses writes,
and a program that fails in the middle of a training step.

Each disk scenario runs in a child process (bounded in time) with its own TPUC_CACHE_DIR;
results are compared with PyTorch on the CPU."""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tpuc import _C

# A child that compiles many distinct small programs (one per shape) and checks each
# against the CPU; prints "ok N" at the end.
CHILD = r"""
import sys, torch
n = int(sys.argv[1])
for k in range(1, n + 1):
    a = torch.arange(float(k * 7)).reshape(k, 7)
    got = ((a.to("tpu") * 3 + 1).sin().sum(0)).cpu()
    ref = (a * 3 + 1).sin().sum(0)
    assert torch.allclose(got, ref, rtol=1e-5, atol=1e-5), k
    print("step", k, flush=True)
s = torch.tpu.stats()
print("ok", n, s["disk_hits"] + s["preloaded"], s["disk_writes"], flush=True)
"""

TRAIN = r"""
import torch
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
x, y = torch.randn(32, 8), torch.randn(32, 1)
ref = __import__("copy").deepcopy(m)
m.to("tpu")
opt = torch.optim.SGD(m.parameters(), lr=0.1)
ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
for step in range(5):
    for model, o, xx, yy in ((m, opt, x.to("tpu"), y.to("tpu")), (ref, ropt, x, y)):
        loss = ((model(xx) - yy) ** 2).mean()
        o.zero_grad()
        loss.backward()
        o.step()
for p, q in zip(m.parameters(), ref.parameters()):
    assert torch.allclose(p.cpu(), q, rtol=1e-4, atol=1e-5)
print("trained", flush=True)
"""


def _env(cache: Path) -> dict[str, str]:
    return {**os.environ, "TPUC_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1"}


def test_sigkill_while_writing_the_cache_then_restart(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    p = subprocess.Popen([sys.executable, "-c", CHILD, "30"], env=_env(cache),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # kill it in the middle of its compile-and-write loop
        deadline = time.time() + 120
        while time.time() < deadline:
            line = p.stdout.readline()
            if line.startswith("step") and int(line.split()[1]) >= 8:
                break
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
        p.stdout.close()
        p.stderr.close()
    assert p.returncode == -signal.SIGKILL
    written = list(cache.glob("*.tpx"))
    assert written, "the child wrote nothing before it was killed"
    # a file cut short by the kill, as if the rename had raced the crash
    victim = written[0]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    out = subprocess.run([sys.executable, "-c", CHILD, "30"], env=_env(cache),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    last = out.stdout.strip().splitlines()[-1].split()
    assert last[:2] == ["ok", "30"], out.stdout[-500:]
    assert int(last[2]) > 0  # the restarted process loaded what the killed one had written


def test_cache_directory_unusable_warns_and_runs(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out = subprocess.run([sys.executable, "-c", TRAIN], env=_env(blocker / "cache"),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "trained" in out.stdout, out.stderr[-2000:]
    assert "compile cache directory" in out.stderr and "warning" in out.stderr


def _limit_file_size() -> None:
    # a full disk, for this child only: writes past 512 bytes fail with EFBIG
    # (Python ignores SIGXFSZ, so the write returns an error instead of killing it)
    resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))


def test_cache_disk_full_warns_once_and_training_continues(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    out = subprocess.run([sys.executable, "-c", TRAIN], env=_env(cache), capture_output=True,
                         text=True, timeout=300, preexec_fn=_limit_file_size)
    assert out.returncode == 0 and "trained" in out.stdout, out.stderr[-2000:]
    assert out.stderr.count("cannot write to the compile cache") == 1, out.stderr[-2000:]
    assert not list(cache.glob("*.tpx")) and not list(cache.glob("*.tmp.*"))


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_failure_mid_step_leaves_earlier_tensors_intact(mode: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    ref = __import__("copy").deepcopy(model)
    model.to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(512, 64), torch.randn(512, 1)
    before = [p.detach().cpu().clone() for p in model.parameters()]
    torch.tpu.set_eager_mode(mode)
    xd, yd = x.to("tpu"), y.to("tpu")
    torch.tpu.synchronize()
    # the next allocation of the step's activations fails (as on a full device)
    _C._set_memory_limit(0, torch.tpu.memory_allocated() + 64 * 1024)
    try:
        with pytest.raises(torch.OutOfMemoryError):
            loss = ((model(xd) - yd) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            torch.tpu.synchronize()
    finally:
        _C._set_memory_limit(0, 0)
    for b, p in zip(before, model.parameters()):  # the failed step changed nothing
        torch.testing.assert_close(p.detach().cpu(), b, rtol=0, atol=0)
    # and the next step is the CPU's step
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for m, o, xx, yy in ((model, opt, x.to("tpu"), y.to("tpu")), (ref, ropt, x, y)):
        loss = ((m(xx) - yy) ** 2).mean()
        o.zero_grad()
        loss.backward()
        o.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


def test_plugin_error_mid_step_leaves_earlier_tensors_intact() -> None:
    # strict mode: the failing program runs asynchronously; tensors it does not write keep
    # their values, the error surfaces at the read of its result
    w = torch.randn(16, device="tpu")
    w_before = w.cpu()
    big = torch.ones(1 << 19, device="tpu")
    s = (big[:, None] * big[None, :]).sum()  # the plugin fails to allocate 1 TiB
    w.mul_(2)
    with pytest.raises(torch.OutOfMemoryError):
        s.item()
    _drain()
    torch.testing.assert_close(w.cpu(), w_before * 2, rtol=0, atol=0)
    assert big.sum().item() == 1 << 19


def test_plugin_error_in_place_debug_mode_leaves_target_intact() -> None:
    # debug mode raises at the failing op, so an in-place target is never written; in strict
    # mode an op that consumed the failed value would carry its error (documented)
    torch.tpu.set_eager_mode("debug")
    w = torch.randn(16, device="tpu")
    w_before = w.cpu()
    big = torch.ones(1 << 19, device="tpu")
    with pytest.raises(torch.OutOfMemoryError):
        w.add_((big[:, None] * big[None, :]).sum())
    _drain()
    torch.testing.assert_close(w.cpu(), w_before, rtol=0, atol=0)


def _drain() -> None:
    try:
        torch.tpu.synchronize()  # waits for everything launched; may report the failure again
    except torch.OutOfMemoryError:
        pass
