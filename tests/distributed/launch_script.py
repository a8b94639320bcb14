"""Run by torchrun from test_launch.py: each process takes tpu:LOCAL_RANK, as on CUDA,
joins the default group with no backend named, checks an all_reduce and a
torch.compile(backend="tpu") function holding functional collectives, and writes
what it saw to $TPUC_TEST_OUT/rank<RANK>.json."""
import json
import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

local = int(os.environ["LOCAL_RANK"])
dev = torch.device("tpu", local)
torch.tpu.set_device(dev)
dist.init_process_group(device_id=dev)
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.full((4,), float(rank + 1), device=dev)
dist.all_reduce(t)


def step(x: torch.Tensor) -> torch.Tensor:
    y = funcol.all_reduce(x * 2, "sum", dist.group.WORLD)
    return funcol.all_gather_tensor(y + 1, 0, dist.group.WORLD)


x = torch.arange(3.0, device=dev) + rank
compiled = torch.compile(step, backend="tpu")(x)
eager = step(x)
out = {
    "rank": rank, "world": world, "local_rank": local, "backend": dist.get_backend(),
    "device": str(t.device), "all_reduce": t.cpu().tolist(),
    "compiled": compiled.cpu().tolist(), "eager": eager.cpu().tolist(),
    "compiled_device": str(compiled.device),
}
with open(os.path.join(os.environ["TPUC_TEST_OUT"], f"rank{rank}.json"), "w") as f:
    json.dump(out, f)
dist.destroy_process_group()
