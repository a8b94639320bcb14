"""``TpuSRTPlatform``: SGLang's ``SRTPlatform`` for the device "tpu" (SGLang 0.5.23).

Device "tpu" (PyTorch's PrivateUse1) as an out-of-tree platform (SGLang routes an OOT platform's
memory queries and device config through these methods), the attention backend "torch_native"
(in the scheduler process a bucketed subclass of SGLang's, attention.py) with the KV cache on
"tpu", the PyTorch sampler, no device graphs, no overlap scheduling, no Triton.
"""
from __future__ import annotations

import os
from typing import Any

import torch
from sglang.srt.platforms.device_mixin import PlatformEnum
from sglang.srt.platforms.interface import PlatformCapabilities, SRTPlatform

# The memory SGLang may size the KV cache from when the plugin reports host memory (the XLA CPU
# plugin's "device" memory is this machine's RAM, shared with every process): 4 GiB unless
# TPUC_SGLANG_MEMORY_GB says otherwise. On a real TPU the device's own size is used.
_CPU_PLUGIN_BUDGET_GB = 4.0


class TpuSRTPlatform(SRTPlatform):
    _enum: PlatformEnum = PlatformEnum.OOT
    device_name: str = "tpu"
    device_type: str = "tpu"
    capabilities: PlatformCapabilities = PlatformCapabilities()

    # ---- device ----
    def get_device(self, device_id: int = 0) -> torch.device:
        return torch.device("tpu", max(0, device_id))

    def set_device(self, device: torch.device) -> None:
        torch.tpu.set_device(device)

    def get_device_name(self, device_id: int = 0) -> str:
        return torch.tpu.get_device_name(device_id)

    def get_device_uuid(self, device_id: int = 0) -> str:
        return f"tpu:{device_id}"

    def get_device_capability(self, device_id: int = 0):
        return None

    def synchronize(self) -> None:
        torch.tpu.synchronize()

    def _budget(self, device_id: int = 0) -> int:
        _free, total = torch.tpu.mem_get_info(device_id)
        env = os.environ.get("TPUC_SGLANG_MEMORY_GB")
        if env:
            return min(total, int(float(env) * (1 << 30)))
        props = torch.tpu.get_device_properties(device_id)
        if str(props.platform).lower() == "cpu":
            return min(total, int(_CPU_PLUGIN_BUDGET_GB * (1 << 30)))
        return total

    def get_device_total_memory(self, device_id: int = 0) -> int:
        return self._budget(device_id)

    def get_current_memory_usage(self, device: torch.device | None = None) -> float:
        return float(torch.tpu.memory_allocated(device))

    def get_available_memory(self, device_id: int = 0) -> tuple[int, int]:
        total = self._budget(device_id)
        return max(0, total - torch.tpu.memory_allocated(device_id)), total

    # ---- SRT ----
    def get_default_attention_backend(self) -> str:
        return "torch_native"

    def get_compile_backend(self, mode: str | None = None) -> str:
        return "tpu"

    def get_graph_runner_cls(self) -> Any:
        return None

    def get_dispatch_key_name(self) -> str:
        # BaseFusedOp looks up forward_<key>; no SGLang op has a "tpu" one, so each runs its
        # forward_native (pure PyTorch), which tpuc lowers.
        return "native"

    def post_load_model(self, model: torch.nn.Module) -> None:
        # in the scheduler process, after the weights are on "tpu" and before the attention
        # backend is built: the stats RPC (stats.py), the bucketed attention (attention.py),
        # bounded bookkeeping shapes and token buckets (shapes.py)
        from . import attention, shapes, stats

        stats.install()
        attention.install()
        shapes.install()

    def get_group_coordinator_device(self, local_rank: int) -> torch.device:
        return torch.device("tpu", local_rank)

    def apply_server_args_defaults(self, server_args: Any) -> None:
        # in the process that holds SGLang's tokenizer manager (engine or HTTP server)
        from . import validate

        validate.install()
        for name, value in (("device", "tpu"), ("attention_backend", "torch_native"),
                            ("disable_cuda_graph", True), ("sampling_backend", "pytorch"),
                            ("disable_overlap_schedule", True)):
            if hasattr(server_args, name):
                setattr(server_args, name, value)
