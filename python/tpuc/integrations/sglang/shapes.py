"""Bounded shapes for SGLang on "tpu": a shim for SGLang 0.5.23 (``SGLANG_VERSIONS``).

tpuc compiles one program per op signature, and a signature holds the shapes and a view's storage
offset. SGLang 0.5.23's non-CUDA paths run its bookkeeping on the device at exact sizes and
offsets (slices of the request table and of the free-slot list, per-request copies, per-request
``arange``s), so every new prompt length, request row and position compiled new programs
(175 for the first request of the tests' tiny Llama). ``install()`` (in the scheduler process,
from the platform's ``post_load_model``, before SGLang builds its memory pools) moves that
bookkeeping to the host and pads what the model sees:

- **The request table on the host** (``ReqToTokenPool``: its ``req_to_token`` and ``write``).
  It maps (request row, position) to KV cache slots and is only bookkeeping: SGLang's scheduler
  and radix cache slice, copy and write it per request. Kept in host memory, those are host
  operations; the attention backend (attention.py) gathers each forward's slots ``[tokens,
  context bucket]`` on the host and sends them in one transfer.
- **The free-slot list on the host** (``TokenToKVPoolAllocator``: ``clear``, ``alloc``,
  ``free``, ``merge_and_sort_free``): SGLang hands out ``free_pages[:n]``, a device view at a
  new offset every time, and ``torch.cat``s freed slots back; here ``alloc`` sends a fresh copy
  of the slots to the device (the KV writes index the device cache with it).
- **One write per batch** (``allocation.write_cache_indices``): the batch's (row, column, slot)
  triples built on the host, one ``index_put_`` (SGLang's non-Triton path wrote each request's
  prefix and new slots separately, with a host sync per length it read).
- **Positions on the host** (``forward_batch_info.compute_position``): SGLang's torch path
  concatenates one device ``arange`` per request; here numpy builds them from the lengths.
- **Token counts padded to buckets** (``EagerRunner.load_batch``) for extend (prefill) batches:
  ``input_ids``, ``positions`` and ``out_cache_loc`` padded to the next power of two (at least
  ``MIN_TOKEN_BUCKET``); padded tokens are token 0 at position 0 writing their K/V into slot 0,
  the slot SGLang's allocator reserves for padded tokens; the logits processor picks each
  request's last real token by ``extend_seq_lens``, and the attention backend gives the padded
  rows request 0's first slot. SGLang's own ``load_batch`` copies the batch into static buffers
  at the exact size (one program per size); that copy is skipped (as SGLang's
  ``SGLANG_EAGER_INPUT_NO_COPY`` does).

Not bucketed (docs/sglang.md "Limits"): the number of requests (decode batches, the logits and the
sampler run at the batch's request count). SGLang's retraction under memory pressure and its
per-request attention loop (layers attention.py does not cover) index the device with the host
table: untested.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np
import torch

SGLANG_VERSIONS = ("0.5.23",)
MIN_TOKEN_BUCKET = 16
TOKEN_BUCKETS_ENV = "TPUC_SGLANG_TOKEN_BUCKETS"  # "off": no padding (the exact token counts)


def token_bucket(n: int) -> int:
    """The padded token count: the next power of two, at least ``MIN_TOKEN_BUCKET``."""
    return max(MIN_TOKEN_BUCKET, 1 << max(0, int(n) - 1).bit_length())


def _host(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu") if t.device.type != "cpu" else t.detach()


def _to_dev(a: np.ndarray, dtype: torch.dtype, device: Any) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a)).to(dtype).to(device)


# ---- the request table on the host ----

def _host_index(i: Any) -> Any:
    if isinstance(i, tuple):
        return tuple(_host_index(x) for x in i)
    return _host(i) if isinstance(i, torch.Tensor) else i


def _table_write(self: Any, indices: Any, values: Any) -> None:
    if isinstance(values, torch.Tensor):
        values = _host(values)
    self.req_to_token[_host_index(indices)] = values


def _host_table(pool: Any) -> None:
    if pool.req_to_token.device.type != "cpu":
        pool.req_to_token = _host(pool.req_to_token).clone()


# ---- the KV slot free list on the host ----

def _hosted(self: Any) -> None:
    if self.free_pages.device.type != "cpu":
        self.free_pages = _host(self.free_pages)
    if self.release_pages.device.type != "cpu":
        self.release_pages = _host(self.release_pages)


def _clear(self: Any) -> None:
    # slot 0 is SGLang's slot for padded tokens: never handed out
    self.free_pages = torch.arange(1, self.size + 1, dtype=torch.int64)
    self.free_group = None
    self.release_pages = torch.empty((0,), dtype=torch.int64)


def _alloc(self: Any, need_size: int):
    _hosted(self)
    if self.need_sort and need_size > len(self.free_pages):
        self.merge_and_sort_free()
    if need_size > len(self.free_pages):
        return None
    select = self.free_pages[:need_size].clone()
    self.free_pages = self.free_pages[need_size:]
    return select.to(self.device)


def _free(self: Any, free_index: torch.Tensor) -> None:
    if free_index.numel() == 0:
        return
    _hosted(self)
    idx = _host(free_index).to(torch.int64).clone()
    if self.free_group is not None:
        self.free_group.append(idx)
    elif self.need_sort:
        self.release_pages = torch.cat((self.release_pages, idx))
    else:
        self.free_pages = torch.cat((self.free_pages, idx))


def _merge_and_sort_free(self: Any) -> None:
    _hosted(self)
    if len(self.release_pages) > 0:
        self.free_pages = torch.sort(torch.cat((self.free_pages, self.release_pages))).values
        self.release_pages = torch.empty((0,), dtype=torch.int64)


# ---- one indexed write of the batch's cache slots into req_to_token ----

def write_cache_indices(out_cache_loc, req_pool_indices_tensor, req_pool_indices_cpu,
                        prefix_lens_tensor, prefix_lens_cpu, seq_lens_tensor, seq_lens_cpu,
                        extend_lens_tensor, extend_lens_cpu, prefix_tensors,
                        req_to_token_pool) -> None:
    """``req_to_token[req, :seq] = prefix slots ++ new slots`` for every request of the batch,
    as one ``index_put_`` of a bucketed length (the signature of SGLang 0.5.23's function)."""
    loc = _host(out_cache_loc).to(torch.int64).numpy()
    rows, cols, vals = [], [], []
    pt = 0
    for i in range(int(req_pool_indices_cpu.shape[0])):
        r, p = int(req_pool_indices_cpu[i]), int(prefix_lens_cpu[i])
        s, e = int(seq_lens_cpu[i]), int(extend_lens_cpu[i])
        if p > 0:
            rows.append(np.full(p, r, np.int64))
            cols.append(np.arange(p, dtype=np.int64))
            vals.append(_host(prefix_tensors[i]).to(torch.int64).numpy()[:p])
        rows.append(np.full(s - p, r, np.int64))
        cols.append(np.arange(p, s, dtype=np.int64))
        vals.append(loc[pt:pt + e])
        pt += e
    row, col, val = (np.concatenate(x) for x in (rows, cols, vals))
    n = row.shape[0]
    if n == 0:
        return
    pad = token_bucket(n) - n
    if pad:  # the last triple again: the same entry rewritten with its own value
        row, col, val = (np.concatenate([x, np.full(pad, x[-1], np.int64)])
                         for x in (row, col, val))
    table = req_to_token_pool.req_to_token
    dev = table.device
    table.index_put_((_to_dev(row, torch.int64, dev), _to_dev(col, torch.int64, dev)),
                     _to_dev(val, table.dtype, dev))


# ---- positions on the host ----

def compute_position(attn_backend: str, extend_prefix_lens: torch.Tensor,
                     extend_seq_lens: torch.Tensor, extend_seq_lens_sum: int):
    """(positions, extend_start_loc) as SGLang 0.5.23's ``compute_position`` returns them."""
    pre = _host(extend_prefix_lens).to(torch.int64).numpy()
    ext = _host(extend_seq_lens).to(torch.int64).numpy()
    dev = extend_seq_lens.device
    pos = (np.concatenate([np.arange(a, a + b, dtype=np.int64) for a, b in zip(pre, ext)])
           if len(ext) else np.zeros(0, np.int64))
    start = np.cumsum(ext) - ext
    return _to_dev(pos, torch.int64, dev), _to_dev(start, extend_seq_lens.dtype, dev)


# ---- token counts padded to buckets ----

def _pad(t: torch.Tensor | None, n: int) -> torch.Tensor | None:
    if t is None or t.shape[0] >= n:
        return t
    h = _host(t)
    out = torch.zeros((n,) + tuple(h.shape[1:]), dtype=h.dtype)
    out[: h.shape[0]] = h
    return out.to(t.device)


def pad_extend_batch(fb: Any) -> Any:
    """A shallow copy of the ForwardBatch with its token tensors padded to the token bucket."""
    fb = dataclasses.replace(fb)
    mode = fb.forward_mode
    if (os.environ.get(TOKEN_BUCKETS_ENV, "") == "off" or mode.is_decode() or mode.is_idle()
            or not mode.is_extend() or fb.input_ids is None or fb.input_embeds is not None):
        return fb
    n = int(fb.input_ids.shape[0])
    t = token_bucket(n)
    if t > n:
        # SGLang narrows attention to the real rows when this is set (its MLP-sync padding);
        # the bucketed attention covers the padded rows itself, at the bucket's shape
        fb.global_num_token_non_padded_cpu = None
        fb.input_ids = _pad(fb.input_ids, t)
        fb.positions = _pad(fb.positions, t)
        fb.out_cache_loc = _pad(fb.out_cache_loc, t)
    return fb


def install() -> None:
    import sglang
    from sglang.srt.mem_cache import allocation
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.model_executor import forward_batch_info
    from sglang.srt.model_executor.runner.eager_runner import EagerRunner

    if getattr(EagerRunner.load_batch, "_tpuc", False):
        return
    if sglang.__version__ not in SGLANG_VERSIONS:
        import logging

        logging.getLogger(__name__).warning(
            "tpuc's SGLang shape shim was written for SGLang %s, this is %s",
            ", ".join(SGLANG_VERSIONS), sglang.__version__)
    orig_init = ReqToTokenPool.__init__

    def __init__(self: Any, *args: Any, **kw: Any) -> None:
        orig_init(self, *args, **kw)
        _host_table(self)

    ReqToTokenPool.__init__ = __init__
    ReqToTokenPool.write = _table_write
    TokenToKVPoolAllocator.clear = _clear
    TokenToKVPoolAllocator.alloc = _alloc
    TokenToKVPoolAllocator.free = _free
    TokenToKVPoolAllocator.merge_and_sort_free = _merge_and_sort_free
    allocation.write_cache_indices = write_cache_indices
    forward_batch_info.compute_position = compute_position

    def load_batch(self: Any, forward_batch: Any, pp_proxy_tensors: Any = None, **kw: Any):
        return pad_extend_batch(forward_batch)

    load_batch._tpuc = True
    EagerRunner.load_batch = load_batch
