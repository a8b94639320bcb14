"""The entry points other programs call: PyTorch's device-backend autoload (``import torch``),
vLLM's and SGLang's platform plugins. Each first decides whether the device "tpu" should
exist in this process, without importing tpuc, because registering "tpu" cannot be undone
and changes the rest of PyTorch: ``at::accelerator::getAccelerator()`` returns PrivateUse1
whenever a PrivateUse1 backend name is registered (PyTorch 2.11-2.15, ATen/
DeviceAccelerator.cpp), so ``torch.accelerator``, autograd's stream bookkeeping and the
libraries that ask PyTorch for "the" accelerator (transformers, accelerate) would switch
from CUDA to "tpu" on a CUDA machine just because tpuc is installed.

The policy (docs/install.md, "Beside another accelerator"):

1. ``TPUC_ENABLE=1`` or ``TPUC_PLATFORM`` set (tpu, cuda or cpu): register ("asked for").
2. ``TPUC_ENABLE=0``: do not register.
3. A TPU attached (``/dev/accel*`` or ``/dev/vfio/<n>``, as on Cloud TPU VMs): register.
4. Another accelerator available (CUDA or ROCm, XPU, MPS): do not register; ``import tpuc``
   registers it later on purpose, and then warns that "tpu" is now PyTorch's accelerator.
5. Otherwise (CPU-only machines, CI): register, as before.

An explicit ``import tpuc`` always registers: importing the package is asking for it.
This module imports nothing of tpuc's until the decision is yes.
"""
from __future__ import annotations

import glob
import os
from typing import Callable

decision: tuple[bool, str] | None = None  # the last autoload decision, for `tpuc info`


def _flag(name: str) -> str:
    return os.environ.get(name, "").strip().lower()


def tpu_attached() -> bool:
    """A Cloud TPU's device files (TPU VMs expose /dev/accel<n> or /dev/vfio/<n>)."""
    return bool(glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/vfio/[0-9]*"))


def other_accelerators() -> list[str]:
    """The accelerators PyTorch itself can use in this process (without creating a context:
    torch.cuda.is_available() counts devices only)."""
    import torch

    found = []
    try:
        if (torch.version.cuda or getattr(torch.version, "hip", None)) and torch.cuda.is_available():
            found.append("ROCm" if getattr(torch.version, "hip", None) else "CUDA")
    except Exception:  # noqa: BLE001 — a broken CUDA install is not an accelerator
        pass
    for name, probe in (("XPU", lambda: torch.xpu.is_available()),
                        ("MPS", lambda: torch.backends.mps.is_available())):
        try:
            if probe():
                found.append(name)
        except Exception:  # noqa: BLE001
            pass
    return found


def decide(env: dict[str, str] | None = None, attached: Callable[[], bool] = tpu_attached,
           others: Callable[[], list[str]] = other_accelerators) -> tuple[bool, str]:
    """(register "tpu" now?, why) for an implicit load (import torch, a serving plugin)."""
    env = os.environ if env is None else env
    enable = env.get("TPUC_ENABLE", "").strip().lower()
    platform = env.get("TPUC_PLATFORM", "").strip().lower()
    if enable in ("1", "on", "true", "yes"):
        return True, "TPUC_ENABLE=1"
    if platform:
        return True, f"TPUC_PLATFORM={platform}"
    if enable in ("0", "off", "false", "no"):
        return False, "TPUC_ENABLE=0"
    if attached():
        return True, "a TPU is attached"
    found = others()
    if found:
        return False, (f"{' and '.join(found)} available: 'tpu' not registered, so that PyTorch "
                       f"keeps {found[0]} as its accelerator (import tpuc, TPUC_ENABLE=1 or "
                       "TPUC_PLATFORM registers it)")
    return True, "no other accelerator"


def torch_autoload() -> None:
    """Entry point of ``torch.backends`` (called by ``import torch``)."""
    global decision
    try:
        decision = decide()
    except Exception as e:  # noqa: BLE001 — never break `import torch`
        decision = (True, f"policy failed ({type(e).__name__}: {e}): registered as before")
    if decision[0]:
        import tpuc  # noqa: F401  (registers "tpu")


def _serving_plugin(module: str) -> str | None:
    global decision
    decision = decide()
    if not decision[0]:
        return None
    import importlib

    return importlib.import_module(module).register()


def vllm_platform() -> str | None:
    """Entry point of ``vllm.platform_plugins``: tpuc's platform only where "tpu" is wanted."""
    return _serving_plugin("tpuc.integrations.vllm")


def sglang_platform() -> str | None:
    """Entry point of ``sglang.srt.platforms``."""
    return _serving_plugin("tpuc.integrations.sglang")
