"""FSDP2 with bf16 parameters (MixedPrecisionPolicy, as TorchTitan's
``--training.mixed_precision_param bfloat16``) compiles what float32 compiles plus one cast
program per distinct parameter shape, and nothing per step.

Why this test: TorchTitan's FLUX at FSDP=2 recorded 441 compiles in bf16 against 22 in
float32 (docs/torchtitan.md, "FLUX at FSDP=2 and bf16"). The record's ``compiles`` excludes
programs the disk cache supplied, and the float32 programs were on disk from earlier FLUX
runs while the bf16 ones were not: counted from a cold cache the small reproduction needed
about as many programs in either dtype. What bf16 adds, by construction, is FSDP2's casts:
the float32 shard to bf16 when it gathers a parameter and the bf16 gradient to float32 for
the reduction, one program per parameter shape; anything per call (a cast compiled per
tensor, a shape or scalar baked into a program per step) would show here.

``cache_misses`` counts the programs a process needed that its in-memory cache lacked
(compiled or loaded from disk), so the counts do not depend on the disk cache's state.
"""
from __future__ import annotations

import pytest
import torch

from dist_harness import run

# one rank: FSDP2 gathers, casts and reduces through tpu_dist as on more (the casts do not
# depend on the rank count), at half the cost of two spawned processes
WORLD = 1
STEPS = 3


def _programs_per_step(rank: int, world: int, width: int, dtype_name: str) -> dict:
    """One model of ``width`` under FSDP2 with ``dtype_name`` parameters, STEPS steps:
    the programs each step needed, the number of distinct local parameter shapes, the
    output's dtype and the dtypes the parameters are kept in."""
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dtype = getattr(torch, dtype_name)
    dev = torch.device("tpu", rank)
    torch.manual_seed(0)

    def block() -> nn.Module:
        return nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 4 * width),
                             nn.GELU(approximate="tanh"), nn.Linear(4 * width, width))

    # 4 blocks: 28 parameters of 7 shapes, so a cast compiled per tensor would exceed the
    # bound below (2 per shape)
    blocks = [block() for _ in range(4)]
    model = nn.Sequential(nn.Linear(8, width), *blocks, nn.Linear(width, 8)).to(dev)
    mesh = init_device_mesh("tpu", (world,))
    mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for b in blocks:
        fully_shard(b, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    shapes = {tuple(p.to_local().shape) for p in model.parameters()}

    def misses() -> int:
        return int(torch.tpu.stats()["cache_misses"])

    per_step = []
    for _ in range(STEPS):
        before = misses()
        x = torch.randn(6, 8, device=dev)
        out = model(x)
        loss = (out.float() ** 2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        loss.item()
        per_step.append(misses() - before)
    return {"per_step": per_step, "param_shapes": len(shapes), "out_dtype": str(out.dtype),
            "dtypes": sorted({str(p.dtype) for p in model.parameters()})}


def _runs(rank: int, world: int) -> list[dict]:
    """In one process, three widths (no shape-specific program of one run serves another): a
    float32 warm-up that pays for the shape-free programs (scalar steps of AdamW, the grad
    norm's total), then bf16 and float32, each counting only what its own shapes and dtype
    need."""
    return [_programs_per_step(rank, world, w, d)
            for w, d in ((16, "float32"), (40, "bfloat16"), (24, "float32"))]


def test_bf16_parameters_add_only_cast_programs():
    for _, b16, f32 in run(_runs, WORLD, timeout=240):
        # FSDP2 keeps float32 shards and computes in the policy's dtype
        assert f32["dtypes"] == b16["dtypes"] == ["torch.float32"]
        assert (b16["out_dtype"], f32["out_dtype"]) == ("torch.bfloat16", "torch.float32")
        # steady state: nothing new after step 2 in either dtype
        assert f32["per_step"][2:] == [0] * (STEPS - 2), f32
        assert b16["per_step"][2:] == [0] * (STEPS - 2), b16
        # bf16 needs what float32 needs plus the casts: a parameter shape to bf16 (gather)
        # and a bf16 gradient to float32 (reduction), per distinct parameter shape
        extra = sum(b16["per_step"]) - sum(f32["per_step"])
        assert extra <= 2 * b16["param_shapes"], (f32, b16)
