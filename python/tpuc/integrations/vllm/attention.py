"""``TpuAttentionBackend``: vLLM's paged KV cache and attention on "tpu" in native PyTorch ops.

The KV cache of one layer is one tensor ``[num_blocks * block_size, num_kv_heads, 2 * head]``
(keys then values in the last axis) allocated by the model runner; slot ``s`` is token
``s % block_size`` of block ``s // block_size``, the numbering of vLLM's slot mapping.

- Update: ``cache.index_copy_(0, slot_mapping, cat(key, value))``, one scatter per layer.
  Padding tokens (slot -1, vLLM's PAD_SLOT_ID) write slot 0, which belongs to vLLM's null
  block 0, never allocated to a request.
- Attention, per step (the metadata is built once per step and shared by the layers): every
  query token gathers the slots of its request's context, ``block_table[req, j // bs] * bs +
  j % bs`` for ``j < L``, and attends to them with ``scaled_dot_product_attention`` under the
  mask ``j <= position(token)``. ``L`` is the longest context rounded up to a power of two
  (a multiple of the block size), and the token count is the model runner's bucketed count,
  so a steady stream of requests reuses a few shapes, and tpuc compiles each once.

Every op here has a tpuc lowering: no CPU fallback in the decode loop
(tests/serving/test_vllm_offline.py checks ``torch.tpu.stats()["fallbacks"]``).
Not supported (raises at construction): sliding windows, ALiBi, logit soft-capping, attention
sinks, encoder/cross attention, quantized KV caches.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
)

from . import buckets
from .buckets import bucket


class TpuAttentionBackend(AttentionBackend):
    forward_includes_kv_cache_update: bool = False
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16, torch.float16]
    supported_kv_cache_dtypes: ClassVar[list[Any]] = ["auto", "float32", "bfloat16", "float16"]

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_impl_cls() -> type["TpuAttentionImpl"]:
        return TpuAttentionImpl

    @staticmethod
    def get_builder_cls() -> type["TpuAttentionMetadataBuilder"]:
        return TpuAttentionMetadataBuilder

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return []  # any

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER


@dataclass
class TpuAttentionMetadata:
    num_actual_tokens: int
    token_pos: torch.Tensor  # [T] int64 on the device: each token's position in its request
    kv_slots: torch.Tensor  # [T, L] int64 on the device: the cache slots of its context
    mask: torch.Tensor  # [T, 1, 1, L] bool on the device: which of them it attends to


class TpuAttentionMetadataBuilder(AttentionMetadataBuilder[TpuAttentionMetadata]):
    def __init__(self, kv_cache_spec: Any, layer_names: list[str], vllm_config: Any,
                 device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = int(kv_cache_spec.block_size)
        self.max_tokens = int(vllm_config.scheduler_config.max_num_batched_tokens)
        self.token_buckets = buckets.sizes(self.max_tokens, buckets.MIN_BUCKET,
                                           buckets.TOKEN_BUCKETS_ENV)  # the runner's
        self._init_reorder_batch_threshold(None)
        self._host_block_table: np.ndarray | None = None
        self.last_context = 0  # the context bucket of the last step (the runner's step log)

    def set_host_block_table(self, table: np.ndarray) -> None:
        """The host copy of this group's block table, set by the model runner each step
        (``TpuModelRunner._prepare_inputs``): the context slots are then gathered on the host,
        so no device program depends on the step's request count."""
        self._host_block_table = table

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> TpuAttentionMetadata:
        m = common_attn_metadata
        n_reqs, n_tok = int(m.num_reqs), int(m.num_actual_tokens)
        qsl = m.query_start_loc_cpu[: n_reqs + 1].numpy().astype(np.int64)
        seq_lens = _seq_lens_cpu(m, n_reqs)
        t_pad = buckets.pad_to(n_tok, self.token_buckets)
        bs = self.block_size
        width = m.block_table_tensor.shape[1]
        longest = int(seq_lens.max()) if n_reqs else 1
        ctx = min(bucket(-(-longest // bs), width), width) * bs

        # host: each token's request and position (pads: request 0, position 0)
        q_lens = qsl[1:] - qsl[:-1]
        req = np.zeros(t_pad, np.int64)
        pos = np.zeros(t_pad, np.int64)
        req[:n_tok] = np.repeat(np.arange(n_reqs), q_lens)
        offs = np.arange(n_tok) - np.repeat(qsl[:-1], q_lens)
        pos[:n_tok] = np.repeat(seq_lens - q_lens, q_lens) + offs
        self.last_context = ctx
        dev = self.device
        pos_d = torch.from_numpy(pos).to(dev)
        nblk = ctx // bs
        host_bt, self._host_block_table = self._host_block_table, None
        if host_bt is not None:
            # host: the slots of each token's context (shape [tokens bucket, context bucket])
            blocks = host_bt[req, :nblk].astype(np.int64)
            slots_np = (blocks[:, :, None] * bs + np.arange(bs, dtype=np.int64)).reshape(t_pad, ctx)
            slots = torch.from_numpy(slots_np).to(dev)
        else:
            # device: from the block table already there (vLLM's own input path)
            req_d = torch.from_numpy(req).to(dev)
            blocks = m.block_table_tensor[:, :nblk].to(torch.int64).index_select(0, req_d)
            within = torch.arange(bs, device=dev, dtype=torch.int64)
            slots = (blocks.unsqueeze(-1) * bs + within).reshape(t_pad, ctx)
        j = torch.arange(ctx, device=dev, dtype=torch.int64)
        mask = (j.unsqueeze(0) <= pos_d.unsqueeze(1)).reshape(t_pad, 1, 1, ctx)
        return TpuAttentionMetadata(n_tok, pos_d, slots, mask)


def _seq_lens_cpu(m: CommonAttentionMetadata, n_reqs: int) -> np.ndarray:
    cpu = getattr(m, "seq_lens_cpu_upper_bound", None)  # exact without speculative decoding
    if cpu is None:
        cpu = m.seq_lens[:n_reqs].cpu()
    return cpu[:n_reqs].numpy().astype(np.int64)


class TpuAttentionImpl(AttentionImpl[TpuAttentionMetadata]):
    def __init__(self, num_heads: int, head_size: int, scale: float,
                 num_kv_heads: int | None = None, alibi_slopes: list[float] | None = None,
                 sliding_window: int | None = None, kv_cache_dtype: str = "auto",
                 logits_soft_cap: float | None = None, attn_type: str = AttentionType.DECODER,
                 kv_sharing_target_layer_name: str | None = None,
                 sinks: torch.Tensor | None = None, **_: Any) -> None:
        unsupported = {
            "sliding_window": sliding_window, "alibi_slopes": alibi_slopes,
            "logits_soft_cap": logits_soft_cap or None, "sinks": sinks,
        }
        bad = [k for k, v in unsupported.items() if v is not None]
        if bad or attn_type != AttentionType.DECODER:
            raise NotImplementedError(
                f'the "tpu" attention backend does not support {bad or attn_type} yet'
            )
        if kv_cache_dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise NotImplementedError(f'KV cache dtype {kv_cache_dtype!r} on "tpu"')
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.attn_type = attn_type

    def do_kv_cache_update(self, layer: torch.nn.Module, key: torch.Tensor, value: torch.Tensor,
                           kv_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        if kv_cache.numel() == 0:  # profiling run before the cache exists
            return
        n = key.shape[0]
        slots = slot_mapping[:n].to(torch.int64).clamp_min(0)  # PAD_SLOT_ID -> null block
        kv_cache.index_copy_(0, slots, torch.cat([key, value], dim=-1).to(kv_cache.dtype))

    def forward(self, layer: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                kv_cache: torch.Tensor, attn_metadata: TpuAttentionMetadata | None,
                output: torch.Tensor, output_scale: torch.Tensor | None = None,
                output_block_scale: torch.Tensor | None = None) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError('fused output quantization on "tpu"')
        if attn_metadata is None or kv_cache.numel() == 0:  # profiling / warm-up
            return output.zero_()
        t, h, d = query.shape
        md = attn_metadata
        kv = kv_cache.index_select(0, md.kv_slots.reshape(-1)).reshape(
            t, md.kv_slots.shape[1], self.num_kv_heads, 2 * d)
        k = kv[..., :d].transpose(1, 2)  # [T, KH, L, D]
        v = kv[..., d:].transpose(1, 2)
        if self.num_kv_heads != h:  # grouped-query attention: each KV head serves h/KH heads
            g = h // self.num_kv_heads
            k = k.repeat_interleave(g, dim=1)
            v = v.repeat_interleave(g, dim=1)
        q = query.reshape(t, h, 1, d)
        out = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype),
                                             attn_mask=md.mask, scale=self.scale)
        output.copy_(out.reshape(t, h, d).to(output.dtype))
        return output
