"""Weight normalization's fused kernels on the device "tpu", composed of ops the core lowers:
``aten::_weight_norm_interface`` (w = v * g / ||v||, the norm taken over every dim but one)
and ``aten::_weight_norm_interface_backward``.

``torch.nn.utils.weight_norm`` and ``nn.utils.parametrizations.weight_norm`` call
``torch._weight_norm``, which takes these two kernels whenever the norm is kept along the first
or the last dim (the default, dim=0) and no tensor is float16; PyTorch has them for the CPU and
CUDA only, so every forward and backward of such a layer went through the CPU fallback
(Hugging Face's wav2vec2 and HuBERT keep their positional convolution weight-normalized;
vocoders such as HiFi-GAN every layer). The math is the one of PyTorch's CPU kernels
(aten/src/ATen/native/cpu/WeightNormKernel.cpp): sums of squares and products in float32 for
bfloat16 (and float16) tensors, the norms returned in float32 for a bfloat16 ``g``, and
grad_v = a * grad_w - b * v with a = g / norm, b = a * grad_g / norm. The double backward
(``create_graph=True``) is PyTorch's composite of ordinary ops. Registered when tpuc registers
the device (python/tpuc/__init__.py); ``TPUC_WEIGHT_NORM_KERNELS=0`` leaves both ops on the CPU
fallback (the switch of tests/test_weight_norm.py's differential test)."""
from __future__ import annotations

import os
from typing import Optional

import torch
from torch import Tensor

from . import _aten_impl

_lib: Optional[torch.library.Library] = None


def _acc(t: Tensor) -> torch.dtype:
    """The type the CPU kernel accumulates in: float32 for 16-bit floats (PyTorch's opmath)."""
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


def _other_dims(v: Tensor, dim: int) -> list[int]:
    if dim < 0:
        dim += v.dim()
    if dim not in (0, v.dim() - 1):
        raise RuntimeError("fused kernels can only be applied for first or last dim")
    return [d for d in range(v.dim()) if d != dim]


def forward(v: Tensor, g: Tensor, dim: int = 0) -> tuple[Tensor, Tensor]:
    """(w, norms): w = v * (g / norms), norms of v over every dim but `dim`, shaped as g."""
    dims = _other_dims(v, dim)
    acc = _acc(v)
    vv = v.to(acc)
    norm = vv.mul(vv).sum(dims, keepdim=True).sqrt() if dims else vv.abs()
    a = g.to(acc).reshape(norm.shape) / norm
    w = (vv * a).to(v.dtype).contiguous()
    norm_dtype = torch.float32 if g.dtype == torch.bfloat16 else g.dtype
    return w, norm.reshape(g.shape).to(norm_dtype)


def backward(grad_w: Tensor, saved_v: Tensor, saved_g: Tensor, saved_norms: Tensor,
             dim: int) -> tuple[Tensor, Tensor]:
    """(grad_v, grad_g) of w = v * g / ||v||."""
    dims = _other_dims(saved_v, dim)
    acc = _acc(saved_v)
    gw, v = grad_w.to(acc), saved_v.to(acc)
    per_dim_sum = gw.mul(v).sum(dims, keepdim=True) if dims else gw * v
    norm = saved_norms.to(acc).reshape(per_dim_sum.shape)
    grad_g = per_dim_sum / norm
    a = saved_g.to(acc).reshape(norm.shape) / norm
    b = a * grad_g / norm
    grad_v = (a * gw - b * v).to(saved_v.dtype).contiguous()
    return grad_v, grad_g.reshape(saved_g.shape).to(saved_g.dtype).contiguous()


def register() -> None:
    """Registers both kernels for the device "tpu" (idempotent; not with
    TPUC_WEIGHT_NORM_KERNELS=0)."""
    global _lib
    if _lib is not None or os.environ.get("TPUC_WEIGHT_NORM_KERNELS") == "0":
        return
    _lib = _aten_impl.register({"_weight_norm_interface": forward,
                                "_weight_norm_interface_backward": backward})
