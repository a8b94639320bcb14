"""TorchRec on "tpu" (docs/torchrec.md): device kernels for the operators an
unsharded TorchRec model calls that tpuc's core does not lower, registered
when the project that defines them is imported (no third-party file edited).

- (``aten::_embedding_bag``, which nn.EmbeddingBag runs once per feature of an
  EmbeddingBagCollection, is a kernel of tpuc itself: python/tpuc/embedding_bag.py;)
- ``fbgemm_ops``: the ``fbgemm::`` jagged/permute operators (fbgemm-gpu-cpu
  1.9.0 has CPU/CUDA kernels only), registered when fbgemm_gpu is imported;
- ``tpu_kernel_ops``: the ``torchrec::`` lookups of TorchRec's own TPU compute
  kernel ("unfused_tpu", the sharded path), registered when TorchRec defines them;
- ``kjt_check``: ``check_kjt``, a clear error for a KeyedJaggedTensor whose
  lengths do not add up to its values; EmbeddingBagCollection.forward runs
  the same check (from the per-key lengths it reads anyway) on a "tpu" KJT.
"""
from __future__ import annotations

from types import ModuleType

from .. import _hooks
from .kjt_check import check_kjt

__all__ = ["check_kjt", "install"]


def _on_fbgemm(_mod: ModuleType) -> None:
    from . import fbgemm_ops

    fbgemm_ops.register()


def _on_embedding_modules(mod: ModuleType) -> None:
    from .kjt_check import patch_embedding_modules

    patch_embedding_modules(mod)


def _on_tpu_kernel_ops(_mod: ModuleType) -> None:
    from . import tpu_kernel_ops

    tpu_kernel_ops.register()


def install() -> None:
    """Registers the kernels when fbgemm_gpu / torchrec are imported (now, if they are)."""
    _hooks.on_import("fbgemm_gpu", _on_fbgemm)
    _hooks.on_import("torchrec.modules.embedding_modules", _on_embedding_modules)
    _hooks.on_import("torchrec.experimental.torch_tpu.pallas.ops", _on_tpu_kernel_ops)
