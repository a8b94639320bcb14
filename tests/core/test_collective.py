"""The C core's collectives (tpuc_collective_*, csrc/core/lower/collective.c,
csrc/core/exec/collective.c) through ctypes, on 2 and 4 XLA CPU devices of one
client in this process, against PyTorch on the CPU.

Inputs are small integers, so sums, products and averages are exact in every
dtype and in any order of reduction: the results must equal the CPU's
exactly. A non-integer float32 sum is checked against the rounding bound of
any summation order (gamma_{n-1} * sum |x|, Higham 4.2)."""
from __future__ import annotations

import ctypes

import pytest
import torch

from harness import _DTYPES, _RuntimeOptions, _plugin_path, library_path

ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, PERMUTE, BROADCAST = range(6)
OPS = {"sum": 0, "avg": 1, "product": 2, "min": 3, "max": 4}
INVALID_ARGUMENT = 1
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32,
          torch.int64, torch.int8, torch.uint8, torch.bool, torch.complex64]


class Desc(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("op", ctypes.c_int), ("dim", ctypes.c_int),
                ("concat_dim", ctypes.c_int), ("root", ctypes.c_int),
                ("pairs", ctypes.POINTER(ctypes.c_int)), ("npairs", ctypes.c_int),
                ("group_size", ctypes.c_int), ("devices", ctypes.POINTER(ctypes.c_int)),
                ("ndevices", ctypes.c_int), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("dims", ctypes.POINTER(ctypes.c_int64))]


class CoreError(RuntimeError):
    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


class Runtime:
    """A runtime of the core with 4 XLA CPU devices, and collectives on buffers."""

    def __init__(self):
        lib = ctypes.CDLL(library_path())
        vp = ctypes.c_void_p
        for name, args, res in [
            ("tpuc_status_code", [vp], ctypes.c_int), ("tpuc_status_message", [vp], ctypes.c_char_p),
            ("tpuc_status_destroy", [vp], None),
            ("tpuc_runtime_create", [ctypes.POINTER(_RuntimeOptions), ctypes.POINTER(vp)], vp),
            ("tpuc_runtime_destroy", [vp], None),
            ("tpuc_buffer_from_host", [vp, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                                       ctypes.c_int, vp, ctypes.POINTER(vp)], vp),
            ("tpuc_buffer_to_host", [vp, vp, ctypes.c_size_t], vp),
            ("tpuc_buffer_nbytes", [vp], ctypes.c_size_t), ("tpuc_buffer_device", [vp], ctypes.c_int),
            ("tpuc_buffer_release", [vp], None),
            ("tpuc_collective_create", [vp, ctypes.POINTER(Desc), ctypes.POINTER(vp)], vp),
            ("tpuc_collective_destroy", [vp], None),
            ("tpuc_collective_output_ndim", [vp], ctypes.c_int),
            ("tpuc_collective_output_dims", [vp], ctypes.POINTER(ctypes.c_int64)),
            ("tpuc_collective_run", [vp, ctypes.POINTER(vp), ctypes.POINTER(vp), ctypes.c_bool], vp),
        ]:
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
        self.lib = lib
        opts = _RuntimeOptions(_plugin_path().encode(), 4, b"off", 0)
        rt = vp()
        self.check(lib.tpuc_runtime_create(ctypes.byref(opts), ctypes.byref(rt)))
        self.rt = rt

    def check(self, st):
        if st:
            code = self.lib.tpuc_status_code(st)
            msg = self.lib.tpuc_status_message(st).decode()
            self.lib.tpuc_status_destroy(st)
            raise CoreError(code, msg)

    def collective(self, xs, devices, kind, op="sum", dim=0, concat_dim=0, root=0, pairs=(),
                   group_size=0):
        """Runs the collective on CPU tensors xs[r] placed on devices[r]; returns
        the outputs as CPU tensors."""
        n, x0 = len(xs), xs[0]
        flat = [v for p in pairs for v in p]
        desc = Desc(kind, OPS[op], dim, concat_dim, root, (ctypes.c_int * max(1, len(flat)))(*flat),
                    len(pairs), group_size, (ctypes.c_int * n)(*devices), n, _DTYPES[x0.dtype],
                    x0.dim(), (ctypes.c_int64 * max(1, x0.dim()))(*x0.shape))
        h = ctypes.c_void_p()
        self.check(self.lib.tpuc_collective_create(self.rt, ctypes.byref(desc), ctypes.byref(h)))
        ins, outs = (ctypes.c_void_p * n)(), (ctypes.c_void_p * n)()
        try:
            nd = self.lib.tpuc_collective_output_ndim(h)
            od = self.lib.tpuc_collective_output_dims(h)
            shape = [od[i] for i in range(nd)]
            for r, x in enumerate(xs):
                x = x.contiguous()
                dims = (ctypes.c_int64 * max(1, x.dim()))(*x.shape)
                b = ctypes.c_void_p()
                self.check(self.lib.tpuc_buffer_from_host(self.rt, devices[r], _DTYPES[x.dtype], dims,
                                                          x.dim(), x.data_ptr(), ctypes.byref(b)))
                ins[r] = b.value
            self.check(self.lib.tpuc_collective_run(h, ins, outs, False))
            res = []
            for r in range(n):
                assert self.lib.tpuc_buffer_device(outs[r]) == devices[r]
                y = torch.empty(shape, dtype=x0.dtype)
                self.check(self.lib.tpuc_buffer_to_host(outs[r], y.data_ptr(), y.numel() * y.element_size()))
                res.append(y)
            return res
        finally:
            for b in list(ins) + list(outs):
                if b:
                    self.lib.tpuc_buffer_release(b)
            self.lib.tpuc_collective_destroy(h)


@pytest.fixture(scope="module")
def core():
    r = Runtime()
    yield r
    r.lib.tpuc_runtime_destroy(r.rt)


def inputs(n, dtype, shape, product=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    lo, hi = ((0, 3) if product else (0, 7)) if dtype in (torch.uint8, torch.bool) else \
        ((-1, 2) if product else (-3, 4))
    out = []
    for _ in range(n):
        x = torch.randint(lo, hi, shape, generator=g)
        if dtype == torch.bool:
            x = x != 0
        elif dtype.is_complex:
            x = torch.complex(x.double(), torch.randint(-2, 3, shape, generator=g).double())
        out.append(x.to(dtype))
    return out


DEVICES = {2: [1, 0], 4: [2, 0, 3, 1]}  # orders other than 0..n-1: ranks are the caller's


def reduce_ref(xs, op):
    s = torch.stack([x.to(torch.complex128 if x.is_complex() else torch.float64) for x in xs])
    dt = xs[0].dtype
    if dt == torch.bool:
        r = {"sum": s.sum(0) != 0, "max": s.amax(0) != 0, "product": s.prod(0) != 0,
             "min": s.amin(0) != 0}[op]
        return r
    if op == "sum":
        r = s.sum(0)
    elif op == "product":
        r = s.prod(0)
    elif op == "min":
        r = s.amin(0)
    elif op == "max":
        r = s.amax(0)
    else:
        r = s.sum(0) / len(xs)
        if not (dt.is_floating_point or dt.is_complex):
            r = torch.trunc(r)
    return r.to(dt)


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", list(OPS))
def test_all_reduce(core, n, dtype, op):
    if dtype.is_complex and op in ("min", "max"):
        with pytest.raises(CoreError) as e:
            core.collective(inputs(n, dtype, (3,)), DEVICES[n], ALL_REDUCE, op)
        assert e.value.code == INVALID_ARGUMENT and "complex" in str(e.value)
        return
    if dtype == torch.bool and op == "avg":
        with pytest.raises(CoreError, match="AVG of bool"):
            core.collective(inputs(n, dtype, (3,)), DEVICES[n], ALL_REDUCE, op)
        return
    xs = inputs(n, dtype, (5, 3), product=op == "product")
    want = reduce_ref(xs, op)
    for got in core.collective(xs, DEVICES[n], ALL_REDUCE, op):
        assert torch.equal(got, want)


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_gather_reduce_scatter_all_to_all(core, n, dtype):
    xs = inputs(n, dtype, (2 * n, 3), seed=1)
    for dim in (0, 1):
        want = torch.cat(xs, dim)
        for got in core.collective(xs, DEVICES[n], ALL_GATHER, dim=dim):
            assert torch.equal(got, want)
    red = reduce_ref(xs, "sum")
    for rank, got in enumerate(core.collective(xs, DEVICES[n], REDUCE_SCATTER, "sum", dim=0)):
        assert torch.equal(got, red.chunk(n, 0)[rank])
    for split, concat in [(0, 0), (0, 1)]:  # all_to_all_single, and a concat on another dim
        outs = core.collective(xs, DEVICES[n], ALL_TO_ALL, dim=split, concat_dim=concat)
        for rank, got in enumerate(outs):
            want = torch.cat([x.chunk(n, split)[rank] for x in xs], concat)
            assert torch.equal(got, want)


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool,
                                   torch.complex128], ids=str)
def test_permute_and_broadcast(core, n, dtype):
    xs = inputs(n, dtype, (7,), seed=2)
    ring = [(r, (r + 1) % n) for r in range(n)]
    for rank, got in enumerate(core.collective(xs, DEVICES[n], PERMUTE, pairs=ring)):
        assert torch.equal(got, xs[(rank - 1) % n])
    # send/recv: one pair; every other rank receives zeros
    outs = core.collective(xs, DEVICES[n], PERMUTE, pairs=[(n - 1, 0)])
    assert torch.equal(outs[0], xs[n - 1])
    for got in outs[1:]:
        assert torch.equal(got, torch.zeros_like(got))
    for root in (0, n - 1):
        for got in core.collective(xs, DEVICES[n], BROADCAST, root=root):
            assert torch.equal(got, xs[root])


def test_broadcast_keeps_every_bit(core):
    bits = torch.tensor([0x80000000, 0x7FC01234, 0xFF800000, 1], dtype=torch.int64)
    root = bits.to(torch.int32).view(torch.float32)  # -0.0, a NaN with a payload, -inf, a subnormal
    xs = [torch.ones(4), torch.ones(4), root, torch.ones(4)]
    for got in core.collective(xs, DEVICES[4], BROADCAST, root=2):
        assert torch.equal(got.view(torch.int32), root.view(torch.int32))


def test_groups_of_two(core):
    xs = inputs(4, torch.float32, (4, 3), seed=3)
    outs = core.collective(xs, DEVICES[4], ALL_REDUCE, "sum", group_size=2)
    for rank, got in enumerate(outs):
        g = rank // 2
        assert torch.equal(got, xs[2 * g] + xs[2 * g + 1])
    outs = core.collective(xs, DEVICES[4], ALL_GATHER, dim=0, group_size=2)
    for rank, got in enumerate(outs):
        g = rank // 2
        assert torch.equal(got, torch.cat(xs[2 * g:2 * g + 2]))


@pytest.mark.parametrize("n", [2, 4])
def test_float_sum_within_the_rounding_bound(core, n):
    g = torch.Generator().manual_seed(5)
    xs = [(torch.randn(4099, generator=g, dtype=torch.float64) *
           10.0 ** torch.randint(-4, 5, (4099,), generator=g)).float() for _ in range(n)]
    exact = torch.stack([x.double() for x in xs]).sum(0)  # exact: n <= 4 float32 terms fit
    abs_sum = torch.stack([x.double().abs() for x in xs]).sum(0)
    u = 2.0 ** -24
    bound = (n - 1) * u / (1 - (n - 1) * u) * abs_sum
    for got in core.collective(xs, DEVICES[n], ALL_REDUCE, "sum"):
        assert bool(((got.double() - exact).abs() <= bound).all())


def test_errors_are_statuses(core):
    xs = inputs(4, torch.float32, (6,))
    with pytest.raises(CoreError, match="does not divide"):
        core.collective(xs, DEVICES[4], REDUCE_SCATTER, "sum")
    with pytest.raises(CoreError, match="twice"):
        core.collective(xs, [0, 1, 1, 2], ALL_REDUCE)
    with pytest.raises(CoreError, match="out of range"):
        core.collective(xs, [0, 1, 2, 7], ALL_REDUCE)
    with pytest.raises(CoreError, match="root"):
        core.collective(xs, DEVICES[4], BROADCAST, root=4)
    # still usable
    assert torch.equal(core.collective(xs, DEVICES[4], ALL_REDUCE)[0], sum(xs))
