"""``torch.amp.GradScaler``'s two kernels on the device "tpu", composed of ops the core lowers:
``aten::_amp_foreach_non_finite_check_and_unscale_`` (multiply every gradient by the inverse
scale; flag any inf or NaN) and ``aten::_amp_update_scale_`` (grow or back off the scale).

Float16 mixed precision trains with a GradScaler (``torch.amp.GradScaler("tpu")``, as
``torch.amp.GradScaler("cuda")`` on a GPU). Without kernels of their own both ops went through
the CPU fallback every step: every gradient copied to the host and back. Here the checks and
the scale's update are decided on the device, as PyTorch's CUDA kernels do; the only read
left is the one GradScaler makes itself (``found_inf.item()`` before the optimizer's step).

The math is the one of PyTorch's CPU kernels (aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp):
a 16-bit gradient is multiplied in float32 and rounded once; float32 and float64 gradients in
their own type; the scale is multiplied by the factor in double precision and rounded to
float32, and it does not grow into infinity. In strict mode each call runs as one program
(as fused_optim.py's kernels do); fused mode records it into its chunk. Registered when tpuc
registers the device (python/tpuc/__init__.py); ``TPUC_AMP_KERNELS=0`` leaves both ops on the
CPU fallback (the switch of tests/test_grad_scaler.py's differential test)."""
from __future__ import annotations

import os
from typing import Optional

import torch
from torch import Tensor

from . import _aten_impl
from .fused_optim import _one_program

_lib: Optional[torch.library.Library] = None


def _check_one_float(t: Tensor, name: str) -> None:
    if t.numel() != 1:
        raise RuntimeError(f"{name} must be a 1-element tensor.")
    if t.dtype != torch.float32:
        raise RuntimeError(f"{name} must be a float tensor.")


def unscale_(grads: list[Tensor], found_inf: Tensor, inv_scale: Tensor) -> None:
    """grads *= inv_scale in place; found_inf = 1 where any gradient holds an inf or a NaN
    (left as it is otherwise: zeroing it first is the caller's, as on the CPU)."""
    if not grads:
        return
    _check_one_float(inv_scale, "inv_scale")
    _check_one_float(found_inf, "found_inf")
    dev = grads[0].device
    for g in grads:
        if g.device != dev:
            raise RuntimeError("scaled_grads must be on the same device.")
        if g.layout != torch.strided:
            raise RuntimeError("one of scaled_grads was not a strided tensor.")
        if not g.is_floating_point():
            raise RuntimeError(f"_amp_foreach_non_finite_check_and_unscale_: {g.dtype} gradients "
                               "are not supported (floating point only, as on the CPU)")
    with _one_program():
        inv = inv_scale.reshape(())
        finite = torch.stack([torch.isfinite(g).all() for g in grads]).all()
        found_inf.copy_(torch.where(finite, found_inf, torch.ones_like(found_inf)))
        for g in grads:
            # 16-bit values in float32 (PyTorch's opmath), multiplied and rounded once
            acc = torch.float32 if g.dtype in (torch.float16, torch.bfloat16) else g.dtype
            g.copy_(g.to(acc) * inv.to(acc))


def _times(scale: Tensor, factor: float) -> Tensor:
    """float(scale * factor) with the product in double precision, as the CPU kernel has it.
    A factor exact in float32 (2.0, 0.5: GradScaler's defaults) needs no double: the product
    of two float32 values is exact in double, so one float32 multiply rounds it the same."""
    f32 = torch.tensor(factor, dtype=torch.float32).item()
    if f32 == factor:
        return scale * f32
    return (scale.double() * factor).float()


def update_scale_(scale: Tensor, growth_tracker: Tensor, found_inf: Tensor,
                  growth_factor: float, backoff_factor: float, growth_interval: int) -> Tensor:
    """The scale backs off after an inf or a NaN and grows after `growth_interval` clean steps
    in a row (not into infinity); growth_tracker counts the clean steps."""
    if growth_tracker.numel() != 1:
        raise RuntimeError("growth_tracker must be a 1-element tensor.")
    _check_one_float(scale, "current_scale")
    _check_one_float(found_inf, "found_inf")
    if growth_tracker.dtype != torch.int32:
        raise RuntimeError("growth_tracker must be an int tensor.")
    with _one_program():
        found = found_inf != 0
        successful = growth_tracker + 1
        grown = _times(scale, growth_factor)
        grow = (~found) & (successful == growth_interval)
        new_scale = torch.where(found, _times(scale, backoff_factor),
                                torch.where(grow & torch.isfinite(grown), grown, scale))
        new_tracker = torch.where(found | grow, torch.zeros_like(successful), successful)
        scale.copy_(new_scale)
        growth_tracker.copy_(new_tracker)
    return scale


def register() -> None:
    """Registers both kernels for the device "tpu" (idempotent; not with TPUC_AMP_KERNELS=0).
    Their functional forms (``_amp_update_scale``, which torch.compile's functionalization
    uses) are PyTorch's composites over these."""
    global _lib
    if _lib is not None or os.environ.get("TPUC_AMP_KERNELS") == "0":
        return
    _lib = _aten_impl.register({"_amp_foreach_non_finite_check_and_unscale_": unscale_,
                                "_amp_update_scale_": update_scale_})
