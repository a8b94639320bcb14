"""``TpuSRTPlatform``: SGLang's ``SRTPlatform`` for the device "tpu" (SGLang 0.5.23).

Device "tpu" (PyTorch's PrivateUse1), SGLang's pure-PyTorch attention backend
("torch_native"), torch.compile backend "tpu", no device graphs, no Triton.
"""
from __future__ import annotations

from typing import Any

import torch
from sglang.srt.platforms.interface import PlatformCapabilities, SRTPlatform


class TpuSRTPlatform(SRTPlatform):
    device_name: str = "tpu"
    device_type: str = "tpu"
    capabilities: PlatformCapabilities = PlatformCapabilities()

    def get_default_attention_backend(self) -> str:
        return "torch_native"

    def get_compile_backend(self, mode: str | None = None) -> str:
        return "tpu"

    def get_graph_runner_cls(self) -> Any:
        return None

    def get_dispatch_key_name(self) -> str:
        return "PrivateUse1"

    def get_group_coordinator_device(self, local_rank: int) -> torch.device:
        return torch.device("tpu", local_rank)

    def apply_server_args_defaults(self, server_args: Any) -> None:
        for name, value in (("device", "tpu"), ("attention_backend", "torch_native"),
                            ("disable_cuda_graph", True), ("sampling_backend", "pytorch")):
            if hasattr(server_args, name):
                setattr(server_args, name, value)
