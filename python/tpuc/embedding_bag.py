"""``aten::_embedding_bag`` (and its forward-only twin and backwards) on "tpu", composed of
ops the core lowers: index_select, searchsorted, index_add.

The core has no lowering of ``_embedding_bag``, so ``nn.EmbeddingBag`` (and TorchRec's
unsharded ``EmbeddingBagCollection``, one per feature) went through the CPU fallback every
step, forward and backward. Registered when tpuc registers the device (python/tpuc/__init__.py).
Modes sum and mean run here; max (and ``sparse=True`` gradients) keep PyTorch's CPU kernels on
host copies, counted as fallbacks (``torch.tpu.stats()["fallbacks"]``, and ``cpu_runs()`` under
this module's names). Shapes depend only
on the number of ids and bags, never on their values, so a steady-state step compiles
nothing."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

SUM, MEAN, MAX = 0, 1, 2
_cpu_runs: dict[str, int] = {}


def _bag_of_each_id(indices: Tensor, offsets: Tensor, include_last_offset: bool) -> tuple[Tensor, int]:
    """(offset2bag, number of bags): id i belongs to the last bag b with offsets[b] <= i."""
    starts = offsets[:-1] if include_last_offset else offsets
    starts = starts.to(torch.int64)
    n = indices.numel()
    pos = torch.arange(n, device=indices.device, dtype=torch.int64)
    return torch.searchsorted(starts, pos, right=True) - 1, starts.numel()


def _acc(t: Tensor) -> Tensor:
    """float32 for 16-bit floats: bags are summed in float32 and rounded once, as the CPU does."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _keep(indices: Tensor, padding_idx: int) -> Optional[Tensor]:
    return None if padding_idx < 0 else (indices != padding_idx)


def _cpu(name: str, op: torch._ops.OpOverload, *args):  # type: ignore[no-untyped-def]
    """The CPU kernel on host copies (the modes this module does not compose), counted as the
    boxed fallback counts its runs (stats()["fallbacks"], the warning, TPUC_FALLBACK=error)."""
    from . import _C

    _C._note_kernel_fallback(op.name(), op._overloadname if op._overloadname != "default" else "",
                             f"{name[name.index('(') + 1:-1]} is not composed on the device")
    _cpu_runs[name] = _cpu_runs.get(name, 0) + 1
    dev = next(a.device for a in args if isinstance(a, Tensor))
    host = [a.cpu() if isinstance(a, Tensor) else a for a in args]
    out = op(*host)
    return tuple(t.to(dev) for t in out) if isinstance(out, tuple) else out.to(dev)


def forward(weight: Tensor, indices: Tensor, offsets: Tensor, scale_grad_by_freq: bool = False,
            mode: int = SUM, sparse: bool = False, per_sample_weights: Optional[Tensor] = None,
            include_last_offset: bool = False, padding_idx: int = -1
            ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(output, offset2bag, bag_size, max_indices) as PyTorch's kernel returns them."""
    if mode == MAX:
        return _cpu("_embedding_bag(mode=max)", torch.ops.aten._embedding_bag.default, weight, indices,
                    offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                    include_last_offset, padding_idx)
    indices = indices.reshape(-1)
    bag, nbags = _bag_of_each_id(indices, offsets, include_last_offset)
    rows = _acc(weight.index_select(0, indices))
    keep = _keep(indices, padding_idx)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.reshape(-1, 1).to(rows.dtype)
    if keep is not None:
        rows = rows * keep.unsqueeze(1).to(rows.dtype)
    out = rows.new_zeros(nbags, weight.shape[1]).index_add(0, bag, rows)
    counts = torch.ones_like(indices, dtype=torch.int64) if keep is None else keep.to(torch.int64)
    bag_size = torch.zeros(nbags, dtype=torch.int64, device=weight.device).index_add(0, bag, counts)
    if mode == MEAN:
        out = out / bag_size.clamp(min=1).unsqueeze(1).to(out.dtype)
    out = out.to(weight.dtype)
    max_indices = torch.zeros(nbags, dtype=torch.int64, device=weight.device)
    return out, bag, bag_size, max_indices


def dense_backward(grad: Tensor, indices: Tensor, offset2bag: Tensor, bag_size: Tensor,
                   maximum_indices: Tensor, num_weights: int, scale_grad_by_freq: bool, mode: int,
                   per_sample_weights: Optional[Tensor], padding_idx: int = -1) -> Tensor:
    """The weight's gradient: each id's row gets its bag's gradient (scaled as in forward)."""
    if mode == MAX:
        return _cpu("_embedding_bag_dense_backward(mode=max)",
                    torch.ops.aten._embedding_bag_dense_backward.default, grad, indices, offset2bag,
                    bag_size, maximum_indices, num_weights, scale_grad_by_freq, mode,
                    per_sample_weights, padding_idx)
    indices = indices.reshape(-1)
    rows = _acc(grad.index_select(0, offset2bag))
    if mode == MEAN:
        rows = rows / bag_size.index_select(0, offset2bag).clamp(min=1).unsqueeze(1).to(rows.dtype)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.reshape(-1, 1).to(rows.dtype)
    keep = _keep(indices, padding_idx)
    if keep is not None:
        rows = rows * keep.unsqueeze(1).to(rows.dtype)
    if scale_grad_by_freq:
        freq = torch.zeros(num_weights, dtype=rows.dtype, device=rows.device).index_add(
            0, indices, torch.ones_like(indices, dtype=rows.dtype))
        rows = rows / freq.index_select(0, indices).unsqueeze(1)
    return rows.new_zeros(num_weights, grad.shape[1]).index_add(0, indices, rows).to(grad.dtype)


def backward(grad: Tensor, indices: Tensor, offsets: Tensor, offset2bag: Tensor, bag_size: Tensor,
             maximum_indices: Tensor, num_weights: int, scale_grad_by_freq: bool, mode: int,
             sparse: bool, per_sample_weights: Optional[Tensor], padding_idx: int = -1) -> Tensor:
    """``_embedding_bag_backward`` (torch 2.14 gives it CPU/CUDA kernels, not a
    composite): the dense gradient here; a sparse one on the CPU."""
    if sparse:
        return _cpu("_embedding_bag_backward(sparse=True)", torch.ops.aten._embedding_bag_backward.default,
                    grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                    scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx)
    return dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                          scale_grad_by_freq, mode, per_sample_weights, padding_idx)


def per_sample_weights_backward(grad: Tensor, weight: Tensor, indices: Tensor, offsets: Tensor,
                                offset2bag: Tensor, mode: int, padding_idx: int = -1) -> Tensor:
    """d out / d per_sample_weights[i] = <grad of i's bag, weight row of id i> (sum mode)."""
    indices = indices.reshape(-1)
    dots = (_acc(grad.index_select(0, offset2bag)) * _acc(weight.index_select(0, indices))).sum(1)
    keep = _keep(indices, padding_idx)
    return (dots if keep is None else dots * keep.to(dots.dtype)).to(grad.dtype)


KERNELS = (
    ("_embedding_bag", forward),
    ("_embedding_bag_forward_only", forward),
    ("_embedding_bag_backward", backward),
    ("_embedding_bag_dense_backward", dense_backward),
    ("_embedding_bag_per_sample_weights_backward", per_sample_weights_backward),
)


_lib: Optional[torch.library.Library] = None


def register() -> None:
    """PrivateUse1 kernels for the ops above (idempotent; an op the installed torch does not
    define is skipped)."""
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    for name, fn in KERNELS:
        if hasattr(torch.ops.aten, name):
            lib.impl(name, fn, "PrivateUse1")
    _lib = lib


def cpu_runs() -> dict[str, int]:
    """Calls this module handed to the CPU (mode max), by name."""
    return dict(_cpu_runs)
