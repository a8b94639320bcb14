"""Activation checkpointing's random-state operators for the device "tpu".

Compatibility shim (torch 2.13): when a compiled model uses
``torch.utils.checkpoint``, AOTAutograd's partitioner wraps every op tagged
``nondeterministic_seeded`` in a recomputed region (dropout, and the fused
attention op, which can draw dropout bits) into the higher-order operators
``run_and_save_rng_state`` (forward: keep the generator state, run the op) and
``run_with_rng_state`` (backward: run the op again from that state, then
restore the generator). torch/_prims/rng_prims.py gives them kernels for
cpu, cuda, hpu and xpu only, chosen from a closed table, so compiling such a
model for "tpu" failed with ``AssertionError: Backend not supported for tpu``.
This module adds the device's kernels (the PrivateUse1 dispatch key) and
extends the backend-select and fake-tensor kernels with "tpu", leaving every
other device's behaviour as it was.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

_installed = False


def _tpu_index(args: Any, kwargs: dict) -> int | None:
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor) and a.device.type == "tpu":
            return a.device.index or 0
    return None


def _save(op: Callable, *args: Any, **kwargs: Any) -> Any:
    idx = _tpu_index(args, kwargs) or 0
    return torch.tpu.get_rng_state(idx), op(*args, **kwargs)


def _run_with(rng_state: torch.Tensor, op: Callable, *args: Any, **kwargs: Any) -> Any:
    idx = _tpu_index(args, kwargs) or 0
    current = torch.tpu.get_rng_state(idx)
    torch.tpu.set_rng_state(rng_state.cpu(), idx)
    try:
        return op(*args, **kwargs)
    finally:
        torch.tpu.set_rng_state(current, idx)


def _on_tpu(kernel: Callable, tpu_kernel: Callable, nstate: int) -> Callable:
    """`kernel` for other devices, `tpu_kernel` when the op's tensors are on tpu."""

    def select(*a: Any, **kw: Any) -> Any:
        if _tpu_index(a[nstate + 1:], kw) is not None:
            return tpu_kernel(*a, **kw)
        return kernel(*a, **kw)

    return select


def install() -> None:
    """Registers the tpu kernels (idempotent)."""
    global _installed
    if _installed:
        return
    from torch._C import DispatchKey
    from torch._higher_order_ops.utils import registered_hop_fake_fns
    from torch._prims import rng_prims

    save, run_with = rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state
    for hop, kern, nstate in ((save, _save, 0), (run_with, _run_with, 1)):
        if DispatchKey.PrivateUse1 not in hop.py_kernels:
            hop.py_impl(DispatchKey.PrivateUse1)(kern)
        old = hop.py_kernels.get(DispatchKey.BackendSelect)
        if old is not None:
            hop.py_kernels[DispatchKey.BackendSelect] = _on_tpu(old, kern, nstate)
        hop._dispatch_cache.clear()
    # the fake kernel of run_and_save_rng_state calls the closed table itself
    fake = registered_hop_fake_fns.get(save)
    if fake is not None:
        registered_hop_fake_fns[save] = _on_tpu(fake, _save, 0)
    _installed = True
