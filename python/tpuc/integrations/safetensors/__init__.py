"""safetensors on "tpu" (written against safetensors 0.8.0).

Its Rust loader accepts a fixed list of device names (cpu, cuda, mps, npu,
xpu, xla, mlu, musa, hpu) or an integer index, so
`load_file(path, device="tpu")` and `safe_open(path, "pt", device="tpu:1")`
fail with "device tpu is invalid". An integer index is handed to torch, for
which it means the current accelerator - "tpu" - so the shim rewrites a tpu
device ("tpu", "tpu:N", torch.device("tpu", N)) to its index before calling
safetensors. Applied to `safetensors.safe_open`, `safetensors.torch.safe_open`
and `safetensors.torch.load_file` when safetensors is imported.

`load_file(..., device=<tpu>)` loads on the CPU and moves each tensor with `.to()`:
safetensors 0.8 builds a device tensor as a uint8 buffer viewed as the stored dtype, and
tpuc's lowerings decline a float view of a uint8 storage, so every op reading such a weight
ran on the CPU fallback (a FLUX autoencoder loaded this way: each convolution)."""
from __future__ import annotations

import functools
import sys
from types import ModuleType
from typing import Any

from .. import _hooks

_PATCHED = "_tpuc_patched"


def _index(device: Any) -> Any:
    import torch

    if isinstance(device, (str, torch.device)):
        try:
            d = torch.device(device)
        except (RuntimeError, TypeError):
            return device
        if d.type == "tpu":
            return d.index if d.index is not None else torch.tpu.current_device()
    return device


def _is_tpu(device: Any) -> bool:
    import torch

    try:
        return isinstance(device, (str, torch.device)) and torch.device(device).type == "tpu"
    except (RuntimeError, TypeError):
        return False


def _wrap(fn: Any) -> Any:
    if getattr(fn, _PATCHED, False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if fn.__name__ == "load_file":
            dev = kwargs.pop("device", args[1] if len(args) >= 2 else "cpu")
            if _is_tpu(dev):
                import torch

                target = torch.device("tpu", _index(dev))
                return {k: v.to(target) for k, v in fn(args[0], device="cpu").items()}
            return fn(args[0], device=dev)
        if "device" in kwargs:
            kwargs["device"] = _index(kwargs["device"])
        elif fn.__name__ == "safe_open" and len(args) >= 3:
            args = (*args[:2], _index(args[2]), *args[3:])
        elif fn.__name__ == "load_file" and len(args) >= 2:
            args = (args[0], _index(args[1]), *args[2:])
        return fn(*args, **kwargs)

    setattr(wrapper, _PATCHED, True)
    return wrapper


def _patch_torch(mod: ModuleType) -> None:
    for name in ("load_file", "safe_open"):
        if hasattr(mod, name):
            setattr(mod, name, _wrap(getattr(mod, name)))


def _patch_top(mod: ModuleType) -> None:
    if hasattr(mod, "safe_open"):
        orig = mod.safe_open
        mod.safe_open = _wrap(orig)
        # Modules that copied it already. Only their own namespace is read (`vars`), never
        # `getattr`: a lazy module's __getattr__ (transformers' _LazyModule, ...) would import
        # its submodules here, in the middle of someone else's import -- in the serving venv
        # that raised "No module named 'torchvision'" or a circular-import error from inside
        # this hook.
        for m in list(sys.modules.values()):
            if m is None or m is mod:
                continue
            try:
                ns = vars(m)
            except TypeError:  # not a module-like object with a __dict__
                continue
            if ns.get("safe_open") is orig:
                try:
                    m.safe_open = mod.safe_open
                except Exception:
                    pass


def install() -> None:
    _hooks.on_import("safetensors", _patch_top)
    _hooks.on_import("safetensors.torch", _patch_torch)
