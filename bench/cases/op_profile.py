"""Where a training step's time goes: device time per ATen op, tpu (each op
waited for, debug mode) against PyTorch on the CPU, one step of the example
model. Shows which ops bound the fused and compiled modes: an op's device
time is spent whatever the mode; fusion removes launches, not these."""
from __future__ import annotations

import time
from collections import defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .common import eager_mode, tpu_available, train_step_fn

COMMAND = "make bench BENCH_CASES=op_profile"


def _profile(cfg, device: str, batch: int, seq: int, steps: int) -> dict[str, list[float]]:
    from llama import Llama

    torch.manual_seed(0)
    model = Llama(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x = torch.randint(0, cfg.vocab_size, (batch, seq)).to(device)
    times: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])

    class Timer(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            t0 = time.perf_counter()
            out = func(*args, **(kwargs or {}))
            if device == "tpu":
                torch.tpu.synchronize()
            rec = times[str(func).removeprefix("aten.")]
            rec[0] += time.perf_counter() - t0
            rec[1] += 1
            return out

    step = train_step_fn(model, opt, x, x)
    for _ in range(3):  # warm-up: compiles, optimizer state, steady signatures
        step().item()
    with Timer():
        for _ in range(steps):
            step().item()
    return {k: [v[0] / steps, v[1] / steps] for k, v in times.items()}


def run(quick: bool) -> dict:
    if not tpu_available():
        return {"title": "Op profile", "command": COMMAND, "rows": [],
                "notes": "tpu unavailable on this install"}
    from llama import LlamaConfig

    cfg = LlamaConfig(vocab_size=256, dim=256, n_layers=2 if quick else 6, n_heads=8,
                      hidden_dim=688, max_seq_len=128)
    batch, seq, steps = (8, 64, 1) if quick else (8, 128, 3)
    with eager_mode("strict"):
        tpu = _profile(cfg, "tpu", batch, seq, steps)
    cpu = _profile(cfg, "cpu", batch, seq, steps)
    total_tpu = sum(v[0] for v in tpu.values())
    total_cpu = sum(v[0] for v in cpu.values())
    rows = []
    for op in sorted(tpu, key=lambda k: -tpu[k][0])[:14]:
        rows.append({"op": op, "calls": tpu[op][1], "tpu_ms": tpu[op][0] * 1e3,
                     "cpu_ms": cpu.get(op, [0.0])[0] * 1e3,
                     "tpu_share": tpu[op][0] / total_tpu})
    return {
        "title": "Op profile: device time per op in one training step",
        "command": COMMAND,
        "batch": batch, "seq": seq,
        "total_tpu_ms": total_tpu * 1e3, "total_cpu_ms": total_cpu * 1e3,
        "rows": rows,
        "notes": "One step of the example model (5M, AdamW foreach), every op timed with the "
                 "device waited for after it (tpu) or as it runs (cpu); ms per step, the 14 ops "
                 "with the most tpu time. Includes each op's host dispatch.",
    }
