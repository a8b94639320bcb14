"""Trains the same model three times with the same seeds and data — on the CPU in
float64 (the reference), on the CPU in float32 and on "tpu" in float32 — and
prints a JSON report: per-step losses, each float32 run's error against the
float64 reference (losses and parameters), compiles per step, fallbacks. Run by
test_training.py in a fresh process per mode, so that the device's statistics
start from zero.

Why a float64 reference: the CPU's float32 result is not the truth, only one
rounding of it. Comparing tpu with it directly needs a bound tuned to one CPU's
rounding (20 AdamW steps amplify last-bit differences); comparing each float32
run with float64 measures how far float32 rounding takes *this* computation on
*this* machine, and the device must stay within a small multiple of that.

    python tests/train_check.py mlp|transformer [--steps N]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from llama import Llama, LlamaConfig  # noqa: E402


def make_mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.ReLU(), nn.LayerNorm(64),
        nn.Linear(64, 10),
    )


def make_transformer() -> nn.Module:
    return Llama(LlamaConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, hidden_dim=96,
                             max_seq_len=16))


def data(kind: str, steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`steps` batches cycling over 4 fixed ones, so that the loss must fall."""
    g = torch.Generator().manual_seed(1234)
    out = []
    for _ in range(4):
        if kind == "mlp":
            out.append((torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)))
        else:
            out.append((torch.randint(0, 64, (4, 16), generator=g),
                        torch.randint(0, 64, (4, 16), generator=g)))
    return [out[i % 4] for i in range(steps)]


def train(kind: str, device: str, steps: int, compiled: bool = False,
          whole_step: bool = False, dtype: torch.dtype = torch.float32) -> dict:
    """compiled: the model under torch.compile; whole_step: one compiled function
    holding forward, backward and the optimizer step (AdamW, capturable); dtype:
    the parameters' and inputs' floating dtype (float64 for the reference)."""
    torch.manual_seed(0)
    model = (make_mlp() if kind == "mlp" else make_transformer()).to(device)
    if dtype == torch.float64:
        model.double()  # floating parameters only: rotary's complex buffer stays complex
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01,
                            capturable=whole_step)
    run = torch.compile(model, backend="tpu") if compiled else model

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if kind == "mlp":
            loss = nn.functional.cross_entropy(run(x), y)
        else:
            _, loss = run(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    if whole_step:
        step = torch.compile(step, backend="tpu")
    losses, compiles, executions, donations = [], [], [], []
    for x, y in data(kind, steps):
        x = x.to(device, dtype) if x.is_floating_point() else x.to(device)
        loss = step(x, y.to(device))
        losses.append(loss.item())
        if device == "tpu":
            st = torch.tpu.stats()
            compiles.append(st["compiles"])
            executions.append(st["executions"])
            donations.append(st["donations"])
    params = [p.detach().to("cpu", torch.float64) for p in model.parameters()]
    return {"losses": losses, "compiles": compiles, "params": params,
            "executions": executions, "donations": donations}


def loss_error(run: dict, exact: dict) -> float:
    """The largest relative difference of a step's loss from the float64 run's."""
    return max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(run["losses"], exact["losses"]))


def param_error(run: dict, exact: dict) -> float:
    """The largest difference of a parameter from the float64 run's, relative to
    that parameter tensor's largest magnitude."""
    return max(((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()
               for a, b in zip(run["params"], exact["params"]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["mlp", "transformer"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--compile", action="store_true", help='torch.compile(backend="tpu") on tpu')
    ap.add_argument("--compile-step", action="store_true",
                    help="compile the whole training step (forward, backward, optimizer) on tpu")
    args = ap.parse_args()
    exact = train(args.kind, "cpu", args.steps, dtype=torch.float64)
    ref = train(args.kind, "cpu", args.steps)
    dev = train(args.kind, "tpu", args.steps, compiled=args.compile,
                whole_step=args.compile_step)
    stats = torch.tpu.stats()
    print(json.dumps({
        "f64_losses": exact["losses"],
        "cpu_losses": ref["losses"],
        "tpu_losses": dev["losses"],
        "cpu_loss_err": loss_error(ref, exact),
        "tpu_loss_err": loss_error(dev, exact),
        "cpu_param_err": param_error(ref, exact),
        "tpu_param_err": param_error(dev, exact),
        "compiles_per_step": dev["compiles"],
        "executions_per_step": dev["executions"],
        "donations_per_step": dev["donations"],
        "n_params": len(dev["params"]),
        "fallbacks": stats.get("fallbacks", {}),
        "launch_blocking": os.environ.get("TPUC_LAUNCH_BLOCKING", "0"),
        "eager_mode": torch.tpu.get_eager_mode(),
        "dynamo_compiles": stats.get("dynamo_compiles"),
        "chunk_hits": stats.get("chunk_hits"),
        "flushes": stats.get("flushes"),
        "host_first_ops": stats.get("host_first_ops"),
        "hoisted_fills": stats.get("hoisted_fills"),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
