"""Training throughput of the example Llama-style model: tokens/s and MFU."""
from __future__ import annotations

import time

import torch

from .common import (compiled_available, eager_mode, example_step, fused_available,
                     machine_peak, tpu_available)

COMMAND = "make bench BENCH_CASES=train_step"


def configs(quick: bool) -> dict:
    from llama import LlamaConfig

    small = LlamaConfig(vocab_size=256, dim=256, n_layers=6, n_heads=8, hidden_dim=688,
                        max_seq_len=128)
    large = LlamaConfig(vocab_size=256, dim=640, n_layers=10, n_heads=10, hidden_dim=1712,
                        max_seq_len=128)
    if quick:  # CI: 2 of the 6 blocks (every contender still runs; compiles, the inductor
        # contender's above all, grow with the depth; the full run measures 5M and 50M)
        from dataclasses import replace

        return {"5M's width, 2 layers": replace(small, n_layers=2)}
    return {"5M": small, "50M": large}


def _measure(cfg, contender: str, batch: int, seq: int, steps: int, warmup: int) -> dict:
    device = "cpu" if contender.startswith("cpu") else "tpu"
    # the compiled contender compiles the whole step, optimizer included, which
    # wants the optimizer's step counters on the device (capturable)
    model, _, _, _, step = example_step(cfg, device, batch, seq, capturable=contender == "tpu compiled")
    if contender == "cpu inductor":
        step = torch.compile(step)
    if contender == "tpu compiled":
        step = torch.compile(step, backend="tpu")
    mode = contender.split()[-1] if device == "tpu" else None
    times = []
    ctx = eager_mode(mode) if mode in ("strict", "fused") else None
    if ctx:
        ctx.__enter__()
    try:
        for i in range(warmup + steps):
            t0 = time.perf_counter()
            step().item()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    finally:
        if ctx:
            ctx.__exit__(None, None, None)
    times.sort()
    med = times[len(times) // 2]
    return {"median_s": med, "min_s": times[0], "max_s": times[-1],
            "params": sum(p.numel() for p in model.parameters())}


def run(quick: bool) -> dict:
    from llama import flops_per_token

    batch, seq = (8, 64) if quick else (8, 128)
    steps, warmup = (2, 3) if quick else (5, 3)  # step 2 is the first with optimizer state
    peak = machine_peak(torch.float32, quick)
    # quick (CI: numbers, not comparisons): not the inductor baseline, whose C++ compiles
    # were most of the quick case's time; the full run measures it
    contenders = ["cpu eager"] if quick else ["cpu eager", "cpu inductor"]
    if tpu_available():
        contenders.append("tpu strict")
    if fused_available():
        contenders.append("tpu fused")
    if compiled_available():
        contenders.append("tpu compiled")
    rows = []
    for size, cfg in configs(quick).items():
        base = None
        for c in contenders:
            try:
                m = _measure(cfg, c, batch, seq, steps, warmup)
            except Exception as e:  # a contender that fails is reported, not hidden
                rows.append({"model": size, "contender": c, "error": f"{type(e).__name__}: {e}"[:300]})
                continue
            tok_s = batch * seq / m["median_s"]
            mfu = flops_per_token(cfg, m["params"], seq) * tok_s / peak
            if c == "cpu eager":
                base = tok_s
            rows.append({"model": size, "contender": c, "params": m["params"],
                         "tokens_per_s": tok_s, "step_s": m, "mfu": mfu,
                         "vs_cpu_eager": tok_s / base if base else None})
    return {
        "title": "Train step: tokens/s and MFU of the example model",
        "command": COMMAND,
        "batch": batch, "seq": seq,
        "peak_gflops_fp32": peak / 1e9,
        "rows": rows,
        "notes": "AdamW, float32, batch x seq tokens per step; median step time after warm-up. "
                 "'compiled' = torch.compile of the whole step (forward, backward, "
                 "AdamW(capturable=True).step()): one program per step, parameters and "
                 "optimizer state donated; 'cpu inductor' compiles the same step function. "
                 "MFU = FLOPs per token (6 x parameters + attention) x tokens/s / measured fp32 "
                 "peak of this machine.",
    }
