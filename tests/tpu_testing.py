"""Shared helpers for the device tests (imported by tests/test_*.py).

The reference is always PyTorch on the CPU with the same data. The `native`
fixture runs a test twice: through the op engine (ops with a lowering run on
the device) and with every op forced through the CPU fallback (as
TPUC_NATIVE=0 does), so the glue's own paths are checked either way."""
from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
import torch

import tpuc  # noqa: F401  (registers "tpu" even with TORCH_DEVICE_BACKEND_AUTOLOAD=0)
from tpuc import _C


@pytest.fixture(autouse=True)
def quiet_fallback_warnings() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="tpuc: .* runs on the CPU")
        yield


@pytest.fixture(params=[True, False], ids=["native", "cpu-fallback"])
def native(request: pytest.FixtureRequest) -> Iterator[bool]:
    before = _C._native_enabled()
    _C._set_native_enabled(request.param)
    try:
        yield request.param
    finally:
        _C._set_native_enabled(before)


def assert_same(tpu: torch.Tensor, ref: torch.Tensor, **tol: float) -> None:
    """tpu (a tpu tensor) equals ref (a CPU tensor): device, dtype, shape, values."""
    assert tpu.device.type == "tpu", tpu.device
    assert tpu.dtype == ref.dtype, (tpu.dtype, ref.dtype)
    assert tpu.shape == ref.shape, (tpu.shape, ref.shape)
    got = tpu.cpu()
    if tol:
        torch.testing.assert_close(got, ref, **tol)
    else:
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6, equal_nan=True)


def fallback_counts() -> dict[str, int]:
    """CPU fallbacks so far, op name -> calls (torch.tpu.stats()["fallbacks"])."""
    return dict(torch.tpu.stats()["fallbacks"])


def new_fallbacks(before: dict[str, int]) -> list[str]:
    """The ops that fell back since `before` (a fallback_counts())."""
    return sorted(k for k, v in fallback_counts().items() if v > before.get(k, 0))
