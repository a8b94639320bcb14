"""``aten::_weight_int8pack_mm`` on the device "tpu": the product of 16- or 32-bit float
activations with int8 weights scaled per output channel, the kernel of int8 weight-only
quantized inference (torchao's int8 weight-only layout, gpt-fast).

C = (A @ B^T) * scales with A [M, K] float32/bfloat16/float16, B [N, K] int8 and scales [N] of
A's type: the products are summed in float32 and multiplied by the scale in float32, then rounded
once to A's type, as PyTorch's CPU kernel does (its sums run in another order, so 16-bit results
can differ from the CPU's by an ulp, float32 ones by the float32 reordering error). Composed of a
conversion and a matrix product the core lowers; PyTorch has the kernel for the CPU, CUDA and
MPS only, so every call went through the CPU fallback (the int8 weights and activations to the
host and back). Registered when tpuc registers the device (python/tpuc/__init__.py);
``TPUC_INT8_MM_KERNEL=0`` leaves it on the fallback."""
from __future__ import annotations

import os
from typing import Optional

import torch
from torch import Tensor

from . import _aten_impl

_lib: Optional[torch.library.Library] = None
_OP = "_weight_int8pack_mm"


def int8pack_mm(a: Tensor, b: Tensor, scales: Tensor) -> Tensor:
    if a.dim() != 2:
        raise RuntimeError(f"{_OP}: expect A to be 2D tensor.")
    if a.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise RuntimeError(f"{_OP}: expect A to be either 32-bit or 16-bit float tensor.")
    if b.dtype != torch.int8:
        raise RuntimeError(f"{_OP}: expect B to be int8 tensor.")
    if b.dim() != 2 or b.shape[1] != a.shape[1]:
        raise RuntimeError(f"{_OP}: expect B to be a 2D tensor of shape [N, {a.shape[1]}], "
                           f"got {list(b.shape)}.")
    n = b.shape[0]
    if scales.dim() != 1 or scales.shape[0] != n:
        raise RuntimeError(f"{_OP}: expect scales to be 1d tensor with size {n}")
    if scales.dtype != a.dtype:
        raise RuntimeError(f"expected scalar type {_aten_impl.scalar_type_name(a.dtype)} but found "
                           f"{_aten_impl.scalar_type_name(scales.dtype)}")
    acc = a.float() @ b.float().t()  # int8 values are exact in float32
    return (acc * scales.float()).to(a.dtype)


def register() -> None:
    """Registers the kernel for the device "tpu" (idempotent; not with TPUC_INT8_MM_KERNEL=0)."""
    global _lib
    if _lib is not None or os.environ.get("TPUC_INT8_MM_KERNEL") == "0":
        return
    _lib = _aten_impl.register({_OP: int8pack_mm})
