"""Train a small Llama-style model on text, in plain PyTorch.

    python examples/train_transformer.py                 # on "tpu"
    python examples/train_transformer.py --device cpu    # the same on the CPU

The only tpu-specific thing is the device string.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama import Llama, LlamaConfig, batches, corpus_bytes, describe  # noqa: E402


def progress(step: int, total: int, loss: float, tok_s: float, width: int = 30) -> str:
    done = int(width * step / total)
    bar = "#" * done + "-" * (width - done)
    return f"\r[{bar}] step {step:4d}/{total}  loss {loss:6.3f}  {tok_s:8.0f} tok/s"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="tpu")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mode", choices=["strict", "fused", "compile"], default="strict",
                   help="tpu eager mode, or torch.compile of the whole training step")
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    cfg = LlamaConfig(dim=args.dim, n_layers=args.layers, hidden_dim=(8 * args.dim // 3 + 7) // 8 * 8,
                      max_seq_len=max(256, args.seq))
    model = Llama(cfg).to(device)
    compiled = args.mode == "compile"
    # a compiled step keeps the optimizer's step counters on the device (capturable)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1,
                            capturable=compiled and device.type != "cpu")
    if device.type == "tpu" and args.mode == "fused":
        torch.tpu.set_eager_mode("fused")

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    if compiled:  # forward, backward and AdamW: one program per step on tpu
        train_step = torch.compile(train_step, backend="tpu" if device.type == "tpu" else "inductor")
    text = corpus_bytes()
    data = torch.frombuffer(bytearray(text), dtype=torch.uint8)
    gen = torch.Generator().manual_seed(args.seed)
    stream = batches(data, args.batch, args.seq, gen)
    print(f"device {device}: {describe(cfg, model.num_parameters())}; "
          f"{len(text) / 1e3:.0f} kB of text; {args.steps} steps of {args.batch}x{args.seq} tokens")

    first_loss = None
    t0 = time.perf_counter()
    window_start, window_tokens = t0, 0
    loss_value = float("nan")
    for step in range(1, args.steps + 1):
        x, y = next(stream)
        x, y = x.to(device), y.to(device)
        loss = train_step(x, y)
        window_tokens += x.numel()
        if step == 1 or step % 10 == 0 or step == args.steps:
            loss_value = loss.item()  # reading the loss waits for the device
            if first_loss is None:
                first_loss = loss_value
            now = time.perf_counter()
            tok_s = window_tokens / max(now - window_start, 1e-9)
            window_start, window_tokens = now, 0
            print(progress(step, args.steps, loss_value, tok_s), end="", flush=True)
    elapsed = time.perf_counter() - t0
    print()
    print(f"loss {first_loss:.3f} -> {loss_value:.3f} in {elapsed:.1f} s "
          f"({args.steps * args.batch * args.seq / elapsed:.0f} tok/s overall)")
    if device.type == "tpu":
        stats = torch.tpu.stats()
        print(f"tpu ({args.mode}): {stats.get('executions')} executions, {stats.get('compiles')} "
              f"compiles, {stats.get('donations')} donations, "
              f"{sum(stats.get('fallbacks', {}).values())} fallback calls")
    return 0 if loss_value < first_loss else 1


if __name__ == "__main__":
    sys.exit(main())
