"""A GRPO step of tpuc.post_training.recipe split into generation, scoring, training and
weight sync, on "tpu" against the CPU (same code, same seed), with the sync's bytes/s and the
reward per step (plotted by bench/report.py into docs/perf_grpo_reward.png).

Step 0 of each device compiles (on "tpu") and is reported apart; the phase times are medians
over the later steps. The contenders run one after the other (a run is a whole training)."""
from __future__ import annotations

import statistics

from .common import tpu_available

COMMAND = "python -m bench.run --cases grpo --no-report"
PHASES = ("generation", "scoring", "training", "sync")


def _one(device: str, steps: int, rounds: int) -> dict:
    from tpuc.post_training.recipe import GRPOConfig, run

    res = run(GRPOConfig(device=device, engine="local", steps=steps, prompts_per_step=8, group_size=6, lr=3e-3,
                         beta=0.02, eval_rounds=rounds, safety_weight=1.0))
    h = res["history"]
    later = h[1:] if len(h) > 1 else h
    med = {p: statistics.median(s["times"][p] for s in later) for p in PHASES}
    return {
        "device": device,
        "first_step_s": sum(h[0]["times"].values()),
        "phase_median_s": med,
        "step_median_s": statistics.median(sum(s["times"].values()) for s in later),
        "sync_bytes": h[0]["sync_bytes"],
        "sync_path": h[0]["sync_path"],
        "sync_bytes_per_s": statistics.median(s["sync_bytes_per_s"] for s in later),
        "rewards": [s["reward"] for s in h],
        "task_rewards": [s["task_reward"] for s in h],
        "forbidden": [s["forbidden_rate"] for s in h],
        "before": res["before"], "after": res["after"],
    }


def run(quick: bool) -> dict:
    steps, rounds = (3, 1) if quick else (16, 4)
    devices = (["tpu"] if tpu_available() else []) + ["cpu"]
    rows = [_one(d, steps, rounds) for d in devices]
    out = {"title": "GRPO step: generation, scoring, training, weight sync", "command": COMMAND,
           "steps": steps, "engine": "local", "rows": rows}
    if len(rows) == 2:
        out["step_speedup_vs_cpu"] = rows[1]["step_median_s"] / rows[0]["step_median_s"]
    return out
