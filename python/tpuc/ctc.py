"""The CTC loss on the device "tpu" (F.ctc_loss, nn.CTCLoss: speech models such as wav2vec2
fine-tuned with CTC).

PyTorch's `ctc_loss` reads the lengths to the host and calls `aten::_ctc_loss` with them as
int lists, which have no device kernel: the op ran on the CPU fallback, its log-probabilities
copied to the host and back at every step. Here the int-list forms run as the `.Tensor` forms
that the core lowers (csrc/core/lower/nn_ctc.c: the forward-backward recursion as one
stablehlo.while over time): the lengths are uploaded as small tensors, so a batch of other
lengths reuses the compiled program; concatenated 1-D targets are gathered into padded
[N, max target length] ones first, as the CPU kernel's log_alpha has that width. The `.Tensor`
forms get Meta kernels (output shapes), which PyTorch lacks. ``TPUC_CTC_KERNEL=0`` leaves
ctc_loss on the CPU fallback (registered in python/tpuc/__init__.py)."""
from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from . import _aten_impl

_lib: torch.library.Library | None = None
_meta_lib: torch.library.Library | None = None


def _as_tensors(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: Sequence[int],
                target_lengths: Sequence[int],
                check: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if check:  # the forward's: the backward's arguments are the forward's, checked already
        # the CPU kernel's argument checks (lengths in range, targets' sizes), raised with its
        # words: its Meta kernel makes them on shapes and the lengths alone
        torch.ops.aten._ctc_loss(log_probs.to("meta"), targets.to("meta"), input_lengths,
                                 target_lengths)
    dev = log_probs.device
    il = torch.tensor(list(input_lengths), dtype=torch.int64, device=dev)
    tl = torch.tensor(list(target_lengths), dtype=torch.int64, device=dev)
    if targets.dim() == 1:  # concatenated: row n is targets[offset_n : offset_n + tl_n]
        width = max(target_lengths, default=0)
        rows, start = [], 0
        for n in target_lengths:
            rows.append([start + j if j < n else 0 for j in range(width)])
            start += n
        if width == 0 or targets.numel() == 0:
            targets = torch.zeros(len(rows), width, dtype=torch.int64, device=dev)
        else:
            idx = torch.tensor(rows, dtype=torch.int64, device=dev)
            targets = targets[idx]
    return targets, il, tl


def forward(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: Sequence[int],
            target_lengths: Sequence[int], blank: int = 0,
            zero_infinity: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    tg, il, tl = _as_tensors(log_probs, targets, input_lengths, target_lengths)
    return torch.ops.aten._ctc_loss.Tensor(log_probs, tg, il, tl, blank, zero_infinity)


def backward(grad: torch.Tensor, log_probs: torch.Tensor, targets: torch.Tensor,
             input_lengths: Sequence[int], target_lengths: Sequence[int],
             neg_log_likelihood: torch.Tensor, log_alpha: torch.Tensor, blank: int,
             zero_infinity: bool = False) -> torch.Tensor:
    tg, il, tl = _as_tensors(log_probs, targets, input_lengths, target_lengths, check=False)
    return torch.ops.aten._ctc_loss_backward.Tensor(grad, log_probs, tg, il, tl, neg_log_likelihood,
                                                    log_alpha, blank, zero_infinity)


def _meta_forward(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
                  target_lengths: torch.Tensor, blank: int = 0,
                  zero_infinity: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    if log_probs.dim() != 3 or targets.dim() != 2:
        raise RuntimeError("tpuc: _ctc_loss.Tensor's Meta kernel takes [T, N, C] log_probs and "
                           "padded [N, S] targets")
    t, n, _ = log_probs.shape
    return (log_probs.new_empty(n), log_probs.new_empty(n, t, 2 * targets.shape[1] + 1))


def _meta_backward(grad: torch.Tensor, log_probs: torch.Tensor, *args: object) -> torch.Tensor:
    return torch.empty_like(log_probs)


def register() -> None:
    """Registers the int-list kernels for "tpu" and the `.Tensor` forms' Meta kernels
    (idempotent; not with TPUC_CTC_KERNEL=0)."""
    global _lib, _meta_lib
    if _lib is not None or os.environ.get("TPUC_CTC_KERNEL") == "0":
        return
    if not hasattr(torch.ops.aten._ctc_loss, "Tensor"):
        return
    _meta_lib = torch.library.Library("aten", "IMPL")
    metas = (("_ctc_loss.Tensor", _meta_forward), ("_ctc_loss_backward.Tensor", _meta_backward))
    for name, fn in metas:
        if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::" + name, "Meta"):
            _meta_lib.impl(name, fn, "Meta")
    _lib = _aten_impl.register({"_ctc_loss": forward, "_ctc_loss_backward": backward})
