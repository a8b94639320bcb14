"""Integration hooks (tpuc/integrations/_hooks.py) on a module that is half imported when the
hook is installed: `from accelerate import Accelerator` before `import torch` runs
accelerate/accelerator.py, whose `import torch` loads tpuc before `Accelerator` exists."""
from __future__ import annotations

import importlib
import importlib.machinery
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from tpuc.integrations import _hooks


def _write(d: Path, name: str, body: str) -> None:
    (d / f"{name}.py").write_text(textwrap.dedent(body))


@pytest.fixture
def modules(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    sys.path.insert(0, str(tmp_path))

    def undo() -> None:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n.startswith("hooktest_")]:
            del sys.modules[name]
        for name in [n for n in _hooks._hooks if n.startswith("hooktest_")]:
            del _hooks._hooks[name]
    request.addfinalizer(undo)
    return tmp_path


def test_hook_on_half_imported_module_runs_when_its_import_finishes(modules: Path) -> None:
    """The module installs a hook on itself half way (as torch's autoload of tpuc does for
    accelerate): the hook sees the whole module, once, and the spec is a plain one again."""
    seen: list[tuple[bool, bool]] = []

    def hook(mod: ModuleType) -> None:
        seen.append((hasattr(mod, "EARLY"), hasattr(mod, "LATE")))

    _write(modules, "hooktest_half", """
        import sys
        EARLY = 1
        sys.modules["tests_hook_fn"](__name__)
        LATE = 2
    """)
    sys.modules["tests_hook_fn"] = lambda name: _hooks.on_import(name, hook)  # type: ignore
    try:
        mod = importlib.import_module("hooktest_half")
    finally:
        del sys.modules["tests_hook_fn"]
    assert seen == [(True, True)]
    assert type(mod.__spec__) is importlib.machinery.ModuleSpec
    assert not _hooks._deferred


def test_hook_on_a_failed_half_import_does_not_run(modules: Path) -> None:
    seen: list[ModuleType] = []
    _write(modules, "hooktest_fails", """
        import sys
        sys.modules["tests_hook_fn"](__name__)
        raise ImportError("this module fails on purpose")
    """)
    sys.modules["tests_hook_fn"] = lambda name: _hooks.on_import(name, seen.append)  # type: ignore
    try:
        with pytest.raises(ImportError, match="on purpose"):
            importlib.import_module("hooktest_fails")
    finally:
        del sys.modules["tests_hook_fn"]
    assert seen == [] and not _hooks._deferred


def test_hook_on_a_whole_module_runs_at_once(modules: Path) -> None:
    seen: list[ModuleType] = []
    _write(modules, "hooktest_whole", "X = 1\n")
    mod = importlib.import_module("hooktest_whole")
    _hooks.on_import("hooktest_whole", seen.append)
    assert seen == [mod]


@pytest.mark.parametrize("order", ["accelerate first", "torch first"])
def test_accelerate_fp16_on_tpu_whichever_is_imported_first(order: str) -> None:
    """A user's script starting `from accelerate import Accelerator`: before the fix the shim
    saw a half-imported accelerate.accelerator, warned, and fp16 on "tpu" raised accelerate's
    "fp16 mixed precision requires a device in (...)"."""
    pytest.importorskip("accelerate")
    imports = ("from accelerate import Accelerator\nimport torch" if order == "accelerate first"
               else "import torch\nfrom accelerate import Accelerator")
    script = imports + textwrap.dedent("""
        a = Accelerator(mixed_precision="fp16")
        print(a.device.type, a.mixed_precision, type(a.scaler).__name__)
    """)
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="1")
    got = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", script],
                         capture_output=True, text=True, timeout=120, env=env)
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.split() == ["tpu", "fp16", "GradScaler"]
