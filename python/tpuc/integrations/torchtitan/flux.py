"""TorchTitan 0.3.0's FLUX recipe (``--module flux``) on "tpu" and in the CPU reference run.

Two items, each applied by the launcher (train.py) only for ``--module flux``:

- :func:`apply_load_shim` (compatibility, torchtitan 0.3.0 + safetensors 0.8): the FLUX
  trainer loads its autoencoder with ``safetensors.torch.load_file(path, device=str(device))``
  where ``device`` is the trainer's ``torch.device("<type>:<local rank>")``; safetensors
  accepts "cpu" but refuses "cpu:0" (``SafetensorError: device cpu:0 is invalid``), so the
  CPU reference run could not start. The shim passes "cpu" for any "cpu:N".
- :class:`CpuRandomStream` (``--tpuc.cpu_rng=1``, for comparisons with the CPU only): FLUX's
  training step draws its noise and timesteps on the device (``torch.randn_like``,
  ``torch.rand`` under ``torch.device``) and the autoencoder samples its latent
  (``randn_like``); "tpu"'s generator is not the CPU's, so a "tpu" run and the CPU run would
  train on different noise and their losses could not be compared. Under this mode every
  such draw (and ``uniform_``/``normal_`` on a "tpu" tensor, e.g. a module's init) is taken
  from the CPU's default generator with the CPU's shapes and dtypes and copied to the device,
  so the "tpu" run consumes the CPU stream exactly as the CPU run does. Off by default: a
  user's run draws on the device.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode


def apply_load_shim() -> None:
    from torchtitan.models.flux.model import autoencoder

    original: Callable[..., Any] = autoencoder.load_sft
    if getattr(original, "_tpuc_shim", False):
        return

    def load_sft(path: str, device: str = "cpu") -> dict[str, torch.Tensor]:
        dev = torch.device(device)
        return original(path, device="cpu" if dev.type == "cpu" else str(dev))

    load_sft._tpuc_shim = True  # type: ignore[attr-defined]
    autoencoder.load_sft = load_sft


_LIKE = {torch.randn_like, torch.rand_like}
_FACTORY = {torch.randn, torch.rand}
_INPLACE = {torch.Tensor.uniform_, torch.Tensor.normal_}


def _plain_on_device(t: Any) -> bool:
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.device.type == "tpu"


def _on_device(dev: Any) -> bool:
    return dev is not None and torch.device(dev).type == "tpu"


class CpuRandomStream(TorchFunctionMode):
    """Random draws aimed at "tpu" are made on the CPU's generator, then copied."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = dict(kwargs or {})
        if kwargs.get("generator") is None:
            t = args[0] if args else kwargs.get("tensor")
            if getattr(func, "__module__", None) == "torch.nn.init" and _plain_on_device(t):
                # an init function (kaiming_uniform_, ...; it passes its tensor as tensor=): its
                # own uniform_/normal_ would run inside this handler, where the mode is off, and
                # draw from the device generator
                tmp = t.detach().cpu()
                if args:
                    func(tmp, *args[1:], **kwargs)
                else:
                    func(**{**kwargs, "tensor": tmp})
                with torch.no_grad():
                    t.copy_(tmp)
                return t
            if func in _LIKE and isinstance(args[0], torch.Tensor):
                src = args[0]
                dev = kwargs.pop("device", None) or src.device
                if _on_device(dev):
                    rg = kwargs.pop("requires_grad", False)
                    kwargs.pop("memory_format", None)
                    kwargs.pop("layout", None)
                    dtype = kwargs.pop("dtype", None) or src.dtype
                    out = func(torch.empty(src.shape, dtype=dtype), *args[1:], **kwargs).to(dev)
                    return out.requires_grad_(rg)
            elif func in _FACTORY and _on_device(kwargs.get("device")):
                dev = kwargs.pop("device")
                rg = kwargs.pop("requires_grad", False)
                return func(*args, device="cpu", **kwargs).to(dev).requires_grad_(rg)
            elif func in _INPLACE and type(args[0]) in (torch.Tensor, torch.nn.Parameter) \
                    and _on_device(args[0].device):  # plain tensors (a DTensor passes through)
                t = args[0]
                tmp = torch.empty(t.shape, dtype=t.dtype)
                func(tmp, *args[1:], **kwargs)
                with torch.no_grad():
                    t.copy_(tmp)
                return t
        return func(*args, **kwargs)


def enable_cpu_random_stream() -> CpuRandomStream:
    """Enters the mode for the rest of the process (the launcher runs one training)."""
    mode = CpuRandomStream()
    mode.__enter__()
    return mode
