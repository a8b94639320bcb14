"""What tpuc's Python kernels for ATen ops share (the modules that compose PyTorch's CPU/CUDA-only
kernels of device ops: grad_scaler, weight_norm, matrix_exp, quantized_mm, fake_quant, ctc): their
registration on the device "tpu" (PrivateUse1), skipping an op the installed torch does not
define, so that one torch version lacking one op (the 2.14.1 venv, vLLM's and SGLang's pinned
torch builds) loses that kernel, not the device; the C++ names of dtypes their errors quote as
PyTorch's do; and the float32 rounding of a Python float, as the CPU kernels' float parameters
take it."""
from __future__ import annotations

import struct
from typing import Callable

import torch


def register(kernels: dict[str, Callable[..., object]]) -> torch.library.Library:
    """A library holding each defined op's kernel (keep it alive: dropping it unregisters)."""
    lib = torch.library.Library("aten", "IMPL")
    for name, fn in kernels.items():
        if hasattr(torch.ops.aten, name):
            lib.impl(name, fn, "PrivateUse1")
    return lib


_CPP_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.bfloat16: "BFloat16",
              torch.float16: "Half", torch.int64: "Long", torch.int32: "Int", torch.int16: "Short",
              torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool"}


def scalar_type_name(dtype: torch.dtype) -> str:
    """The name PyTorch's C++ errors give a dtype ("Float", "Long", ...)."""
    return _CPP_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def to_float32(v: float) -> float:
    """v rounded to float32 (a C++ `float` parameter given a Python float)."""
    return struct.unpack("f", struct.pack("f", v))[0]
