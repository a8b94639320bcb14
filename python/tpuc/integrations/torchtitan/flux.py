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
- The same mode on the CPU (``CpuRandomStream("cpu")``, every FLUX run of the CPU reference):
  the CPU generator gives other values for a float64 or bf16 draw than for a float32 one, so
  the float64 reference trained on other noise than the float32 runs (a 5% loss difference
  at step 1, which made the float64-derived bound loose). Every floating draw of either mode
  is made in float32 and cast to its dtype, so float64, float32 and bf16 runs, "tpu" and CPU,
  train on the same noise.
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


def _draw_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a draw is made in: float32 for every other floating dtype. The CPU generator
    gives other values in float64 than in float32 (53-bit uniforms) and in bfloat16, so a
    float64 reference or a bf16 run would train on other noise than the float32 run; drawn in
    float32 and cast, every run trains on the float32 run's noise (rounded to its dtype)."""
    return torch.float32 if dtype.is_floating_point else dtype


class CpuRandomStream(TorchFunctionMode):
    """Random draws aimed at ``device_type`` are made on the CPU's generator in float32 (see
    :func:`_draw_dtype`), then cast and copied. ``"tpu"`` (``--tpuc.cpu_rng=1``): "tpu"'s draws
    come from the CPU stream; ``"cpu"`` (the CPU reference runs of FLUX): the CPU's own float64
    and bf16 draws are made in float32 and cast, float32 draws are left as they are."""

    def __init__(self, device_type: str = "tpu"):
        super().__init__()
        self.device_type = device_type

    def _plain_on_device(self, t: Any) -> bool:
        return type(t) in (torch.Tensor, torch.nn.Parameter) and t.device.type == self.device_type

    def _on_device(self, dev: Any) -> bool:
        if dev is None:  # no device named: the default (CPU) device
            return self.device_type == "cpu"
        return torch.device(dev).type == self.device_type

    def _untouched(self, dtype: torch.dtype) -> bool:
        """On the CPU a draw in its own dtype that float32 would not change runs as it is."""
        return self.device_type == "cpu" and _draw_dtype(dtype) == dtype

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = dict(kwargs or {})
        if kwargs.get("generator") is None:
            t = args[0] if args else kwargs.get("tensor")
            if getattr(func, "__module__", None) == "torch.nn.init" and self._plain_on_device(t) \
                    and not self._untouched(t.dtype):
                # an init function (kaiming_uniform_, ...; it passes its tensor as tensor=): its
                # own uniform_/normal_ would run inside this handler, where the mode is off, and
                # draw from the device generator (or in the tensor's own dtype)
                tmp = t.detach().cpu().to(_draw_dtype(t.dtype))
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
                dtype = kwargs.pop("dtype", None) or src.dtype
                if self._on_device(dev) and not self._untouched(dtype):
                    rg = kwargs.pop("requires_grad", False)
                    kwargs.pop("memory_format", None)
                    kwargs.pop("layout", None)
                    tmp = torch.empty(src.shape, dtype=_draw_dtype(dtype))
                    out = func(tmp, *args[1:], **kwargs).to(device=dev, dtype=dtype)
                    return out.requires_grad_(rg)
                kwargs.update(device=dev, dtype=dtype)
            elif func in _FACTORY and self._on_device(kwargs.get("device")):
                dtype = kwargs.get("dtype") or torch.get_default_dtype()
                if not self._untouched(dtype):
                    dev = kwargs.pop("device", None) or "cpu"
                    rg = kwargs.pop("requires_grad", False)
                    kwargs["dtype"] = _draw_dtype(dtype)
                    out = func(*args, device="cpu", **kwargs).to(device=dev, dtype=dtype)
                    return out.requires_grad_(rg)
            elif func in _INPLACE and self._plain_on_device(args[0]) \
                    and not self._untouched(args[0].dtype):  # plain tensors (a DTensor passes)
                t = args[0]
                tmp = torch.empty(t.shape, dtype=_draw_dtype(t.dtype))
                func(tmp, *args[1:], **kwargs)
                with torch.no_grad():
                    t.copy_(tmp)
                return t
        return func(*args, **kwargs)


def enable_cpu_random_stream(device_type: str = "tpu") -> CpuRandomStream:
    """Enters the mode for the rest of the process (the launcher runs one training)."""
    mode = CpuRandomStream(device_type)
    mode.__enter__()
    return mode
