"""DDP and FSDP2 training step time and tokens/s at 1, 2 and 4 processes: the example
Llama-style model (examples/llama.py) on "tpu" with tpu_dist against the same on CPU tensors
with gloo, launched the same way (one process per rank, a file store). Weak scaling: each rank
trains a fixed local batch, so tokens/s should grow with ranks where the collectives keep up.
On this machine tpu_dist carries gradients through the host with gloo (docs/distributed.md),
and every rank shares the same CPU cores: the ratios say what the host hop costs, not what a
TPU slice does. Quick: 2 processes, 2 timed steps."""
from __future__ import annotations

import json

from .common import EXAMPLES, run_ranks, tpu_available

COMMAND = "python -m bench.run --cases dist_train --no-report"

CHILD = r"""
import json, os, statistics, sys, time
from datetime import timedelta
import torch, torch.distributed as dist
sys.path.insert(0, sys.argv[7])
from llama import Llama, LlamaConfig
rank, world, store, mode, device, steps = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                           sys.argv[4], sys.argv[5], int(sys.argv[6]))
cfg = LlamaConfig(vocab_size=512, dim=128, n_layers=2, n_heads=4, hidden_dim=256, max_seq_len=64)
batch, seq = 4, 64
if device == "tpu":
    torch.tpu.set_device(rank)
dist.init_process_group("tpu_dist" if device == "tpu" else "gloo", init_method=f"file://{store}",
                        rank=rank, world_size=world, timeout=timedelta(seconds=600))
torch.manual_seed(0)
model = Llama(cfg).to(device)
if mode == "ddp":
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(model)
else:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh(device, (world,))
    for block in model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(rank)
tok = torch.randint(0, cfg.vocab_size, (batch, seq + 1), generator=g).to(device)
x, y = tok[:, :-1], tok[:, 1:]
ts = []
for s in range(steps + 2):
    dist.barrier()
    t0 = time.perf_counter()
    _, loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    float(loss.detach())  # waits for the step
    if s >= 2:
        ts.append(time.perf_counter() - t0)
if rank == 0:
    n = sum(p.numel() for p in model.parameters())
    print(json.dumps({"step_s": statistics.median(ts), "params_local": n}))
dist.destroy_process_group()
"""


def _launch(world: int, mode: str, device: str, steps: int) -> dict:
    line = run_ranks(CHILD, world, lambda r, store: [str(r), str(world), store, mode, device,
                                                    str(steps), EXAMPLES],
                     f"{mode}/{device}/{world}", env={"OMP_NUM_THREADS": "1"})
    return json.loads(line)


def run(quick: bool) -> dict:
    if not tpu_available():
        return {"title": "DDP / FSDP2 step time", "command": COMMAND, "rows": [],
                "notes": "tpu unavailable on this install"}
    worlds = [2] if quick else [1, 2, 4]
    steps = 2 if quick else 10
    batch, seq = 4, 64
    rows = []
    for mode in ("ddp", "fsdp2"):
        for world in worlds:
            r: dict = {"mode": mode, "procs": world}
            for device in ("tpu", "cpu"):  # the two contenders side by side per layout
                out = _launch(world, mode, device, steps)
                r[f"{device}_step_s"] = out["step_s"]
                r[f"{device}_tokens_per_s"] = world * batch * seq / out["step_s"]
            r["ratio"] = r["cpu_step_s"] / r["tpu_step_s"]
            rows.append(r)
    return {
        "title": "DDP and FSDP2 training steps: tpu_dist on \"tpu\" against gloo on CPU",
        "command": COMMAND,
        "rows": rows,
        "notes": f"examples/llama.py at dim 128, 2 layers, vocab 512 (~0.3M parameters), AdamW, "
                 f"{batch} x {seq} tokens per rank (weak scaling), median of {steps} steps after "
                 "2 warm-up steps, each after a barrier; OMP_NUM_THREADS=1 per rank. The ranks "
                 "share this machine's 2 cores. ratio = CPU step time / tpu step time "
                 "(> 1: tpu faster).",
    }
