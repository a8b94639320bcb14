"""``torch.compile(model)`` without a backend on "tpu" tensors runs on the
"tpu" backend.

Shim for torch 2.13 (and the releases before it that map the device name
"tpu" to Inductor's Pallas backend): the default backend, Inductor, cannot
run "tpu" tensors of this PrivateUse1 device — its code generation for
"tpu" is Pallas/JAX, which fails on them. tpuc therefore wraps the default
backend's entry point (``torch._TorchCompileInductorWrapper.__call__``):
a graph whose example inputs, parameters or buffers include a "tpu" tensor
is compiled by ``tpuc.dynamo.tpu_backend`` (the same as
``backend="tpu"``); every other graph goes to Inductor unchanged. Inductor's
``mode=`` / ``options=`` do not apply to the "tpu" backend: a warning says so
once. ``TPUC_COMPILE_DEFAULT=inductor`` turns the wrapper off.
"""
from __future__ import annotations

import os
import warnings
from typing import Any

_installed = False
_warned = False


def _has_tpu(gm: Any, inputs: Any) -> bool:
    import torch

    for x in inputs or ():
        if isinstance(x, torch.Tensor) and x.device.type == "tpu":
            return True
    if isinstance(gm, torch.nn.Module):
        for t in list(gm.parameters()) + list(gm.buffers()):
            if t.device.type == "tpu":
                return True
    return False


def install() -> None:
    """Wraps the default backend (idempotent)."""
    global _installed
    if _installed or os.environ.get("TPUC_COMPILE_DEFAULT", "") == "inductor":
        return
    import torch

    cls = getattr(torch, "_TorchCompileInductorWrapper", None)
    if cls is None or not callable(getattr(cls, "__call__", None)):
        return  # another torch: nothing to wrap
    inductor_call = cls.__call__

    def __call__(self: Any, model_: Any, inputs_: Any, *args: Any, **kwargs: Any) -> Any:
        global _warned
        if _has_tpu(model_, inputs_):
            from . import dynamo

            if not _warned and (getattr(self, "config", None) or kwargs.get("config_patches")):
                _warned = True
                warnings.warn("tpuc: torch.compile on 'tpu' tensors uses the 'tpu' backend; "
                              "Inductor's mode/options are ignored", RuntimeWarning, stacklevel=2)
            return dynamo.tpu_backend(model_, inputs_)
        return inductor_call(self, model_, inputs_, *args, **kwargs)

    __call__.__wrapped__ = inductor_call  # type: ignore[attr-defined]
    cls.__call__ = __call__
    _installed = True
