"""``torch.tpu``: the device module of "tpu", shaped like ``torch.cuda``.

Devices, synchronization, memory statistics, random number generators and
tpuc's own counters (``stats()``). Everything here is thin: the work is done
by the C++ glue (``tpuc._C``) and the C core.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any, Iterable, Union

import torch

from . import _C

_DeviceLike = Union[torch.device, str, int, None]

__all__ = [
    "is_available", "is_initialized", "device_count", "current_device", "set_device", "device",
    "synchronize", "get_device_name", "get_device_properties", "get_device_capability",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_stats", "reset_peak_memory_stats", "empty_cache",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed",
    "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
    "default_generators", "get_amp_supported_dtype", "stats", "reset_stats",
    "launch_blocking", "set_launch_blocking", "unavailable_reason",
    "memory_summary", "set_per_process_memory_fraction", "get_per_process_memory_fraction",
    "check_bounds", "set_check_bounds", "OutOfMemoryError", "mem_get_info",
    "init", "device_of", "is_bf16_supported", "is_tf32_supported", "is_current_stream_capturing",
    "ipc_collect", "memory_cached", "max_memory_cached", "reset_max_memory_allocated",
    "reset_max_memory_cached", "reset_accumulated_memory_stats", "memory_stats_as_nested_dict",
    "amp", "nvtx",
]

OutOfMemoryError = torch.OutOfMemoryError  # what an exhausted tpu raises (torch.cuda has it too)

_in_bad_fork = False


def _after_fork_in_child() -> None:
    global _in_bad_fork
    _in_bad_fork = _C._is_initialized()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# ---- devices --------------------------------------------------------------------------


def is_available() -> bool:
    """True when a PJRT plugin is loaded and has at least one device."""
    return device_count() > 0


def unavailable_reason() -> str:
    """Why "tpu" is unavailable ('' when it is available)."""
    return _C._runtime_error()


def is_initialized() -> bool:
    return _C._is_initialized()


def __getattr__(name: str) -> Any:
    """``torch.tpu._initialized``, read as ``torch.cuda._initialized`` is by PyTorch's device-
    generic code: torch.utils.checkpoint saves and restores a device's random state around the
    recomputation only when its module says it is initialized. Without it, a checkpointed
    block's dropout drew a new mask in the backward (wrong gradients, no error)."""
    if name == "_initialized":
        return _C._is_initialized()
    raise AttributeError(f"module 'torch.tpu' has no attribute '{name}'")


def _is_in_bad_fork() -> bool:
    """True in a child forked after the runtime started (it cannot be used there)."""
    return _in_bad_fork


def device_count() -> int:
    return _C._device_count()


def _get_device_index(device: _DeviceLike, optional: bool = True) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "tpu":
            raise ValueError(f"expected a tpu device, got {device}")
        return current_device() if device.index is None else device.index
    raise TypeError(f"expected a device, an index or None, got {type(device).__name__}")


def current_device() -> int:
    return _C._current_device()


def set_device(device: _DeviceLike) -> None:
    """Sets this thread's current tpu device (RuntimeError when out of range)."""
    _C._set_device(_get_device_index(device))


class device:
    """Context manager that makes ``device`` current for its body."""

    def __init__(self, device: _DeviceLike):
        self.idx = -1 if device is None else _get_device_index(device)
        self.prev_idx = -1

    def __enter__(self) -> None:
        if self.idx >= 0:
            self.prev_idx = current_device()
            if self.prev_idx != self.idx:
                set_device(self.idx)

    def __exit__(self, *exc: object) -> None:
        if self.idx >= 0 and self.prev_idx != self.idx:
            set_device(self.prev_idx)


class device_of(device):
    """Makes the device of ``obj`` (a tensor or storage) current for the body; does nothing
    for an object that is not on "tpu" (as ``torch.cuda.device_of``)."""

    def __init__(self, obj: Any) -> None:
        super().__init__(obj.get_device() if obj.device.type == "tpu" else None)


def init() -> None:
    """Starts the runtime (loads the PJRT plugin) now rather than at the first tpu op."""
    device_count()


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """True: every PJRT device tpuc runs on computes bfloat16 (False when none is available)."""
    return is_available()


def is_tf32_supported() -> bool:
    """False: float32 matmuls on "tpu" are not computed in TensorFloat-32."""
    return False


def is_current_stream_capturing() -> bool:
    """False: "tpu" has no CUDA-graph capture (torch.compile(backend="tpu") plays that part)."""
    return False


def ipc_collect() -> None:
    """Nothing to collect: tpu tensors are not shared between processes by IPC handles."""


def synchronize(device: _DeviceLike = None) -> None:
    """Waits until every launched op on the device has finished; raises its error."""
    _C._synchronize(_get_device_index(device))


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    platform: str
    platform_version: str
    kind: str
    description: str
    id: int
    index: int
    total_memory: int = 0  # unknown through PJRT's C API

    def __repr__(self) -> str:
        return f"DeviceProperties(name={self.name!r}, platform={self.platform!r}, id={self.id})"


def get_device_properties(device: _DeviceLike = None) -> DeviceProperties:
    idx = _get_device_index(device)
    rt = _C._runtime_info()
    d = _C._device_info(idx)
    return DeviceProperties(
        name=_device_name(rt["platform_name"], d["kind"]),
        platform=rt["platform_name"],
        platform_version=rt["platform_version"],
        kind=d["kind"],
        description=d["description"],
        id=d["id"],
        index=idx,
        total_memory=_total_memory(idx),
    )


def _total_memory(idx: int) -> int:
    """The device's memory: PJRT's ``bytes_limit`` when the plugin reports one; on the
    XLA CPU plugin (buffers are host memory) the host's physical memory; else 0.
    TorchTitan's memory log and set_per_process_memory_fraction divide by it."""
    limit = int(_C._memory_stats(idx).get("bytes_limit", 0) or 0)
    if limit > 0:
        return limit
    if _C._runtime_info()["platform_name"].lower() == "cpu" and hasattr(os, "sysconf"):
        try:
            return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError):
            return 0
    return 0


def _device_name(platform: str, kind: str) -> str:
    if platform.lower() == "cpu":
        return f"XLA CPU ({kind})" if kind and kind.lower() != "cpu" else "XLA CPU"
    return kind or platform


def get_device_name(device: _DeviceLike = None) -> str:
    """The device's name as the plugin reports it ("TPU v5 lite"; "XLA CPU" here)."""
    return get_device_properties(device).name


def get_device_capability(device: _DeviceLike = None) -> tuple[int, int]:
    return (0, 0)


# ---- memory ------------------------------------------------------------------------------


def memory_stats(device: _DeviceLike = None) -> dict[str, int]:
    m = _C._memory_stats(_get_device_index(device))
    return {
        "allocated_bytes.all.current": m["bytes_in_use"],
        "allocated_bytes.all.peak": m["peak_bytes_in_use"],
        "active_bytes.all.current": m["bytes_in_use"],
        "active_bytes.all.peak": m["peak_bytes_in_use"],
        "reserved_bytes.all.current": m["bytes_in_use"],
        "reserved_bytes.all.peak": m["peak_bytes_in_use"],
        "allocation.all.current": m["num_buffers"],
        "allocation.all.allocated": m["num_allocs"],
        "num_alloc_retries": 0,
        "num_ooms": m["num_ooms"],
        "limit_bytes": m["limit_bytes"],
    }


def _host_available() -> int:
    """The host's available memory (Linux MemAvailable), or -1 where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return -1


def mem_get_info(device: _DeviceLike = None) -> tuple[int, int]:
    """``(free, total)`` bytes of the device, as ``torch.cuda.mem_get_info``.

    *total* is the device's memory (``get_device_properties().total_memory``);
    *free* is total less the bytes of tpuc's live buffers (tpuc's own
    accounting; it caches no memory, so nothing reserved is hidden), capped by
    the limit of ``set_per_process_memory_fraction``/``TPUC_MEMORY_LIMIT`` when
    one is set (CUDA's ignores its fraction; tpuc's limit refuses allocations
    past it, so the room under it is what is free). On the XLA CPU plugin,
    whose buffers are host memory shared with every other process, free is
    also capped by the host's available memory. Raises RuntimeError where the
    plugin reports no memory size."""
    idx = _get_device_index(device)
    total = _total_memory(idx)
    if total <= 0:
        raise RuntimeError("tpuc: the plugin does not report this device's memory size, so "
                           "mem_get_info cannot say what is free; memory_allocated() gives "
                           "the bytes tpuc holds")
    m = _C._memory_stats(idx)
    used = int(m["bytes_in_use"])
    free = total - used
    limit = int(m["limit_bytes"] or 0)
    if limit > 0:
        free = min(free, limit - used)
    if _C._runtime_info()["platform_name"].lower() == "cpu":
        avail = _host_available()
        if avail >= 0:
            free = min(free, avail)
    return max(0, free), total


def memory_allocated(device: _DeviceLike = None) -> int:
    """Bytes of device buffers alive now (tpuc's own accounting)."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: _DeviceLike = None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: _DeviceLike = None) -> int:
    return memory_allocated(device)  # tpuc caches no memory


def max_memory_reserved(device: _DeviceLike = None) -> int:
    return max_memory_allocated(device)


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    _C._reset_peak_memory_stats(_get_device_index(device))


def _renamed(old: str, new: str) -> None:
    import warnings

    warnings.warn(f"`torch.tpu.{old}` has been renamed to `torch.tpu.{new}`", FutureWarning,
                  stacklevel=3)


def memory_cached(device: _DeviceLike = None) -> int:
    """Deprecated (as in torch.cuda); see ``memory_reserved``."""
    _renamed("memory_cached", "memory_reserved")
    return memory_reserved(device)


def max_memory_cached(device: _DeviceLike = None) -> int:
    """Deprecated (as in torch.cuda); see ``max_memory_reserved``."""
    _renamed("max_memory_cached", "max_memory_reserved")
    return max_memory_reserved(device)


def reset_max_memory_allocated(device: _DeviceLike = None) -> None:
    """Resets the peak of allocated bytes (``reset_peak_memory_stats``: one peak here)."""
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: _DeviceLike = None) -> None:
    """Resets the peak of reserved bytes (the same peak: tpuc caches no memory)."""
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: _DeviceLike = None) -> None:
    """Nothing to reset: the accumulated counters (allocations, OOMs) count since start-up."""
    _get_device_index(device)


def memory_stats_as_nested_dict(device: _DeviceLike = None) -> dict[str, Any]:
    """``memory_stats()`` with its dotted keys as nested dicts, as torch.cuda's."""
    out: dict[str, Any] = {}
    for key, value in memory_stats(device).items():
        node = out
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def empty_cache() -> None:
    """Nothing to do: buffers are freed when their storages die."""


def set_per_process_memory_fraction(fraction: float, device: _DeviceLike = None) -> None:
    """Limits this process's tensors on the device to ``fraction`` of its memory, as
    ``torch.cuda.set_per_process_memory_fraction``: going past it raises
    ``torch.OutOfMemoryError`` before anything is allocated. ``TPUC_MEMORY_LIMIT``
    (bytes, e.g. ``8G``) sets a limit at start-up; a fraction of 1 lifts it."""
    if not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
        raise ValueError(f"invalid fraction {fraction!r}: expected a number in [0, 1]")
    idx = _get_device_index(device)
    if fraction >= 1:
        _C._set_memory_limit(idx, 0)
        return
    total = _total_memory(idx)
    if total <= 0:
        raise RuntimeError("tpuc: the plugin does not report this device's memory size; "
                           "set a limit in bytes with TPUC_MEMORY_LIMIT instead")
    _C._set_memory_limit(idx, max(1, int(total * fraction)))


def get_per_process_memory_fraction(device: _DeviceLike = None) -> float:
    """The limit set by ``set_per_process_memory_fraction`` (1.0: none)."""
    idx = _get_device_index(device)
    limit = _C._memory_stats(idx)["limit_bytes"]
    total = _total_memory(idx)
    return 1.0 if limit <= 0 or total <= 0 else min(1.0, limit / total)


def _fmt_bytes(n: int) -> str:
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{int(v)} {unit}" if unit == "B" else f"{v:.2f} {unit}"
        v /= 1024
    return f"{n} B"


def memory_summary(device: _DeviceLike = None, abbreviated: bool = False) -> str:
    """A printable table of the device's memory use, like ``torch.cuda.memory_summary()``:
    tensor bytes now and at the peak (the peak includes programs' scratch memory),
    live buffers, allocations ever made, out-of-memory errors and the limit."""
    idx = _get_device_index(device)
    m = _C._memory_stats(idx)
    limit = m["limit_bytes"]
    total = _total_memory(idx)
    width = 75
    line, thick = "|" + "-" * (width - 2) + "|", "|" + "=" * (width - 2) + "|"

    def row(text: str) -> str:
        return "|" + text.ljust(width - 2)[: width - 2] + "|"

    rows = [
        thick,
        row(f" PyTorch tpu memory summary, device ID {idx} ({get_device_name(idx)})".center(width - 2)),
        line,
        row(f" OOMs: {m['num_ooms']:<10} limit: "
            + (_fmt_bytes(limit) + " (set_per_process_memory_fraction)"
               if limit > 0 else "none")),
        thick,
        row(f" {'Metric':<28}| {'Cur Usage':>12} | {'Peak Usage':>12} | {'Tot Alloc':>12}"),
        line,
        row(f" {'Allocated memory':<28}| {_fmt_bytes(m['bytes_in_use']):>12} | "
            f"{_fmt_bytes(m['peak_bytes_in_use']):>12} | {'':>12}"),
        row(f" {'Device buffers (tensors)':<28}| {m['num_buffers']:>12} | {'':>12} | "
            f"{m['num_allocs']:>12}"),
    ]
    if not abbreviated:
        rows += [
            line,
            row(" Buffers are freed when their storages die: nothing is cached, reserved"),
            row(" equals allocated. The peak counts programs' scratch memory too."),
            row(f" Device memory: {_fmt_bytes(total) if total else 'not reported by the plugin'}"),
        ]
    rows.append(thick)
    return "\n".join(rows) + "\n"


# ---- random numbers -------------------------------------------------------------------
# A tpu generator is a (seed, offset) pair; its state is 16 bytes: seed and
# offset as little-endian uint64 (the layout DTensor's RNG tracker reads).


class _DefaultGenerators:
    """``torch.tpu.default_generators[i]``: the torch.Generator of device i."""

    def __init__(self) -> None:
        self._cache: dict[int, torch.Generator] = {}

    def __getitem__(self, i: int) -> torch.Generator:
        if i < 0 or i >= device_count():
            raise IndexError(f"tpu device index {i} out of range ({device_count()} devices)")
        if i not in self._cache:
            self._cache[i] = _C._default_generator(i)
        return self._cache[i]

    def __len__(self) -> int:
        return device_count()

    def __iter__(self) -> Iterable[torch.Generator]:
        return (self[i] for i in range(len(self)))


default_generators = _DefaultGenerators()


def manual_seed(seed: int) -> None:
    """Seeds the current device's generator (lazily: no device is started)."""
    seed = int(seed) & 0xFFFF_FFFF_FFFF_FFFF
    if not _C._is_initialized():
        _C._manual_seed_all(seed)
        return
    _C._set_rng_state(current_device(), seed, 0)


def manual_seed_all(seed: int) -> None:
    _C._manual_seed_all(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def seed() -> None:
    manual_seed(int.from_bytes(os.urandom(8), "little"))


def seed_all() -> None:
    manual_seed_all(int.from_bytes(os.urandom(8), "little"))


def initial_seed() -> int:
    return _C._get_rng_state(current_device())[0]


def get_rng_state(device: _DeviceLike = "tpu") -> torch.Tensor:
    s, off = _C._get_rng_state(_get_device_index(device))
    return torch.frombuffer(bytearray(struct.pack("<QQ", s, off)), dtype=torch.uint8)


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = "tpu") -> None:
    data = bytes(new_state.detach().to("cpu", torch.uint8).contiguous().numpy().tobytes())
    if len(data) != 16:
        raise ValueError(f"a tpu RNG state is 16 bytes (seed, offset), got {len(data)}")
    s, off = struct.unpack("<QQ", data)
    _C._set_rng_state(_get_device_index(device), s, off)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# ---- autocast, modes and statistics -------------------------------------------------------


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def launch_blocking() -> bool:
    """Debug mode: every op waits for the device and raises its error at the op."""
    return _C._launch_blocking()


def set_launch_blocking(on: bool) -> None:
    _C._set_launch_blocking(bool(on))


def check_bounds() -> bool:
    """Whether index values are checked on the device outside debug mode."""
    return bool(_C._check_bounds())


def set_check_bounds(on: bool) -> None:
    """Checks every index of index/gather/scatter/take/put/embedding/index_* ops
    on the device in strict, fused and compiled execution too (``TPUC_CHECK_BOUNDS=1``):
    no host wait per op; an out-of-range index raises PyTorch's IndexError (or
    RuntimeError for gather/scatter) at the next synchronisation (``.item()``,
    ``.cpu()``, ``torch.tpu.synchronize()``), as CUDA reports device-side asserts.
    Debug mode always checks, at the op."""
    _C._set_check_bounds(bool(on))


def stats() -> dict[str, Any]:
    """tpuc's counters: executions, compiles, cache hits/misses (memory tier),
    disk_hits/disk_misses/disk_writes/disk_corrupt/disk_evictions (disk tier),
    compile and load seconds, the op engine's signature cache
    (fast_hits/fast_misses), fused execution (recorded_ops, flushes,
    chunk_hits/chunk_misses), graphs compiled by torch.compile
    (dynamo_compiles), ``recompiles`` with the last ``recompile_reasons`` (what
    changed in an op's signature; TPUC_LOG_RECOMPILES=1 prints them as they
    happen) and ``fallbacks``: op name -> number of times it ran on the CPU
    instead of the device."""
    from . import dynamo

    out: dict[str, Any] = dict(_C._runtime_stats())
    out["dynamo_compiles"] = dynamo.graphs_compiled()
    out.update(dynamo.replay_stats())  # graph_records/replays/rerecords, graph_replay_reasons
    out["recompile_reasons"] = list(_C._recompile_reasons())
    out["fused_replay_reasons"] = list(_C._fused_replay_reasons())  # last 16 per device
    out["fallbacks"] = dict(_C._fallback_counts())
    return out


def reset_stats() -> None:
    """Forgets the fallback counts (the core's counters are cumulative)."""
    _C._reset_fallback_counts()


from . import amp, nvtx  # noqa: E402,F401  (torch.tpu.amp, torch.tpu.nvtx as torch.cuda's)
from .eager import eager_mode, flush, get_eager_mode, set_eager_mode  # noqa: E402,F401
from .eager import set_fused_replay  # noqa: E402,F401
from .dynamo import graph_replay, set_graph_replay  # noqa: E402,F401
from ._streams import (  # noqa: E402,F401  (FSDP2 / DTensor / TorchTitan use these)
    Event, Stream, StreamContext, current_stream, default_stream, set_stream, stream,
)
