"""The clean-up both Ray test modules share (tests/raytrain, tests/rayserve): a local Ray
cluster's processes are found by its temp directory, which every process of the cluster names
on its command line or inherits in its environment (the tests export it as
TPUC_RAY_TEST_SESSION), so only that cluster's processes are ever killed."""
from __future__ import annotations

import os
import signal
import time


def session_procs(marker: str) -> list[int]:
    """Processes whose command line or environment names `marker` (this process excluded)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        text = b""
        for part in ("cmdline", "environ"):
            try:
                with open(f"/proc/{d}/{part}", "rb") as f:
                    text += f.read()
            except OSError:
                pass
        if marker.encode() in text:
            pids.append(int(d))
    return pids


def reap(marker: str, wait_s: float = 30.0) -> list[int]:
    """After ray.shutdown(): waits up to `wait_s` for the cluster's processes to exit, SIGKILLs
    those still alive and returns them (empty: the cluster cleaned up after itself)."""
    left: list[int] = []
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        left = session_procs(marker)
        if not left:
            break
        time.sleep(0.5)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def restore_env(saved: dict[str, str | None]) -> None:
    """Puts back the environment variables a fixture changed (None: it was unset)."""
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
