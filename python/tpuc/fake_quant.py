"""Quantization-aware training's fake-quantize kernels on the device "tpu", composed of ops the
core lowers: ``aten::fake_quantize_per_tensor_affine_cachemask``, its tensor-qparams form
``_fake_quantize_per_tensor_affine_cachemask_tensor_qparams``,
``fake_quantize_per_channel_affine_cachemask`` and ``_fused_moving_avg_obs_fq_helper`` (the
observer and fake-quantize step of ``FusedMovingAvgObsFakeQuantize``, which the default QAT
qconfig puts on every weight and activation).

PyTorch has them for the CPU and CUDA only, so QAT on "tpu" ran every observer on the CPU
fallback at every forward, activations to the host and back. The arithmetic is the one of
PyTorch's CPU kernels (aten/src/ATen/native/quantized/cpu/kernels/QuantizedOpKernels.cpp): the
input times the float32 reciprocal of the scale, rounded half to even, plus the zero point (for a
per-channel floating zero point: the zero point added before rounding); clamped with fmin/fmax
(a NaN goes to quant_min; per channel an infinity too, as the CPU kernel's conversion to an
integer gives on x86-64); the output (q - zero_point) * scale, in float32 per tensor and in
double per channel, rounded once to the input's type; the mask marks the values that were not
clamped. The fake-quantize outputs equal the CPU's bit for bit (tests/test_fake_quant.py).

The fused observer keeps the CPU kernel's own quantization-parameter choice (FBGEMM's
ChooseQuantizationParams, in double precision, with its nudging of the zero point): the
input's min and max are taken on the device and the running statistics, scale and zero point
are updated by PyTorch's CPU kernel over those few numbers, then copied back. So each call
makes one host round trip of a few numbers (the CPU kernel reads its flags and statistics on the
host as well); the activations stay on the device. The tensor-qparams form reads nothing on the
host. Not composed: the learnable fake-quantize ops (``_fake_quantize_learnable_*``), which stay
on the fallback; a tensor zero point's range is not checked (the check would read it on the
host). Registered when tpuc registers the device (python/tpuc/__init__.py);
``TPUC_FAKE_QUANT_KERNELS=0`` leaves all four on the fallback."""
from __future__ import annotations

import os
from typing import Optional

import torch
from torch import Tensor

from . import _aten_impl

_lib: Optional[torch.library.Library] = None
_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _f32_reciprocal(v: float) -> float:
    """1.0f / v, divided in float32 (rounding the double quotient to float32 can differ)."""
    one = torch.ones((), dtype=torch.float32)
    return (one / torch.tensor(v, dtype=torch.float32)).item()


def _acc(x: Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _clamp(q: Tensor, qmin: int, qmax: int) -> Tensor:
    """fmin(fmax(q, qmin), qmax): a NaN becomes qmin, as in the CPU kernel."""
    lo = torch.full((), float(qmin), dtype=q.dtype, device=q.device)
    hi = torch.full((), float(qmax), dtype=q.dtype, device=q.device)
    return torch.fmin(torch.fmax(q, lo), hi)


def _per_tensor(x: Tensor, inv: Tensor | float, scale: Tensor | float, zp: Tensor | int,
                qmin: int, qmax: int) -> tuple[Tensor, Tensor]:
    acc = _acc(x)
    zpf = zp.to(acc) if isinstance(zp, Tensor) else zp
    qf = torch.round(x.to(acc) * (inv.to(acc) if isinstance(inv, Tensor) else inv)) + zpf
    mask = (qf >= qmin) & (qf <= qmax)
    # (qval - z_point) * sc: an integer times the float32 scale, in float32 (also for float64 input)
    diff = (_clamp(qf, qmin, qmax) - zpf).float()
    out = diff * (scale.float() if isinstance(scale, Tensor) else scale)
    return out.to(x.dtype), mask


def _check_range(qmin: int, qmax: int) -> None:
    if qmin > qmax:
        raise RuntimeError("`quant_min` should be less than or         equal to `quant_max`.")


def _check_input(x: Tensor, name: str) -> None:
    if x.dtype not in _FLOATS:
        raise NotImplementedError(f'"{name}" not implemented for '
                                  f"'{_aten_impl.scalar_type_name(x.dtype)}'")


def per_tensor_cachemask(x: Tensor, scale: float, zero_point: int, quant_min: int,
                         quant_max: int) -> tuple[Tensor, Tensor]:
    _check_range(quant_min, quant_max)
    if not quant_min <= zero_point <= quant_max:
        raise RuntimeError("`zero_point` must be between `quant_min` and `quant_max`.")
    _check_input(x, "fake_quantize_tensor_cachemask_kernel_type_handling")
    sc = _aten_impl.to_float32(scale)
    return _per_tensor(x, _f32_reciprocal(sc), sc, zero_point, quant_min, quant_max)


def per_tensor_cachemask_tensor_qparams(x: Tensor, scale: Tensor, zero_point: Tensor,
                                        fake_quant_enabled: Tensor, quant_min: int,
                                        quant_max: int) -> tuple[Tensor, Tensor]:
    """Scale, zero point and the enabled flag stay on the device (the CPU kernel reads them)."""
    _check_range(quant_min, quant_max)
    _check_input(x, "fake_quantize_tensor_cachemask_kernel_type_handling")
    dev = x.device
    sc = scale.to(dev, torch.float32).reshape(())
    inv = torch.reciprocal(sc)  # 1.0f / sc, correctly rounded like the CPU's division
    zp = zero_point.to(dev).reshape(()).to(torch.int64)
    out, mask = _per_tensor(x, inv, sc, zp, quant_min, quant_max)
    on = fake_quant_enabled.to(dev).reshape(()) != 0
    return torch.where(on, out, x), torch.where(on, mask, torch.ones_like(mask))


def per_channel_cachemask(x: Tensor, scale: Tensor, zero_point: Tensor, axis: int,
                          quant_min: int, quant_max: int) -> tuple[Tensor, Tensor]:
    if scale.dtype not in (torch.float32, torch.bfloat16):
        raise RuntimeError("Scale must be Float or BFloat16, found "
                           f"{_aten_impl.scalar_type_name(scale.dtype)}")
    if zero_point.dtype not in (torch.int32, torch.float32, torch.float16):
        raise RuntimeError("Zero-point must be Int32, Float or Half, found "
                           f"{_aten_impl.scalar_type_name(zero_point.dtype)}")
    if scale.dim() != 1:
        raise RuntimeError("scale should be a 1-D tensor")
    if zero_point.dim() != 1:
        raise RuntimeError("zero point should be a 1-D tensor")
    if scale.numel() != zero_point.numel():
        raise RuntimeError("scale and zero-point need to have the same dimensions")
    if not -x.dim() <= axis < x.dim():
        raise IndexError(f"Dimension out of range (expected to be in range of [{-x.dim()}, "
                         f"{x.dim() - 1}], but got {axis})")
    if scale.numel() != x.shape[axis]:
        raise RuntimeError("dimensions of scale and zero-point are not consistent with input "
                           "tensor")
    if axis < 0:
        raise RuntimeError("`axis` must be between 0 and number of dimensions of input")
    _check_range(quant_min, quant_max)
    _check_input(x, "fake_quantize_channel_cachemask_cpu_type_handling")
    shape = [1] * x.dim()
    shape[axis] = x.shape[axis]
    acc = _acc(x)
    sc = scale.to(torch.float32).reshape(shape)
    inv = torch.reciprocal(sc)
    xs = x.to(acc) * inv.to(acc)
    if zero_point.is_floating_point():  # lrintf(zero_point + x * inv_scale): the sum in float
        zp = zero_point.reshape(shape).to(acc)
        qf = torch.round((xs + zp).float())
    else:  # zero_point + nearbyint(x * inv_scale)
        zp = zero_point.reshape(shape).to(acc)
        qf = torch.round(xs) + zp
    mask = (qf >= quant_min) & (qf <= quant_max)
    # The CPU kernel converts the unclamped value to an integer first: an infinity or a NaN
    # becomes INT64_MIN there (x86-64's conversion of an out-of-range value), so quant_min.
    qf = torch.where(torch.isfinite(qf), qf, torch.full_like(qf, float(quant_min)))
    # (clamped - zero_point) * scale in double, rounded once to the input's type. For float32
    # input with an integer zero point one float32 product is that rounding (an integer of at
    # most 16 bits times a float32 is exact in double); 16-bit input would round twice through
    # float32, a fractional zero point makes the difference inexact: those take float64.
    exact_in_f32 = x.dtype == torch.float32 and not zero_point.is_floating_point()
    out_acc = torch.float32 if exact_in_f32 else torch.float64
    out = (_clamp(qf, quant_min, quant_max).to(out_acc) - zp.to(out_acc)) * sc.to(out_acc)
    return out.to(x.dtype), mask


def fused_moving_avg_obs_fq_helper(x: Tensor, observer_on: Tensor, fake_quant_on: Tensor,
                                   running_min: Tensor, running_max: Tensor, scale: Tensor,
                                   zero_point: Tensor, averaging_const: float, quant_min: int,
                                   quant_max: int, ch_axis: int, per_row_fake_quant: bool = False,
                                   symmetric_quant: bool = False) -> tuple[Tensor, Tensor]:
    flags = (observer_on.cpu(), fake_quant_on.cpu())  # the CPU kernel reads both on the host too
    observe = int(flags[0].item())
    if per_row_fake_quant:
        y = x
        if x.dim() != 2:
            order = list(range(x.dim()))
            order[ch_axis], order[0] = 0, ch_axis
            y = x.permute(order).flatten(1)
        if observe and ch_axis != 0:
            raise RuntimeError("Per-channel FakeQuant in fused_moving_avg_obs_fake_quant is only "
                               "supported on axis == 0")
        size = x.shape[ch_axis]
        lo, hi = torch.aminmax(y, dim=1) if observe else (y.new_zeros(size), y.new_zeros(size))
        few = torch.stack([lo, hi], dim=1)  # [C, 2]: each row's min and max, nothing else
    else:
        lo, hi = torch.aminmax(x) if observe else (x.new_zeros(()), x.new_zeros(()))
        few = torch.stack([lo, hi])
    # PyTorch's CPU kernel over those numbers: the same running statistics and parameters
    host = [t.cpu() for t in (running_min, running_max, scale, zero_point)]
    torch.ops.aten._fused_moving_avg_obs_fq_helper(
        few.float().cpu(), *flags, *host, averaging_const,
        quant_min, quant_max, 0 if per_row_fake_quant else ch_axis, per_row_fake_quant,
        symmetric_quant)
    for dst, src in zip((running_min, running_max, scale, zero_point), host):
        if dst.shape != src.shape:
            dst.resize_(src.shape)
        dst.copy_(src)
    if not int(flags[1].item()):
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    if per_row_fake_quant:
        return per_channel_cachemask(x, scale, zero_point, ch_axis, quant_min, quant_max)
    enabled = torch.ones((), device=x.device)
    return per_tensor_cachemask_tensor_qparams(x, scale, zero_point, enabled, quant_min, quant_max)


def register() -> None:
    """Registers the four kernels for the device "tpu" (idempotent; not with
    TPUC_FAKE_QUANT_KERNELS=0)."""
    global _lib
    if _lib is not None or os.environ.get("TPUC_FAKE_QUANT_KERNELS") == "0":
        return
    _lib = _aten_impl.register({
        "fake_quantize_per_tensor_affine_cachemask": per_tensor_cachemask,
        "_fake_quantize_per_tensor_affine_cachemask_tensor_qparams":
            per_tensor_cachemask_tensor_qparams,
        "fake_quantize_per_channel_affine_cachemask": per_channel_cachemask,
        "_fused_moving_avg_obs_fq_helper": fused_moving_avg_obs_fq_helper,
    })
