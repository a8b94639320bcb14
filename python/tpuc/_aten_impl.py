"""Registers tpuc's Python kernels for ATen ops on the device "tpu" (PrivateUse1), skipping an op
the installed torch does not define, so that one torch version lacking one op (the 2.14.1 venv,
vLLM's and SGLang's pinned torch builds) loses that kernel, not the device. Used by the modules
that compose PyTorch's CPU/CUDA-only kernels of device ops (grad_scaler, weight_norm,
matrix_exp, quantized_mm, fake_quant)."""
from __future__ import annotations

from typing import Callable

import torch


def register(kernels: dict[str, Callable[..., object]]) -> torch.library.Library:
    """A library holding each defined op's kernel (keep it alive: dropping it unregisters)."""
    lib = torch.library.Library("aten", "IMPL")
    for name, fn in kernels.items():
        if hasattr(torch.ops.aten, name):
            lib.impl(name, fn, "PrivateUse1")
    return lib
