"""The local Ray cluster the Ray test modules share (tests/raytrain, tests/rayserve,
tests/raygrpo) and its clean-up: a cluster's processes are found by its temp directory, which
every process of the cluster names on its command line or inherits in its environment (the
tests export it as TPUC_RAY_TEST_SESSION), so only that cluster's processes are ever killed."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def local_cluster(prefix: str, env: dict[str, str] | None = None, num_cpus: int = 4,
                  **init: Any) -> Iterator[str]:
    """A one-node Ray cluster on 127.0.0.1 (no dashboard, no usage stats, OMP_NUM_THREADS=1,
    and `env`), its temp dir under /tmp (short: Ray's socket paths must fit 107 bytes); yields
    that dir. On the way out: ray.shutdown(), the cluster's processes reaped, the environment
    put back; then it fails if a process had to be killed."""
    import ray

    tmp = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    want = {"RAY_USAGE_STATS_ENABLED": "0", "TPUC_RAY_TEST_SESSION": tmp,
            "OMP_NUM_THREADS": "1", **(env or {})}
    saved = {k: os.environ.get(k) for k in want}
    os.environ.update(want)
    left: list[int] = []
    try:
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
                 _node_ip_address="127.0.0.1", _temp_dir=tmp, log_to_driver=False,
                 configure_logging=False, **init)
        yield tmp
    finally:
        try:
            ray.shutdown()
        finally:
            left = reap(tmp)
            restore_env(saved)
            shutil.rmtree(tmp, ignore_errors=True)
    assert not left, f"Ray processes left after shutdown (killed now): {left}"


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
