"""The device path of ``tpu_dist``: collectives run on the devices as one
StableHLO collective program built by the C core (``tpuc_collective_*`` in
tpuc.h), for participants that are devices of this process's client.

    import torch
    from tpuc.distributed import _device_path as dp

    xs = [torch.full((4,), float(i + 1), device=f"tpu:{i}") for i in range(2)]
    if dp.supported([x.device for x in xs]):
        dp.all_reduce(xs, "sum")                 # in place: every xs[i] == [3, 3, 3, 3]
        gathered = dp.all_gather(xs, dim=0)      # one tensor of 8 elements per device

Each function takes one tensor per participant, ``tensors[r]`` on the r-th
participating device, every tensor of the same dtype and shape (any strides:
views are read and written through the core's view machinery). On TPU the
program's collectives travel over ICI, with the CUDA plugin through NCCL, and
on the XLA CPU plugin between the devices of this process
(``TPUC_CPU_DEVICE_COUNT=N``). Across processes the backend takes its host
path (gloo); this module serves the single-process, multi-device case.

The functions are thread-safe. Each distinct collective (kind, reduction,
dtype, shape, devices, groups) is compiled once and kept.
"""
from __future__ import annotations

import ctypes
import functools
import sys
import threading
from collections import OrderedDict
from typing import Iterable, Sequence

import torch

from tpuc import _native

__all__ = [
    "supported", "all_reduce", "all_gather", "all_gather_into", "reduce_scatter",
    "all_to_all", "permute", "broadcast", "DevicePathError",
]

_MAX_DIMS = 16
# tpuc_dtype, in the order of tpuc.h
_DTYPES = {
    torch.bool: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4,
    torch.uint8: 5, torch.uint16: 6, torch.uint32: 7, torch.uint64: 8,
    torch.float16: 9, torch.bfloat16: 10, torch.float32: 11, torch.float64: 12,
    torch.complex64: 13, torch.complex128: 14,
}
# tpuc_collective_kind
_ALL_REDUCE, _ALL_GATHER, _REDUCE_SCATTER, _ALL_TO_ALL, _PERMUTE, _BROADCAST = range(6)
# tpuc_reduce_op
_OPS = {"sum": 0, "avg": 1, "product": 2, "min": 3, "max": 4}
_ERR_INVALID_ARGUMENT = 1


class DevicePathError(RuntimeError):
    """A collective the device path cannot run (or the core's error)."""


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("storage", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("sizes", ctypes.c_int64 * _MAX_DIMS),
        ("strides", ctypes.c_int64 * _MAX_DIMS),
        ("offset", ctypes.c_int64),
    ]


class _Desc(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int),
        ("op", ctypes.c_int),
        ("dim", ctypes.c_int),
        ("concat_dim", ctypes.c_int),
        ("root", ctypes.c_int),
        ("pairs", ctypes.POINTER(ctypes.c_int)),
        ("npairs", ctypes.c_int),
        ("group_size", ctypes.c_int),
        ("devices", ctypes.POINTER(ctypes.c_int)),
        ("ndevices", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("dims", ctypes.POINTER(ctypes.c_int64)),
    ]


@functools.lru_cache(maxsize=None)
def _lib() -> ctypes.CDLL:
    lib = _native.lib()  # the same libtpuc_core.so the torch extension uses
    vp = ctypes.c_void_p
    status = lib.tpuc_status_code.argtypes[0]
    lib.tpuc_storage_runtime.argtypes = [vp]
    lib.tpuc_storage_runtime.restype = vp
    lib.tpuc_collective_create.argtypes = [vp, ctypes.POINTER(_Desc), ctypes.POINTER(vp)]
    lib.tpuc_collective_create.restype = status
    lib.tpuc_collective_destroy.argtypes = [vp]
    lib.tpuc_collective_destroy.restype = None
    lib.tpuc_collective_output_ndim.argtypes = [vp]
    lib.tpuc_collective_output_ndim.restype = ctypes.c_int
    lib.tpuc_collective_output_dims.argtypes = [vp]
    lib.tpuc_collective_output_dims.restype = ctypes.POINTER(ctypes.c_int64)
    lib.tpuc_collective_run_tensors.argtypes = [vp, ctypes.POINTER(_Tensor),
                                                ctypes.POINTER(_Tensor), ctypes.c_bool]
    lib.tpuc_collective_run_tensors.restype = status
    return lib


def _check(st) -> None:
    if not st:
        return
    lib = _lib()
    code = lib.tpuc_status_code(st)
    msg = (lib.tpuc_status_message(st) or b"").decode("utf-8", "replace")
    lib.tpuc_status_destroy(st)
    if code == _ERR_INVALID_ARGUMENT:
        raise ValueError(msg)
    raise DevicePathError(msg)


class _Collective:
    """A compiled tpuc_collective and its output shape."""

    def __init__(self, handle: int, out_shape: tuple[int, ...]):
        self.handle = handle
        self.out_shape = out_shape
        self._destroy = _lib().tpuc_collective_destroy
        self._finalizing = sys.is_finalizing

    def __del__(self):
        # at interpreter exit the runtime may already be gone: leave it to the process
        if self.handle and not self._finalizing():
            self._destroy(self.handle)
        self.handle = 0


_CACHE_SIZE = 256
_cache: "OrderedDict[tuple, _Collective]" = OrderedDict()
_lock = threading.Lock()


def _device_index(d: torch.device) -> int:
    if d.type != "tpu":
        raise ValueError(f"the device path runs collectives of 'tpu' tensors, not {d}")
    return 0 if d.index is None else d.index


def _op_name(op) -> str:
    """"sum", "avg", ... from a name, a ReduceOp.RedOpType or a ReduceOp object
    (which c10d hands to backends; its type is in `.op`)."""
    if not isinstance(op, str) and not hasattr(op, "name") and hasattr(op, "op"):
        op = op.op
    name = op if isinstance(op, str) else getattr(op, "name", None) or str(op).rsplit(".", 1)[-1]
    name = str(name).lower()
    if name in ("premul_sum", "band", "bor", "bxor"):
        raise DevicePathError(f"ReduceOp.{name.upper()} has no device path; the backend "
                              "must take the host path (gloo) for it")
    if name not in _OPS:
        raise ValueError(f"unknown reduction {op!r}; expected one of {sorted(_OPS)}")
    return name


def _runtime_of(t: torch.Tensor) -> int:
    storage = t.untyped_storage().data_ptr()
    if not storage:
        raise DevicePathError("a tensor without a device storage")
    return _lib().tpuc_storage_runtime(storage)


def _collective(rt: int, kind: int, sample: torch.Tensor, devices: tuple[int, ...], *, op: int = 0,
                dim: int = 0, concat_dim: int = 0, root: int = 0,
                pairs: tuple[tuple[int, int], ...] = (), group_size: int = 0) -> _Collective:
    if sample.dtype not in _DTYPES:
        raise ValueError(f"dtype {sample.dtype} has no device collective")
    shape = tuple(sample.shape)
    key = (rt, kind, op, dim, concat_dim, root, pairs, group_size, devices, sample.dtype, shape)
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    n = len(devices)
    devs = (ctypes.c_int * n)(*devices)
    flat = [x for p in pairs for x in p]
    parr = (ctypes.c_int * max(1, len(flat)))(*flat)
    dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
    desc = _Desc(kind, op, dim, concat_dim, root, parr, len(pairs), group_size, devs, n,
                 _DTYPES[sample.dtype], len(shape), dims)
    handle = ctypes.c_void_p()
    _check(_lib().tpuc_collective_create(rt, ctypes.byref(desc), ctypes.byref(handle)))
    lib = _lib()
    nd = lib.tpuc_collective_output_ndim(handle)
    od = lib.tpuc_collective_output_dims(handle)
    coll = _Collective(handle.value, tuple(int(od[i]) for i in range(nd)))
    with _lock:
        raced = _cache.get(key)
        if raced is not None:
            return raced  # another thread made the same one: drop ours
        _cache[key] = coll
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return coll


def _desc_of(t: torch.Tensor) -> _Tensor:
    d = _Tensor()
    d.storage = t.untyped_storage().data_ptr()
    d.dtype = _DTYPES[t.dtype]
    d.ndim = t.dim()
    for i in range(t.dim()):
        d.sizes[i] = t.shape[i]
        d.strides[i] = t.stride(i)
    d.offset = t.storage_offset()
    return d


def _participants(tensors: Sequence[torch.Tensor], what: str) -> tuple[int, ...]:
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{what}: no tensors")
    first = tensors[0]
    for r, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what}: participant {r} is not a tensor")
        if t.dtype != first.dtype or t.shape != first.shape:
            raise ValueError(
                f"{what}: participant {r} has {t.dtype} {tuple(t.shape)}, participant 0 "
                f"{first.dtype} {tuple(first.shape)}; every participant must pass the same "
                "dtype and shape")
        if t.dim() > _MAX_DIMS:
            raise ValueError(f"{what}: rank {t.dim()} > {_MAX_DIMS}")
    devices = tuple(_device_index(t.device) for t in tensors)
    if len(set(devices)) != len(devices):
        raise ValueError(f"{what}: two participants on one device ({devices}); the device "
                         "path runs one participant per device")
    return devices


def _wait() -> bool:
    try:
        import tpuc._C as C

        return bool(C._launch_blocking())
    except Exception:  # noqa: BLE001 - the extension may be absent in pure-core use
        return False


def _run(coll: _Collective, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> None:
    n = len(inputs)
    ins = (_Tensor * n)(*[_desc_of(t) for t in inputs])
    outs = (_Tensor * n)(*[_desc_of(t) for t in outputs])
    _check(_lib().tpuc_collective_run_tensors(coll.handle, ins, outs, _wait()))


def _fresh_outputs(coll: _Collective, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.empty(coll.out_shape, dtype=t.dtype, device=t.device) for t in inputs]


# ---- the public functions -------------------------------------------------
@functools.lru_cache(maxsize=64)
def _probe(devices: tuple[int, ...]) -> bool:
    try:
        xs = [torch.zeros(1, device=f"tpu:{d}") for d in devices]
        _collective(_runtime_of(xs[0]), _ALL_REDUCE, xs[0], devices)
        return True
    except Exception:  # noqa: BLE001 - any failure means: take the host path
        return False


def supported(group_devices: Iterable[torch.device | str | int]) -> bool:
    """True when every participant is a distinct "tpu" device of this process
    and the plugin compiles a collective across them (checked once per set of
    devices by compiling a one-element all_reduce)."""
    try:
        devs = tuple(
            _device_index(torch.device("tpu", d) if isinstance(d, int) else torch.device(d))
            for d in group_devices)
    except (ValueError, RuntimeError):
        return False
    if not devs or len(set(devs)) != len(devs):
        return False
    try:
        count = torch.tpu.device_count()
    except Exception:  # noqa: BLE001 - no device at all
        return False
    if any(d < 0 or d >= count for d in devs):
        return False
    return _probe(devs)


def all_reduce(tensors: Sequence[torch.Tensor], op="sum", *, group_size: int = 0) -> None:
    """In place: every tensors[r] becomes the reduction over its group (sum,
    avg, product, min, max; a torch.distributed.ReduceOp or its name)."""
    devices = _participants(tensors, "all_reduce")
    if tensors[0].numel() == 0:
        return
    coll = _collective(_runtime_of(tensors[0]), _ALL_REDUCE, tensors[0], devices,
                       op=_OPS[_op_name(op)], group_size=group_size)
    _run(coll, tensors, tensors)


def all_gather(tensors: Sequence[torch.Tensor], dim: int = 0, *,
               group_size: int = 0) -> list[torch.Tensor]:
    """New tensors: the group's inputs concatenated along `dim`, in rank order."""
    devices = _participants(tensors, "all_gather")
    dim = dim % max(1, tensors[0].dim())
    coll = _collective(_runtime_of(tensors[0]), _ALL_GATHER, tensors[0], devices, dim=dim,
                       group_size=group_size)
    outs = _fresh_outputs(coll, tensors)
    if tensors[0].numel():
        _run(coll, tensors, outs)
    return outs


def all_gather_into(outputs: Sequence[torch.Tensor], tensors: Sequence[torch.Tensor],
                    dim: int = 0, *, group_size: int = 0) -> None:
    """all_gather written into given outputs (any views of the right shape):
    all_gather_into_tensor's form."""
    devices = _participants(tensors, "all_gather")
    dim = dim % max(1, tensors[0].dim())
    coll = _collective(_runtime_of(tensors[0]), _ALL_GATHER, tensors[0], devices, dim=dim,
                       group_size=group_size)
    _check_outputs(coll, outputs, tensors, "all_gather")
    if tensors[0].numel():
        _run(coll, tensors, outputs)


def reduce_scatter(tensors: Sequence[torch.Tensor], op="sum", dim: int = 0, *,
                   group_size: int = 0, outputs: Sequence[torch.Tensor] | None = None
                   ) -> list[torch.Tensor]:
    """The reduction split along `dim` into one block per rank; rank k gets
    block k (reduce_scatter_tensor's form)."""
    devices = _participants(tensors, "reduce_scatter")
    dim = dim % max(1, tensors[0].dim())
    coll = _collective(_runtime_of(tensors[0]), _REDUCE_SCATTER, tensors[0], devices,
                       op=_OPS[_op_name(op)], dim=dim, group_size=group_size)
    if outputs is None:
        outputs = _fresh_outputs(coll, tensors)
    else:
        _check_outputs(coll, outputs, tensors, "reduce_scatter")
    if tensors[0].numel():
        _run(coll, tensors, outputs)
    return list(outputs)


def all_to_all(tensors: Sequence[torch.Tensor], split_dim: int = 0, concat_dim: int = 0, *,
               group_size: int = 0) -> list[torch.Tensor]:
    """Each input split along split_dim into one block per rank, block j sent
    to rank j; the received blocks concatenated along concat_dim in rank order
    (all_to_all_single with even splits is split_dim = concat_dim = 0)."""
    devices = _participants(tensors, "all_to_all")
    nd = max(1, tensors[0].dim())
    coll = _collective(_runtime_of(tensors[0]), _ALL_TO_ALL, tensors[0], devices,
                       dim=split_dim % nd, concat_dim=concat_dim % nd, group_size=group_size)
    outs = _fresh_outputs(coll, tensors)
    if tensors[0].numel():
        _run(coll, tensors, outs)
    return outs


def permute(tensors: Sequence[torch.Tensor], pairs: Iterable[tuple[int, int]], *,
            group_size: int = 0) -> list[torch.Tensor]:
    """(source, target) rank pairs: target's result is source's tensor; a rank
    no pair targets gets zeros (send/recv is one pair)."""
    devices = _participants(tensors, "permute")
    pairs = tuple((int(s), int(t)) for s, t in pairs)
    coll = _collective(_runtime_of(tensors[0]), _PERMUTE, tensors[0], devices, pairs=pairs,
                       group_size=group_size)
    outs = _fresh_outputs(coll, tensors)
    if tensors[0].numel():
        _run(coll, tensors, outs)
    return outs


def broadcast(tensors: Sequence[torch.Tensor], root: int = 0, *, group_size: int = 0) -> None:
    """In place: every tensors[r] becomes rank `root`'s tensor, bit for bit."""
    devices = _participants(tensors, "broadcast")
    if tensors[0].numel() == 0:
        return
    coll = _collective(_runtime_of(tensors[0]), _BROADCAST, tensors[0], devices, root=root,
                       group_size=group_size)
    _run(coll, tensors, tensors)


def _check_outputs(coll: _Collective, outputs: Sequence[torch.Tensor],
                   inputs: Sequence[torch.Tensor], what: str) -> None:
    if len(outputs) != len(inputs):
        raise ValueError(f"{what}: {len(outputs)} outputs for {len(inputs)} participants")
    for r, (o, i) in enumerate(zip(outputs, inputs)):
        if tuple(o.shape) != coll.out_shape or o.dtype != i.dtype or o.device != i.device:
            raise ValueError(
                f"{what}: output {r} is {o.dtype} {tuple(o.shape)} on {o.device}; expected "
                f"{i.dtype} {coll.out_shape} on {i.device}")
