"""PrivateUse1 ("tpu") kernels for the ``fbgemm::`` operators TorchRec calls,
each composed of aten ops the core lowers (cumsum, cat, index_select,
searchsorted, index_add).

What it works around: fbgemm-gpu-cpu 1.9.0 (with torchrec 1.9.2, torch 2.14)
registers these operators for CPU, CUDA and Meta only, so on "tpu" each one
went through tpuc's boxed CPU fallback (a host round trip per call). Autograd
formulas stay fbgemm's own (its Autograd kernels call the ops below).

Every output shape is computed from input shapes or from the argument fbgemm
itself requires the caller to pass (``permuted_lengths_sum``); where fbgemm's
CPU kernel reads a length sum from the host and the caller did not pass it,
the same host read happens here (one ``.item()``), never a compile per value."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ._register import register_kernels



def complete_cumsum(t: Tensor) -> Tensor:
    """[0, t0, t0+t1, ...] along the last dim, in t's dtype."""
    zero = t.new_zeros(*t.shape[:-1], 1)
    return torch.cat([zero, torch.cumsum(t, dim=-1, dtype=t.dtype)], dim=-1)


def _segment_ids(offsets: Tensor, total: int) -> Tensor:
    """For each of `total` positions, the segment (row of the CSR `offsets`) it lies in."""
    pos = torch.arange(total, device=offsets.device, dtype=offsets.dtype)
    return torch.searchsorted(offsets[:-1].contiguous(), pos, right=True) - 1


def segment_sum_csr(batch_size: int, csr_seg: Tensor, values: Tensor) -> Tensor:
    """Sums of `batch_size`-long blocks of values, per CSR segment (csr_seg in blocks)."""
    nseg = csr_seg.numel() - 1
    blocks = values.reshape(-1, batch_size).sum(1)
    seg = _segment_ids(csr_seg.to(torch.int64), blocks.numel())
    return values.new_zeros(nseg).index_add(0, seg, blocks)


def _gather_segments(lengths: Tensor, offsets: Tensor, perm_rows: Tensor, total: int) -> Tensor:
    """Positions into the flat values of the rows `perm_rows` (by the lengths'
    CSR `offsets`), concatenated in that order; `total` of them."""
    new_len = lengths.index_select(0, perm_rows)
    new_off = complete_cumsum(new_len.to(torch.int64))
    row = _segment_ids(new_off, total)
    pos = torch.arange(total, device=lengths.device, dtype=torch.int64)
    return offsets.index_select(0, perm_rows).index_select(0, row) + (pos - new_off.index_select(0, row))


def _permute_sparse(permute: Tensor, lengths: Tensor, values: Tensor, weights: Optional[Tensor],
                    permuted_lengths_sum: Optional[int]) -> tuple[Tensor, Tensor, Optional[Tensor]]:
    """Rows of `lengths` (2-D: features x batch, or 1-D: segments) reordered by
    `permute`, with their values (and weights) moved along."""
    rows = permute.to(torch.int64)
    out_lengths = lengths.index_select(0, rows)
    if lengths.dim() == 2:  # row r of the flat lengths: r*batch .. r*batch+batch-1
        nb = lengths.shape[1]
        flat_rows = (rows.unsqueeze(1) * nb + torch.arange(nb, device=rows.device)).reshape(-1)
    else:
        flat_rows = rows
    flat = lengths.reshape(-1)
    offsets = complete_cumsum(flat.to(torch.int64))
    total = int(permuted_lengths_sum) if permuted_lengths_sum is not None else int(
        flat.index_select(0, flat_rows).sum().item())
    idx = _gather_segments(flat, offsets, flat_rows, total)
    out_values = values.index_select(0, idx)
    out_weights = None if weights is None else weights.index_select(0, idx)
    return out_lengths, out_values, out_weights


def permute_2D_sparse_data(permute: Tensor, lengths: Tensor, values: Tensor,
                           weights: Optional[Tensor] = None, permuted_lengths_sum: Optional[int] = None
                           ) -> tuple[Tensor, Tensor, Optional[Tensor]]:
    return _permute_sparse(permute, lengths, values, weights, permuted_lengths_sum)


def permute_1D_sparse_data(permute: Tensor, lengths: Tensor, values: Tensor,
                           weights: Optional[Tensor] = None, permuted_lengths_sum: Optional[int] = None
                           ) -> tuple[Tensor, Tensor, Optional[Tensor]]:
    return _permute_sparse(permute, lengths.reshape(-1), values, weights, permuted_lengths_sum)


def permute_pooled_embs(pooled_embs: Tensor, offset_dim_list: Tensor, permute_list: Tensor,
                        inv_offset_dim_list: Tensor, inv_permute_list: Tensor) -> Tensor:
    """Column blocks of pooled_embs (bounds in offset_dim_list) in permute_list's order."""
    offs = offset_dim_list.to(torch.int64)
    perm = permute_list.to(torch.int64)
    cols = _gather_segments(offs[1:] - offs[:-1], offs, perm, pooled_embs.shape[-1])
    return pooled_embs.index_select(-1, cols)


def block_bucketize_sparse_features(
        lengths: Tensor, indices: Tensor, bucketize_pos: bool, sequence: bool, block_sizes: Tensor,
        my_size: int, weights: Optional[Tensor] = None, batch_size_per_feature: Optional[Tensor] = None,
        max_B: int = -1, block_bucketize_pos: Optional[list[Tensor]] = None, keep_orig_idx: bool = False,
        total_num_blocks: Optional[Tensor] = None, keep_orig_idx_per_feature: Optional[Tensor] = None
        ) -> tuple[Tensor, Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
    """Row-wise sharding's input split: id i of feature f goes to bucket
    i // block_sizes[f] (as i % block_sizes[f]), or, past my_size blocks, to
    i % my_size (as i // my_size); the output is grouped by (bucket, bag), ids
    keeping their order. Every output size is the input's (each id lands in
    exactly one bucket), so a stable sort on (bucket, bag) places them. The
    options row-wise training does not use go to FBGEMM's CPU kernel."""
    plain = not (bucketize_pos or sequence or keep_orig_idx) and batch_size_per_feature is None \
        and block_bucketize_pos is None and total_num_blocks is None and keep_orig_idx_per_feature is None
    if not plain:
        dev = lengths.device
        host = lambda t: None if t is None else t.cpu()  # noqa: E731
        out = torch.ops.fbgemm.block_bucketize_sparse_features(
            lengths.cpu(), indices.cpu(), bucketize_pos, sequence, block_sizes.cpu(), my_size,
            host(weights), host(batch_size_per_feature), max_B,
            None if block_bucketize_pos is None else [t.cpu() for t in block_bucketize_pos],
            keep_orig_idx, host(total_num_blocks), host(keep_orig_idx_per_feature))
        return tuple(None if t is None else t.to(dev) for t in out)  # type: ignore[return-value]
    nbags = lengths.numel()
    nfeat = block_sizes.numel()
    batch = nbags // nfeat
    offsets = complete_cumsum(lengths.reshape(-1).to(torch.int64))
    bag = _segment_ids(offsets, indices.numel())
    feat = torch.div(bag, batch, rounding_mode="floor")
    idx = indices.to(torch.int64)
    blk = block_sizes.to(torch.int64).index_select(0, feat)
    inside = idx < blk * my_size
    bucket = torch.where(inside, torch.div(idx, blk, rounding_mode="floor"), idx % my_size)
    new_idx = torch.where(inside, idx % blk, torch.div(idx, my_size, rounding_mode="floor"))
    key = bucket * nbags + bag
    order = torch.sort(key, stable=True).indices
    new_lengths = torch.zeros(my_size * nbags, dtype=lengths.dtype, device=lengths.device).index_add(
        0, key, torch.ones_like(key, dtype=lengths.dtype))
    out_indices = new_idx.index_select(0, order).to(indices.dtype)
    out_weights = None if weights is None else weights.index_select(0, order)
    return new_lengths, out_indices, out_weights, None, None


# (name, kernel); each registered for PrivateUse1 when fbgemm_gpu has defined it
KERNELS = (
    ("asynchronous_complete_cumsum", complete_cumsum),
    ("segment_sum_csr", segment_sum_csr),
    ("permute_2D_sparse_data", permute_2D_sparse_data),
    ("permute_1D_sparse_data", permute_1D_sparse_data),
    ("permute_pooled_embs", permute_pooled_embs),
    ("block_bucketize_sparse_features", block_bucketize_sparse_features),
)


def register() -> list[str]:
    """Registers the kernels whose operator exists (idempotent); returns their names."""
    return register_kernels("fbgemm", KERNELS)
