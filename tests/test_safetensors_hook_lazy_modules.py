"""The safetensors post-import hook next to lazy modules (docs/serving.md, "The serving venv").

When safetensors is imported, the hook re-points modules that copied `safe_open` already. It
used `getattr(module, "safe_open", None)` on every module in sys.modules, which runs a lazy
module's __getattr__ (transformers' _LazyModule): in the serving venv that imported a missing
torchvision, or a half-initialised module, from inside the hook, and the import warned
"tpuc: integration hook for safetensors failed". The hook must read only module namespaces.
"""
from __future__ import annotations

import sys
import types
import warnings

import tpuc  # noqa: F401  (registers "tpu")
from tpuc.integrations import safetensors as shim


class _Lazy(types.ModuleType):
    touched: list[str]

    def __getattr__(self, name: str):  # what a lazy module does on a missing attribute
        self.touched.append(name)
        raise ImportError(f"cannot import name {name!r} (most likely due to a circular import)")


def test_patch_top_reads_no_lazy_attribute_and_repoints_copies() -> None:
    def safe_open(filename, framework, device="cpu"):  # stands in for the Rust safe_open
        return device

    top = types.ModuleType("fake_safetensors_top")
    top.safe_open = safe_open
    lazy = _Lazy("fake_lazy_module")
    lazy.touched = []
    copier = types.ModuleType("fake_copier")
    copier.safe_open = safe_open  # `from safetensors import safe_open` before the hook ran
    sys.modules.update({top.__name__: top, lazy.__name__: lazy, copier.__name__: copier})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            shim._patch_top(top)
        assert lazy.touched == []  # the lazy module's __getattr__ never ran
        assert getattr(top.safe_open, "_tpuc_patched", False)
        assert copier.safe_open is top.safe_open  # the copy now goes through the shim
        assert top.safe_open("f", "pt", device="tpu") == 0  # "tpu" -> the accelerator index
        assert top.safe_open("f", "pt", device="cpu") == "cpu"
    finally:
        for m in (top, lazy, copier):
            sys.modules.pop(m.__name__, None)
