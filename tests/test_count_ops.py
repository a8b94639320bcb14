"""torch.histc and torch.isin on "tpu" (csrc/core/lower/count.c): on the
device (no fallback), equal to the CPU; for integer histc, which the CPU has
no kernel for (CUDA has), equal to the CPU's float64 histc of the same values
(exact: see tests/core/test_lower_count.py). And when the CPU fallback cannot
run an op for a dtype, the error says it is tpuc's gap, not the user's."""
from __future__ import annotations

import pytest
import torch

from tpu_testing import fallback_counts, new_fallbacks, quiet_fallback_warnings  # noqa: F401
from tpuc import _C


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_histc_int_on_device(dtype: torch.dtype) -> None:
    x = torch.randint(0, 8, (40, 2), generator=torch.Generator().manual_seed(0)).to(dtype)
    before = fallback_counts()
    got = torch.histc(x.to("tpu"), bins=8, min=0, max=7)
    assert new_fallbacks(before) == []
    assert got.device.type == "tpu" and got.dtype == dtype
    ref = torch.histc(x.double(), bins=8, min=0, max=7)
    torch.testing.assert_close(got.cpu().double(), ref, rtol=0, atol=0)
    out = torch.empty(8, dtype=dtype, device="tpu")
    torch.histc(x.to("tpu"), bins=8, min=0, max=7, out=out)
    torch.testing.assert_close(out.cpu(), got.cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_histc_float_on_device(dtype: torch.dtype) -> None:
    x = torch.randn(200, generator=torch.Generator().manual_seed(1)).to(dtype)
    before = fallback_counts()
    got = torch.histc(x.to("tpu"), bins=10, min=-2, max=2)
    assert new_fallbacks(before) == []
    torch.testing.assert_close(got.cpu(), torch.histc(x, bins=10, min=-2, max=2), rtol=0, atol=0)


def test_isin_on_device() -> None:
    e = torch.tensor([[3, 5, 7], [1, 2, 50256]])
    t = torch.tensor([50256, 2])
    before = fallback_counts()
    got = torch.isin(e.to("tpu"), t.to("tpu"))
    inv = torch.isin(e.to("tpu"), t.to("tpu"), invert=True)
    sc = torch.isin(e.to("tpu"), 7)
    assert new_fallbacks(before) == []
    torch.testing.assert_close(got.cpu(), torch.isin(e, t))
    torch.testing.assert_close(inv.cpu(), torch.isin(e, t, invert=True))
    torch.testing.assert_close(sc.cpu(), torch.isin(e, 7))


def test_cpu_fallback_without_a_dtype_kernel_says_it_is_tpucs_gap() -> None:
    # With every op forced to the CPU (as TPUC_NATIVE=0), int histc reaches
    # the CPU kernel, which has none for Int: NotImplementedError, naming
    # the op and saying what to do.
    before = _C._native_enabled()
    _C._set_native_enabled(False)
    try:
        with pytest.raises(NotImplementedError) as ei:
            torch.histc(torch.tensor([1, 2], dtype=torch.int32, device="tpu"), bins=2, min=0, max=2)
    finally:
        _C._set_native_enabled(before)
    msg = str(ei.value)
    assert "aten::histc" in msg and "gap in tpuc" in msg and "not implemented for 'Int'" in msg
