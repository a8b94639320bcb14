"""DDP, FSDP2, TP and FSDP x TP training of the example transformer on "tpu"
ranks, each matching one CPU process (bounds: train_common.py), and a DCP
save / load round trip of FSDP2-sharded state."""
from __future__ import annotations

import os
from typing import Any

import torch

import dist_harness as harness
import train_common as tc

STEPS = int(os.environ.get("TPUC_DIST_TEST_STEPS", "5"))  # make test-dist-long: 20


def ddp_worker(rank: int, world: int, steps: int) -> tuple[list[float], dict[str, torch.Tensor]]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(tc.make_model(0).to("tpu"), device_ids=None)
    losses = tc.train_loop(model, steps, rank, world)
    return losses, tc.full_params(model)


def fsdp_variants(rank: int, world: int, steps: int, ckpt: str) -> list[Any]:
    """Three FSDP2 runs in one set of processes (each spawn costs seconds here):
    reshard_after_forward on (+ DCP round trip), off, and bf16 params / fp32 reduce."""
    return [fsdp_worker(rank, world, steps, True, False, ckpt),
            fsdp_worker(rank, world, steps, False, False, None),
            fsdp_worker(rank, world, steps, True, True, None)]


def fsdp_worker(rank: int, world: int, steps: int, reshard: bool, mixed: bool, ckpt: str | None
                ) -> tuple[list[float], dict[str, torch.Tensor], list[str]]:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("tpu", (world,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed \
        else MixedPrecisionPolicy()

    def build(seed: int) -> torch.nn.Module:
        model = tc.make_model(seed).to("tpu")
        for block in model.layers:
            fully_shard(block, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
        return model

    model = build(0)
    notes = []
    for p in model.parameters():  # sharded on dim 0 over the mesh, on the device
        if p.device.type != "tpu" or p.to_local().shape[0] * world < p.shape[0]:
            notes.append(f"param not sharded on tpu: {p.device} {p.to_local().shape} of {p.shape}")
    losses = tc.train_loop(model, steps, rank, world)
    params = tc.full_params(model)
    if ckpt is not None:  # DCP: save the sharded state, load it into a differently initialised model
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

        dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=ckpt)
        fresh = build(1)
        sd = {"model": get_model_state_dict(fresh)}
        dcp.load(sd, checkpoint_id=ckpt)
        set_model_state_dict(fresh, sd["model"])
        for k, v in tc.full_params(fresh).items():
            if not torch.equal(v, params[k]):
                notes.append(f"DCP round trip changed {k}")
        dist.barrier()
    return losses, params, notes


def tp_worker(rank: int, world: int, steps: int) -> tuple[list[float], dict[str, torch.Tensor]]:
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("tpu", (world,))
    model = tc.make_model(0).to("tpu")
    tc.tp_plan_apply(model, mesh)
    losses = tc.train_loop(model, steps, 0, 1)  # every TP rank sees the whole batch
    return losses, tc.full_params(model), _dtensor_random(mesh)


def _dtensor_random(mesh) -> list[str]:  # type: ignore[no-untyped-def]
    """DTensor's RNG tracker on "tpu": a sharded random init gives each shard its own
    numbers, the same whatever the rank count, and replays from the same seed."""
    from torch.distributed.tensor import Shard, distribute_tensor

    notes = []
    torch.manual_seed(7)
    d = distribute_tensor(torch.empty(8, 4, device="tpu"), mesh, [Shard(0)])
    torch.nn.init.uniform_(d)
    full = d.full_tensor().cpu()
    if torch.equal(full[:4], full[4:]):
        notes.append("DTensor random init: both shards drew the same numbers")
    torch.manual_seed(7)
    d2 = distribute_tensor(torch.empty(8, 4, device="tpu"), mesh, [Shard(0)])
    torch.nn.init.uniform_(d2)
    if not torch.equal(d2.full_tensor().cpu(), full):
        notes.append("DTensor random init does not replay from the same seed")
    return notes


def fsdp_tp_worker(rank: int, world: int, steps: int) -> tuple[list[float], dict[str, torch.Tensor]]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("tpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
    model = tc.make_model(0).to("tpu")
    tc.tp_plan_apply(model, mesh["tp"])
    for block in model.layers:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    dp_rank = mesh["dp"].get_local_rank()
    losses = tc.train_loop(model, steps, dp_rank, 2, loss_group=mesh["dp"].get_group())
    return losses, tc.full_params(model)


def _check(results: list[Any], compute_dtype: torch.dtype | None = None) -> None:
    for r, res in enumerate(results):
        losses, params = res[0], res[1]
        if len(res) > 2:
            assert res[2] == [], f"rank {r}: {res[2]}"
        tc.check_against_reference(losses, params, STEPS, compute_dtype)


def test_ddp() -> None:
    _check(harness.run(ddp_worker, 2, STEPS, timeout=240, backend="device_id"))


def test_fsdp2_reshard_on_off_and_mixed_precision_with_dcp(tmp_path: Any) -> None:
    per_rank = harness.run(fsdp_variants, 2, STEPS, str(tmp_path / "dcp"), timeout=420)
    for variant, compute_dtype in enumerate([None, None, torch.bfloat16]):
        _check([res[variant] for res in per_rank], compute_dtype)


def test_tensor_and_sequence_parallel() -> None:
    _check(harness.run(tp_worker, 2, STEPS, timeout=300))


def test_fsdp_x_tp_2x2() -> None:
    _check(harness.run(fsdp_tp_worker, 4, STEPS, timeout=400))


def ddp_timer_worker(rank: int, world: int, steps: int) -> dict[str, int]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(tc.make_model(0).to("tpu"), device_ids=None)
    tc.train_loop(model, steps, rank, world)
    data = model._get_ddp_logging_data()
    return {k: int(v) for k, v in data.items() if k.startswith("avg_") and k.endswith("_time")}


def test_ddp_times_its_iterations_without_a_warning(capfd: Any) -> None:
    """DDP's reducer times each iteration with the device type's registered timer
    (csrc/torch/ddp_timer.cpp); without one it printed "Time stats are currently only collected
    for CPU and CUDA devices" on every rank and logged no times."""
    per_rank = harness.run(ddp_timer_worker, 2, 3, timeout=240, backend="device_id")
    err = capfd.readouterr().err
    assert "Time stats are currently only collected" not in err
    for times in per_rank:
        assert times.get("avg_forward_compute_time", 0) > 0, times
        assert times.get("avg_backward_compute_time", 0) > 0, times
