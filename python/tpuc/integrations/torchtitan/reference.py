"""TorchTitan's own trainer on the CPU: the reference the "tpu" runs are compared with.

``python -m tpuc.integrations.torchtitan.train --tpuc.device=cpu [--tpuc.dtype=float64] ...``
runs the same recipe, the same swaps and the same data with ``device_type = "cpu"`` and gloo.
TorchTitan 0.3.0 has no CPU mode: ``torchtitan.tools.utils`` picks ``_get_available_device_type()
or "cuda"`` at import, and its trainer calls memory/name functions ``torch.cpu`` lacks. So
:func:`use_cpu` (called before any other torchtitan module is imported, since several import
``device_type`` by name) sets the module's ``device_type``/``device_module`` to "cpu" and a
small device module: ``torch.cpu`` plus the functions TorchTitan's metrics call, answering
host-memory figures (no peak tracking: zeros).

``--tpuc.dtype=float64`` makes the reference a float64 run: the default dtype (TorchTitan builds
the model on meta in it) and FSDP's ``param_dtype`` (``mixed_precision_param``, whose
``TORCH_DTYPE_MAP`` knows only 16/32-bit names: "float64" is added to it). The model's explicit
``.float()`` casts (RoPE, the loss) stay float32, so the reference is float64 everywhere else.
"""
from __future__ import annotations

import os
import types
from typing import Any

import torch


def _cpu_module() -> types.ModuleType:
    m = types.ModuleType("tpuc_titan_cpu")
    for name in ("Stream", "Event", "StreamContext", "current_stream", "stream", "synchronize",
                 "is_available"):
        setattr(m, name, getattr(torch.cpu, name))
    m.device_count = lambda: int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    m.set_device = lambda device: None
    m.current_device = lambda: 0  # an index, as barrier(device_ids=[...]) wants

    def total_memory() -> int:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    m.get_device_name = lambda device=None: "CPU"
    m.get_device_properties = lambda device=None: types.SimpleNamespace(
        name="CPU", total_memory=total_memory())
    m.memory_stats = lambda device=None: {}
    m.reset_peak_memory_stats = lambda device=None: None
    m.empty_cache = lambda: None
    return m


_cpu_applied = False


def use_cpu(dtype: str = "float32") -> None:
    """Makes TorchTitan train on the CPU (gloo). Call before importing torchtitan's trainer.
    Idempotent; ``dtype``: :func:`set_dtype`."""
    global _cpu_applied
    if _cpu_applied:
        set_dtype(dtype)
        return
    _cpu_applied = True
    import torchtitan.tools.utils as tt_utils

    tt_utils.device_type = "cpu"
    tt_utils.device_module = _cpu_module()
    torch.distributed.Backend.default_device_backend_map["cpu"] = "gloo"
    # TorchTitan's set_pg_timeouts calls barrier(device_ids=[current_device()]); c10d turns
    # device_ids into a device of the *accelerator's* type ("tpu"), which the gloo group lacks.
    # The CPU reference drops device_ids (they only pick the device on accelerators).
    barrier = torch.distributed.barrier

    def cpu_barrier(group=None, async_op=False, device_ids=None):
        return barrier(group=group, async_op=async_op)

    torch.distributed.barrier = cpu_barrier
    # FSDP2 (torch 2.13) reduce-scatters gradients with ReduceOp.PREMUL_SUM(1/factor) when
    # TorchTitan sets a gradient divide factor; gloo refuses PREMUL_SUM. The CPU reference
    # asks FSDP2 for its SUM-then-divide path instead (same value; MTIA gets it the same way).
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives as fc

    factors = fc._get_gradient_divide_factors

    def sum_factors(*args, **kwargs):
        kwargs["force_sum_reduction_for_comms"] = True
        if len(args) > 5:
            args = args[:5]
        return factors(*args, **kwargs)

    fc._get_gradient_divide_factors = sum_factors
    set_dtype(dtype)


def set_dtype(dtype: str) -> None:
    """The reference run's dtype: float64 (default dtype, and FSDP's dtypes through
    :func:`apply_dtype_to_config`) or float32; may change between runs of one process."""
    if dtype == "float64":
        from torchtitan.config import TORCH_DTYPE_MAP

        TORCH_DTYPE_MAP["float64"] = torch.float64
        torch.set_default_dtype(torch.float64)
    elif dtype == "float32":
        torch.set_default_dtype(torch.float32)
    else:
        raise ValueError(f"tpuc: --tpuc.dtype must be float32 or float64, not {dtype!r}")


def apply_dtype_to_config(config: Any, dtype: str) -> Any:
    if dtype == "float64":
        config.training.mixed_precision_param = "float64"
        config.training.mixed_precision_reduce = "float64"
    return config
