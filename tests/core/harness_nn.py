"""A ctypes harness over the C core's op API (tpuc_op_run), without the C++
glue: tensors are uploaded into storages, an ATen op is called by name with
its arguments in schema order, and the results are compared with PyTorch on
the CPU. Used by the linalg / shape / index / nn lowering tests.

Conventions it follows (the ones the lowerings rely on):
- arguments are encoded by the schema's types: Tensor -> TENSOR, Tensor[] ->
  TENSORS, int/SymInt/ScalarType -> INT, int[] -> INTS, bool -> BOOL,
  bool[] -> BOOLS, str -> STRING, float/Scalar -> SCALAR (a runtime value),
  None -> NONE;
- the outputs are the schema's returns (an aliased return is the argument it
  aliases: self for in-place ops, out for out=), then every mutated argument
  no return aliases, in schema order (running stats of batch norm);
- ops that draw random numbers get a trailing RNG argument.
"""
from __future__ import annotations

import ctypes
import os

import torch

from tpuc import _native, _plugin

MAX_DIMS = 16

DTYPES = {
    torch.bool: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4,
    torch.uint8: 5, torch.uint16: 6, torch.uint32: 7, torch.uint64: 8,
    torch.float16: 9, torch.bfloat16: 10, torch.float32: 11, torch.float64: 12,
    torch.complex64: 13, torch.complex128: 14,
}

A_NONE, A_TENSOR, A_TENSORS, A_INT, A_INTS, A_BOOL, A_BOOLS, A_STRING, A_SCALAR, A_RNG = range(10)
S_BOOL, S_INT, S_FLOAT, S_COMPLEX = range(4)


# The C structs of the op API are declared once, in harness.py.
from harness import Arg, OpCall, OpStats, Tensor  # noqa: E402


class Unimplemented(Exception):
    """The lowering declined this call (TPUC_ERR_UNIMPLEMENTED)."""


class RNG:
    """A trailing generator argument (seed, offset)."""

    def __init__(self, seed: int = 0, offset: int = 0):
        self.seed, self.offset = seed, offset


_core = None


class Core:
    def __init__(self):
        lib = _native.lib()
        P = ctypes.c_void_p
        sig = {
            "tpuc_storage_create": ([P, ctypes.c_int, ctypes.c_size_t, ctypes.POINTER(P)], P),
            "tpuc_storage_destroy": ([P], None),
            "tpuc_storage_upload": ([P, ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_int,
                                     P], P),
            "tpuc_storage_download": ([P, P, ctypes.c_size_t], P),
            "tpuc_op_find": ([P, ctypes.c_char_p], P),
            "tpuc_op_run": ([P, ctypes.POINTER(OpCall), ctypes.c_bool], P),
            "tpuc_op_stats_get": ([P, ctypes.POINTER(OpStats)], None),
            "tpuc_op_count": ([P], ctypes.c_int),
            "tpuc_op_name": ([P, ctypes.c_int], ctypes.c_char_p),
        }
        for name, (args, res) in sig.items():
            f = getattr(lib, name)
            f.argtypes, f.restype = args, res
        lib.tpuc_status_code.argtypes = [P]
        lib.tpuc_status_message.argtypes = [P]
        lib.tpuc_status_destroy.argtypes = [P]
        self.lib = lib
        path = _plugin.find_plugin().path
        opts = _native._RuntimeOptions(path.encode(), 1)
        rt = ctypes.c_void_p()
        _native._check(lib.tpuc_runtime_create(ctypes.byref(opts), ctypes.byref(rt)))
        self.rt = rt

    def check(self, status):
        if status:
            code = self.lib.tpuc_status_code(status)
            msg = (self.lib.tpuc_status_message(status) or b"").decode()
            self.lib.tpuc_status_destroy(status)
            if code == 3:
                raise Unimplemented(msg)
            raise RuntimeError(f"tpuc error {code}: {msg}")

    def op_names(self) -> list[str]:
        return [self.lib.tpuc_op_name(self.rt, i).decode()
                for i in range(self.lib.tpuc_op_count(self.rt))]

    def stats(self) -> OpStats:
        s = OpStats()
        self.lib.tpuc_op_stats_get(self.rt, ctypes.byref(s))
        return s


def core() -> Core:
    global _core
    if _core is None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        _core = Core()
    return _core


class _Storage:
    """A device storage holding a copy of a CPU tensor's whole storage."""

    def __init__(self, c: Core, t: torch.Tensor | None, nbytes: int):
        self.c = c
        self.nbytes = nbytes
        h = ctypes.c_void_p()
        c.check(c.lib.tpuc_storage_create(c.rt, 0, max(nbytes, 0), ctypes.byref(h)))
        self.h = h
        if t is not None and nbytes > 0:
            st = t.untyped_storage()
            n = nbytes // t.element_size()
            flat = torch.empty(0, dtype=t.dtype).set_(st, 0, (n,), (1,)).clone()
            dims = (ctypes.c_int64 * 1)(n)
            c.check(c.lib.tpuc_storage_upload(h, DTYPES[t.dtype], dims, 1,
                                              ctypes.c_void_p(flat.data_ptr())))

    def download(self, like: torch.Tensor) -> torch.Tensor:
        raw = torch.empty(self.nbytes, dtype=torch.uint8)
        if self.nbytes:
            self.c.check(self.c.lib.tpuc_storage_download(
                self.h, ctypes.c_void_p(raw.data_ptr()), self.nbytes))
        flat = raw.view(like.dtype)
        return flat.as_strided(like.shape, like.stride(), like.storage_offset()).clone()

    def __del__(self):
        try:
            self.c.lib.tpuc_storage_destroy(self.h)
        except Exception:
            pass


def _desc(t: torch.Tensor, s: _Storage) -> Tensor:
    d = Tensor()
    d.storage = s.h
    d.dtype = DTYPES[t.dtype]
    d.ndim = t.dim()
    for i in range(t.dim()):
        d.sizes[i] = t.shape[i]
        d.strides[i] = t.stride(i)
    d.offset = t.storage_offset()
    return d


def _schema_overload(op):
    return op._schema


def _arg_type(a) -> str:
    return str(a.type)


def _mutated_arg_names(schema) -> list[str]:
    return [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]


# ops whose CPU kernels update arguments the schema does not mark as written
EXTRA_MUTATED = {
    "aten::native_batch_norm": ["running_mean", "running_var"],
    "aten::native_batch_norm.out": ["running_mean", "running_var"],
}


def op_name(op) -> str:
    s = op._schema
    return s.name + ("." + s.overload_name if s.overload_name else "")


def run(op, *args, rng: RNG | None = None, out_like=None, **kwargs):
    """Runs `op` (a torch.ops.aten overload) through tpuc_op_run on CPU
    tensors' copies; returns (outputs on the device as CPU tensors, the same
    computed by PyTorch on the CPU). With out_like (a list of tensors giving
    the results' shapes and dtypes) PyTorch does not run the op: for ops
    without a CPU kernel; the second list is then out_like."""
    c = core()
    schema = op._schema
    name = op_name(op)
    h = c.lib.tpuc_op_find(c.rt, name.encode())
    if not h:
        raise Unimplemented(f"{name}: no lowering")
    bound = []
    for i, a in enumerate(schema.arguments):
        if i < len(args):
            bound.append(args[i])
        elif a.name in kwargs:
            bound.append(kwargs[a.name])
        elif a.has_default_value():
            bound.append(a.default_value)
        else:
            raise TypeError(f"missing argument {a.name}")
    # reference: run on CPU with clones (in-place ops must not touch inputs)
    def clone(v):
        if isinstance(v, torch.Tensor):
            return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype).copy_(v)
        if isinstance(v, (list, tuple)):
            return type(v)(clone(x) for x in v)
        return v
    ref_args = [clone(v) for v in bound]
    pos = [a.name for a in schema.arguments if not a.kwarg_only]
    call_args = [v for a, v in zip(schema.arguments, ref_args) if not a.kwarg_only]
    call_kwargs = {a.name: v for a, v in zip(schema.arguments, ref_args) if a.kwarg_only}
    ref = op(*call_args, **call_kwargs) if out_like is None else tuple(out_like)
    del pos

    storages: dict[int, _Storage] = {}
    keep = []

    def storage_of(t: torch.Tensor) -> _Storage:
        key = t.untyped_storage()._cdata
        if key not in storages:
            storages[key] = _Storage(c, t, t.untyped_storage().nbytes())
        return storages[key]

    tensors: list[Tensor] = []
    cargs = (Arg * (len(bound) + 1))()
    for i, (a, v) in enumerate(zip(schema.arguments, bound)):
        ty = _arg_type(a)
        ca = cargs[i]
        if v is None:
            ca.kind = A_NONE
        elif ty in ("List[Tensor]", "List[Optional[Tensor]]"):
            ca.kind = A_TENSORS
            ca.tensors.first, ca.tensors.count = len(tensors), len(v)
            for t in v:
                tensors.append(_desc(t, storage_of(t)) if t is not None else Tensor())
        elif ty in ("Tensor", "Optional[Tensor]"):
            ca.kind = A_TENSOR
            ca.tensors.first, ca.tensors.count = len(tensors), 1
            tensors.append(_desc(v, storage_of(v)))
        elif ty in ("List[int]", "Optional[List[int]]"):
            vv = [v] if isinstance(v, int) else list(v)
            arr = (ctypes.c_int64 * max(len(vv), 1))(*vv)
            keep.append(arr)
            ca.kind = A_INTS
            ca.ints.v, ca.ints.n = arr, len(vv)
        elif ty == "List[bool]":
            arr = (ctypes.c_int64 * max(len(v), 1))(*[int(x) for x in v])
            keep.append(arr)
            ca.kind = A_BOOLS
            ca.ints.v, ca.ints.n = arr, len(v)
        elif ty in ("bool", "Optional[bool]"):
            ca.kind, ca.i = A_BOOL, int(v)
        elif ty in ("int", "Optional[int]"):
            if isinstance(v, torch.dtype):
                v = list(DTYPES).index(v)  # a tag only; lowerings read output types
            ca.kind, ca.i = A_INT, int(v)
        elif ty in ("Device", "Optional[Device]"):
            ca.kind = A_NONE
        elif ty in ("str", "Optional[str]"):
            b = v.encode()
            keep.append(b)
            ca.kind, ca.s = A_STRING, b
        elif ty in ("float", "Optional[float]", "number", "Optional[number]"):
            ca.kind = A_SCALAR
            if isinstance(v, bool):
                ca.scalar.kind, ca.scalar.i, ca.scalar.re = S_BOOL, int(v), float(v)
            elif isinstance(v, int) and "number" in ty:
                ca.scalar.kind, ca.scalar.i, ca.scalar.re = S_INT, v, float(v)
            elif isinstance(v, complex):
                ca.scalar.kind, ca.scalar.re, ca.scalar.im = S_COMPLEX, v.real, v.imag
            else:
                ca.scalar.kind, ca.scalar.re = S_FLOAT, float(v)
        elif ty == "Optional[Generator]":
            ca.kind = A_RNG
            r = rng or RNG()
            ca.rng.seed, ca.rng.offset = r.seed, r.offset
        else:
            raise TypeError(f"harness: argument type {ty}")
    nargs = len(bound)
    if rng is not None and not any("Generator" in _arg_type(a) for a in schema.arguments):
        cargs[nargs].kind = A_RNG
        cargs[nargs].rng.seed, cargs[nargs].rng.offset = rng.seed, rng.offset
        nargs += 1

    # outputs
    refs = list(ref) if isinstance(ref, (tuple, list)) else ([] if ref is None else [ref])
    names = {a.name: i for i, a in enumerate(schema.arguments)}
    outs: list[tuple[torch.Tensor, _Storage]] = []
    for k, r in enumerate(schema.returns):
        ai = r.alias_info
        target = None
        if ai is not None and ai.is_write:
            for i, a in enumerate(schema.arguments):
                if a.alias_info is not None and a.alias_info.before_set == ai.before_set:
                    target = bound[i]
        if target is None:
            t = refs[k]
            if t is None:  # an undefined result (output_mask): no output
                continue
            if isinstance(t, (list, tuple)):
                for x in t:
                    outs.append((x, _Storage(c, None, x.untyped_storage().nbytes())))
                continue
            like = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
            outs.append((like, _Storage(c, None, like.untyped_storage().nbytes())))
        else:
            outs.append((target, storage_of(target)))
    returned = {str(r.alias_info.before_set) for r in schema.returns if r.alias_info is not None}
    for i, a in enumerate(schema.arguments):
        extra = a.name in EXTRA_MUTATED.get(name, [])
        aliased = a.alias_info is not None and a.alias_info.is_write and \
            str(a.alias_info.before_set) not in returned
        if (aliased or extra) and bound[i] is not None:
            if isinstance(bound[i], (list, tuple)):
                for x in bound[i]:
                    outs.append((x, storage_of(x)))
            else:
                outs.append((bound[i], storage_of(bound[i])))

    tarr = (Tensor * max(len(tensors), 1))(*tensors)
    oarr = (Tensor * len(outs))(*[_desc(t, s) for t, s in outs])
    call = OpCall(h, 0, cargs, nargs, tarr, len(tensors), oarr, len(outs))
    c.check(c.lib.tpuc_op_run(c.rt, ctypes.byref(call), True))
    got = [s.download(t) for t, s in outs]

    # the reference values, same order
    want = []
    for k, r in enumerate(schema.returns):
        v = refs[k] if k < len(refs) else None
        if isinstance(v, (list, tuple)):
            want.extend(v)
        elif v is not None:
            want.append(v)
    if not schema.returns or (len(refs) == 0):
        pass
    for i, a in enumerate(schema.arguments):
        extra = a.name in EXTRA_MUTATED.get(name, [])
        aliased = a.alias_info is not None and a.alias_info.is_write and \
            str(a.alias_info.before_set) not in returned
        if (aliased or extra) and ref_args[i] is not None:
            if isinstance(ref_args[i], (list, tuple)):
                want.extend(ref_args[i])
            else:
                want.append(ref_args[i])
    return got, want


def check(op, *args, rtol=None, atol=None, skip=(), **kwargs):
    """Runs op through tpuc and on the CPU and asserts the outputs agree
    (outputs whose index is in `skip` are not compared)."""
    got, want = run(op, *args, **kwargs)
    assert len(got) == len(want), (len(got), len(want))
    for i, (g, w) in enumerate(zip(got, want)):
        if i in skip:
            continue
        if rtol is None:
            torch.testing.assert_close(g, w, equal_nan=True, msg=lambda m: f"output {i}: {m}")
        else:
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True,
                                       msg=lambda m: f"output {i}: {m}")
    return got, want


_none_ok = None


def supports_none_in_lists() -> bool:
    """Whether the engine accepts a None entry (a tensor without storage) in
    a Tensor?[] argument."""
    global _none_ok
    if _none_ok is None:
        try:
            run(torch.ops.aten.index.Tensor, torch.zeros(2, 2), [None, torch.tensor([1])])
            _none_ok = True
        except Unimplemented:
            _none_ok = True
        except RuntimeError as e:
            _none_ok = "no storage" not in str(e)
    return _none_ok


def noncontig(t: torch.Tensor) -> torch.Tensor:
    """The same values in a transposed (non-contiguous) layout."""
    if t.dim() < 2:
        return t.repeat_interleave(2)[::2] if t.dim() == 1 else t
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)
