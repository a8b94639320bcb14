"""tpuc: PyTorch on TPUs (and any PJRT plugin) with a native core in C.

``import torch`` loads tpuc through the ``torch.backends`` entry point
(``tpuc_entry.torch_autoload``) unless another accelerator (CUDA, XPU, MPS) is
available and nobody asked for "tpu" (python/tpuc_entry says why); ``import tpuc``
always registers. Afterwards the device "tpu" exists:
``torch.randn(4, 4, device="tpu")``, ``torch.tpu``.
Neither import ever fails because of tpuc: problems become a warning and
``torch.tpu.is_available()`` says False.
"""
from __future__ import annotations

import atexit
import sys
import warnings

__version__ = "0.1.0"

_registered = False


def _register() -> None:
    """Registers the device "tpu" with PyTorch (idempotent)."""
    global _registered
    if _registered:
        return
    import os

    import torch

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # XLA's INFO lines off (docs/environment.md)
    from . import _host_heap, _plugin, _xla_flags

    missing = ""
    try:
        choice: _plugin.PluginChoice | None = _plugin.find_plugin()
    except _plugin.PluginNotFoundError as e:
        choice, missing = None, str(e)
    # before anything starts the plugin's threads (see _host_heap)
    _host_heap.apply(choice is not None and _plugin.is_cpu_plugin(choice))
    # before the plugin reads XLA_FLAGS (its first compile)
    _xla_flags.apply(choice is not None and _plugin.is_cpu_plugin(choice))
    try:
        from .distributed import apply_launch_environment  # torchrun: tpu:LOCAL_RANK exists

        apply_launch_environment(choice is not None and _plugin.is_cpu_plugin(choice))
    except Exception:  # a torch built without torch.distributed: single-device use unaffected
        pass
    from . import _C

    _C._set_plugin(choice.path if choice else "", missing)
    # before the C exit handlers destroy LLVM's statics under a compile still running
    atexit.register(_C._stop_background_compiles)
    from . import _exit

    # registered after, so it runs first: parks the autograd device threads before the
    # interpreter finalizes (_exit.py says why)
    atexit.register(_exit.park)

    if torch._C._get_privateuse1_backend_name() != "tpu":
        torch.utils.rename_privateuse1_backend("tpu")
    if not hasattr(torch, "tpu"):
        from . import device

        torch._register_device_module("tpu", device)
        # `import torch.tpu.amp` / `from torch.tpu.amp import autocast`, as for torch.cuda
        sys.modules.setdefault("torch.tpu.amp", device.amp)
        sys.modules.setdefault("torch.tpu.nvtx", device.nvtx)
    if not hasattr(torch.Tensor, "is_tpu"):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
    _registered = True
    from . import (ctc, dynamo, eager, embedding_bag, fake_quant, fused_optim, grad_scaler,
                   matrix_exp, quantized_mm, weight_norm)

    fused_optim.register()  # Adam(W)(fused=True) on the device, not the CPU
    embedding_bag.register()  # nn.EmbeddingBag (sum, mean) on the device
    grad_scaler.register()  # torch.amp.GradScaler's unscale and scale update on the device
    weight_norm.register()  # nn.utils.weight_norm's fused kernels on the device
    matrix_exp.register()  # torch.linalg.matrix_exp on the device
    quantized_mm.register()  # int8 weight-only quantized matmul on the device
    fake_quant.register()  # quantization-aware training's fake-quantize kernels on the device
    ctc.register()  # F.ctc_loss on the device (lengths as tensors: one program for any lengths)
    from . import data_parallel

    data_parallel.register()  # nn.DataParallel over tpu devices (torch.nn.parallel.comm)
    from .integrations import accelerate as _accelerate_shim

    _accelerate_shim.install()  # device_map="auto" and Accelerator().device find "tpu"
    from .integrations import safetensors as _safetensors_shim

    _safetensors_shim.install()  # safetensors.torch.load_file(..., device="tpu")
    from .integrations import torchrec as _torchrec_shim

    _torchrec_shim.install()  # fbgemm/embedding-bag kernels on "tpu" once torchrec is imported

    if os.environ.get("TPUC_EAGER"):
        eager.apply_environment()
    _warn_beside_another_accelerator()
    try:
        dynamo.register()  # torch.compile(backend="tpu")
        from . import compile_default

        compile_default.install()  # torch.compile(model) on "tpu" tensors: backend "tpu"
    except Exception as e:  # dynamo unavailable: eager use is unaffected
        warnings.warn(f"tpuc: torch.compile backend 'tpu' not registered: {e}", RuntimeWarning)
    try:
        from . import distributed

        distributed.register()  # c10d backend "tpu_dist" for the device "tpu"
    except Exception as e:  # torch.distributed unusable: single-device use is unaffected
        warnings.warn(f"tpuc: c10d backend 'tpu_dist' not registered: {e}", RuntimeWarning)


def _warn_beside_another_accelerator() -> None:
    """Registering "tpu" makes it PyTorch's accelerator (python/tpuc_entry says why): say so
    once where CUDA (or XPU, MPS) is available too, since CUDA code in this process changes."""
    try:
        from tpuc_entry import other_accelerators

        found = other_accelerators()
    except Exception:  # noqa: BLE001
        return
    if found:
        warnings.warn(
            f"tpuc: the device 'tpu' is registered while {' and '.join(found)} is available: "
            f"PyTorch now reports 'tpu' as torch.accelerator in this process, and autograd's "
            f"stream bookkeeping for {found[0]} tensors follows it (a backward on {found[0]} can "
            "fail with an 'opt_ready_stream' assertion). Keep tpu and "
            f"{found[0]} work in separate processes; without `import tpuc`, TPUC_ENABLE or "
            "TPUC_PLATFORM, `import torch` leaves 'tpu' unregistered on this machine "
            "(docs/install.md).", RuntimeWarning, stacklevel=3)


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group, called by ``import torch``."""
    try:
        _register()
    except Exception as e:  # never break `import torch`
        warnings.warn(
            f"tpuc: the device 'tpu' could not be registered ({type(e).__name__}: {e}); "
            "reinstall tpuc against this torch (pip install --no-build-isolation .)",
            RuntimeWarning,
            stacklevel=2,
        )


try:  # `import tpuc` registers too, when torch is installed
    import torch as _torch  # noqa: F401
except ImportError:
    pass
else:
    _autoload()
