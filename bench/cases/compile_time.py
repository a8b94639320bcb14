"""Time to the first training step with a cold and a warm compile cache, and
compiles per step until steady state. Runs in a fresh process."""
from __future__ import annotations

import json
import os
import subprocess
import sys

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
print(json.dumps({"cold_s": cold, "warm_memory_s": warm, "compiles_per_step": per_step,
                  "first_step_compiles": None}))
"""


def run(quick: bool) -> dict:
    if not tpu_available():
        return {"title": "Compile", "command": COMMAND, "rows": [],
                "notes": "tpu unavailable on this install"}
    examples = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
    r = subprocess.run([sys.executable, "-c", _CHILD, examples, "3" if quick else "6"],
                       capture_output=True, text=True, timeout=1200)
    if r.returncode != 0:
        return {"title": "Compile", "command": COMMAND, "rows": [],
                "error": r.stderr[-2000:]}
    res = json.loads(r.stdout.strip().splitlines()[-1])
    rows = [
        {"what": "first step, cold cache (fresh process)", "seconds": res["cold_s"]},
        {"what": "first step of a new model, warm in-memory cache", "seconds": res["warm_memory_s"]},
    ]
    return {
        "title": "Compile: time to first step and compiles until steady state",
        "command": COMMAND,
        "rows": rows,
        "compiles_per_step_after_first": res["compiles_per_step"],
        "cold_over_warm": res["cold_s"] / max(res["warm_memory_s"], 1e-9),
        "notes": "A 2-layer example model, batch 4 x 64. The disk cache tier is not built yet.",
    }
