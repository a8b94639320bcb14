"""Post-import hooks: run a function on a module right after it executes
(before any `from module import name` elsewhere copies its functions).

A meta-path finder wraps the loader of the named modules only; every other
import is untouched. Installing is idempotent; a hook on a module already
imported runs at once."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable
from types import ModuleType

_lock = threading.Lock()
_hooks: dict[str, list[Callable[[ModuleType], None]]] = {}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        _run(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name not in _hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


_finder = _Finder()


def _run(module: ModuleType) -> None:
    for fn in _hooks.get(module.__name__, []):
        try:
            fn(module)
        except Exception as e:  # a shim must never break the user's import
            import warnings

            warnings.warn(f"tpuc: integration hook for {module.__name__} failed: {e}", RuntimeWarning)


def on_import(name: str, fn: Callable[[ModuleType], None]) -> None:
    """Calls fn(module) when `name` is imported (now, if it already is)."""
    with _lock:
        _hooks.setdefault(name, []).append(fn)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
    mod = sys.modules.get(name)
    if mod is not None:
        try:
            fn(mod)
        except Exception as e:
            import warnings

            warnings.warn(f"tpuc: integration hook for {name} failed: {e}", RuntimeWarning)
