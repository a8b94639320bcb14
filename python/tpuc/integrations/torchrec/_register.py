"""Registers Python kernels for the device "tpu" (dispatch key PrivateUse1) under one operator
namespace, once per namespace; operators the installed library does not define are skipped."""
from __future__ import annotations

from typing import Callable, Sequence

import torch

_libs: dict[str, torch.library.Library] = {}


def register_kernels(namespace: str, kernels: Sequence[tuple[str, Callable[..., object]]]) -> list[str]:
    """Registers each (operator name, kernel) of ``namespace`` whose operator exists (idempotent:
    a second call registers nothing); returns the names of ``kernels``' registered operators."""
    ops = getattr(torch.ops, namespace)

    def defined(name: str) -> bool:
        try:
            getattr(ops, name)
        except (AttributeError, RuntimeError):
            return False
        return True

    names = [n for n, _ in kernels if defined(n)]
    if namespace not in _libs:
        lib = torch.library.Library(namespace, "IMPL")
        for name, fn in kernels:
            if name in names:
                lib.impl(name, fn, "PrivateUse1")
        _libs[namespace] = lib
    return names
