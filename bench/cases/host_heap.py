"""Keeping freed host memory on the XLA CPU plugin (TPUC_HOST_HEAP, docs/execution.md):
step time, page faults per step and resident memory of the example model's
training step with tpuc's malloc setting ("auto") and with glibc's own
("system"). The setting is made once per process, so each measurement is a
fresh process; the two settings alternate (A B A B ...)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from .common import compiled_available, fused_available, tpu_available

COMMAND = "make bench BENCH_CASES=host_heap"

# Runs in a child process: argv = contender, layers, warmup, steps.
CHILD = r"""
import json, os, resource, statistics, sys, time
import torch
sys.path.insert(0, os.environ["TPUC_BENCH_ROOT"])
from bench.cases.common import eager_mode, train_step_fn
from llama import Llama, LlamaConfig
import tpuc._host_heap as hh
contender, layers, warmup, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cfg = LlamaConfig(vocab_size=256, dim=256, n_layers=layers, n_heads=8, hidden_dim=688,
                  max_seq_len=128)
torch.manual_seed(0)
model = Llama(cfg).to("tpu")
compiled = contender == "tpu compiled"
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=compiled)
x = torch.randint(0, 256, (8, 128)).to("tpu")
step = train_step_fn(model, opt, x, x)
if compiled:
    step = torch.compile(step, backend="tpu")
times, faults = [], []
with eager_mode("fused" if contender == "tpu fused" else "strict"):
    for i in range(warmup + steps):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        step().item()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
rss = int(open(f"/proc/{os.getpid()}/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
print(json.dumps({"times": times, "faults": faults, "rss_bytes": rss, "state": hh.state()}))
"""


def _child(contender: str, heap: str, layers: int, warmup: int, steps: int) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, TPUC_HOST_HEAP=heap, TPUC_BENCH_ROOT=root,
               PYTHONPATH=os.path.join(root, "examples"))
    out = subprocess.run([sys.executable, "-c", CHILD, contender, str(layers), str(warmup),
                          str(steps)], env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{contender} TPUC_HOST_HEAP={heap}: {out.stderr[-400:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2]


def run(quick: bool) -> dict:
    if not tpu_available():
        return {"title": "Host heap", "command": COMMAND, "rows": [],
                "notes": "tpu unavailable on this install"}
    contenders = [c for c, ok in (("tpu fused", fused_available()),
                                  ("tpu compiled", compiled_available())) if ok]
    if quick:
        contenders = contenders[-1:]
    layers, warmup, steps, rounds = (2, 3, 4, 1) if quick else (6, 5, 12, 3)
    got: dict[tuple[str, str], list[dict]] = {}
    for _ in range(rounds):
        for c in contenders:
            for heap in ("auto", "system"):
                got.setdefault((c, heap), []).append(_child(c, heap, layers, warmup, steps))
    rows = []
    for (c, heap), runs in got.items():
        times = [t for r in runs for t in r["times"]]
        faults = [f for r in runs for f in r["faults"]]
        rows.append({"contender": c, "heap": heap, "state": runs[0]["state"],
                     "step_s": {"median": _median(times), "min": min(times), "max": max(times)},
                     "process_medians_s": [_median(r["times"]) for r in runs],
                     "faults_per_step": _median(faults),
                     "rss_mb": max(r["rss_bytes"] for r in runs) / 1e6})
    by = {(r["contender"], r["heap"]): r for r in rows}
    for r in rows:
        if r["heap"] == "auto" and (r["contender"], "system") in by:
            r["system_over_auto"] = by[(r["contender"], "system")]["step_s"]["median"] / \
                r["step_s"]["median"]
    return {
        "title": "Host heap: keeping freed memory on the CPU plugin",
        "command": COMMAND,
        "rows": rows,
        "notes": f"The example model ({layers} layers, batch 8 x 128, AdamW) in fresh processes, "
                 "TPUC_HOST_HEAP=auto (tpuc asks glibc to keep freed memory) against =system "
                 f"(glibc's default: big blocks mapped and unmapped on every use), alternating, "
                 f"{rounds} process(es) each; median over {steps} steps after {warmup} warm-up "
                 "steps per process. Faults = minor page faults per step; RSS = resident memory "
                 "at the end.",
    }
