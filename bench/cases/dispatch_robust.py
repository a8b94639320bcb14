"""Strict eager's host cost per op on a cache hit, measured so that a loaded
machine distorts it as little as possible: one fresh process runs short
blocks of `a + b` (8 elements) on tpu and on PyTorch's CPU eager in turns
(tpu, cpu, tpu, cpu, ...), and times every block by the wall clock and by
the process's CPU time (every thread's, the plugin's workers included: what
the op costs the host, not how long it waited for a core). Reported: the
median and the minimum over blocks, per op, and the tpu/cpu ratio of each
(the ratio of the minima is the least disturbed by other processes: a block
that ran without being preempted)."""
from __future__ import annotations

import json
import subprocess
import sys

_CHILD = r"""
import json, sys, time, torch, tpuc
n, blocks = int(sys.argv[1]), int(sys.argv[2])
torch.tpu.set_eager_mode("strict")
a = torch.randn(8, device="tpu"); b = torch.randn(8, device="tpu")
ca = torch.randn(8); cb = torch.randn(8)
for _ in range(2000): a + b
torch.tpu.synchronize()
for _ in range(2000): ca + cb
out = {"tpu": {"wall": [], "cpu": []}, "cpu": {"wall": [], "cpu": []}}
wall, cput = time.perf_counter, time.process_time
for _ in range(blocks):
    t, c = wall(), cput()
    for _ in range(n): a + b
    torch.tpu.synchronize()
    out["tpu"]["wall"].append((wall() - t) / n * 1e6); out["tpu"]["cpu"].append((cput() - c) / n * 1e6)
    t, c = wall(), cput()
    for _ in range(n): ca + cb
    out["cpu"]["wall"].append((wall() - t) / n * 1e6); out["cpu"]["cpu"].append((cput() - c) / n * 1e6)
print("RESULT", json.dumps(out))
"""


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def measure(quick: bool) -> dict:
    n, blocks = (1000, 7) if quick else (2000, 41)
    r = subprocess.run([sys.executable, "-c", _CHILD, str(n), str(blocks)], capture_output=True,
                       text=True, timeout=600)
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT")), None)
    if r.returncode != 0 or not line:
        return {"skipped": (r.stderr or r.stdout)[-300:]}
    raw = json.loads(line.split(" ", 1)[1])
    out: dict = {"op": "a + b, 8 elements, strict, cache hit", "ops_per_block": n,
                 "blocks": blocks}
    for clock in ("wall", "cpu"):
        row = {}
        for side in ("tpu", "cpu"):
            xs = raw[side][clock]
            row[side] = {"median": _median(xs), "min": min(xs), "max": max(xs)}
        row["ratio_median"] = row["tpu"]["median"] / row["cpu"]["median"]
        row["ratio_min"] = row["tpu"]["min"] / row["cpu"]["min"]
        out[clock] = row
    return out


if __name__ == "__main__":
    print(json.dumps(measure("--quick" in sys.argv), indent=1))
