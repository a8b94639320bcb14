"""Attention over SGLang's KV cache on "tpu" with bucketed context lengths (SGLang 0.5.23).

SGLang's ``torch_native`` backend (``TorchNativeAttnBackend``) loops over the requests of a batch
and slices each one's keys at its exact context length, read back from the device per request
per layer: every new context length compiles new programs, and the host waits once per request
per layer. ``TpuBucketedAttnBackend`` subclasses it and replaces the two loops, for decoder
self-attention, by one gather and one ``scaled_dot_product_attention`` per layer for the whole
batch (the vLLM plugin's scheme, python/tpuc/integrations/vllm/attention.py):

- per forward (``init_forward_metadata``, on the host from SGLang's CPU copies of the lengths):
  each query token's request and position; ``L``, the longest context rounded up to a power of
  two (at least 16, at most the request table's width); the cache slots of each token's context,
  ``req_to_token[req_pool_index, :L]`` gathered on the device, ``[T, L]``; the mask
  ``j <= position`` ``[T, 1, 1, L]``;
- per layer: keys/values ``k_cache[slots]`` ``[T, L, H_kv, D]``, attention of each token to its
  ``L`` slots under the mask.

Slots past a request's length hold stale indices that the mask hides. So the programs depend on
(token count, L) only, and L takes a handful of values. Token rows past the batch's real tokens
(an extend batch padded to a token bucket, shapes.py) attend as request 0 at position 0. What it does not cover falls back to the
parent's loops: sliding windows, cross attention, encoder-only layers, a layer whose q/k head dim
differs from v's. The platform installs it under SGLang's name ``torch_native`` in the scheduler
process (``install()``); ``TPUC_SGLANG_ATTENTION=native`` keeps SGLang's own.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

MIN_CONTEXT_BUCKET = 16


def context_bucket(n: int, cap: int) -> int:
    b = max(MIN_CONTEXT_BUCKET, 1 << max(0, int(n) - 1).bit_length())
    return max(1, min(b, int(cap)))


def _make_backend_cls():
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from sglang.srt.layers.radix_attention import AttentionType
    from sglang.srt.mem_cache.memory_pool import KVWriteLoc

    class TpuBucketedAttnBackend(TorchNativeAttnBackend):
        def __init__(self, model_runner: Any):
            super().__init__(model_runner)
            self._meta = None
            self.last_context = 0  # the context bucket of the last forward (tests, logs)

        def init_forward_metadata(self, forward_batch: Any):
            super().init_forward_metadata(forward_batch)
            self._meta = None
            if self.use_sliding_window_kv_pool or forward_batch.encoder_lens is not None:
                return
            seq_cpu = forward_batch.seq_lens_cpu
            if seq_cpu is None:
                return
            seq = seq_cpu.numpy().astype(np.int64)
            n = seq.shape[0]
            if forward_batch.forward_mode.is_decode():
                q_lens = np.ones(n, np.int64)
            elif forward_batch.forward_mode.is_extend() and \
                    forward_batch.extend_seq_lens_cpu is not None:
                q_lens = np.asarray(forward_batch.extend_seq_lens_cpu, np.int64)
            else:
                return
            width = self.req_to_token_pool.req_to_token.shape[1]
            ctx = context_bucket(int(seq.max()) if n else 1, width)
            self.last_context = ctx
            req = np.repeat(np.arange(n, dtype=np.int64), q_lens)
            starts = np.repeat(np.cumsum(q_lens) - q_lens, q_lens)
            pos = np.repeat(seq - q_lens, q_lens) + (np.arange(req.shape[0]) - starts)
            t_pad = int(forward_batch.input_ids.shape[0]) if forward_batch.input_ids is not None \
                else req.shape[0]
            if t_pad > req.shape[0]:  # tokens padded to a bucket (shapes.py): request 0, position 0
                extra = np.zeros(t_pad - req.shape[0], np.int64)
                req, pos = np.concatenate([req, extra]), np.concatenate([pos, extra])
            dev = self.device
            pos_d = torch.from_numpy(pos).to(dev)
            table = self.req_to_token_pool.req_to_token
            if table.device.type == "cpu":  # the host request table (shapes.py)
                rows = forward_batch.req_pool_indices.to("cpu").to(torch.int64).numpy()[req]
                slots = table[torch.from_numpy(rows), :ctx].to(dev)
            else:
                req_d = torch.from_numpy(req).to(dev)
                rows = forward_batch.req_pool_indices.to(torch.int64).index_select(0, req_d)
                slots = table[:, :ctx].index_select(0, rows)
            j = torch.arange(ctx, device=dev, dtype=torch.int64)
            mask = (j.unsqueeze(0) <= pos_d.unsqueeze(1)).reshape(-1, 1, 1, ctx)
            self._meta = (slots.to(torch.int64), mask)

        def _covers(self, layer: Any) -> bool:
            return (self._meta is not None and not layer.is_cross_attention
                    and layer.attn_type != AttentionType.ENCODER_ONLY
                    and (layer.sliding_window_size is None or layer.sliding_window_size < 0)
                    and layer.qk_head_dim == layer.v_head_dim)

        def _attend(self, q, k, v, layer, forward_batch, save_kv_cache):
            if save_kv_cache and k is not None and v is not None:
                self.token_to_kv_pool.set_kv_buffer(
                    layer, KVWriteLoc(forward_batch.out_cache_loc, self.swa_out_cache_loc), k, v)
            slots, mask = self._meta
            t = slots.shape[0]
            hq, hkv, d = layer.tp_q_head_num, layer.tp_k_head_num, layer.qk_head_dim
            kc = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
            vc = self.token_to_kv_pool.get_value_buffer(layer.layer_id)
            qq = q.reshape(t, hq, 1, d)
            kk = kc[slots].permute(0, 2, 1, 3)  # [T, H_kv, L, D]
            vv = vc[slots].permute(0, 2, 1, 3)
            if kk.dtype != qq.dtype:
                kk, vv = kk.to(qq.dtype), vv.to(qq.dtype)
            out = torch.nn.functional.scaled_dot_product_attention(
                qq, kk, vv, attn_mask=mask, scale=layer.scaling, enable_gqa=hq != hkv)
            return out.reshape(t, hq * d)

        def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
            if not self._covers(layer):
                return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache)
            return self._attend(q, k, v, layer, forward_batch, save_kv_cache)

        def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True):
            if not self._covers(layer):
                return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache)
            return self._attend(q, k, v, layer, forward_batch, save_kv_cache)

    return TpuBucketedAttnBackend


def install() -> None:
    """Makes SGLang's ``torch_native`` backend name build the bucketed backend (this process)."""
    if os.environ.get("TPUC_SGLANG_ATTENTION", "bucketed") == "native":
        return
    from sglang.srt.layers.attention import attention_registry as reg

    if getattr(reg.ATTENTION_BACKENDS.get("torch_native"), "_tpuc", False):
        return
    cls = _make_backend_cls()

    def create(runner: Any):
        return cls(runner)

    create._tpuc = True
    reg.ATTENTION_BACKENDS["torch_native"] = create
