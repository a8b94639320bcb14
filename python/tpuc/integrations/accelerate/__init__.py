"""accelerate on "tpu" (written against accelerate 1.15.0; applied to any
version, each shim checking what it patches exists).

What accelerate lacks, and what this supplies from outside (`install()`,
called when tpuc registers the device; every patch happens when accelerate's
module is imported, through tpuc.integrations._hooks):

1. `accelerate.utils.modeling.get_max_memory()` (1.15) enumerates only
   npu/mlu/sdaa/musa/xpu/hpu/cuda devices, so `device_map="auto"` in
   transformers and `infer_auto_device_map` put everything on the CPU while
   "tpu" is available. Wrapped: with no max_memory given and no other
   accelerator found, it lists each tpu device by index (torch.device(i) is
   "tpu:i" once tpu is the accelerator) with its free memory
   (`torch.tpu.mem_get_info` where the device module has it; for the XLA
   CPU plugin, whose device memory is host memory, the host's available
   memory), and - as accelerate does for MPS and integrated CUDA devices,
   which share host RAM - no separate "cpu" budget then, so host memory is
   not counted twice.
2. `PartialState.default_device` (1.15) knows mps/mlu/sdaa/musa/npu/hpu/
   cuda/xpu/neuron and else returns cpu, so `Accelerator().device` and
   `PartialState().device` are cpu in a single process with "tpu" available
   (TRL then mixes devices). Wrapped: "tpu" when the original answer is cpu
   and torch.tpu is available. `Accelerator(cpu=True)` still gives cpu.
3. Multi-process (1.15): `PartialState._prepare_backend` picks a backend
   and DistributedType only for xla/mlu/sdaa/musa/npu/hpu/cuda/xpu/neuron;
   under torchrun (LOCAL_RANK set) with only "tpu" it answers
   DistributedType.NO, so every process trains alone with no gradient
   exchange and `num_processes` is 1 - silently wrong. Wrapped: where it
   answers NO, `cpu=False`, LOCAL_RANK is set, WORLD_SIZE > 1 and tpu is
   available, the backend is tpuc's c10d backend "tpu_dist" and the type
   DistributedType.MULTI_CPU - accelerate's one generic multi-process type:
   it initialises the process group from torchrun's environment and
   `prepare()` wraps the model in DDP without CUDA device ids, which is what
   a tpu module needs. `PartialState.set_device` would then put the process
   on "cpu"; wrapped: with the "tpu_dist" backend the device is
   tpu:(local rank % device count), as CUDA's is. Launch with
   `accelerate launch --multi_gpu --num_processes N` (or torchrun): without
   --multi_gpu, accelerate 1.15's launcher counts only CUDA-like devices and
   starts one process.
4. float16 mixed precision (1.15): `Accelerator(mixed_precision="fp16")` - what the
   transformers Trainer asks for with `fp16=True` - raises "fp16 mixed precision requires a
   device in ('xpu', 'cuda', ...) (not 'tpu')": the list of devices is a literal in
   `Accelerator.__init__`. Wrapped: on "tpu" (not with `cpu=True`) a float16 request is set up as
   bfloat16 (whose checks pass for any device), then turned into float16: the state's mixed
   precision, native AMP and a `torch.amp.GradScaler("tpu")` (with the GradScalerKwargs given;
   FSDP2's scaler for an FSDP2 plugin), as accelerate sets them up for CUDA. Its autocast then
   is `torch.autocast("tpu", dtype=torch.float16)`.
"""
from __future__ import annotations

import functools
import sys
from types import ModuleType
from typing import Any

from .. import _hooks

_PATCHED = "_tpuc_patched"


def _tpu_available() -> bool:
    import torch

    tpu = getattr(torch, "tpu", None)
    return bool(tpu is not None and tpu.is_available() and tpu.device_count() > 0)


def _free_memory(index: int) -> int:
    import torch

    mem_get_info = getattr(torch.tpu, "mem_get_info", None)
    if mem_get_info is not None:
        try:
            return int(mem_get_info(index)[0])
        except RuntimeError:  # the plugin reports no memory size
            pass
    import psutil

    return int(psutil.virtual_memory().available)


def _shares_host_memory() -> bool:
    import torch

    return torch.tpu.get_device_properties(0).platform == "cpu"


def _other_accelerator(max_memory: dict[Any, Any]) -> bool:
    return any(isinstance(k, int) for k in max_memory) or "mps" in max_memory


def _wrap_get_max_memory(orig: Any) -> Any:
    @functools.wraps(orig)
    def get_max_memory(max_memory: dict[Any, Any] | None = None) -> dict[Any, Any]:
        if not _tpu_available():
            return orig(max_memory)
        if max_memory is not None:
            return _normalise(max_memory, orig)
        found = orig(None)
        if _other_accelerator(found):
            return found
        import torch

        out: dict[Any, Any] = {i: _free_memory(i) for i in range(torch.tpu.device_count())}
        if not _shares_host_memory() and "cpu" in found:
            out["cpu"] = found["cpu"]
        return out

    setattr(get_max_memory, _PATCHED, True)
    return get_max_memory


def _normalise(max_memory: dict[Any, Any], orig: Any) -> dict[Any, Any]:
    """accelerate's own handling of a given max_memory (sizes as ints,
    devices ordered), checking integer devices against the tpu count rather
    than CUDA's (which warned "Device 0 is not available")."""
    import torch

    if any(isinstance(k, int) for k in max_memory) and torch.cuda.device_count() > 0:
        return orig(max_memory)  # a CUDA machine: accelerate's answer
    from accelerate.utils import convert_file_size_to_int

    sized = {k: convert_file_size_to_int(v) if isinstance(v, str) else v for k, v in max_memory.items()}
    n = torch.tpu.device_count()
    ints = sorted(k for k in sized if isinstance(k, int))
    for k in ints:
        if not 0 <= k < n:
            raise ValueError(f"Device {k} is not available, available tpu devices are {list(range(n))}")
    named = [k for k in ("mps", "cpu", "disk") if k in sized]
    for k in sized:
        if k not in ints and k not in named:
            raise ValueError(f"Device {k} is not recognized, available devices are integers (tpu), "
                             "'mps', 'cpu' and 'disk'")
    return {k: sized[k] for k in ints + named}


def _patch_modeling(mod: ModuleType) -> None:
    orig = getattr(mod, "get_max_memory", None)
    if orig is None or getattr(orig, _PATCHED, False):
        return
    new = _wrap_get_max_memory(orig)
    mod.get_max_memory = new
    # modules that already copied the function by name (when accelerate was
    # imported before tpuc)
    for name, attr in (("accelerate.utils", "get_max_memory"),
                       ("accelerate.big_modeling", "get_max_memory"),
                       ("transformers.integrations.accelerate", "accelerate_max_memory")):
        m = sys.modules.get(name)
        if m is not None and getattr(m, attr, None) is orig:
            setattr(m, attr, new)


def _patch_state(mod: ModuleType) -> None:
    cls = getattr(mod, "PartialState", None)
    prop = getattr(cls, "default_device", None) if cls is not None else None
    if not isinstance(prop, property) or getattr(prop.fget, _PATCHED, False):
        return
    orig = prop.fget

    @functools.wraps(orig)
    def default_device(self: Any) -> Any:
        dev = orig(self)
        if dev.type == "cpu" and _tpu_available():
            import torch

            return torch.device("tpu")
        return dev

    setattr(default_device, _PATCHED, True)
    cls.default_device = property(default_device, doc=prop.__doc__)


_BACKEND = "tpu_dist"


def _world_size() -> int:
    import os

    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def _patch_multiprocess(mod: ModuleType) -> None:
    cls = getattr(mod, "PartialState", None)
    prep = getattr(cls, "_prepare_backend", None) if cls is not None else None
    set_dev = getattr(cls, "set_device", None) if cls is not None else None
    dtype = getattr(getattr(mod, "DistributedType", None), "MULTI_CPU", None)
    if prep is None or set_dev is None or dtype is None or getattr(prep, _PATCHED, False):
        return
    no = mod.DistributedType.NO

    @functools.wraps(prep)
    def _prepare_backend(self: Any, cpu: bool = False, sagemaker_dp: bool = False,
                         backend: str | None = None) -> tuple[Any, Any]:
        import os

        got, kind = prep(self, cpu, sagemaker_dp, backend)
        if (kind == no and not cpu and not sagemaker_dp and backend in (None, _BACKEND)
                and int(os.environ.get("LOCAL_RANK", -1)) != -1 and _world_size() > 1
                and _tpu_available()):
            return _BACKEND, dtype
        return got, kind

    @functools.wraps(set_dev)
    def set_device(self: Any) -> None:
        if getattr(self, "device", None) is None and getattr(self, "backend", None) == _BACKEND:
            import torch

            index = max(0, int(self.local_process_index)) % torch.tpu.device_count()
            self.device = torch.device("tpu", index)
            torch.tpu.set_device(self.device)
            return
        set_dev(self)

    setattr(_prepare_backend, _PATCHED, True)
    cls._prepare_backend = _prepare_backend
    cls.set_device = set_device


def _wants_fp16(kwargs: dict[str, Any]) -> bool:
    import os

    asked = kwargs.get("mixed_precision")
    if asked is None:
        asked = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
    return str(getattr(asked, "value", asked)).lower() == "fp16"


def _patch_accelerator(mod: ModuleType) -> None:
    cls = getattr(mod, "Accelerator", None)
    init = getattr(cls, "__init__", None)
    if init is None or getattr(init, _PATCHED, False):
        return

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if args or kwargs.get("cpu") or not _wants_fp16(kwargs) or not _tpu_available():
            init(self, *args, **kwargs)
            return
        init(self, **dict(kwargs, mixed_precision="bf16"))
        if self.device.type != "tpu":  # another device was chosen after all: as asked
            raise ValueError(f"fp16 mixed precision: the device is {self.device.type!r}, not tpu")
        import torch

        self.state._mixed_precision = "fp16"
        self.native_amp = True
        scaler_kwargs = self.scaler_handler.to_kwargs() if self.scaler_handler is not None else {}
        fsdp2 = getattr(self, "is_fsdp2", False)
        get_fsdp2 = getattr(sys.modules.get("accelerate.utils.modeling"), "get_fsdp2_grad_scaler",
                            None) or getattr(mod, "get_fsdp2_grad_scaler", None)
        if fsdp2 and get_fsdp2 is not None:
            self.scaler = get_fsdp2(device="tpu", **scaler_kwargs)
        else:
            self.scaler = torch.amp.GradScaler("tpu", **scaler_kwargs)

    setattr(__init__, _PATCHED, True)
    cls.__init__ = __init__


def install() -> None:
    _hooks.on_import("accelerate.utils.modeling", _patch_modeling)
    _hooks.on_import("accelerate.state", _patch_state)
    _hooks.on_import("accelerate.state", _patch_multiprocess)
    _hooks.on_import("accelerate.accelerator", _patch_accelerator)
