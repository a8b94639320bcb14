"""Soak: the example model trained for many steps while live device buffers, device bytes
and the host's resident memory are recorded, to show that nothing grows step over step.

    python -m tests.reliability.soak --strict-steps 10000 --compiled-steps 2000   # make soak

writes bench/results/soak.json and docs/reliability_soak.png. `run()` is also what
tests/reliability/test_soak.py calls for its short run."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run(mode: str, steps: int, every: int = 1, dim: int = 64, layers: int = 2,
        batch: int = 4, seq: int = 32) -> list[dict[str, Any]]:
    """Trains the example Llama for `steps` steps in `mode` ("strict" or "compiled") and
    returns a sample every `every` steps: step, live buffers, device bytes, host RSS."""
    from llama import Llama, LlamaConfig, batches, corpus_bytes

    torch.manual_seed(0)
    cfg = LlamaConfig(dim=dim, n_layers=layers, hidden_dim=(8 * dim // 3 + 7) // 8 * 8, max_seq_len=max(64, seq))
    model = Llama(cfg).to("tpu")
    compiled = mode == "compiled"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=compiled)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    if compiled:
        step = torch.compile(step, backend="tpu")
    data = torch.frombuffer(bytearray(corpus_bytes(100_000)), dtype=torch.uint8)
    stream = batches(data, batch, seq, torch.Generator().manual_seed(0))
    samples = []
    prev = torch.tpu.get_eager_mode()
    torch.tpu.set_eager_mode("strict")
    try:
        t0 = time.perf_counter()
        for i in range(1, steps + 1):
            x, y = next(stream)
            loss = step(x.to("tpu"), y.to("tpu"))
            if i % every == 0 or i == steps:
                value = loss.item()
                torch.tpu.synchronize()
                m = torch.tpu.memory_stats()
                samples.append({"step": i, "live_buffers": m["allocation.all.current"],
                                "device_bytes": m["allocated_bytes.all.current"],
                                "host_rss": _rss_bytes(), "loss": value,
                                "seconds": time.perf_counter() - t0})
    finally:
        torch.tpu.set_eager_mode(prev)
    return samples


def _plot(results: dict[str, list[dict[str, Any]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for mode, s in results.items():
        steps = [r["step"] for r in s]
        axes[0].plot(steps, [r["live_buffers"] for r in s], label=mode)
        axes[1].plot(steps, [r["device_bytes"] / 2**20 for r in s], label=mode)
        axes[2].plot(steps, [r["host_rss"] / 2**20 for r in s], label=mode)
    for ax, title in zip(axes, ["live device buffers", "device MiB (tensors)", "host RSS MiB"]):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.legend(loc="lower right")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.25)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def replot() -> None:
    """Draws docs/reliability_soak.png again from bench/results/soak.json."""
    with open(os.path.join(ROOT, "bench", "results", "soak.json")) as f:
        _plot(json.load(f)["results"], os.path.join(ROOT, "docs", "reliability_soak.png"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strict-steps", type=int, default=10000)
    ap.add_argument("--compiled-steps", type=int, default=2000)
    ap.add_argument("--every", type=int, default=0, help="sample interval (default: steps/100)")
    args = ap.parse_args(argv)
    results = {}
    for mode, n in (("strict", args.strict_steps), ("compiled", args.compiled_steps)):
        if n > 0:
            results[mode] = run(mode, n, every=args.every or max(1, n // 100))
            first, last = results[mode][min(1, len(results[mode]) - 1)], results[mode][-1]
            print(f"{mode}: {n} steps in {last['seconds']:.0f} s; live buffers {first['live_buffers']} -> "
                  f"{last['live_buffers']}, device {first['device_bytes']} -> {last['device_bytes']} bytes, "
                  f"host RSS {first['host_rss'] / 2**20:.0f} -> {last['host_rss'] / 2**20:.0f} MiB")
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "soak.json"), "w") as f:
        json.dump({"args": vars(args), "results": results}, f, indent=1)
    _plot(results, os.path.join(ROOT, "docs", "reliability_soak.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
