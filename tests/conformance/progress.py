"""A one-line progress bar on stderr: ops done / total, tasks, elapsed, ETA."""
from __future__ import annotations

import sys
import time
from collections import Counter


def _clock(s: float) -> str:
    s = int(s)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    def __init__(self, tasks_per_op: dict[str, int], enabled: bool = True):
        self.left = dict(tasks_per_op)
        self.ops_total = len(tasks_per_op)
        self.tasks_total = sum(tasks_per_op.values())
        self.ops_done = self.tasks_done = 0
        self.classes: Counter[str] = Counter()
        self.start = time.monotonic()
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.last_print = 0.0

    def done(self, op: str, cls: str) -> None:
        self.tasks_done += 1
        self.classes[cls] += 1
        self.left[op] -= 1
        if self.left[op] == 0:
            self.ops_done += 1
        self.show()

    def show(self, final: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not (final or self.tty or now - self.last_print >= 10):  # a log gets a line per 10 s
            return
        self.last_print = now
        elapsed = now - self.start
        frac = self.tasks_done / self.tasks_total if self.tasks_total else 1.0
        eta = elapsed / frac - elapsed if frac > 0 else 0.0
        width = 30
        bar = "#" * int(width * frac) + "-" * (width - int(width * frac))
        c = self.classes
        line = (f"[{bar}] ops {self.ops_done}/{self.ops_total}  tasks {self.tasks_done}/{self.tasks_total}  "
                f"elapsed {_clock(elapsed)}  ETA {_clock(eta)}  "
                f"N{c['native_pass']} F{c['fallback_pass']} M{c['mismatch']} E{c['error']} S{c['skipped']}")
        end = "\n" if final or not self.tty else ""
        sys.stderr.write(("\r" if self.tty else "") + line + end)
        sys.stderr.flush()
