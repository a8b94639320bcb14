"""ctypes bindings to the C core (``libtpuc_core.so``) for what Python needs
without PyTorch: loading a plugin and describing it (``tpuc info``).

The PyTorch device itself talks to the core from C++ (csrc/torch/); this
module never imports torch.
"""
from __future__ import annotations

import ctypes
import os
from typing import Callable
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
        ("cache_preload", ctypes.c_int),  # 0: $TPUC_CACHE_PRELOAD, < 0: off
        ("_reserved", ctypes.c_int64 * 16),  # zeros for fields a newer core may add
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
        ("op_xla_options", ctypes.c_char_p),
        ("op_xla_options_from_env", ctypes.c_bool),
        ("compile_ahead", ctypes.c_bool),
        ("compile_threads", ctypes.c_int),
        ("compile_nice", ctypes.c_int),
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
    op_xla_options: str = ""          # strict mode's per-op programs' XLA options ("": none)
    op_xla_options_from_env: bool = False
    compile_ahead: bool = False       # strict mode's compile-ahead queue (TPUC_COMPILE_AHEAD)
    compile_threads: int = 1          # threads compiling ahead of need (TPUC_COMPILE_THREADS)
    compile_nice: int = 0             # the nice value they run at (TPUC_COMPILE_NICE)
    devices: list[DeviceDescription] = field(default_factory=list)


def _version3(v: ctypes.Array) -> str | None:
    return None if v[0] < 0 else ".".join(str(x) for x in v)


def describe(plugin_path: str, cpu_device_count: int = 0) -> RuntimeDescription:
    """Loads the plugin, creates a client, describes it and destroys the client."""
    l = lib()
    # a look at the devices, destroyed at once: no preload of the disk cache
    opts = _RuntimeOptions(plugin_path.encode(), cpu_device_count, None, 0, -1)
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
            op_xla_options=(info.op_xla_options or b"").decode(),
            op_xla_options_from_env=bool(info.op_xla_options_from_env),
            compile_ahead=bool(info.compile_ahead),
            compile_threads=int(info.compile_threads),
            compile_nice=int(info.compile_nice),
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


# ---- multi-process clients (tpuc_runtime_create_multiprocess) ---------------
# A key-value store implemented in Python: get(key, timeout_ms) -> bytes | None
# (timeout_ms < 0: do not wait; None: the key is missing), put(key, value).
# Keys and values are bytes. Exceptions become statuses (their message reaches
# the plugin); ValueError is INVALID_ARGUMENT, any other error RUNTIME.
_ERR_INVALID_ARGUMENT, _ERR_RUNTIME = 1, 6
_KV_GET = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                           ctypes.c_int, ctypes.c_void_p)
_KV_PUT = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                           ctypes.c_void_p, ctypes.c_size_t)


class _KVStore(ctypes.Structure):
    _fields_ = [("get", _KV_GET), ("put", _KV_PUT), ("user", ctypes.c_void_p)]


class _ProcessOptions(ctypes.Structure):
    _fields_ = [("process_id", ctypes.c_int), ("num_processes", ctypes.c_int),
                ("kv_store", ctypes.POINTER(_KVStore))]


class _ProcessInfo(ctypes.Structure):
    _fields_ = [("process_index", ctypes.c_int), ("global_device_count", ctypes.c_int),
                ("device_count", ctypes.c_int), ("num_processes", ctypes.c_int),
                ("kv_store", ctypes.c_bool), ("create_options", ctypes.c_char_p)]


def _bind_multiprocess(l: ctypes.CDLL) -> None:
    if getattr(l, "_tpuc_mp_bound", False):
        return
    l.tpuc_status_create.restype = ctypes.c_void_p
    l.tpuc_status_create.argtypes = [ctypes.c_int, ctypes.c_char_p]
    l.tpuc_kv_value_set.restype = ctypes.c_bool
    l.tpuc_kv_value_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    l.tpuc_runtime_create_multiprocess.restype = _StatusP
    l.tpuc_runtime_create_multiprocess.argtypes = [
        ctypes.POINTER(_RuntimeOptions), ctypes.POINTER(_ProcessOptions),
        ctypes.POINTER(ctypes.c_void_p)]
    l.tpuc_process_info_get.restype = None
    l.tpuc_process_info_get.argtypes = [ctypes.c_void_p, ctypes.POINTER(_ProcessInfo)]
    l._tpuc_mp_bound = True


class KeyValueCallbacks:
    """A Python key-value store as the C core's ``tpuc_kv_store``.

    ``struct`` is what the core receives; this object must outlive every
    runtime created with it. ``calls`` counts the core's calls (tests and
    ``tpuc info`` read it)."""

    def __init__(self, get: Callable[[bytes, int], "bytes | None"],
                 put: Callable[[bytes, bytes], None]):
        self._get, self._put = get, put
        self.calls = 0
        self._lib = lib()
        _bind_multiprocess(self._lib)
        self._c_get = _KV_GET(self._on_get)
        self._c_put = _KV_PUT(self._on_put)
        self.struct = _KVStore(self._c_get, self._c_put, None)

    def _status(self, e: BaseException) -> int:
        code = _ERR_INVALID_ARGUMENT if isinstance(e, ValueError) else _ERR_RUNTIME
        msg = f"{type(e).__name__}: {e}".encode("utf-8", "replace")
        return self._lib.tpuc_status_create(code, msg)

    def _on_get(self, _user, key, key_len, timeout_ms, value):  # type: ignore[no-untyped-def]
        self.calls += 1
        try:
            v = self._get(ctypes.string_at(key, key_len), timeout_ms)
            if v is not None and not self._lib.tpuc_kv_value_set(value, v, len(v)):
                raise MemoryError("out of host memory copying a value")
            return None
        except BaseException as e:  # noqa: BLE001 - every error must become a status
            return self._status(e)

    def _on_put(self, _user, key, key_len, val, val_len):  # type: ignore[no-untyped-def]
        self.calls += 1
        try:
            self._put(ctypes.string_at(key, key_len), ctypes.string_at(val, val_len))
            return None
        except BaseException as e:  # noqa: BLE001
            return self._status(e)


@dataclass
class ProcessDescription:
    process_index: int | None
    global_device_count: int | None
    device_count: int
    num_processes: int
    kv_store: bool
    create_options: list[str]


def describe_multiprocess(plugin_path: str, process_id: int, num_processes: int,
                          kv: KeyValueCallbacks | None,
                          cpu_device_count: int = 0) -> ProcessDescription:
    """Creates the client as process ``process_id`` of ``num_processes`` sharing
    ``kv``, describes what the plugin made of it, and destroys it."""
    l = lib()
    _bind_multiprocess(l)
    opts = _RuntimeOptions(plugin_path.encode(), cpu_device_count, b"off", 0, -1)
    popts = _ProcessOptions(process_id, num_processes,
                            ctypes.pointer(kv.struct) if kv is not None else None)
    rt = ctypes.c_void_p()
    _check(l.tpuc_runtime_create_multiprocess(ctypes.byref(opts), ctypes.byref(popts),
                                              ctypes.byref(rt)))
    try:
        pi = _ProcessInfo()
        l.tpuc_process_info_get(rt, ctypes.byref(pi))
        names = (pi.create_options or b"").decode()
        return ProcessDescription(
            process_index=None if pi.process_index < 0 else pi.process_index,
            global_device_count=None if pi.global_device_count < 0 else pi.global_device_count,
            device_count=pi.device_count, num_processes=pi.num_processes,
            kv_store=bool(pi.kv_store), create_options=[n for n in names.split(",") if n])
    finally:
        l.tpuc_runtime_destroy(rt)
