"""ctypes bindings to the C core (``libtpuc_core.so``) for what Python needs
without PyTorch: loading a plugin and describing it (``tpuc info``).

The PyTorch device itself talks to the core from C++ (csrc/torch/); this
module never imports torch.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field

_MAX_DIMS = 16


class _Status(ctypes.Structure):
    pass


_StatusP = ctypes.POINTER(_Status)


class _RuntimeOptions(ctypes.Structure):
    _fields_ = [
        ("plugin_path", ctypes.c_char_p),
        ("cpu_device_count", ctypes.c_int),
        ("cache_dir", ctypes.c_char_p),
        ("cache_max_bytes", ctypes.c_int64),
    ]


class _RuntimeInfo(ctypes.Structure):
    _fields_ = [
        ("plugin_path", ctypes.c_char_p),
        ("platform_name", ctypes.c_char_p),
        ("platform_version", ctypes.c_char_p),
        ("pjrt_api_major", ctypes.c_int),
        ("pjrt_api_minor", ctypes.c_int),
        ("xla_version", ctypes.c_int64),
        ("stablehlo_current", ctypes.c_int64 * 3),
        ("stablehlo_minimum", ctypes.c_int64 * 3),
        ("device_count", ctypes.c_int),
    ]


class _DeviceInfo(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_int),
        ("local_index", ctypes.c_int),
        ("kind", ctypes.c_char_p),
        ("description", ctypes.c_char_p),
    ]


class CoreError(RuntimeError):
    """An error reported by the C core; ``code`` is the tpuc_code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def library_path() -> str:
    override = os.environ.get("TPUC_CORE_LIB")
    if override:
        return override
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libtpuc_core.so")


_lib: ctypes.CDLL | None = None


def lib() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        # XLA logs INFO lines to stderr on every client creation; keep warnings.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        path = library_path()
        try:
            handle = ctypes.CDLL(path)
        except OSError as e:
            raise RuntimeError(
                f"tpuc's C core is missing or broken ({path}: {e}); reinstall tpuc "
                "(make setup, or pip install --no-build-isolation .)"
            ) from e
        handle.tpuc_status_code.restype = ctypes.c_int
        handle.tpuc_status_code.argtypes = [_StatusP]
        handle.tpuc_status_message.restype = ctypes.c_char_p
        handle.tpuc_status_message.argtypes = [_StatusP]
        handle.tpuc_status_destroy.restype = None
        handle.tpuc_status_destroy.argtypes = [_StatusP]
        handle.tpuc_runtime_create.restype = _StatusP
        handle.tpuc_runtime_create.argtypes = [
            ctypes.POINTER(_RuntimeOptions),
            ctypes.POINTER(ctypes.c_void_p),
        ]
        handle.tpuc_runtime_destroy.restype = None
        handle.tpuc_runtime_destroy.argtypes = [ctypes.c_void_p]
        handle.tpuc_runtime_info_get.restype = None
        handle.tpuc_runtime_info_get.argtypes = [ctypes.c_void_p, ctypes.POINTER(_RuntimeInfo)]
        handle.tpuc_device_info_get.restype = _StatusP
        handle.tpuc_device_info_get.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.POINTER(_DeviceInfo),
        ]
        _lib = handle
    return _lib


def _check(status: _StatusP) -> None:
    if status:
        l = lib()
        code = l.tpuc_status_code(status)
        message = (l.tpuc_status_message(status) or b"").decode("utf-8", "replace")
        l.tpuc_status_destroy(status)
        raise CoreError(code, message)


@dataclass
class DeviceDescription:
    index: int
    id: int
    kind: str
    description: str


@dataclass
class RuntimeDescription:
    plugin: str
    platform: str
    platform_version: str
    pjrt_api_version: str
    xla_version: int | None
    stablehlo_current: str | None
    stablehlo_minimum: str | None
    devices: list[DeviceDescription] = field(default_factory=list)


def _version3(v: ctypes.Array) -> str | None:
    return None if v[0] < 0 else ".".join(str(x) for x in v)


def describe(plugin_path: str, cpu_device_count: int = 0) -> RuntimeDescription:
    """Loads the plugin, creates a client, describes it and destroys the client."""
    l = lib()
    opts = _RuntimeOptions(plugin_path.encode(), cpu_device_count, None, 0)
    rt = ctypes.c_void_p()
    _check(l.tpuc_runtime_create(ctypes.byref(opts), ctypes.byref(rt)))
    try:
        info = _RuntimeInfo()
        l.tpuc_runtime_info_get(rt, ctypes.byref(info))
        out = RuntimeDescription(
            plugin=info.plugin_path.decode(),
            platform=info.platform_name.decode(),
            platform_version=info.platform_version.decode(),
            pjrt_api_version=f"{info.pjrt_api_major}.{info.pjrt_api_minor}",
            xla_version=None if info.xla_version < 0 else info.xla_version,
            stablehlo_current=_version3(info.stablehlo_current),
            stablehlo_minimum=_version3(info.stablehlo_minimum),
        )
        for i in range(info.device_count):
            d = _DeviceInfo()
            _check(l.tpuc_device_info_get(rt, i, ctypes.byref(d)))
            out.devices.append(
                DeviceDescription(i, d.id, d.kind.decode(), d.description.decode())
            )
        return out
    finally:
        l.tpuc_runtime_destroy(rt)
