"""Float -> uint8 / int8 / int16 on "tpu" converts as PyTorch's CPU does (lower/util.c,
lx_convert_cpu): through int32 (int64 for float64 -> uint8), keeping the low bits, where XLA's
convert saturates. C leaves out-of-range conversions undefined; these are the results of
PyTorch's x86-64 build, which the CPU side of each test computes on this machine."""
from __future__ import annotations

import pytest
import torch

from tpu_testing import quiet_fallback_warnings  # noqa: F401

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
SMALL_INTS = [torch.uint8, torch.int8, torch.int16]

# in range, wrapped once or many times, halves (truncation toward zero), the edges of int32
_VALUES = [0.0, 1.7, -0.5, -8.2, 255.9, 256.0, 300.0, -129.0, -128.5, 127.9, 1e5, -1e5, 7e4,
           -7e4, 65535.0, 65536.5, -32769.0, 2.0**31 - 128, -(2.0**31)]


def _check(x: torch.Tensor, to: torch.dtype) -> None:
    got = x.to("tpu").to(to).cpu()
    assert torch.equal(got, x.to(to)), (x.dtype, to, x, got, x.to(to))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("to", SMALL_INTS)
def test_out_of_range_wraps_as_the_cpu(dtype: torch.dtype, to: torch.dtype) -> None:
    x = torch.tensor(_VALUES, dtype=torch.float64)
    if dtype == torch.float16:
        x = x[x.abs() < 65504]  # finite in float16 (CPU refuses the overflow in torch.tensor)
    _check(x.to(dtype), to)
    # the random [-9, 9] sample of the conformance sweep's `byte` entry
    r = torch.empty(500, dtype=torch.float64).uniform_(-9, 9, generator=torch.Generator().manual_seed(0))
    _check(r.to(dtype), to)


@pytest.mark.parametrize("dtype", FLOATS)
def test_byte_method_and_copy(dtype: torch.dtype) -> None:
    x = torch.tensor([-8.2, 300.0, 44.5, -1.0], dtype=dtype)
    assert x.to("tpu").byte().cpu().tolist() == x.byte().tolist() == [248, 44, 44, 255]
    out = torch.empty(4, dtype=torch.uint8, device="tpu")
    out.copy_(x.to("tpu"))
    assert out.cpu().tolist() == [248, 44, 44, 255]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("to", SMALL_INTS)
def test_nan_inf_and_beyond_int32(dtype: torch.dtype, to: torch.dtype) -> None:
    """Beyond the wider type's range, NaN and +-inf: x86-64's "integer indefinite" (its
    minimum) truncated, 0; float64 -> uint8 goes through int64 (3e9 + 7 -> 7)."""
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 3e9, -3e9, 1e20], dtype=dtype)
    _check(x, to)
    if dtype == torch.float64:
        _check(torch.tensor([3e9 + 7, -3e9 - 7, 2.0**40 + 9, 2.0**64], dtype=dtype), to)
