"""The C core's collective path: all_reduce, all_gather and reduce_scatter as
one replicated StableHLO program over 2 and 4 devices of one client (the XLA
CPU plugin's devices in this process), from 4 KB to 64 MB, timed through
tpuc_collective_run on buffers already on the devices (launch + wait).

Side by side, the same arithmetic on host tensors with PyTorch on the CPU
(the n inputs summed, concatenated, or summed and split, into
preallocated outputs, once per participant): what moving the
data through host memory costs at least, in the same process. Sizes follow
nccl-tests: the per-participant input of all_reduce and reduce_scatter, the
per-participant output of all_gather. Bus bandwidth as nccl-tests defines it:
algbw * 2(n-1)/n for all_reduce, algbw * (n-1)/n for the others."""
from __future__ import annotations

import ctypes
import os

import torch

from ..timing import interleave

COMMAND = "make bench BENCH_CASES=collectives_core"

ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER = 0, 1, 2
KINDS = {"all_reduce": ALL_REDUCE, "all_gather": ALL_GATHER, "reduce_scatter": REDUCE_SCATTER}
F32 = 11


class _Desc(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("op", ctypes.c_int), ("dim", ctypes.c_int),
                ("concat_dim", ctypes.c_int), ("root", ctypes.c_int),
                ("pairs", ctypes.POINTER(ctypes.c_int)), ("npairs", ctypes.c_int),
                ("group_size", ctypes.c_int), ("devices", ctypes.POINTER(ctypes.c_int)),
                ("ndevices", ctypes.c_int), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("dims", ctypes.POINTER(ctypes.c_int64))]


class _Options(ctypes.Structure):
    _fields_ = [("plugin_path", ctypes.c_char_p), ("cpu_device_count", ctypes.c_int),
                ("cache_dir", ctypes.c_char_p), ("cache_max_bytes", ctypes.c_int64),
                ("cache_preload", ctypes.c_int),  # 0: $TPUC_CACHE_PRELOAD
                ("_reserved", ctypes.c_int64 * 16)]  # zeros for fields a newer core may add


class _Core:
    """A runtime of the core with 4 devices, separate from the torch device's."""

    def __init__(self):
        from tpuc import _native, _plugin

        lib = ctypes.CDLL(_native.library_path())
        vp = ctypes.c_void_p
        for name, args, res in [
            ("tpuc_status_message", [vp], ctypes.c_char_p), ("tpuc_status_destroy", [vp], None),
            ("tpuc_runtime_create", [ctypes.POINTER(_Options), ctypes.POINTER(vp)], vp),
            ("tpuc_runtime_destroy", [vp], None),
            ("tpuc_buffer_from_host", [vp, ctypes.c_int, ctypes.c_int,
                                       ctypes.POINTER(ctypes.c_int64), ctypes.c_int, vp,
                                       ctypes.POINTER(vp)], vp),
            ("tpuc_buffer_release", [vp], None),
            ("tpuc_collective_create", [vp, ctypes.POINTER(_Desc), ctypes.POINTER(vp)], vp),
            ("tpuc_collective_destroy", [vp], None),
            ("tpuc_collective_run", [vp, ctypes.POINTER(vp), ctypes.POINTER(vp), ctypes.c_bool],
             vp),
        ]:
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
        self.lib = lib
        path = os.environ.get("TPUC_PJRT_PLUGIN") or _plugin.find_plugin().path
        opts = _Options(path.encode(), 4, None, 0)
        rt = vp()
        self.check(lib.tpuc_runtime_create(ctypes.byref(opts), ctypes.byref(rt)))
        self.rt = rt

    def check(self, st):
        if st:
            msg = self.lib.tpuc_status_message(st).decode()
            self.lib.tpuc_status_destroy(st)
            raise RuntimeError(msg)

    def prepare(self, kind: int, n: int, numel: int):
        """A collective over devices 0..n-1 and its f32 inputs on the devices;
        returns run() and a cleanup."""
        devs = (ctypes.c_int * n)(*range(n))
        dims = (ctypes.c_int64 * 1)(numel)
        desc = _Desc(kind, 0, 0, 0, 0, None, 0, 0, devs, n, F32, 1, dims)
        h = ctypes.c_void_p()
        self.check(self.lib.tpuc_collective_create(self.rt, ctypes.byref(desc), ctypes.byref(h)))
        ins = (ctypes.c_void_p * n)()
        host = torch.randn(numel)
        for r in range(n):
            b = ctypes.c_void_p()
            self.check(self.lib.tpuc_buffer_from_host(self.rt, r, F32, dims, 1, host.data_ptr(),
                                                      ctypes.byref(b)))
            ins[r] = b.value
        outs = (ctypes.c_void_p * n)()

        def run():
            self.check(self.lib.tpuc_collective_run(h, ins, outs, True))
            for r in range(n):
                self.lib.tpuc_buffer_release(outs[r])
                outs[r] = None

        def cleanup():
            for r in range(n):
                self.lib.tpuc_buffer_release(ins[r])
            self.lib.tpuc_collective_destroy(h)

        return run, cleanup

    def close(self):
        self.lib.tpuc_runtime_destroy(self.rt)


def _host(kind: int, n: int, numel: int):
    """The same arithmetic on host tensors into preallocated outputs (no
    allocation timed: the floor of a host-memory path)."""
    xs = [torch.randn(numel) for _ in range(n)]
    if kind == ALL_GATHER:
        outs = [torch.empty(numel * n) for _ in range(n)]

        def gather():
            for o in outs:
                torch.cat(xs, out=o)

        return gather
    outs = [torch.empty(numel) for _ in range(n)]

    def reduce():
        for o in outs:
            torch.add(xs[0], xs[1], out=o)
            for x in xs[2:]:
                o.add_(x)
        if kind == REDUCE_SCATTER:  # each rank keeps its block
            [o[r * (numel // n):(r + 1) * (numel // n)].clone() for r, o in enumerate(outs)]

    return reduce


def run(quick: bool) -> dict:
    sizes = [4 << 10, 1 << 20] if quick else [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]
    repeats = 3 if quick else 7
    core = _Core()
    rows = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # see the notes: OpenMP's team stalls on a loaded shared machine
    try:
        for name, kind in KINDS.items():
            for n in (2, 4):
                for size in sizes:
                    numel = size // 4
                    if kind == ALL_GATHER:  # size is the gathered output
                        numel //= n
                    if kind == REDUCE_SCATTER:
                        numel -= numel % n
                    inner = max(1, min(50, (8 << 20) // size))  # enough work per sample
                    dev_run, cleanup = core.prepare(kind, n, numel)
                    host_run = _host(kind, n, numel)

                    def dev(dev_run=dev_run, inner=inner):
                        for _ in range(inner):
                            dev_run()

                    def host(host_run=host_run, inner=inner):
                        for _ in range(inner):
                            host_run()

                    res = interleave({"core device path": dev, "torch cpu (host)": host}, repeats)
                    cleanup()
                    factor = 2 * (n - 1) / n if kind == ALL_REDUCE else (n - 1) / n
                    med = {}
                    for c, sample in res.items():
                        s = sample.summary(scale=1e6 / inner)
                        med[c] = s["median"]
                        algbw = size / (s["median"] * 1e-6) / 1e9
                        rows.append({"collective": name, "n": n, "bytes": size, "contender": c,
                                     "us": s, "algbw_gbs": algbw, "busbw_gbs": algbw * factor})
                    rows[-2]["vs_host"] = med["torch cpu (host)"] / med["core device path"]
    finally:
        torch.set_num_threads(threads)
        core.close()
    return {
        "title": "Collectives: the C core's device path (StableHLO collectives, one process)",
        "command": COMMAND,
        "rows": rows,
        "notes": "µs per collective (median, [min, max]) on the XLA CPU plugin's devices of one "
                 "client, float32; each sample runs the collective to completion several "
                 "times. 'vs host' = torch-cpu time / device-path time (> 1: the device path "
                 "is faster). On this plugin both run on the same CPU cores and memory, so the "
                 "ratio measures the program's overhead, not an interconnect. The host "
                 "contender runs PyTorch on one thread (its OpenMP team stalled for tens of ms "
                 "per op on this loaded 2-core machine), into preallocated outputs.",
    }
