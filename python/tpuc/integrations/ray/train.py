"""``TpuTorchConfig``: Ray Train's ``TorchConfig`` for tpuc's "tpu" (see the package docstring).

Three pieces, each running in every Ray Train worker process:

1. ``_prepare_worker`` (the backend's ``on_start``, before Ray sets up the process group):
   LOCAL_RANK / LOCAL_WORLD_SIZE from Ray's train context into the environment, so that tpuc's
   launch rule (tpuc.distributed.apply_launch_environment) gives the XLA CPU plugin's runtime
   LOCAL_WORLD_SIZE devices before it starts; then the device manager below.
2. ``TpuDeviceManager`` installed as the worker's Ray device manager. Shim, Ray 2.60.0:
   ``ray.air._internal.device_manager.get_torch_device_manager_by_context`` picks a manager from
   the worker's Ray accelerator resources (GPU, HPU, NPU; TPU means the ``torch_tpu`` package)
   and caches it in the module's ``_torch_device_manager``; there is no registration hook, so
   this sets that cache to a manager that answers ``tpu:LOCAL_RANK``. ``get_device``,
   ``prepare_model`` and ``prepare_data_loader`` all ask it. Goes when Ray offers a hook.
3. ``_TrainThreadContext`` (the config's ``train_func_context``): Ray Train 2 runs the training
   function in a thread of its own, and tpuc's current device is per thread, so the device is
   made current there.

``_TpuBackend`` subclasses Ray's ``_TorchBackend`` (private, Ray 2.60.0) so that Ray's own
``on_start`` still does the rest -- MASTER_ADDR/PORT, RANK/LOCAL_RANK/..., and
``init_process_group`` -- after ``_prepare_worker``; a Ray whose ``ray.train.torch.config``
lacks it fails at import of this module.
"""
from __future__ import annotations

import os
import threading
import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, List, Union

import ray
import torch
from ray.air._internal import device_manager as _ray_dm
from ray.air._internal.device_manager.torch_device_manager import TorchDeviceManager
from ray.train.torch.config import TorchConfig, TorchConfigContextManager, _TorchBackend

from . import TESTED_RAY

# torch reads "tpu_dist" (registered for the device "tpu") and "tpu:tpu_dist" as the same map;
# Ray 2.60 imports torch_tpu for the bare name only (ray/train/torch/config.py)
BACKEND = "tpu:tpu_dist"

if ray.__version__ != TESTED_RAY:
    warnings.warn(f"tpuc.integrations.ray is tested with Ray {TESTED_RAY}, this is Ray "
                  f"{ray.__version__}: its device-manager shim may not apply", RuntimeWarning,
                  stacklevel=2)
if not hasattr(_ray_dm, "_torch_device_manager"):
    raise ImportError(f"Ray {ray.__version__} has no ray.air._internal.device_manager."
                      "_torch_device_manager (the shim tpuc.integrations.ray needs; tested with "
                      f"Ray {TESTED_RAY})")


def _local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def local_device() -> torch.device:
    """This worker's device: ``tpu:LOCAL_RANK``."""
    return torch.device("tpu", _local_rank())


class TpuDeviceManager(TorchDeviceManager):
    """Ray's device-manager interface answered for "tpu" (no streams: tpuc orders work itself)."""

    def is_available(self) -> bool:
        return torch.tpu.is_available()

    def get_devices(self) -> List[torch.device]:
        return [local_device()]

    def set_device(self, device: Union[torch.device, int, str, None]) -> None:
        if device is not None:
            torch.tpu.set_device(device)

    def supports_stream(self) -> bool:
        return False

    def create_stream(self, device: torch.device) -> None:
        return None

    def get_stream_context(self, stream: Any) -> Any:
        return nullcontext()

    def get_current_stream(self) -> None:
        return None


def _install_device_manager() -> None:
    lock: threading.Lock = getattr(_ray_dm, "_torch_device_manager_lock", threading.Lock())
    with lock:
        if not isinstance(_ray_dm._torch_device_manager, TpuDeviceManager):
            _ray_dm._torch_device_manager = TpuDeviceManager()


def _prepare_worker() -> None:
    import tpuc  # noqa: F401  (registers "tpu" and "tpu_dist" when torch's autoload is off)
    from tpuc import _plugin
    from tpuc.distributed import apply_launch_environment

    ctx = ray.train.get_context()
    os.environ["LOCAL_RANK"] = str(ctx.get_local_rank())
    os.environ["LOCAL_WORLD_SIZE"] = str(ctx.get_local_world_size())
    if not torch.tpu.is_initialized():
        try:
            cpu = _plugin.is_cpu_plugin(_plugin.find_plugin())
        except _plugin.PluginNotFoundError:
            cpu = False
        apply_launch_environment(cpu)
    n = torch.tpu.device_count()
    if ctx.get_local_rank() >= n:
        raise RuntimeError(
            f"Ray Train worker with local rank {ctx.get_local_rank()} sees {n} tpu device(s) "
            "(with the XLA CPU plugin: its runtime started before LOCAL_WORLD_SIZE was known; "
            "set TPUC_CPU_DEVICE_COUNT in the workers' runtime_env)")
    _install_device_manager()
    torch.tpu.set_device(local_device())


class _TpuBackend(_TorchBackend):
    share_cuda_visible_devices = False

    def on_start(self, worker_group: Any, backend_config: TorchConfig) -> None:
        worker_group.execute(_prepare_worker)
        super().on_start(worker_group, backend_config)


class _TrainThreadContext(TorchConfigContextManager):
    def __enter__(self) -> None:
        _install_device_manager()
        torch.tpu.set_device(local_device())

    def __exit__(self, *exc: object) -> bool:
        return False


@dataclass
class TpuTorchConfig(TorchConfig):
    """``TorchConfig`` for "tpu": process group "tpu_dist", each worker on ``tpu:LOCAL_RANK``.

    ``backend`` may be None, "tpu_dist" or "tpu:tpu_dist" (all the same group), or a map that
    names other devices too ("cpu:gloo,tpu:tpu_dist")."""

    backend: str | None = BACKEND

    def __post_init__(self) -> None:
        if self.backend in (None, "tpu_dist"):
            self.backend = BACKEND

    @property
    def backend_cls(self) -> type:
        return _TpuBackend

    @property
    def train_func_context(self) -> type:
        return _TrainThreadContext
