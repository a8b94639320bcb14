"""PrivateUse1 ("tpu") kernels for the ``torchrec::`` operators of TorchRec's
own TPU compute kernel (``EmbeddingComputeKernel.UNFUSED_TPU``, module
``torchrec.experimental.torch_tpu.pallas.ops``), composed of aten ops the core
lowers.

What it works around: torchrec 1.9.2 defines these operators with CPU kernels
and, for TorchTPU, Pallas kernels that need the ``torch_tpu`` package; with
tpuc the sharded lookup (DistributedModelParallel, table- and row-wise) went
through the CPU fallback. The CPU kernels find each id's bag with
repeat_interleave (an output size read from the host); here searchsorted
gives it from shapes alone. Autograd stays TorchRec's (register_autograd)."""
from __future__ import annotations


import torch
from torch import Tensor

from ._register import register_kernels



def _bags(offsets: Tensor, n: int) -> Tensor:
    pos = torch.arange(n, device=offsets.device, dtype=torch.int64)
    return torch.searchsorted(offsets[:-1].to(torch.int64).contiguous(), pos, right=True) - 1


def pooled_lookup_offset(indices: Tensor, offsets: Tensor, weights: Tensor, emb_dim: int) -> Tensor:
    """Sum of the rows of each bag (bag b: ids offsets[b]:offsets[b+1])."""
    n = indices.numel()
    rows = weights.index_select(0, indices.reshape(-1).to(torch.int64))
    return weights.new_zeros(offsets.numel() - 1, emb_dim).index_add(0, _bags(offsets, n), rows)


def pooled_lookup_offset_backward(grad_out: Tensor, indices: Tensor, offsets: Tensor, num_rows: int,
                                  emb_dim: int) -> Tensor:
    idx = indices.reshape(-1).to(torch.int64)
    rows = grad_out.index_select(0, _bags(offsets, idx.numel()))
    return grad_out.new_zeros(num_rows, emb_dim).index_add(0, idx, rows)


def lookup(indices: Tensor, weights: Tensor, emb_dim: int) -> Tensor:
    return weights.index_select(0, indices.reshape(-1).to(torch.int64)).view(*indices.shape, emb_dim)


def lookup_backward(grad_out: Tensor, indices: Tensor, num_rows: int, emb_dim: int) -> Tensor:
    idx = indices.reshape(-1).to(torch.int64)
    return grad_out.new_zeros(num_rows, emb_dim).index_add(0, idx, grad_out.reshape(-1, emb_dim))


KERNELS = (
    ("embedding_pooled_lookup_offset", pooled_lookup_offset),
    ("embedding_pooled_lookup_offset_backward", pooled_lookup_offset_backward),
    ("embedding_lookup", lookup),
    ("embedding_lookup_backward", lookup_backward),
)


def register() -> list[str]:
    """Registers the kernels whose operator TorchRec defined (idempotent)."""
    return register_kernels("torchrec", KERNELS)
