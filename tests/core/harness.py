"""A ctypes harness that runs single ATen ops through the C core's op API
(tpuc_op_call / tpuc_op_run) without the PyTorch device, and compares them
with PyTorch on the CPU.

    from harness import core
    got = core().run("aten::add.Tensor", x, y, alpha=2)      # CPU tensors in, CPU tensors out
    core().check("aten::add.Tensor", x, y, alpha=2)          # == the CPU result?

Arguments follow the op's schema (positional and keyword, defaults filled
in). Tensors are CPU tensors: each distinct storage is uploaded once (views of
one storage share it, so transposed and sliced inputs, in-place ops on views
and out= all go through the engine's view machinery). Outputs are fresh
contiguous tensors for functional ops, and the mutated arguments for in-place
and out= overloads. Python scalars become runtime scalars; a Generator
argument becomes the (seed, offset) pair given by `rng=`.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

import torch

MAX_DIMS = 16
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# tpuc_dtype
_DTYPES = {
    torch.bool: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4,
    torch.uint8: 5, torch.uint16: 6, torch.uint32: 7, torch.uint64: 8,
    torch.float16: 9, torch.bfloat16: 10, torch.float32: 11, torch.float64: 12,
    torch.complex64: 13, torch.complex128: 14,
}

# tpuc_arg_kind
NONE, TENSOR, TENSORS, INT, INTS, BOOL, BOOLS, STRING, SCALAR, RNG = range(10)
# tpuc_scalar_kind
S_BOOL, S_INT, S_FLOAT, S_COMPLEX = range(4)
ERR_UNIMPLEMENTED = 3


class Tensor(ctypes.Structure):
    _fields_ = [
        ("storage", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("sizes", ctypes.c_int64 * MAX_DIMS),
        ("strides", ctypes.c_int64 * MAX_DIMS),
        ("offset", ctypes.c_int64),
    ]


class _Ints(ctypes.Structure):
    _fields_ = [("v", ctypes.POINTER(ctypes.c_int64)), ("n", ctypes.c_int)]


class _Tensors(ctypes.Structure):
    _fields_ = [("first", ctypes.c_int), ("count", ctypes.c_int)]


class _Scalar(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("re", ctypes.c_double), ("im", ctypes.c_double),
                ("i", ctypes.c_int64)]


class _Rng(ctypes.Structure):
    _fields_ = [("seed", ctypes.c_uint64), ("offset", ctypes.c_uint64)]


class _ArgU(ctypes.Union):
    _fields_ = [("i", ctypes.c_int64), ("ints", _Ints), ("tensors", _Tensors),
                ("s", ctypes.c_char_p), ("scalar", _Scalar), ("rng", _Rng)]


class Arg(ctypes.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("kind", ctypes.c_int), ("u", _ArgU)]


class OpCall(ctypes.Structure):
    _fields_ = [
        ("op", ctypes.c_void_p),
        ("device", ctypes.c_int),
        ("args", ctypes.POINTER(Arg)),
        ("nargs", ctypes.c_int),
        ("tensors", ctypes.POINTER(Tensor)),
        ("ntensors", ctypes.c_int),
        ("outputs", ctypes.POINTER(Tensor)),
        ("noutputs", ctypes.c_int),
    ]


class OpStats(ctypes.Structure):
    _fields_ = [("op_calls", ctypes.c_int64), ("fast_hits", ctypes.c_int64),
                ("fast_misses", ctypes.c_int64), ("emitted_bytes", ctypes.c_int64),
                ("recorded_ops", ctypes.c_int64), ("flushes", ctypes.c_int64),
                ("chunk_hits", ctypes.c_int64), ("chunk_misses", ctypes.c_int64),
                # room for fields a newer core may add: it writes its whole struct
                ("_reserved", ctypes.c_int64 * 16)]


class _RuntimeOptions(ctypes.Structure):
    _fields_ = [
        ("plugin_path", ctypes.c_char_p),
        ("cpu_device_count", ctypes.c_int),
        ("cache_dir", ctypes.c_char_p),
        ("cache_max_bytes", ctypes.c_int64),
        ("_reserved", ctypes.c_int64 * 16),  # zeros for fields a newer core may add
    ]


class CoreError(RuntimeError):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class Unimplemented(CoreError):
    pass


def library_path() -> str:
    env = os.environ.get("TPUC_CORE_LIB")
    if env:
        return env
    candidates = [os.path.join(ROOT, "build", "c", "csrc", "core", "libtpuc_core.so")]
    try:
        import tpuc._native as native

        candidates.insert(0, native.library_path())
    except Exception:  # noqa: BLE001 - the package may be absent
        pass
    for c in candidates:
        if os.path.exists(c):
            return c
    raise RuntimeError(f"libtpuc_core.so not found (tried {candidates}); run `make install`")


def _plugin_path() -> str:
    env = os.environ.get("TPUC_PJRT_PLUGIN")
    if env:
        return env
    from tpuc._plugin import find_plugin

    return find_plugin().path


@dataclass
class _Storage:
    handle: ctypes.c_void_p
    nbytes: int


class Core:
    """One runtime on the plugin; ops are looked up by name and cached."""

    def __init__(self):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        lib = ctypes.CDLL(library_path())
        vp, sp = ctypes.c_void_p, ctypes.c_void_p
        lib.tpuc_status_code.argtypes = [sp]
        lib.tpuc_status_code.restype = ctypes.c_int
        lib.tpuc_status_message.argtypes = [sp]
        lib.tpuc_status_message.restype = ctypes.c_char_p
        lib.tpuc_status_destroy.argtypes = [sp]
        lib.tpuc_runtime_create.argtypes = [ctypes.POINTER(_RuntimeOptions), ctypes.POINTER(vp)]
        lib.tpuc_runtime_create.restype = sp
        lib.tpuc_storage_create.argtypes = [vp, ctypes.c_int, ctypes.c_size_t, ctypes.POINTER(vp)]
        lib.tpuc_storage_create.restype = sp
        lib.tpuc_storage_destroy.argtypes = [vp]
        lib.tpuc_storage_upload.argtypes = [vp, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                                            ctypes.c_int, ctypes.c_void_p]
        lib.tpuc_storage_upload.restype = sp
        lib.tpuc_storage_download.argtypes = [vp, ctypes.c_void_p, ctypes.c_size_t]
        lib.tpuc_storage_download.restype = sp
        lib.tpuc_op_find.argtypes = [vp, ctypes.c_char_p]
        lib.tpuc_op_find.restype = vp
        lib.tpuc_op_count.argtypes = [vp]
        lib.tpuc_op_count.restype = ctypes.c_int
        lib.tpuc_op_name.argtypes = [vp, ctypes.c_int]
        lib.tpuc_op_name.restype = ctypes.c_char_p
        lib.tpuc_op_run.argtypes = [vp, ctypes.POINTER(OpCall), ctypes.c_bool]
        lib.tpuc_op_run.restype = sp
        lib.tpuc_op_stats_get.argtypes = [vp, ctypes.POINTER(OpStats)]
        self.lib = lib
        opts = _RuntimeOptions(_plugin_path().encode(), 1, b"off", 0)  # no disk cache: isolated
        rt = vp()
        self._check(lib.tpuc_runtime_create(ctypes.byref(opts), ctypes.byref(rt)))
        self.rt = rt
        self._ops: dict[str, int] = {}

    # ---- plumbing ----
    def _check(self, st):
        if not st:
            return
        code = self.lib.tpuc_status_code(st)
        msg = self.lib.tpuc_status_message(st).decode()
        self.lib.tpuc_status_destroy(st)
        raise (Unimplemented if code == ERR_UNIMPLEMENTED else CoreError)(code, msg)

    def op(self, name: str):
        if name not in self._ops:
            self._ops[name] = self.lib.tpuc_op_find(self.rt, name.encode())
        return self._ops[name]

    def op_names(self) -> list[str]:
        n = self.lib.tpuc_op_count(self.rt)
        return [self.lib.tpuc_op_name(self.rt, i).decode() for i in range(n)]

    def stats(self) -> OpStats:
        s = OpStats()
        self.lib.tpuc_op_stats_get(self.rt, ctypes.byref(s))
        return s

    def _upload(self, t: torch.Tensor) -> _Storage:
        st = t.untyped_storage()
        nbytes = st.nbytes()
        h = ctypes.c_void_p()
        self._check(self.lib.tpuc_storage_create(self.rt, 0, nbytes, ctypes.byref(h)))
        es = t.element_size()
        if nbytes and nbytes % es == 0:
            raw = torch.empty(0, dtype=torch.uint8).set_(st).contiguous()
            dims = (ctypes.c_int64 * 1)(nbytes // es)
            self._check(self.lib.tpuc_storage_upload(h, _DTYPES[t.dtype], dims, 1,
                                                     ctypes.c_void_p(raw.data_ptr())))
        return _Storage(h, nbytes)

    def _download_into(self, s: _Storage, t: torch.Tensor):
        raw = torch.empty(s.nbytes, dtype=torch.uint8)
        if s.nbytes:
            self._check(self.lib.tpuc_storage_download(s.handle, ctypes.c_void_p(raw.data_ptr()),
                                                       s.nbytes))
        torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()).copy_(raw)

    @staticmethod
    def _desc(t: torch.Tensor, s: _Storage) -> Tensor:
        d = Tensor()
        d.storage = s.handle
        d.dtype = _DTYPES[t.dtype]
        d.ndim = t.dim()
        for i in range(t.dim()):
            d.sizes[i] = t.shape[i]
            d.strides[i] = t.stride(i)
        d.offset = t.storage_offset()
        return d

    # ---- running ops ----
    def run(self, name: str, *args, rng=(0, 0), wait=True, outs=None, **kwargs):
        """Runs `name` on copies of the given CPU tensors; returns what the op
        returns (a tensor or a tuple), as CPU tensors. In-place and out=
        overloads update the given tensors too, as PyTorch would. `outs`
        gives the outputs of an op without a meta kernel."""
        opov = _overload(name)
        schema = opov._schema
        bound = _bind(schema, args, kwargs)
        # outputs: mutated arguments, or fresh tensors shaped by the meta kernel
        mutated = [i for i, a in enumerate(schema.arguments)
                   if a.alias_info is not None and a.alias_info.is_write]
        if outs is not None:
            outs = list(outs)
        elif mutated:
            outs = [bound[i] for i in mutated]
        else:
            pos_, kw_ = _split(schema, _to_meta(bound))
            meta = opov(*pos_, **kw_)
            metas = meta if isinstance(meta, (tuple, list)) else (meta,)
            outs = [torch.empty(m.shape, dtype=m.dtype) for m in metas]
        storages: dict[int, _Storage] = {}
        keep = []

        def storage_of(t):
            key = t.untyped_storage().data_ptr() or id(t.untyped_storage())
            if key not in storages or t.untyped_storage().nbytes() == 0:
                storages[key] = self._upload(t)
            return storages[key]

        tensors, cargs = [], (Arg * max(1, len(bound)))()
        for i, (a, v) in enumerate(zip(schema.arguments, bound)):
            arg = cargs[i]
            ty = _kind(a.type)
            if ty == "GeneratorType":  # the device generator's state, given or not
                arg.kind = RNG
                arg.rng.seed, arg.rng.offset = rng
            elif v is None:
                arg.kind = NONE
            elif isinstance(v, torch.Tensor):
                arg.kind = TENSOR
                arg.tensors.first, arg.tensors.count = len(tensors), 1
                tensors.append(self._desc(v, storage_of(v)))
            elif isinstance(v, (list, tuple)) and v and isinstance(v[0], torch.Tensor):
                arg.kind = TENSORS
                arg.tensors.first, arg.tensors.count = len(tensors), len(v)
                tensors.extend(self._desc(t, storage_of(t)) for t in v)
            elif ty == "TensorType" and isinstance(v, (bool, int, float, complex)):
                arg.kind = SCALAR  # a wrapped Python number, as the glue passes it
                _set_scalar(arg.scalar, v)
            elif ty in ("NumberType", "FloatType", "ComplexType"):
                arg.kind = SCALAR
                _set_scalar(arg.scalar, v)
            elif isinstance(v, bool):
                arg.kind, arg.i = BOOL, int(v)
            elif isinstance(v, (int, torch.dtype, torch.memory_format, torch.layout)):
                arg.kind, arg.i = INT, _enum_int(v)
            elif isinstance(v, str):
                arg.kind = STRING
                b = v.encode()
                keep.append(b)
                arg.s = b
            elif isinstance(v, (list, tuple)):
                arg.kind = BOOLS if "bool" in str(a.type) else INTS
                arr = (ctypes.c_int64 * max(1, len(v)))(*[int(x) for x in v])
                keep.append(arr)
                arg.ints.v = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int64))
                arg.ints.n = len(v)
            elif isinstance(v, torch.device):
                arg.kind = NONE
            else:
                raise TypeError(f"{name}: cannot pass argument {a.name}={v!r}")
        out_descs = [self._desc(t, storage_of(t)) for t in outs]
        call = OpCall()
        call.op = self.op(name)
        if not call.op:
            raise Unimplemented(ERR_UNIMPLEMENTED, f"{name}: no lowering")
        call.device = 0
        call.args, call.nargs = cargs, len(bound)
        tarr = (Tensor * max(1, len(tensors)))(*tensors)
        oarr = (Tensor * len(out_descs))(*out_descs)
        call.tensors, call.ntensors = tarr, len(tensors)
        call.outputs, call.noutputs = oarr, len(out_descs)
        try:
            self._check(self.lib.tpuc_op_run(self.rt, ctypes.byref(call), wait))
            # write back every storage an output lives in (and thereby its aliases)
            done = set()
            for t in outs:
                s = storage_of(t)
                if id(s) not in done:
                    done.add(id(s))
                    self._download_into(s, t)
        finally:
            for s in {id(s): s for s in storages.values()}.values():
                self.lib.tpuc_storage_destroy(s.handle)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def check(self, name: str, *args, atol=None, rtol=None, equal_nan=True, **kwargs):
        """Runs the op here and on the CPU (on clones of the same arguments)
        and asserts that every output and every mutated argument match."""
        cpu_args, cpu_kwargs = _clone_tree(args), _clone_tree(kwargs)
        want = _overload(name)(*cpu_args, **cpu_kwargs)
        got = self.run(name, *args, **kwargs)
        want_t = want if isinstance(want, (tuple, list)) else (want,)
        got_t = got if isinstance(got, (tuple, list)) else (got,)
        assert len(want_t) == len(got_t), name
        for w, g in zip(want_t, got_t):
            assert g.dtype == w.dtype, f"{name}: dtype {g.dtype} != {w.dtype}"
            assert g.shape == w.shape, f"{name}: shape {tuple(g.shape)} != {tuple(w.shape)}"
            torch.testing.assert_close(g, w, atol=atol, rtol=rtol, equal_nan=equal_nan,
                                       msg=lambda m: f"{name}: {m}")
        # arguments mutated in place (through views too) must match as well
        for a, c in zip(_flatten(args) + _flatten(kwargs), _flatten(cpu_args) + _flatten(cpu_kwargs)):
            if isinstance(a, torch.Tensor):
                torch.testing.assert_close(a, c, atol=atol, rtol=rtol, equal_nan=equal_nan,
                                           msg=lambda m: f"{name} (argument): {m}")
        return got


# ---- helpers ----
def _overload(name: str):
    assert name.startswith("aten::"), name
    base, _, ov = name[len("aten::"):].partition(".")
    return getattr(getattr(torch.ops.aten, base), ov or "default")


def _bind(schema, args, kwargs) -> list:
    out, pos = [], list(args)
    for a in schema.arguments:
        if not a.kwarg_only and pos:
            out.append(pos.pop(0))
        elif a.name in kwargs:
            out.append(kwargs[a.name])
        elif a.has_default_value():
            out.append(a.default_value)
        elif a.type.kind() == "OptionalType":
            out.append(None)
        else:
            raise TypeError(f"{schema.name}: missing argument {a.name}")
    if pos:
        raise TypeError(f"{schema.name}: too many arguments")
    unknown = set(kwargs) - {a.name for a in schema.arguments}
    if unknown:
        raise TypeError(f"{schema.name}: unknown arguments {unknown}")
    return out


def _kind(t) -> str:
    """The schema type's kind, optionals unwrapped ("NumberType" for Scalar)."""
    return (t.getElementType() if t.kind() == "OptionalType" else t).kind()


def _split(schema, bound):
    pos, kw = [], {}
    for a, v in zip(schema.arguments, bound):
        if a.kwarg_only:
            kw[a.name] = v
        else:
            pos.append(v)
    return pos, kw


def _to_meta(bound):
    res = []
    for v in bound:
        if isinstance(v, torch.Tensor):
            res.append(v.to("meta"))
        elif isinstance(v, (list, tuple)) and v and isinstance(v[0], torch.Tensor):
            res.append([t.to("meta") for t in v])
        else:
            res.append(v)
    return res


def _set_scalar(s, v):
    if isinstance(v, torch.Tensor):
        v = v.item()
    if isinstance(v, bool):
        s.kind, s.i, s.re = S_BOOL, int(v), float(v)
    elif isinstance(v, int):
        s.kind, s.i, s.re = S_INT, v, float(v)
    elif isinstance(v, complex):
        s.kind, s.re, s.im = S_COMPLEX, v.real, v.imag
    else:
        s.kind, s.re = S_FLOAT, float(v)


_SCALAR_TYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                 torch.float32, torch.float64, None, torch.complex64, torch.complex128,
                 torch.bool, None, None, None, torch.bfloat16]


def _enum_int(v) -> int:
    if isinstance(v, torch.dtype):
        return _SCALAR_TYPES.index(v)
    if isinstance(v, (torch.memory_format, torch.layout)):
        return 0
    return int(v)


def _clone_tree(x):
    if isinstance(x, torch.Tensor):
        return x.clone() if x._base is None else _clone_view(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_clone_tree(v) for v in x)
    if isinstance(x, dict):
        return {k: _clone_tree(v) for k, v in x.items()}
    return x


def _clone_view(x: torch.Tensor) -> torch.Tensor:
    """A copy of a view keeping its geometry over a copy of its storage."""
    base = torch.empty(0, dtype=x.dtype)
    st = x.untyped_storage()
    copy = torch.empty(st.nbytes(), dtype=torch.uint8)
    copy.copy_(torch.empty(0, dtype=torch.uint8).set_(st))
    base.set_(copy.untyped_storage(), 0, (st.nbytes() // x.element_size(),))
    return base.as_strided(x.shape, x.stride(), x.storage_offset())


def _flatten(x) -> list:
    if isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, (list, tuple)):
        out = []
        for v in x:
            out.extend(_flatten(v))
        return out
    return [x]


_core: Core | None = None


def core() -> Core:
    global _core
    if _core is None:
        _core = Core()
    return _core
