"""A sweep worker: `python -m tests.conformance.worker`, driven by pool.py.

Reads one JSON task a line on stdin ({"op", "dtype", "samples", "grad_samples"}), answers
one JSON Outcome a line on the stdout it was started with; everything else the process
prints (ops, XLA) goes to stderr, the worker's log. Says {"ready": true} once the OpInfo
database is loaded, and exits by itself (after answering) when its memory passes
--max-rss-mb, so the pool starts a fresh one."""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import warnings


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-rss-mb", type=float, default=6000)
    a = ap.parse_args()
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray output of ops and XLA goes to the log, not into the replies
    sys.stdout = sys.stderr
    os.environ.setdefault("TPUC_FALLBACK", "silent")
    warnings.simplefilter("ignore")
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crashing op leaves no core file

    import torch  # noqa: F401  (loads tpuc)

    from . import catalog, check

    catalog.entries()
    replies.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        task = json.loads(line)
        print(f"== {task['op']} {task['dtype']}", file=sys.stderr, flush=True)
        out = check.check(task["op"], task["dtype"], task["samples"], task.get("grad_samples"))
        replies.write(json.dumps(out.to_json()) + "\n")
        if _rss_mb() > a.max_rss_mb:
            print(f"== recycling at {_rss_mb():.0f} MiB", file=sys.stderr, flush=True)
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
