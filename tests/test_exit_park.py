"""A process whose autograd device thread still has Python work when the script ends exits
cleanly (python/tpuc/_exit.py): before the interpreter finalizes, each "tpu" device's autograd
thread finishes what it was doing and parks. Each case runs in a fresh process."""
from __future__ import annotations

import os
import subprocess
import sys
import time

# Background threads' backwards run a Python Function on the device threads of the devices
# named in argv while the main thread ends the script: each device thread wants the GIL back
# after the finalizing started.
_BACKWARD_AT_EXIT = r"""
import sys, threading, time
import torch
started = {d: threading.Event() for d in sys.argv[1:]}
class Slow(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2
    @staticmethod
    def backward(ctx, g):
        started[str(g.device)].set()
        time.sleep(1.0)  # the GIL released: the main thread ends the script meanwhile
        return g * 2
for d in started:
    x = torch.randn(4, device=d, requires_grad=True)
    Slow.apply(x).sum().backward()  # compiles what the background backward runs
    started[d].clear()
    threading.Thread(target=lambda x=x: Slow.apply(x).sum().backward(), daemon=True).start()
for e in started.values():
    e.wait()
print("script ended", flush=True)
"""

# The last statement is a backward, then park() twice (the atexit one is the second call), and
# the time the script ended: the exit must not wait for the parked threads.
_PLAIN = r"""
import sys, time
import torch
x = torch.randn(8, device="tpu", requires_grad=True)
g, = torch.autograd.grad((x * 2).sum(), x)
from tpuc import _exit
_exit.park()
print(time.time(), flush=True)
"""


def _run(script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, "TPUC_CPU_DEVICE_COUNT": "2", **env}
    return subprocess.run([sys.executable, "-c", script, *args], env=e, capture_output=True,
                          text=True, timeout=120)


def _clean(p: subprocess.CompletedProcess[str]) -> bool:
    return p.returncode == 0 and "Fatal Python error" not in p.stderr and "terminate called" not in p.stderr


def test_backward_running_at_exit_on_two_devices() -> None:
    p = _run(_BACKWARD_AT_EXIT, "tpu:0", "tpu:1")
    assert "script ended" in p.stdout, p.stderr[-2000:]
    assert _clean(p), f"exit status {p.returncode}: {p.stderr[-2000:]}"


def test_without_parking_the_same_script_dies_at_exit() -> None:
    """What the test above guards against: with the parking off, the device thread meets the
    finalizing interpreter (torch 2.13 and 2.14, Python 3.11). Should PyTorch or Python fix it,
    this fails, and _exit.py can go."""
    p = _run(_BACKWARD_AT_EXIT, "tpu:0", TPUC_EXIT_PARK="0")
    assert "script ended" in p.stdout, p.stderr[-2000:]
    assert not _clean(p), "the process exited cleanly without the parking"


def test_exit_does_not_wait_for_the_parked_threads() -> None:
    """PyTorch's engine waits up to 10 s at exit for device threads to stop; parked ones never
    do, so park() tells it not to wait. A second park() (the atexit one) returns at once
    instead of waiting 5 s behind the parked thread."""
    p = _run(_PLAIN)
    ended = time.time()
    assert _clean(p), f"exit status {p.returncode}: {p.stderr[-2000:]}"
    script_ended = float(p.stdout.split()[-1])
    assert ended - script_ended < 4.0, f"the exit took {ended - script_ended:.1f} s"


def test_nothing_parked_when_tpu_was_never_used() -> None:
    p = _run("import threading, torch\nfrom tpuc import _exit\n_exit.park()\n"
             "print(sorted(t.name for t in threading.enumerate()))")
    assert _clean(p), p.stderr[-2000:]
    assert "tpuc-exit-park" not in p.stdout
