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

_lib: Optional[torch.library.Library] = None


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


# (name, kernel); each registered for PrivateUse1 when fbgemm_gpu has defined it
KERNELS = (
    ("asynchronous_complete_cumsum", complete_cumsum),
    ("segment_sum_csr", segment_sum_csr),
    ("permute_2D_sparse_data", permute_2D_sparse_data),
    ("permute_1D_sparse_data", permute_1D_sparse_data),
    ("permute_pooled_embs", permute_pooled_embs),
)


def register() -> list[str]:
    """Registers the kernels whose operator exists (idempotent); returns their names."""
    global _lib
    if _lib is not None:
        return [n for n, _ in KERNELS]
    lib = torch.library.Library("fbgemm", "IMPL")
    done = []
    for name, fn in KERNELS:
        try:
            getattr(torch.ops.fbgemm, name)
        except (AttributeError, RuntimeError):
            continue
        lib.impl(name, fn, "PrivateUse1")
        done.append(name)
    _lib = lib
    return done
