"""``torch.tpu.amp``: the old spelling of mixed precision, as ``torch.cuda.amp``.

Scripts written before ``torch.amp`` took a device argument say
``torch.cuda.amp.autocast()`` and ``torch.cuda.amp.GradScaler()``; with "cuda"
replaced by "tpu" they reach these. Like ``torch.cuda.amp`` (PyTorch 2.4 on),
each warns that it is deprecated and hands over to ``torch.amp`` with device
"tpu": float16 by default, as on CUDA."""
from __future__ import annotations

import functools
import warnings
from typing import Any, Callable

import torch

__all__ = ["autocast", "GradScaler", "custom_fwd", "custom_bwd"]


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"`torch.tpu.amp.{old}` is deprecated. Please use `{new}` instead.",
                  FutureWarning, stacklevel=3)


class autocast(torch.amp.autocast_mode.autocast):
    """``torch.autocast("tpu", ...)`` with ``torch.cuda.amp.autocast``'s arguments."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16,
                 cache_enabled: bool = True) -> None:
        _deprecated("autocast(args...)", "torch.amp.autocast('tpu', args...)")
        super().__init__("tpu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler("tpu", ...)`` with ``torch.cuda.amp.GradScaler``'s arguments."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True) -> None:
        _deprecated("GradScaler(args...)", "torch.amp.GradScaler('tpu', args...)")
        super().__init__("tpu", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)


def custom_fwd(fwd: Callable[..., Any] | None = None, *,
               cast_inputs: torch.dtype | None = None) -> Any:
    """``torch.amp.custom_fwd(device_type="tpu", ...)``."""
    _deprecated("custom_fwd(args...)", "torch.amp.custom_fwd(args..., device_type='tpu')")
    if fwd is None:
        return functools.partial(torch.amp.custom_fwd, device_type="tpu", cast_inputs=cast_inputs)
    return torch.amp.custom_fwd(fwd, device_type="tpu", cast_inputs=cast_inputs)


def custom_bwd(bwd: Callable[..., Any]) -> Any:
    """``torch.amp.custom_bwd(device_type="tpu")``."""
    _deprecated("custom_bwd(args...)", "torch.amp.custom_bwd(args..., device_type='tpu')")
    return torch.amp.custom_bwd(bwd, device_type="tpu")
