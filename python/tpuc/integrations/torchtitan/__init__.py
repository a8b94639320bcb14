"""TorchTitan on the device "tpu": everything TorchTitan needs from tpuc, applied from outside.

For torchtitan 0.3.0 with torch 2.13.0. No file of torchtitan is edited or copied; the
launcher ``python -m tpuc.integrations.torchtitan.train`` (under ``torchrun``) calls
:func:`apply` and then TorchTitan's own ``torchtitan.train.main``. Each item below says what
it provides and why:

- ``torch.tpu`` (python/tpuc/device.py) already has every function TorchTitan calls on its
  device module (``set_device``, ``device_count``, ``current_device``, ``synchronize``,
  ``get_device_name``, ``get_device_properties(..).total_memory``, ``memory_stats`` with the
  ``active_bytes.all.peak`` / ``reserved_bytes.all.peak`` / ``num_alloc_retries`` /
  ``num_ooms`` keys its ``DeviceMemoryMonitor`` reads, ``reset_peak_memory_stats``,
  ``empty_cache``). :func:`check_device` verifies them and that TorchTitan picked "tpu".
- Device-type fallback: ``torchtitan.tools.utils`` sets ``device_type =
  _get_available_device_type() or "cuda"`` *at import*. tpuc registers "tpu" at ``import
  torch`` (the ``torch.backends`` entry point), so TorchTitan sees "tpu"; if it was imported
  while "tpu" was unavailable it holds "cuda" and :func:`check_device` says what to do.
- ``torch.distributed.set_timeout``: TorchTitan 0.3.0 calls it after step 1
  (``set_pg_timeouts``); torch 2.13 does not have it (2.14 does). Shimmed with torch's own
  ``distributed_c10d._set_pg_timeout``; the shim is skipped on a torch that has the function.
- Process-group backend: TorchTitan asks ``Backend.default_device_backend_map["tpu"]`` (else
  "nccl"). tpuc's c10d backend ``tpu_dist`` fills it when registered. Without it, a
  one-process run maps "tpu" to :mod:`.loopback` (world size 1: every collective is an
  identity on the device; gloo refuses "tpu" tensors); more processes raise a clear error.
- Peak FLOPs for the MFU log: TorchTitan's ``get_peak_flops`` knows NVIDIA/AMD/Intel/Neuron
  names only and answers A100's 312 TFLOPS for anything else. tpuc answers the TPU
  generation's published bf16 peak when the plugin names one, else a measured matmul peak
  of this device (:mod:`.peak`).
- The CPU reference (:mod:`.reference`, ``--tpuc.device=cpu``): the same recipe on the CPU
  with gloo (TorchTitan 0.3.0 has no CPU mode), float32 or float64, for the tests' bounds.
- Block swaps (:mod:`.swaps`), chosen by configuration and applied when TorchTitan applies
  parallelism (its ``ModelSpec.parallelize_fn`` is wrapped, model.py untouched).
"""
from __future__ import annotations

import datetime
import os
from typing import Any, Optional

import torch

__all__ = ["apply", "check_device", "shim_set_timeout", "select_backend", "TPU_DIST"]

TPU_DIST = "tpu_dist"  # the name tpuc's c10d backend registers (python/tpuc/distributed)

_applied = False


def check_device() -> None:
    """Raises with what to do when TorchTitan did not pick "tpu"."""
    if not (hasattr(torch, "tpu") and torch.tpu.is_available()):
        reason = torch.tpu.unavailable_reason() if hasattr(torch, "tpu") else "tpuc not registered"
        raise RuntimeError(f"tpuc: the device 'tpu' is unavailable ({reason}); see `tpuc info`")
    import torchtitan.tools.utils as tt_utils

    if tt_utils.device_type != "tpu":
        raise RuntimeError(
            f"tpuc: torchtitan chose device {tt_utils.device_type!r}, not 'tpu': it was imported "
            "before 'tpu' was registered (TORCH_DEVICE_BACKEND_AUTOLOAD=0?). Import tpuc first "
            "or launch with `python -m tpuc.integrations.torchtitan.train`."
        )
    for fn in ("set_device", "device_count", "current_device", "synchronize", "get_device_name",
               "get_device_properties", "memory_stats", "reset_peak_memory_stats", "empty_cache"):
        if not callable(getattr(torch.tpu, fn, None)):
            raise RuntimeError(f"tpuc: torch.tpu.{fn} is missing (tpuc and its build disagree)")


def shim_set_timeout() -> None:
    """torch.distributed.set_timeout for torch < 2.14 (TorchTitan 0.3.0 calls it)."""
    import torch.distributed as dist

    if hasattr(dist, "set_timeout"):
        return
    from torch.distributed import distributed_c10d as c10d

    def set_timeout(timeout: datetime.timedelta, group: Optional[Any] = None) -> None:
        # torch 2.13's private equivalent; group None is the default group, as in 2.14.
        c10d._set_pg_timeout(timeout, group)

    dist.set_timeout = set_timeout  # type: ignore[attr-defined]


def tpu_dist_registered() -> bool:
    import torch.distributed as dist

    return TPU_DIST in getattr(dist.Backend, "backend_list", []) or hasattr(dist.Backend, "TPU_DIST")


def select_backend(world_size: Optional[int] = None) -> str:
    """Makes ``default_device_backend_map["tpu"]`` name a backend TorchTitan can use."""
    import torch.distributed as dist

    if world_size is None:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
    m = dist.Backend.default_device_backend_map
    if m.get("tpu"):
        return m["tpu"]
    if tpu_dist_registered():
        m["tpu"] = TPU_DIST
    elif world_size == 1:
        # One process (FSDP on a one-rank mesh, DTensor's RNG broadcast): identities.
        from . import loopback

        m["tpu"] = loopback.register()
    else:
        raise RuntimeError(
            f"tpuc: {world_size} processes on 'tpu' need the c10d backend '{TPU_DIST}', which "
            "is not registered in this tpuc build (tpuc.distributed). One process works "
            "without it."
        )
    return m["tpu"]


def apply(swaps: Optional[str] = None, device: str = "tpu") -> None:
    """Applies the whole integration (idempotent). ``swaps``: see :mod:`.swaps`.
    ``device="cpu"``: for the CPU reference run (:mod:`.reference`), no device check."""
    global _applied
    from . import peak, swaps as swaps_mod

    if not _applied:
        if device == "tpu":
            check_device()
        shim_set_timeout()
        select_backend()
        peak.install()
        _applied = True
    swaps_mod.install(swaps_mod.parse(swaps))
