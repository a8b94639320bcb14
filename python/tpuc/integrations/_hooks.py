"""Post-import hooks: run a function on a module right after it executes
(before any `from module import name` elsewhere copies its functions).

A meta-path finder wraps the loader of the named modules only; every other
import is untouched. Installing is idempotent; a hook on a module already
imported runs at once.

A module can also be half imported when its hook is installed: `from accelerate
import Accelerator` before `import torch` executes accelerate/accelerator.py,
whose `import torch` loads tpuc, which installs the hooks, before that module
has defined `Accelerator`. Such a hook runs when the module's import finishes:
the import system clears `spec._initializing` on the module's spec right after
executing it (CPython 3.8 to 3.14, importlib._bootstrap._load_unlocked), and a
subclass of ModuleSpec notices that assignment."""
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
        _call(fn, module)


def _call(fn: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        fn(module)
    except Exception as e:  # a shim must never break the user's import
        import warnings

        warnings.warn(f"tpuc: integration hook for {module.__name__} failed: {e}", RuntimeWarning)


class _SpecThatTells(importlib.machinery.ModuleSpec):
    """The spec of a half-imported module: when the import system marks it done
    (`_initializing = False`), its deferred hooks run and the spec's class is restored."""

    def __setattr__(self, attr: str, value: object) -> None:
        super().__setattr__(attr, value)
        if attr != "_initializing" or value:
            return
        object.__setattr__(self, "__class__", importlib.machinery.ModuleSpec)
        with _lock:
            waiting = _deferred.pop(self.name, [])
        module = sys.modules.get(self.name)
        if module is not None and getattr(module, "__spec__", None) is self:  # not a failed import
            for fn in waiting:
                _call(fn, module)


_deferred: dict[str, list[Callable[[ModuleType], None]]] = {}


def _defer(module: ModuleType, fn: Callable[[ModuleType], None]) -> bool:
    """Runs fn when the half-imported `module` finishes importing; False if it cannot tell."""
    spec = getattr(module, "__spec__", None)
    if spec is None or not getattr(spec, "_initializing", False):
        return False
    if type(spec) is importlib.machinery.ModuleSpec:
        try:
            object.__setattr__(spec, "__class__", _SpecThatTells)
        except TypeError:
            return False
    elif type(spec) is not _SpecThatTells:
        return False
    with _lock:
        _deferred.setdefault(module.__name__, []).append(fn)
    return True


def on_import(name: str, fn: Callable[[ModuleType], None]) -> None:
    """Calls fn(module) when `name` is imported (now, if it already is; when its import finishes,
    if it is half imported)."""
    with _lock:
        _hooks.setdefault(name, []).append(fn)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
    mod = sys.modules.get(name)
    if mod is not None and not _defer(mod, fn):
        _call(fn, mod)
