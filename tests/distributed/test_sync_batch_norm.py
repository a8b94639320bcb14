"""nn.SyncBatchNorm on two "tpu" ranks (csrc/torch/sync_batch_norm.cpp).

With more than one rank, SyncBatchNorm's statistics are those of the whole batch across the
ranks: its kernels (batch_norm_stats, _gather_stats_with_counts, _elemt, _backward_reduce,
_backward_elemt) have CUDA kernels only, so on "tpu" it raised. Here a small convolutional
model with SyncBatchNorm layers trains three SGD steps under DDP on two ranks, each with its
half of the batch (one rank's half has fewer rows: unequal counts), in float64. That is the
same computation as nn.BatchNorm2d over the whole batch in one CPU process, which is the
reference: the outputs, the parameters after every step and the running statistics must match
it to float64 rounding (1000 ulps of the magnitude: a few hundred ops in another order)."""
from __future__ import annotations

from typing import Any

import torch

import dist_harness as harness

STEPS = 3
SPLIT = (5, 3)  # rows per rank: unequal, so the counts weigh the ranks' statistics


def _model(sync: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    bn = torch.nn.SyncBatchNorm if sync else torch.nn.BatchNorm2d
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), bn(4), torch.nn.ReLU(),
        torch.nn.Conv2d(4, 4, 3), bn(4, affine=False, momentum=0.3), torch.nn.Flatten(),
        torch.nn.Linear(4 * 4 * 4, 2)).double()


def _batch(step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(sum(SPLIT), 3, 6, 6, generator=g, dtype=torch.float64) * 2 + 0.5


def _train(model: torch.nn.Module, device: str, rows: slice, world: int = 1) -> dict[str, Any]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    seen: dict[str, Any] = {"out": [], "params": [], "buffers": None}
    for s in range(STEPS):
        x = _batch(s)[rows].to(device)
        out = model(x)
        opt.zero_grad()
        # the whole batch's mean square; DDP averages the ranks' gradients, hence the world
        out.square().mean().mul(x.shape[0] / sum(SPLIT) * world).backward()
        opt.step()
        seen["out"].append(out.detach().cpu())
        seen["params"].append([p.detach().cpu().clone() for p in model.parameters()])
    seen["buffers"] = [b.detach().cpu().clone() for b in model.buffers()]
    return seen


def sync_worker(rank: int, world: int) -> dict[str, Any]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    start = sum(SPLIT[:rank])
    model = DDP(_model(sync=True).to("tpu"))
    return _train(model, "tpu", slice(start, start + SPLIT[rank]), world)


def test_sync_batch_norm_on_two_ranks_is_batch_norm_over_the_whole_batch() -> None:
    per_rank = harness.run(sync_worker, 2, timeout=300)
    ref = _train(_model(sync=False), "cpu", slice(0, sum(SPLIT)))
    eps = torch.finfo(torch.float64).eps

    def close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
        bound = 1000 * eps * max(1.0, want.abs().max().item())
        err = (got - want).abs().max().item()
        assert err <= bound, f"{what}: {err:.3g} > {bound:.3g}"

    for rank, seen in enumerate(per_rank):
        start = sum(SPLIT[:rank])
        for s in range(STEPS):
            close(seen["out"][s], ref["out"][s][start:start + SPLIT[rank]], f"rank {rank} step {s} output")
            for i, (p, r) in enumerate(zip(seen["params"][s], ref["params"][s])):
                close(p, r, f"rank {rank} step {s} parameter {i}")
        for i, (b, r) in enumerate(zip(seen["buffers"], ref["buffers"])):
            close(b.double(), r.double(), f"rank {rank} buffer {i}")
    # the reference moved: the comparison is not of untouched values
    first = _model(sync=False)
    assert not torch.equal(ref["params"][-1][0], next(first.parameters()).detach())
    assert not torch.equal(ref["buffers"][0], first[1].running_mean)
