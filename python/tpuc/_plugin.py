"""Finding the PJRT plugin that stands behind the device "tpu".

Order: ``TPUC_PJRT_PLUGIN`` (a path) first; then ``TPUC_PLATFORM`` if set
(``tpu``, ``cuda`` or ``cpu``); otherwise libtpu when it is installed and a TPU
is attached; otherwise the XLA CPU plugin from the ``xla-cpu-pjrt`` wheel.
"""
from __future__ import annotations

import glob
import importlib.util
import os
from dataclasses import dataclass


class PluginNotFoundError(RuntimeError):
    """No usable PJRT plugin could be located."""


@dataclass(frozen=True)
class PluginChoice:
    path: str
    source: str  # how it was found: "TPUC_PJRT_PLUGIN", "libtpu", "xla-cpu-pjrt", ...


def _package_dir(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return os.path.dirname(spec.origin) if spec.origin else None


def _libtpu_path() -> str | None:
    env = os.environ.get("TPU_LIBRARY_PATH")
    if env and os.path.exists(env):
        return env
    d = _package_dir("libtpu")
    if d and os.path.exists(os.path.join(d, "libtpu.so")):
        return os.path.join(d, "libtpu.so")
    return None


def _tpu_attached() -> bool:
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def _cuda_path() -> str | None:
    for version in ("13", "12"):
        d = _package_dir(f"jax_plugins.xla_cuda{version}")
        if d and os.path.exists(os.path.join(d, "xla_cuda_plugin.so")):
            return os.path.join(d, "xla_cuda_plugin.so")
    return None


def _cpu_path() -> str | None:
    d = _package_dir("xla_plugins.xla_cpu_pjrt")
    if d and os.path.exists(os.path.join(d, "xla_cpu_pjrt.so")):
        return os.path.join(d, "xla_cpu_pjrt.so")
    return None


def is_cpu_plugin(choice: PluginChoice) -> bool:
    """Whether `choice` is the XLA CPU plugin (its device memory is the host heap)."""
    cpu = _cpu_path()
    return cpu is not None and os.path.realpath(choice.path) == os.path.realpath(cpu)


_HINTS = {
    "tpu": "pip install libtpu (on a Cloud TPU VM)",
    "cuda": "pip install jax-cuda13-pjrt (or jax-cuda12-pjrt)",
    "cpu": "pip install xla-cpu-pjrt",
}


def find_plugin() -> PluginChoice:
    """Returns the plugin to load, or raises PluginNotFoundError saying what to do."""
    explicit = os.environ.get("TPUC_PJRT_PLUGIN")
    if explicit:
        return PluginChoice(explicit, "TPUC_PJRT_PLUGIN")
    finders = {"tpu": _libtpu_path, "cuda": _cuda_path, "cpu": _cpu_path}
    platform = os.environ.get("TPUC_PLATFORM", "").strip().lower()
    if platform:
        if platform not in finders:
            raise PluginNotFoundError(
                f"TPUC_PLATFORM={platform!r} is not one of tpu, cuda, cpu; "
                "unset it or set TPUC_PJRT_PLUGIN=/path/to/plugin.so"
            )
        path = finders[platform]()
        if path is None:
            raise PluginNotFoundError(
                f"TPUC_PLATFORM={platform} but no {platform} PJRT plugin is installed: "
                f"{_HINTS[platform]}"
            )
        return PluginChoice(path, f"TPUC_PLATFORM={platform}")
    if _tpu_attached():
        path = _libtpu_path()
        if path:
            return PluginChoice(path, "libtpu")
    path = _cpu_path()
    if path:
        return PluginChoice(path, "xla-cpu-pjrt")
    raise PluginNotFoundError(
        "no PJRT plugin found: install the XLA CPU plugin (pip install xla-cpu-pjrt), "
        "libtpu on a TPU VM, or set TPUC_PJRT_PLUGIN=/path/to/plugin.so"
    )
