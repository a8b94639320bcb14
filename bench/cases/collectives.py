"""Collectives of tpu_dist on "tpu" tensors against PyTorch's gloo on CPU tensors,
side by side in the same two processes: all_reduce, all_gather_into_tensor and
reduce_scatter_tensor from 4 KB to 64 MB (quick: 4 KB and 1 MB). tpu_dist on this
machine carries the data through the host with gloo, so the ratio tpu_dist / gloo
is the cost of the host hop (device -> host copy, the cross-rank signature check,
host -> device copy). Median of the repetitions; bandwidth = bytes of the
tensor / time."""
from __future__ import annotations

import json

from .common import run_ranks, tpu_available

COMMAND = "python -m bench.run --cases collectives --no-report"

CHILD = r"""
import json, os, statistics, sys, time
from datetime import timedelta
import torch, torch.distributed as dist
rank, world, store, sizes, reps = int(sys.argv[1]), 2, sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
torch.tpu.set_device(rank)
dist.init_process_group("tpu_dist", init_method=f"file://{store}", rank=rank, world_size=world,
                        timeout=timedelta(seconds=300))
gloo = dist.new_group(backend="gloo")
tpu = dist.group.WORLD

def timed(fn, sync):
    fn(); sync()
    ts = []
    for _ in range(reps):
        dist.barrier(group=gloo)
        t0 = time.perf_counter(); fn(); sync(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts)

rows = []
for nbytes in sizes:
    n = nbytes // 4
    for op in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor"):
        row = {"op": op, "bytes": nbytes}
        for name, device, group in (("tpu_dist", "tpu", tpu), ("gloo", "cpu", gloo)):
            x = torch.ones(n, device=device)
            sync = (lambda: torch.tpu.synchronize()) if device == "tpu" else (lambda: None)
            if op == "all_reduce":
                fn = lambda: dist.all_reduce(x, group=group)
            elif op == "all_gather_into_tensor":
                out = torch.empty(n * world, device=device)
                fn = lambda: dist.all_gather_into_tensor(out, x, group=group)
            else:
                out = torch.empty(n // world, device=device)
                fn = lambda: dist.reduce_scatter_tensor(out, x, group=group)
            row[name + "_s"] = timed(fn, sync)
        row["ratio"] = row["tpu_dist_s"] / row["gloo_s"]
        row["tpu_dist_GBps"] = nbytes / row["tpu_dist_s"] / 1e9
        row["gloo_GBps"] = nbytes / row["gloo_s"] / 1e9
        rows.append(row)
if rank == 0:
    print(json.dumps(rows))
dist.destroy_process_group()
"""


def run(quick: bool) -> dict:
    if not tpu_available():
        return {"title": "Collectives", "command": COMMAND, "rows": [],
                "notes": "tpu unavailable on this install"}
    sizes = [4 << 10, 1 << 20] if quick else [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]
    reps = 5 if quick else 9
    line = run_ranks(CHILD, 2, lambda r, store: [str(r), store, json.dumps(sizes), str(reps)],
                     "collectives")
    rows = json.loads(line)
    return {
        "title": "Collectives: tpu_dist (host hop through gloo) against gloo on CPU tensors",
        "command": COMMAND,
        "rows": rows,
        "notes": f"2 processes on this machine, float32, median of {reps} repetitions after one "
                 "warm-up, each after a barrier; tpu_dist times include the wait for the device "
                 "(torch.tpu.synchronize). ratio = tpu_dist time / gloo time.",
    }
