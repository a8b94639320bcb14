"""``TpuModelRunner``: vLLM's ``GPUModelRunner`` with the model, KV cache and sampler on "tpu".

vLLM's GPU model runner already keeps its persistent input buffers on ``self.device`` and copies
host-prepared inputs there each step (``CpuGpuBuffer``), runs the model, then the sampler, on
that device. What changes for "tpu":

- token counts are padded to powers of two (``buckets.bucket``), the padding vLLM itself uses
  for CUDA graphs, so steady traffic reuses a few program shapes instead of compiling one per
  batch size;
- the KV cache is one dense tensor per layer in the model's dtype (``attention`` says its
  layout), not views of one int8 allocation, because reinterpreting bytes as another dtype
  through strided views has no cheap form on a PJRT device;
- CUDA streams and events that the GPU runner creates at construction are stand-ins (vLLM's
  own CPU runner does the same), and sampled tokens come back with ``tolist()``.
"""
from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager
from typing import Any

import torch
from vllm.v1.kv_cache_interface import AttentionSpec, KVCacheConfig
from vllm.v1.worker.cpu_model_runner import _torch_cuda_wrapper
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.utils import bind_kv_cache

from .buckets import bucket


class TpuModelRunner(GPUModelRunner):
    def __init__(self, vllm_config: Any, device: torch.device) -> None:
        # vLLM 0.32's GPU runner makes CUDA streams/events in __init__; its CPU runner replaces
        # them the same way (vllm.v1.worker.cpu_model_runner._torch_cuda_wrapper).
        with _torch_cuda_wrapper():
            super().__init__(vllm_config, device)
        self.use_cuda_graph = False

    # -- shapes ---------------------------------------------------------------------------
    def _determine_batch_execution_and_padding(self, num_tokens: int, *args: Any,
                                               **kwargs: Any) -> tuple:
        mode, desc, ubatch, across_dp, stats = super()._determine_batch_execution_and_padding(
            num_tokens, *args, **kwargs)
        padded = bucket(desc.num_tokens, self.max_num_tokens)
        if padded != desc.num_tokens:
            desc = dataclasses.replace(desc, num_tokens=padded)
        return mode, desc, ubatch, across_dp, stats

    # -- KV cache ---------------------------------------------------------------------------
    def initialize_kv_cache_tensors(self, kv_cache_config: KVCacheConfig,
                                    kernel_block_sizes: list[int],
                                    kv_cache_allocation_context: AbstractContextManager | None = None,
                                    ) -> dict[str, torch.Tensor]:
        kv_caches: dict[str, torch.Tensor] = {}
        for group in kv_cache_config.kv_cache_groups:
            spec = group.kv_cache_spec
            if not isinstance(spec, AttentionSpec):
                raise NotImplementedError(
                    f'KV cache spec {type(spec).__name__} (state-space layers) on "tpu"')
            slots = kv_cache_config.num_blocks * spec.block_size
            for name in group.layer_names:
                kv_caches[name] = torch.zeros(
                    slots, spec.num_kv_heads, 2 * spec.head_size, dtype=spec.dtype,
                    device=self.device)
        for name, target in self.shared_kv_cache_layers.items():
            kv_caches[name] = kv_caches[target]
        bind_kv_cache(kv_caches, self.compilation_config.static_forward_context,
                      self.kv_caches, 1, kv_cache_groups=kv_cache_config.kv_cache_groups)
        return kv_caches

    def _init_kv_zero_meta(self) -> None:
        pass

    def _zero_block_ids(self, block_ids: list[int]) -> None:
        # Not needed on "tpu": attention gives exactly zero weight to slots past a token's
        # position, and the cache only ever holds finite keys/values (zeros at first), so stale
        # contents of a reused block never reach an output.
        pass

    # -- host <-> device --------------------------------------------------------------------
    def _sync_device(self) -> None:
        torch.tpu.synchronize()

    def _to_list(self, sampled_token_ids: torch.Tensor) -> list[list[int]]:
        return sampled_token_ids.tolist()
