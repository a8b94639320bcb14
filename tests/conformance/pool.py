"""Runs (op, dtype) tasks in worker subprocesses: each task in isolation with a timeout.

One thread per worker slot takes the next task from a shared queue (tasks are ordered by
op, so a worker works through a chunk of ops), sends it and waits for the answer. A worker
that dies marks its task "error: crashed" after one retry in a fresh worker (so a crash
left behind by an earlier op is not blamed on the next one); a worker that passes the
timeout is killed and its task marked "error: timed out". Either way a fresh worker takes
over and the sweep goes on."""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 180.0

Task = tuple[str, str]  # (op key, dtype name)


class _Worker:
    def __init__(self, slot: int, log: IO[bytes], max_rss_mb: float):
        env = dict(os.environ)
        env.setdefault("TPUC_FALLBACK", "silent")
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.conformance.worker", "--max-rss-mb", str(max_rss_mb)],
            cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
        )
        self.slot = slot
        self.buf = b""

    def read_line(self, timeout: float) -> str | None:
        """The next line, or None on timeout or end of output."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def send(self, task: dict[str, Any]) -> bool:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(task) + "\n").encode())
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def exit_reason(self) -> str:
        code = self.proc.wait()
        return f"signal {-code}" if code < 0 else f"exit code {code}"


def _error(task: Task, detail: str, seconds: float) -> dict[str, Any]:
    return {"op": task[0], "dtype": task[1], "cls": "error", "detail": detail, "fallbacks": {},
            "checks": {}, "cpu_raised": 0, "seconds": round(seconds, 3)}


def run(
    tasks: list[Task],
    samples: int,
    grad_samples: int | None = None,
    workers: int = 2,
    timeout_s: float = 300.0,
    log_dir: Path | None = None,
    max_rss_mb: float = 6000.0,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Runs every task; returns one Outcome dict per task (in completion order)."""
    log_dir = log_dir or REPO / "build" / "conformance"
    log_dir.mkdir(parents=True, exist_ok=True)
    queue = list(reversed(tasks))
    lock = threading.Lock()
    results: list[dict[str, Any]] = []
    retried: set[Task] = set()

    def record(r: dict[str, Any]) -> None:
        with lock:
            results.append(r)
        if on_result:
            on_result(r)

    def slot_main(slot: int) -> None:
        with open(log_dir / f"worker-{slot}.log", "ab") as log:
            w: _Worker | None = None
            while True:
                with lock:
                    if not queue:
                        break
                    task = queue.pop()
                if w is None or w.proc.poll() is not None:
                    w = _Worker(slot, log, max_rss_mb)
                    if w.read_line(STARTUP_TIMEOUT_S) is None:
                        w.stop()
                        record(_error(task, f"error: the worker did not start ({w.exit_reason()})", 0))
                        w = None
                        continue
                start = time.monotonic()
                msg = {"op": task[0], "dtype": task[1], "samples": samples, "grad_samples": grad_samples}
                line = w.read_line(timeout_s) if w.send(msg) else None
                if line is not None:
                    record(json.loads(line))
                    continue
                alive = w.proc.poll() is None
                w.stop()
                if alive:
                    record(_error(task, f"error: timed out after {timeout_s:.0f} s", time.monotonic() - start))
                elif task not in retried:  # retry once in a fresh worker
                    with lock:
                        retried.add(task)
                        queue.append(task)
                else:
                    record(_error(task, f"error: crashed ({w.exit_reason()}; see {log.name})",
                                  time.monotonic() - start))
                w = None
            if w is not None:
                w.stop()

    threads = [threading.Thread(target=slot_main, args=(i,), daemon=True) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
