"""``TpuModelRunner``: vLLM's ``GPUModelRunner`` with the model, KV cache and sampler on "tpu".

vLLM's GPU model runner already keeps its persistent input buffers on ``self.device`` and copies
host-prepared inputs there each step (``CpuGpuBuffer``), runs the model, then the sampler, on
that device. What changes for "tpu":

- every shape on the step path is bucketed (``buckets``): the token count to a token bucket
  (the forward, the slot mapping, the attention metadata) and the request count to a request
  bucket (the rows of hidden states the logits are computed from, the logits, the sampler and
  its per-request metadata). The GPU runner prepares each step's inputs with small device ops
  over exactly ``num_reqs`` / ``num_tokens`` entries (slice copies, fills, the slot-mapping
  kernel), which on "tpu" compile once per distinct count; ``_prepare_inputs`` here computes
  them on the host instead and copies whole persistent buffers, so after warm-up a stream of
  requests of any lengths and concurrency compiles nothing new (tests/serving
  test_vllm_buckets.py). ``compiles`` are logged (``log_compiles``) and returned by the
  worker's ``tpu_stats`` RPC;
- the KV cache is one dense tensor per layer in the model's dtype (``attention`` says its
  layout), not views of one int8 allocation, because reinterpreting bytes as another dtype
  through strided views has no cheap form on a PJRT device;
- CUDA streams and events that the GPU runner creates at construction are stand-ins (vLLM's
  own CPU runner does the same), and sampled tokens come back with ``tolist()``.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import torch
from vllm.v1.kv_cache_interface import AttentionSpec, KVCacheConfig
from vllm.v1.worker.cpu_model_runner import _torch_cuda_wrapper
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.utils import bind_kv_cache

from . import buckets
from .buckets import bucket

logger = logging.getLogger(__name__)

PAD_SLOT_ID = -1  # vLLM's padding slot (attention writes it to the null block)
STEP_LOG = 4096  # steps kept in step_shapes
LOG_EVERY_S = 30.0  # at most one "compiles" log line per this many seconds


class TpuModelRunner(GPUModelRunner):
    def __init__(self, vllm_config: Any, device: torch.device) -> None:
        # vLLM 0.32's GPU runner makes CUDA streams/events in __init__; its CPU runner replaces
        # them the same way (vllm.v1.worker.cpu_model_runner._torch_cuda_wrapper).
        with _torch_cuda_wrapper():
            super().__init__(vllm_config, device)
        self.use_cuda_graph = False
        self.token_buckets = buckets.sizes(self.max_num_tokens, buckets.MIN_BUCKET,
                                           buckets.TOKEN_BUCKETS_ENV)
        self.request_buckets = buckets.sizes(self.max_num_reqs, 1, buckets.REQUEST_BUCKETS_ENV)
        self._reqs_padded = 0  # this step's request bucket (0: the sampler is not padded)
        self._sampled_full: torch.Tensor | None = None
        self._compiles_logged = (-1, 0.0)
        # (requests, tokens, token bucket, request bucket, context, compiles) per step
        self.step_shapes: list[tuple[int, ...]] = []
        logger.info('"tpu" shape buckets: tokens %s, requests %s', self.token_buckets,
                    self.request_buckets)

    # -- shapes ---------------------------------------------------------------------------
    def _determine_batch_execution_and_padding(self, num_tokens: int, *args: Any,
                                               **kwargs: Any) -> tuple:
        mode, desc, ubatch, across_dp, stats = super()._determine_batch_execution_and_padding(
            num_tokens, *args, **kwargs)
        padded = buckets.pad_to(desc.num_tokens, self.token_buckets)
        if padded != desc.num_tokens:
            desc = dataclasses.replace(desc, num_tokens=padded)
        return mode, desc, ubatch, across_dp, stats

    def _host_prep_supported(self, scheduler_output: Any) -> bool:
        """Whether ``_prepare_inputs`` can build this step on the host: the configuration the
        plugin runs (no speculative decoding, M-RoPE, prompt embeddings, LoRA, async
        scheduling or context parallelism); otherwise vLLM's own device path (correct, but
        its small programs compile per count)."""
        return not (self.speculative_config is not None or self.uses_mrope
                    or self.enable_prompt_embeds or self.lora_config
                    or self.use_async_scheduling
                    or self.input_batch.prev_sampled_token_ids is not None
                    or any(bt.dcp_world_size * bt.pcp_world_size != 1
                           for bt in self.input_batch.block_table.block_tables))

    def _prepare_inputs(self, scheduler_output: Any, num_scheduled_tokens: np.ndarray) -> tuple:
        """vLLM's step inputs, computed on the host and copied as whole persistent buffers (no
        device program depends on this step's counts); returns what the GPU runner's
        ``_prepare_inputs`` returns, with ``logits_indices`` padded to the request bucket."""
        self._reqs_padded = 0
        if not self._host_prep_supported(scheduler_output):
            return super()._prepare_inputs(scheduler_output, num_scheduled_tokens)
        n_tok = int(scheduler_output.total_num_scheduled_tokens)
        n_req = int(self.input_batch.num_reqs)
        ib = self.input_batch
        t_pad = buckets.pad_to(n_tok, self.token_buckets)
        r_pad = buckets.pad_to(n_req, self.request_buckets)

        req_indices = np.repeat(self.arange_np[:n_req], num_scheduled_tokens)
        cu = self._get_cumsum_and_arange(num_scheduled_tokens, self.query_pos.np)
        computed = ib.num_computed_tokens_cpu[:n_req].astype(np.int64)
        positions = computed[req_indices] + self.query_pos.np[:n_tok]

        # token ids (host gather, as vLLM does), the rest of the buffer zero
        width = ib.token_ids_cpu.shape[1]
        torch.index_select(ib.token_ids_cpu_tensor.flatten(), 0,
                           torch.from_numpy(positions + req_indices * width),
                           out=self.input_ids.cpu[:n_tok])
        self.input_ids.cpu[n_tok:].zero_()
        self.input_ids.gpu.copy_(self.input_ids.cpu)

        pos_full = np.zeros(self.positions.shape[0], np.int64)
        pos_full[:n_tok] = positions
        self.positions.copy_(torch.from_numpy(pos_full))

        qsl = self.query_start_loc.np
        qsl[0] = 0
        qsl[1:n_req + 1] = cu
        qsl[n_req + 1:] = cu[-1]
        self.query_start_loc.copy_to_gpu()

        torch.add(ib.num_computed_tokens_cpu_tensor[:n_req],
                  torch.from_numpy(num_scheduled_tokens),
                  out=self.optimistic_seq_lens_cpu[:n_req])
        self.optimistic_seq_lens_cpu[n_req:].fill_(0)
        self.seq_lens.copy_(self.optimistic_seq_lens_cpu.to(self.seq_lens.dtype))
        nc = torch.zeros(self.num_computed_tokens.shape, dtype=self.num_computed_tokens.dtype)
        nc[:n_req] = ib.num_computed_tokens_cpu_tensor[:n_req].to(nc.dtype)
        self.num_computed_tokens.copy_(nc)
        self._compute_prev_positions(n_req)

        num_tokens_np = np.array([self.requests[r].num_tokens for r in ib.req_ids], np.int32)
        self.discard_request_mask.np[:] = False
        self.discard_request_mask.np[:n_req] = (
            self.optimistic_seq_lens_cpu[:n_req].numpy() < num_tokens_np)
        self.discard_request_mask.copy_to_gpu()
        self.num_accepted_tokens.np.fill(1)
        self.num_accepted_tokens.gpu.fill_(1)

        self.req_indices.np[:n_tok] = req_indices
        self.req_indices.np[n_tok:] = 0
        self.req_indices.copy_to_gpu()
        self.query_pos.np[n_tok:] = 0
        self.query_pos.copy_to_gpu()
        self.num_scheduled_tokens.np[:n_req] = num_scheduled_tokens
        self.num_scheduled_tokens.np[n_req:] = 0
        self.num_scheduled_tokens.copy_to_gpu()

        # block tables and slot mappings, per KV-cache group, whole buffers
        for bt in ib.block_table.block_tables:
            bt.block_table.copy_to_gpu()
            bs = bt.block_size
            slots = bt.slot_mapping.np
            slots[:] = PAD_SLOT_ID
            slots[:n_tok] = (bt.block_table.np[req_indices, positions // bs].astype(np.int64)
                             * bs + positions % bs)
            bt.slot_mapping.copy_to_gpu()
        for gid, groups in enumerate(self.attn_groups):
            for group in groups:
                for builder in group.metadata_builders:
                    if hasattr(builder, "set_host_block_table"):
                        builder.set_host_block_table(ib.block_table[gid].block_table.np)

        # the rows the sampler sees: one per request (its last token), padded to r_pad
        logits_idx = np.zeros(r_pad, np.int64)
        logits_idx[:n_req] = cu - 1
        self._reqs_padded = r_pad if self._sampler_paddable(scheduler_output) else 0
        if not self._reqs_padded:
            logits_idx = logits_idx[:n_req]
        # (requests, tokens) and their buckets; the forward's padding itself is
        # _determine_batch_execution_and_padding's (the same token buckets)
        self._step_key = (n_req, n_tok, t_pad, r_pad if self._reqs_padded else n_req)
        return (torch.from_numpy(logits_idx).to(self.device), None, 1)

    def _sampler_paddable(self, scheduler_output: Any) -> bool:
        """Whether the sampler can run on padded rows: its per-request inputs beyond
        temperature/top-p/top-k (penalties, allowed/bad tokens, logprobs, min-p, structured
        output, custom logits processors) are sized by the exact request count."""
        from vllm.v1.sample.logits_processor.builtin import (
            LogitBiasLogitsProcessor, MinPLogitsProcessor, MinTokensLogitsProcessor)

        ib = self.input_batch
        if getattr(scheduler_output, "has_structured_output_requests", False):
            return False
        if not ib.no_penalties or not ib.no_allowed_token_ids or ib.bad_words_token_ids:
            return False
        if ib.num_logprobs or getattr(ib, "logprob_token_ids", None) or self.num_prompt_logprobs:
            return False
        holder = getattr(ib, "thinking_budget_state_holder", None)
        if holder is not None and holder.has_tracked_requests():
            return False
        for lp in ib.logitsprocs.all:
            if isinstance(lp, MinPLogitsProcessor):
                if lp.min_p_count:
                    return False
            elif not isinstance(lp, (LogitBiasLogitsProcessor, MinTokensLogitsProcessor)):
                return False
        return True

    def _get_slot_mappings(self, num_tokens_padded: int, num_reqs_padded: int,
                           num_tokens_unpadded: int, ubatch_slices: Any = None) -> tuple:
        # the slot mapping already holds PAD_SLOT_ID past the step's tokens (_prepare_inputs):
        # no fill over the padding (a program per padding length)
        if self._host_prep_supported(None):
            num_tokens_unpadded = num_tokens_padded
        return super()._get_slot_mappings(num_tokens_padded, num_reqs_padded,
                                          num_tokens_unpadded, ubatch_slices)

    def _build_attention_metadata(self, *args: Any, **kwargs: Any) -> Any:
        # vLLM fills the block-table rows past num_reqs with the null block, an empty slice
        # whose offset (num_reqs * width) would be a new program per request count; the
        # attention backend reads the host table (set_host_block_table), so hand it an empty
        # view at offset 0 instead
        if not self._host_prep_supported(None):
            return super()._build_attention_metadata(*args, **kwargs)
        tables = self.input_batch.block_table.block_tables
        for bt in tables:
            bt.get_device_tensor = lambda n, _g=bt.block_table.gpu: _g[:0]
        try:
            return super()._build_attention_metadata(*args, **kwargs)
        finally:
            for bt in tables:
                del bt.get_device_tensor

    def _preprocess(self, scheduler_output: Any, num_input_tokens: int,
                    intermediate_tensors: Any = None) -> Any:
        # vLLM zeroes positions[num_scheduled:num_input] (a program per padding length);
        # _prepare_inputs already wrote zeros there. For text-only models the scheduled count
        # is used for nothing else here.
        if self._host_prep_supported(None) and not self.supports_mm_inputs \
                and not self.model_config.is_encoder_decoder:
            scheduler_output = _WithTokenCount(scheduler_output, num_input_tokens)
        return super()._preprocess(scheduler_output, num_input_tokens, intermediate_tensors)

    def _prepare_padding_mask(self, num_tokens_unpadded: int,
                              num_tokens_padded: int) -> torch.Tensor:
        mask = torch.ones(self.is_padding.shape, dtype=torch.bool)
        mask[:num_tokens_unpadded] = False
        self.is_padding.copy_(mask)
        return self.is_padding[:num_tokens_padded]

    # -- sampling on padded rows ------------------------------------------------------------
    def _sample(self, logits: torch.Tensor | None, spec_decode_metadata: Any) -> Any:
        self._sampled_full = None
        n_req, r_pad = self.input_batch.num_reqs, self._reqs_padded
        if logits is None or spec_decode_metadata is not None or not r_pad \
                or logits.shape[0] != r_pad:
            return super()._sample(logits, spec_decode_metadata)
        ib = self.input_batch
        md = ib.sampling_metadata

        def host_padded(cpu: torch.Tensor, pad: float) -> torch.Tensor:
            t = cpu[:r_pad].clone()
            t[n_req:] = pad
            return t.to(self.device)

        md = dataclasses.replace(
            md,
            temperature=None if md.temperature is None else host_padded(ib.temperature_cpu_tensor, 1.0),
            top_p=None if md.top_p is None else host_padded(ib.top_p_cpu_tensor, 1.0),
            top_k=None if md.top_k is None else host_padded(ib.top_k_cpu_tensor, ib.vocab_size))
        out = self.sampler(logits=logits, sampling_metadata=md)
        self._sampled_full = out.sampled_token_ids
        return dataclasses.replace(out, sampled_token_ids=out.sampled_token_ids[:n_req])

    # -- compiles -----------------------------------------------------------------------------
    # Each step's shape key -- (token bucket, request bucket, context bucket) -- and the
    # programs compiled while it ran (execute_model through sample_tokens): with every shape
    # bucketed, only a step whose key is new may compile (tests/serving/test_vllm_buckets.py).
    def execute_model(self, *args: Any, **kwargs: Any) -> Any:
        self._step_start = _compiles()
        self._step_key = None
        return super().execute_model(*args, **kwargs)

    def sample_tokens(self, *args: Any, **kwargs: Any) -> Any:
        out = super().sample_tokens(*args, **kwargs)
        start, key = getattr(self, "_step_start", None), getattr(self, "_step_key", None)
        if start is not None and key is not None:
            ctx = max((b.last_context for groups in self.attn_groups for g in groups
                       for b in g.metadata_builders if hasattr(b, "last_context")), default=0)
            self.step_shapes.append((*key, ctx, _compiles() - start))
            del self.step_shapes[:-STEP_LOG]
        self._step_start = None
        self.log_compiles()
        return out

    def log_compiles(self, force: bool = False) -> int:
        """Logs tpuc's compile counter when it grew (at most every LOG_EVERY_S seconds)."""
        n = _compiles() if force or \
            time.monotonic() - self._compiles_logged[1] >= LOG_EVERY_S else -1
        if n >= 0 and (force or n != self._compiles_logged[0]):
            logger.info('"tpu": %d programs compiled in this process so far '
                        "(%d new since the last report)", n,
                        n - max(0, self._compiles_logged[0]))
            self._compiles_logged = (n, time.monotonic())
        return n

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
        full, self._sampled_full = self._sampled_full, None
        if full is not None and sampled_token_ids.shape[0] <= full.shape[0]:
            # the padded sampler's output: one transfer of the whole (bucketed) tensor
            return full.tolist()[: sampled_token_ids.shape[0]]
        return sampled_token_ids.tolist()


def _compiles() -> int:
    """tpuc's compile counter (programs compiled in this process)."""
    from tpuc import _C

    return int(_C._runtime_stats()["compiles"])


class _WithTokenCount:
    """A scheduler output seen with another ``total_num_scheduled_tokens``."""

    def __init__(self, inner: Any, total: int) -> None:
        self._inner = inner
        self.total_num_scheduled_tokens = total

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
