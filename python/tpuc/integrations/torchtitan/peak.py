"""Peak FLOPs of "tpu" for TorchTitan's MFU log.

TorchTitan 0.3.0's ``torchtitan.tools.utils.get_peak_flops(device_name)`` knows GPU and
Neuron names and returns A100's 312e12 for any other, which makes MFU meaningless here.
:func:`install` replaces that module attribute (TorchTitan's metrics call it as
``utils.get_peak_flops``) with :func:`peak_flops`: the published bf16 dense peak per chip
for a TPU generation the plugin names, otherwise the measured peak of a large f32 matmul on
this device (the XLA CPU plugin's, on a machine without an accelerator), cached per process.
"""
from __future__ import annotations

import time
from typing import Callable, Optional

import torch

# Published bf16 dense peaks per chip (Google Cloud TPU documentation).
_TPU_PEAKS = (
    (("v7", "ironwood"), 2307e12),
    (("v6e", "v6 lite", "trillium"), 918e12),
    (("v5p",), 459e12),
    (("v5e", "v5 lite", "v5litepod"), 197e12),
    (("v4",), 275e12),
)

_measured: Optional[float] = None
_original: Optional[Callable[[str], float]] = None


def table_peak(device_name: str) -> Optional[float]:
    n = device_name.lower()
    if "tpu" not in n:
        return None
    for keys, value in _TPU_PEAKS:
        if any(k in n for k in keys):
            return value
    return None


def measured_peak(n: int = 1024, repeats: int = 5, per_round: int = 4) -> float:
    """FLOP/s of n x n f32 matmuls on "tpu": the best of ``repeats`` rounds of ``per_round``
    products each, timed to a device synchronize (after one warm-up). Measured in the strict
    eager mode whatever the process runs (under ``TPUC_EAGER=fused`` the ``per_round``
    identical products would be one fused program, which XLA may compute once: the
    titan_trainer benchmark saw a 4x higher "peak" there)."""
    global _measured
    if _measured is None:
        with torch.tpu.eager_mode("strict"):
            _measured = _measure(n, repeats, per_round)
    return _measured


def _measure(n: int, repeats: int, per_round: int) -> float:
    a = torch.randn(n, n, device="tpu")
    b = torch.randn(n, n, device="tpu")
    (a @ b).cpu()
    best = float("inf")
    for _ in range(repeats):
        torch.tpu.synchronize()
        t0 = time.perf_counter()
        outs = [a @ b for _ in range(per_round)]
        torch.tpu.synchronize()
        best = min(best, (time.perf_counter() - t0) / per_round)
        del outs
    return 2.0 * n**3 / best


def peak_flops(device_name: str) -> float:
    if "XLA" in device_name or "TPU" in device_name.upper():
        return table_peak(device_name) or measured_peak()
    assert _original is not None
    return _original(device_name)


def install() -> None:
    global _original
    import torchtitan.tools.utils as tt_utils

    if tt_utils.get_peak_flops is not peak_flops:
        _original = tt_utils.get_peak_flops
        tt_utils.get_peak_flops = peak_flops
