"""The training function the Ray Train tests run in each worker (imported there by name: the
cluster's PYTHONPATH has this folder, tests/distributed and examples).

The example transformer of tests/distributed/train_common.py, SGD, ``STEPS`` steps of the
global batch ``tc.BATCH`` split over the workers by ``prepare_data_loader``'s
DistributedSampler: the dataset is the steps' batches one after another, each worker's loader
takes ``BATCH // world`` rows a step, and the sampler's interleaving (rank r: rows r, r+w, ...)
gives the workers of step s exactly the rows of ``tc.batch(s)`` between them, so DDP's averaged
gradient is the whole batch's. Each worker writes what it saw to ``out_dir/rank{r}.pt``.

With ``ckpt=True`` rank 0 reports a checkpoint (model state, step) after every step and a run
resumes from ``ray.train.get_checkpoint()``; ``kill_at=k`` SIGKILLs worker ``kill_rank`` in
step k's backward of the first attempt (a marker file says it happened)."""
from __future__ import annotations

import os
import signal
import tempfile
from typing import Any

import torch

import train_common as tc


def dataset(steps: int) -> torch.utils.data.TensorDataset:
    toks, tgts = zip(*(tc.batch(s) for s in range(steps)))
    return torch.utils.data.TensorDataset(torch.cat(toks), torch.cat(tgts))


def train_fn(config: dict[str, Any]) -> None:
    import torch.distributed as dist
    import ray.train
    from ray.train import Checkpoint
    from ray.train.torch import get_device, prepare_data_loader, prepare_model

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    steps = int(config["steps"])
    device = get_device()
    model = tc.make_model(0)
    start = 0
    losses: list[float] = []
    ckpt = ray.train.get_checkpoint() if config.get("ckpt") else None
    resumed_from = None
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), weights_only=False)
        model.load_state_dict(state["model"])
        start = resumed_from = int(state["step"]) + 1
        losses = list(state["losses"])
    model = prepare_model(model)
    opt = torch.optim.SGD(model.parameters(), lr=tc.LR)
    loader = prepare_data_loader(torch.utils.data.DataLoader(
        dataset(steps), batch_size=tc.BATCH // world, shuffle=False))
    devices: set[str] = set()
    marker = config.get("marker")
    for s, (tok, tgt) in enumerate(loader):
        if s < start:
            continue
        devices.update({str(tok.device), str(next(model.parameters()).device)})
        _, loss = model(tok, tgt)
        opt.zero_grad()
        if (s == config.get("kill_at") and rank == config.get("kill_rank", 0)
                and marker and not os.path.exists(marker)):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)  # mid-step: forward done, no backward
        loss.backward()
        opt.step()
        rep = loss.detach().float().clone()
        dist.all_reduce(rep, op=dist.ReduceOp.AVG)
        losses.append(float(rep))
        if config.get("ckpt"):
            with tempfile.TemporaryDirectory() as d:
                if rank == 0:
                    torch.save({"model": {k.replace("module.", ""): v.detach().cpu()
                                          for k, v in model.state_dict().items()},
                                "step": s, "losses": losses}, os.path.join(d, "state.pt"))
                ray.train.report({"step": s, "loss": losses[-1]},
                                 checkpoint=Checkpoint.from_directory(d) if rank == 0 else None)
    torch.save({"losses": losses, "params": tc.full_params(model), "device": str(device),
                "devices": sorted(devices), "backend": dist.get_backend(), "start": start,
                "resumed_from": resumed_from, "world": world},
               os.path.join(config["out_dir"], f"rank{rank}.pt"))
