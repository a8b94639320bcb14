"""Ray Train on "tpu": ``ray.train.torch.TorchTrainer`` unchanged apart from its config.

    import ray
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer, get_device, prepare_data_loader, prepare_model
    from tpuc.integrations.ray import TpuTorchConfig

    def train_fn(config):
        model = prepare_model(build_model())        # on tpu:LOCAL_RANK, wrapped in DDP
        loader = prepare_data_loader(loader)        # batches arrive on tpu:LOCAL_RANK
        ...

    TorchTrainer(train_fn, torch_config=TpuTorchConfig(),
                 scaling_config=ScalingConfig(num_workers=2)).fit()

What it adapts (Ray 2.60.0, the version tested; docs/ray.md):

- the process group: c10d backend "tpu_dist" (tpuc's, python/tpuc/distributed). Ray's own
  ``TorchConfig(backend="tpu_dist")`` expects the ``torch_tpu`` package (it imports
  ``torch_tpu._loader`` for that name), so ``TpuTorchConfig`` passes the same backend spelled
  ``"tpu:tpu_dist"`` -- to torch the identical device map {"tpu": "tpu_dist"}, to Ray a name it
  does not special-case;
- the device: each worker uses ``tpu:LOCAL_RANK`` (with the XLA CPU plugin the worker's
  runtime is made with LOCAL_WORLD_SIZE devices, as under torchrun), set current in the
  training thread, and what ``ray.train.torch.get_device`` / ``prepare_model`` /
  ``prepare_data_loader`` return and move to (shim in ``train.py``: Ray chooses its device
  helper from the worker's Ray accelerator resources, which know cuda/hpu/npu and torch_tpu).

Importing this package does not import Ray; ``TpuTorchConfig`` does (``make ray-setup``).
Ray Serve (vLLM on "tpu" as a deployment with replicas, in the serving venv) is the module
``tpuc.integrations.ray.serve`` (``make serve-ray-setup``), which imports Ray. The GRPO
recipe with Ray Train workers and the vLLM rollout engine in a Ray actor is
``tpuc.integrations.ray.grpo`` (``python -m tpuc.integrations.ray.grpo --workers 2``).
"""
from __future__ import annotations

from typing import Any

__all__ = ["TpuTorchConfig", "TpuDeviceManager", "TESTED_RAY"]

TESTED_RAY = "2.60.0"


def __getattr__(name: str) -> Any:
    if name in ("TpuTorchConfig", "TpuDeviceManager"):
        from . import train

        return getattr(train, name)
    raise AttributeError(name)
