"""Time to the first training step with a cold compile cache, with a warm disk
cache (a second process sharing the cache directory) and with a warm
in-memory cache (a second model in the same process), and compiles per step
until steady state."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from .common import tpu_available

COMMAND = "make bench BENCH_CASES=compile_time"

_CHILD = r"""
import json, sys, time, torch
sys.path.insert(0, sys.argv[1])
from llama import Llama, LlamaConfig
cfg = LlamaConfig(vocab_size=256, dim=128, n_layers=2, n_heads=4, hidden_dim=344, max_seq_len=64)
def first_step():
    torch.manual_seed(0)
    t0 = time.perf_counter()
    m = Llama(cfg).to("tpu"); opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x = torch.randint(0, 256, (4, 64)).to("tpu")
    _, loss = m(x, x); loss.backward(); opt.step(); loss.item()
    return time.perf_counter() - t0, m, opt, x
cold, m, opt, x = first_step()
per_step = []
for _ in range(int(sys.argv[2])):
    before = torch.tpu.stats()["compiles"]
    _, loss = m(x, x); opt.zero_grad(); loss.backward(); opt.step(); loss.item()
    per_step.append(torch.tpu.stats()["compiles"] - before)
warm, *_ = first_step()
s = torch.tpu.stats()
print(json.dumps({"first_s": cold, "warm_memory_s": warm, "compiles_per_step": per_step,
                  "compiles": s["compiles"], "disk_hits": s["disk_hits"]}))
"""


def run(quick: bool) -> dict:
    if not tpu_available():
        return {"title": "Compile", "command": COMMAND, "rows": [],
                "notes": "tpu unavailable on this install"}
    examples = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TPUC_CACHE_DIR=cache)
        runs = []
        for _ in range(2):  # the first process fills the disk cache, the second reads it
            r = subprocess.run([sys.executable, "-c", _CHILD, examples, "3" if quick else "6"],
                               capture_output=True, text=True, timeout=1200, env=env)
            if r.returncode != 0:
                return {"title": "Compile", "command": COMMAND, "rows": [],
                        "error": r.stderr[-2000:]}
            runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    cold, disk = runs
    rows = [
        {"what": "first step, cold cache (fresh process, empty cache directory)",
         "seconds": cold["first_s"], "compiles": cold["compiles"]},
        {"what": "first step, warm disk cache (fresh process, same directory)",
         "seconds": disk["first_s"], "compiles": disk["compiles"]},
        {"what": "first step of a new model, warm in-memory cache (same process)",
         "seconds": cold["warm_memory_s"], "compiles": None},
    ]
    return {
        "title": "Compile: time to first step and compiles until steady state",
        "command": COMMAND,
        "rows": rows,
        "compiles_per_step_after_first": cold["compiles_per_step"],
        "cold_over_warm": cold["first_s"] / max(cold["warm_memory_s"], 1e-9),
        "cold_over_disk": cold["first_s"] / max(disk["first_s"], 1e-9),
        "notes": "A 2-layer example model, batch 4 x 64, strict mode. 'compiles' counts programs "
                 "compiled by the plugin in that process (the warm-disk process loads them).",
    }
