"""Run by test_exit.py as one of two ranks (RANK, WORLD_SIZE, MASTER_ADDR/PORT in
the environment). A program that ends while tpu_dist's gloo worker thread still
holds a collective, or without destroy_process_group, must exit with code 0.

MODE=late_worker (rank 0): the last atexit handler (registered first) is one long C
call that holds the GIL; while it runs, rank 1 joins an all_reduce that rank 0
left unwaited, so rank 0's gloo worker finishes it and then waits for the GIL to
let go of the host tensors. When the handler returns the interpreter starts
finalizing with no bytecode run in between, so the worker meets a finalizing
interpreter: the interleaving a loaded machine produces by chance at the end of
any program (the worker dropping its last collective late), made certain.
MODE=destroy: after destroy_process_group no gloo worker thread of tpu_dist is
left in the process, even while the program still holds the group object (as
a torch.compile'd function holding functional collectives does): the group
was torn down there, not whenever Python happens to collect it."""
import atexit
import os

_state: dict = {}


def _signal_rank1() -> None:  # runs just before the long call below
    _state["store"].set("rank0_exiting", "1")


mode = os.environ["MODE"]
rank = int(os.environ["RANK"])
if mode == "late_worker" and rank == 0:
    atexit.register(sum, range(int(os.environ.get("GIL_HOLD_ITERS", "100000000"))))
    atexit.register(_signal_rank1)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dev = torch.device("tpu", 0)
dist.init_process_group(device_id=dev)
t = torch.full((1024,), float(rank + 1), device=dev)
dist.all_reduce(t)  # the group works
assert t.cpu().eq(3.0).all(), t
print(f"rank {rank} ready", flush=True)
if mode == "late_worker":
    store = dist.distributed_c10d._get_default_store()
    if rank == 0:
        _state["store"] = store
        work = dist.all_reduce(t, async_op=True)  # never waited
        del work
    else:
        store.wait(["rank0_exiting"])
        dist.all_reduce(t)
elif mode == "destroy":
    dist.all_reduce(t, async_op=True).wait()
    dist.barrier()
    held = dist.group.WORLD  # noqa: F841 - kept alive past destroy on purpose
    dist.destroy_process_group()
    names = [open(f"/proc/self/task/{tid}/comm").read().strip() for tid in os.listdir("/proc/self/task")]
    assert "pt_gloo_runloop" not in names, names
else:
    raise SystemExit(f"unknown MODE {mode}")
