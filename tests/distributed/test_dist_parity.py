"""Multi-step parity under DDP and FSDP2 on two "tpu" processes (issue 29): the Llama-like
stack of tests/difftest/parity.py (embedding, RMSNorm, fused-qkv attention, SwiGLU, a
Linear(128, 64) head) at sizes past the engine's thresholds (512 rows per rank), AdamW
(foreach) with grad-norm clipping (a host read between steps), 5 steps. Every parameter
after every step is compared with one CPU process training the whole batch in float64, by
the derived bound (docs/testing.md): the error may be 8x the CPU float32 run's own plus
(64 + 8 sqrt(n)) float32 ulps."""
from __future__ import annotations

import math
import os
import sys
from typing import Any

import torch

import dist_harness as harness

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from tests.difftest import parity, run  # noqa: E402

PROG = parity.PROGRAMS["llama_like"]
STEPS, BATCH, SEQ = 5, 16, 64


def _model(dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(PROG["seed"])
    return torch.nn.Sequential(*[run.block(b) for b in PROG["blocks"]]).double().to(dtype)


def _data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    tok = torch.randint(0, PROG["blocks"][0][1], (BATCH, SEQ), generator=g)
    target = torch.randn(BATCH, SEQ, PROG["blocks"][-1][2], generator=g, dtype=torch.float64)
    return tok, target


def _train(model: torch.nn.Module, device: str, dtype: torch.dtype, rank: int, world: int
           ) -> list[dict[str, torch.Tensor]]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-3, foreach=True)
    n = BATCH // world
    seen = []
    for s in range(STEPS):
        tok, target = _data(s)
        tok = tok[rank * n:(rank + 1) * n].to(device)
        target = target[rank * n:(rank + 1) * n].to(device, dtype)
        loss = ((model(tok) - target) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        seen.append(_full(model))
    return seen


def _full(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    from torch.distributed.tensor import DTensor

    out = {}
    for k, v in model.named_parameters():
        t = v.full_tensor() if isinstance(v, DTensor) else v
        out[k.replace("module.", "")] = t.detach().to("cpu", torch.float64).clone()
    return out


def ddp_worker(rank: int, world: int) -> list[dict[str, torch.Tensor]]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    return _train(DDP(_model(torch.float32).to("tpu")), "tpu", torch.float32, rank, world)


def fsdp_worker(rank: int, world: int) -> list[dict[str, torch.Tensor]]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("tpu", (world,))
    model = _model(torch.float32).to("tpu")
    for block in model:
        if any(True for _ in block.parameters()):
            fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return _train(model, "tpu", torch.float32, rank, world)


def _check(per_rank: list[list[dict[str, torch.Tensor]]]) -> None:
    ref = _train(_model(torch.float64), "cpu", torch.float64, 0, 1)
    cpu = _train(_model(torch.float32), "cpu", torch.float32, 0, 1)
    n = BATCH * SEQ * 3 * 344
    floor = (run.FLOOR_ULPS + run.SUM_ULPS * math.sqrt(n)) * run.EPS32
    for r, seen in enumerate(per_rank):
        for s in range(STEPS):
            for k, exact in ref[s].items():
                e_dev = run._rel(seen[s][k], exact)
                e_cpu = run._rel(cpu[s][k], exact)
                bound = run.FACTOR * e_cpu + floor
                assert e_dev <= bound, (f"rank {r} step {s} {k}: error {e_dev:.3g} vs the CPU's "
                                        f"{e_cpu:.3g} (bound {bound:.3g})")


def test_ddp_parity() -> None:
    _check(harness.run(ddp_worker, 2, timeout=300, backend="device_id"))


def test_fsdp2_parity() -> None:
    _check(harness.run(fsdp_worker, 2, timeout=300))
