"""torch.distributed on "tpu": the c10d backend ``tpu_dist``.

Registered when tpuc registers the device (``import torch`` does), so all of
these work::

    dist.init_process_group()                                   # picks tpu_dist for "tpu"
    dist.init_process_group("tpu_dist")
    dist.init_process_group(device_id=torch.device("tpu", local_rank))
    dist.init_process_group("cpu:gloo,tpu:tpu_dist")

``Backend.default_device_backend_map["tpu"] == "tpu_dist"`` (TorchTitan and
transformers look it up). What runs where: docs/distributed.md.
"""
from __future__ import annotations

import os

from .process_group import BACKEND_NAME, ProcessGroupTpu, TpuWork

__all__ = ["BACKEND_NAME", "ProcessGroupTpu", "TpuWork", "register", "is_registered"]


def _create(store, rank, size, timeout):  # type: ignore[no-untyped-def]
    return ProcessGroupTpu.create(store, rank, size, timeout)


def is_registered() -> bool:
    import torch.distributed as dist

    return dist.is_available() and BACKEND_NAME.upper() in dist.Backend._plugins


def register() -> None:
    """Registers "tpu_dist" with torch.distributed (idempotent; no-op without it)."""
    import torch.distributed as dist

    if not dist.is_available() or is_registered():
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, devices=["tpu"])
    dist.Backend.default_device_backend_map["tpu"] = BACKEND_NAME


def apply_launch_environment(cpu_plugin: bool) -> None:
    """Under torchrun, each process sees every local device, as on CUDA.

    torchrun sets LOCAL_RANK / LOCAL_WORLD_SIZE and user code picks
    ``torch.device("tpu", LOCAL_RANK)``. The XLA CPU plugin makes one device by
    default; here it makes LOCAL_WORLD_SIZE of them so that index exists (each
    process still computes only on its own). An explicit
    TPUC_CPU_DEVICE_COUNT wins.
    """
    if not cpu_plugin or "TPUC_CPU_DEVICE_COUNT" in os.environ:
        return
    local = os.environ.get("LOCAL_WORLD_SIZE")
    if local and local.isdigit() and int(local) > 1 and "LOCAL_RANK" in os.environ:
        os.environ["TPUC_CPU_DEVICE_COUNT"] = local
