"""How the bytes of a tpu_dist collective travel: the transport seam.

``ProcessGroupTpu`` (process_group.py) turns every c10d call into one call of a
``Transport``. Two transports fit behind it:

- ``HostTransport`` (here, the only one this machine can run): the tensors are
  copied to the host, PyTorch's own gloo engine runs the collective over TCP,
  and the results are copied back into the caller's (possibly non-contiguous)
  device tensors. Reductions of 16-bit floats run in float32 on the host and
  are rounded once; dtypes gloo cannot reduce are widened or reinterpreted;
  data-movement collectives move raw bytes, so every dtype works.
- a device transport: the same calls as device programs of the C core
  (StableHLO all_reduce / all_gather / reduce_scatter / all_to_all /
  collective_permute over the participants' devices). It applies where the
  PJRT plugin runs collectives across the participating processes (libtpu
  over ICI, the CUDA plugin); the XLA CPU plugin cannot across processes.
  ``select_transport`` is where it plugs in.

Every method starts the collective (the host copies of the inputs are taken
before it returns, so the caller may overwrite its inputs) and returns a
``Finish``: calling it waits for the transfer and writes the outputs. A method
that returns has launched gloo's work; gloo runs it on its own worker thread.

Lifetime (``HostTransport.shutdown``, ``_exit_hook``): a gloo worker thread
must never be the one that lets go of a collective's last reference. Since
torch 2.13 a C++ reference to a tensor made in Python keeps its PyObject alive,
so dropping the last one takes the GIL; a worker that does so while the
interpreter finalizes is ended by CPython inside a noexcept destructor, and the
process aborts ("terminate called without an active exception"). So the
transport keeps every queued gloo work until the worker provably dropped it
(one worker thread: works run in order, so a finished work means every earlier
one was let go), tears the group down itself in ``shutdown`` (gloo's own
``shutdown`` does nothing in torch 2.13), and at interpreter exit leaves what a
worker may still touch alive for good.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import sys
import warnings
import weakref
from collections import deque
from datetime import timedelta
from typing import Callable, Protocol

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

Tensors = list[torch.Tensor]
Finish = Callable[[], None]


class Transport(Protocol):
    """The primitives tpu_dist needs; tensors may be on "tpu" or the CPU."""

    name: str

    def all_reduce(self, tensors: Tensors, op: ReduceOp) -> Finish: ...
    def broadcast(self, tensors: Tensors, root: int) -> Finish: ...
    def reduce(self, tensors: Tensors, root: int, op: ReduceOp) -> Finish: ...
    def all_gather(self, outputs: list[Tensors], inputs: Tensors) -> Finish: ...
    def all_gather_into_tensor(self, output: torch.Tensor, input: torch.Tensor) -> Finish: ...
    def reduce_scatter(self, outputs: Tensors, inputs: list[Tensors], op: ReduceOp) -> Finish: ...
    def reduce_scatter_tensor(self, output: torch.Tensor, input: torch.Tensor, op: ReduceOp) -> Finish: ...
    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor,
                          output_splits: list[int], input_splits: list[int]) -> Finish: ...
    def all_to_all(self, outputs: Tensors, inputs: Tensors) -> Finish: ...
    def gather(self, outputs: list[Tensors], inputs: Tensors, root: int) -> Finish: ...
    def scatter(self, outputs: Tensors, inputs: list[Tensors], root: int) -> Finish: ...
    def send(self, tensors: Tensors, dst: int, tag: int) -> Finish: ...
    def recv(self, tensors: Tensors, src: int, tag: int) -> Finish: ...
    def barrier(self) -> Finish: ...
    def exchange(self, signature: str) -> list[str]: ...
    def shutdown(self) -> None: ...


# ---- reductions on the host -------------------------------------------------------------

# dtypes gloo reduces natively (ProcessGroupGloo's GENERATE_ALL_TYPES)
_GLOO_REDUCE = {torch.float32, torch.float64, torch.int8, torch.uint8, torch.int32, torch.int64}
# reduced in a wider dtype on the host, then rounded once
_WIDEN = {
    torch.float16: torch.float32, torch.bfloat16: torch.float32,
    torch.int16: torch.int32, torch.uint16: torch.int64, torch.uint32: torch.int64,
    torch.uint64: torch.int64,  # same bits: SUM and PRODUCT wrap alike (MIN/MAX refused below)
}
for _name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
    if hasattr(torch, _name):
        _WIDEN[getattr(torch, _name)] = torch.float32


def _op_type(op: ReduceOp | ReduceOp.RedOpType) -> ReduceOp.RedOpType:
    return op.op if isinstance(op, ReduceOp) else op


class _Reduction:
    """What a ReduceOp becomes on the host: a gloo op, a pre-scale, a post-divide."""

    def __init__(self, op: ReduceOp, dtype: torch.dtype, world: int) -> None:
        t = _op_type(op)
        self.pre: float | None = None
        self.divide: int | None = None
        if dtype.is_complex and t not in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.PREMUL_SUM):
            raise TypeError(f"tpu_dist: {t.name} of complex tensors is not defined (SUM and AVG are)")
        if dtype == torch.bool:  # PyTorch's bool sum is OR, product is AND
            t = {ReduceOp.SUM: ReduceOp.MAX, ReduceOp.PRODUCT: ReduceOp.MIN}.get(t, t)
        if t == ReduceOp.AVG:
            if not (dtype.is_floating_point or dtype.is_complex):
                raise TypeError(f"tpu_dist: ReduceOp.AVG needs a floating dtype, got {dtype}; "
                                "use SUM and divide")
            t, self.divide = ReduceOp.SUM, world
        elif t == ReduceOp.PREMUL_SUM:
            factor = getattr(op, "factor", None)
            if not isinstance(factor, (int, float)):
                raise TypeError("tpu_dist: ReduceOp.PREMUL_SUM needs a Python-number factor "
                                "(a tensor factor is not supported); multiply, then use SUM")
            t, self.pre = ReduceOp.SUM, float(factor)
        if dtype == torch.uint64 and t in (ReduceOp.MIN, ReduceOp.MAX):
            raise TypeError("tpu_dist: MIN/MAX of uint64 is not supported (gloo has no unsigned "
                            "64-bit type); SUM and PRODUCT are")
        if t in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR) and (
                dtype.is_floating_point or dtype.is_complex):
            raise TypeError(f"tpu_dist: {t.name} needs an integer or bool dtype, got {dtype}")
        self.op = t

    def host_dtype(self, dtype: torch.dtype) -> torch.dtype:
        if dtype == torch.bool:
            return torch.uint8
        if dtype in _WIDEN:
            return _WIDEN[dtype]
        if dtype in _GLOO_REDUCE or dtype.is_complex:
            return dtype
        raise TypeError(f"tpu_dist: reductions of {dtype} are not supported")


def _to_host(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A contiguous host copy (a device read; the only wait for the device)."""
    h = t.detach().to("cpu")
    if dtype is not None and h.dtype != dtype:
        h = h.to(dtype)
    if h.is_complex():
        h = torch.view_as_real(h.resolve_conj())
    h = h.contiguous()
    if h.data_ptr() == t.data_ptr() and t.device.type == "cpu":  # gloo writes in place
        h = h.clone()
    return h


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a contiguous host tensor, as a 1-D uint8 view."""
    return t.reshape(-1).view(torch.uint8)


def _host_bytes(t: torch.Tensor) -> torch.Tensor:
    return _bytes(_to_host(t))


def _empty_host(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(t.shape, dtype=t.dtype, device="cpu")


def _write_back(dst: torch.Tensor, host: torch.Tensor) -> None:
    """Copies a host result into dst (any layout, any device) as dst's dtype."""
    if dst.is_complex() and not host.is_complex():
        host = torch.view_as_complex(host.reshape(*dst.shape, 2))
    with torch.no_grad():
        dst.copy_(host.reshape(dst.shape))


def _from_bytes(raw: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return raw.view(like.dtype).reshape(like.shape)


class HostTransport:
    """Collectives through the host with PyTorch's gloo (any device, any plugin)."""

    name = "host-gloo"

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta) -> None:
        opts = dist.ProcessGroupGloo._Options()
        opts._devices = [dist.ProcessGroupGloo.create_default_device()]
        opts._timeout = timeout
        # one worker thread: it runs the queued works in launch order, which is what
        # lets _prune know which works it has let go of (module docstring)
        opts._threads = 1
        # own key space: a gloo created for "cpu" by a "cpu:gloo,tpu:tpu_dist" string
        # rendezvouses on the same store
        self._gloo: dist.ProcessGroupGloo | None = dist.ProcessGroupGloo(
            dist.PrefixStore("tpu_dist/gloo", store), rank, size, opts)
        self.rank, self.size, self.timeout = rank, size, timeout
        # queued gloo works, launch order, kept until the worker thread let go of them
        self._held: deque[dist.Work] = deque()
        _live.add(self)

    @property
    def _pg(self) -> dist.ProcessGroupGloo:
        if self._gloo is None:
            raise RuntimeError("tpu_dist: this process group was shut down "
                               "(destroy_process_group); create a new one")
        return self._gloo

    def _queued(self, work: dist.Work) -> dist.Work:
        """Keeps a work gloo's worker thread runs (not send/recv: those run on the
        caller's thread) until that thread surely dropped its references."""
        self._prune()
        self._held.append(work)
        return work

    def _prune(self) -> None:
        # the worker takes a work only after dropping the one before it: every work
        # older than the newest finished one is no longer referenced by the worker
        held = self._held
        newest = -1
        for i in range(len(held) - 1, -1, -1):
            if held[i].is_completed():
                newest = i
                break
        for _ in range(newest):
            held.popleft()

    @staticmethod
    def _then(works: list[dist.Work], write: Callable[[], None] | None = None) -> Finish:
        """A Finish: waits for gloo's works (gloo raises on its timeout or a closed
        peer), then writes the outputs."""
        def finish() -> None:
            for w in works:
                w.wait()
            if write is not None:
                write()
        return finish

    # -- reductions
    def _reduce_host(self, t: torch.Tensor, op: ReduceOp) -> tuple[torch.Tensor, _Reduction]:
        red = _Reduction(op, t.dtype, self.size)
        h = _to_host(t, red.host_dtype(t.dtype))
        if red.pre is not None:
            h.mul_(red.pre)
        return h, red

    def all_reduce(self, tensors: Tensors, op: ReduceOp) -> Finish:
        works, writes = [], []
        for t in tensors:
            h, red = self._reduce_host(t, op)
            o = dist.AllreduceOptions()
            o.reduceOp = red.op
            works.append(self._queued(self._pg.allreduce([h], o)))
            writes.append((t, h, red.divide))
        def write() -> None:
            for t, h, div in writes:
                _write_back(t, h.div_(div) if div else h)
        return self._then(works, write)

    def reduce(self, tensors: Tensors, root: int, op: ReduceOp) -> Finish:
        works, writes = [], []
        for t in tensors:
            h, red = self._reduce_host(t, op)
            o = dist.ReduceOptions()
            o.reduceOp, o.rootRank = red.op, root
            works.append(self._queued(self._pg.reduce([h], o)))
            writes.append((t, h, red.divide))
        def write() -> None:
            if self.rank == root:
                for t, h, div in writes:
                    _write_back(t, h.div_(div) if div else h)
        return self._then(works, write)

    def reduce_scatter_tensor(self, output: torch.Tensor, input: torch.Tensor, op: ReduceOp) -> Finish:
        if input.numel() != output.numel() * self.size:
            raise ValueError(f"tpu_dist reduce_scatter_tensor: input has {input.numel()} elements, "
                             f"expected output's {output.numel()} x world size {self.size}")
        h, red = self._reduce_host(input, op)
        hout = torch.empty(h.numel() // self.size, dtype=h.dtype).reshape(
            (h.shape[0] // self.size, *h.shape[1:]) if h.dim() else ())
        o = dist.ReduceScatterOptions()
        o.reduceOp = red.op
        work = self._queued(self._pg._reduce_scatter_base(hout, h, o))
        def write() -> None:
            _write_back(output, hout.div_(red.divide) if red.divide else hout)
        return self._then([work], write)

    def reduce_scatter(self, outputs: Tensors, inputs: list[Tensors], op: ReduceOp) -> Finish:
        finishes = []
        for out, ins in zip(outputs, inputs):
            if len(ins) != self.size:
                raise ValueError(f"tpu_dist reduce_scatter: {len(ins)} inputs for world size {self.size}")
            for i, t in enumerate(ins):
                if t.shape != out.shape:
                    raise ValueError(f"tpu_dist reduce_scatter: input {i} has shape {tuple(t.shape)}, "
                                     f"the output {tuple(out.shape)}")
            flat = torch.cat([t.detach().to("cpu").reshape(-1) for t in ins])
            finishes.append(self.reduce_scatter_tensor(out, flat, op))
        def finish() -> None:
            for f in finishes:
                f()
        return finish

    # -- data movement (raw bytes: every dtype)
    def broadcast(self, tensors: Tensors, root: int) -> Finish:
        works, writes = [], []
        for t in tensors:
            h = _host_bytes(t) if self.rank == root else _bytes(_empty_host(t))
            o = dist.BroadcastOptions()
            o.rootRank = root
            works.append(self._queued(self._pg.broadcast([h], o)))
            writes.append((t, h))
        def write() -> None:
            if self.rank != root:
                for t, h in writes:
                    _write_back(t, _from_bytes(h, t))
        return self._then(works, write)

    def all_gather_into_tensor(self, output: torch.Tensor, input: torch.Tensor) -> Finish:
        if output.numel() != input.numel() * self.size:
            raise ValueError(f"tpu_dist all_gather_into_tensor: output has {output.numel()} elements, "
                             f"expected input's {input.numel()} x world size {self.size}")
        if output.dtype != input.dtype:
            raise TypeError(f"tpu_dist all_gather_into_tensor: output dtype {output.dtype} "
                            f"!= input dtype {input.dtype}")
        hin = _host_bytes(input)
        hout = torch.empty(hin.numel() * self.size, dtype=torch.uint8)
        work = self._queued(self._pg._allgather_base(hout, hin))
        return self._then([work], lambda: _write_back(output, _from_bytes(hout, output)))

    def all_gather(self, outputs: list[Tensors], inputs: Tensors) -> Finish:
        works, writes = [], []
        for outs, t in zip(outputs, inputs):
            if len(outs) != self.size:
                raise ValueError(f"tpu_dist all_gather: {len(outs)} outputs for world size {self.size}")
            for i, o in enumerate(outs):
                if o.numel() != t.numel() or o.dtype != t.dtype:
                    raise ValueError(f"tpu_dist all_gather: output {i} is {o.dtype}{tuple(o.shape)}, "
                                     f"the input {t.dtype}{tuple(t.shape)}")
            hin = _host_bytes(t)
            hout = torch.empty(hin.numel() * self.size, dtype=torch.uint8)
            works.append(self._queued(self._pg._allgather_base(hout, hin)))
            writes.append((outs, hout))
        def write() -> None:
            for outs, hout in writes:
                for o, chunk in zip(outs, hout.chunk(self.size)):
                    _write_back(o, _from_bytes(chunk, o))
        return self._then(works, write)

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor,
                          output_splits: list[int], input_splits: list[int]) -> Finish:
        if output.dtype != input.dtype:
            raise TypeError(f"tpu_dist all_to_all_single: output dtype {output.dtype} != input {input.dtype}")
        item = input.element_size()
        row_in = (input.numel() // input.shape[0]) if input.dim() and input.shape[0] else 1
        row_out = (output.numel() // output.shape[0]) if output.dim() and output.shape[0] else 1
        for name, splits, t in (("input", input_splits, input), ("output", output_splits, output)):
            if splits and sum(splits) != (t.shape[0] if t.dim() else 1):
                raise ValueError(f"tpu_dist all_to_all_single: {name} splits {list(splits)} do not sum "
                                 f"to the {name}'s {t.shape[0] if t.dim() else 1} rows")
        hin = _host_bytes(input)
        hout = torch.empty(output.numel() * item, dtype=torch.uint8)
        # splits count rows of dim 0; in bytes they are rows x row size
        ins = [s * row_in * item for s in input_splits]
        outs = [s * row_out * item for s in output_splits]
        work = self._queued(self._pg.alltoall_base(hout, hin, outs, ins, dist.AllToAllOptions()))
        return self._then([work], lambda: _write_back(output, _from_bytes(hout, output)))

    def all_to_all(self, outputs: Tensors, inputs: Tensors) -> Finish:
        hins = [_host_bytes(t) for t in inputs]
        houts = [_bytes(_empty_host(t)) for t in outputs]
        work = self._queued(self._pg.alltoall(houts, hins, dist.AllToAllOptions()))
        def write() -> None:
            for o, h in zip(outputs, houts):
                _write_back(o, _from_bytes(h, o))
        return self._then([work], write)

    def gather(self, outputs: list[Tensors], inputs: Tensors, root: int) -> Finish:
        hin = _host_bytes(inputs[0])
        houts = [[torch.empty_like(hin) for _ in range(self.size)]] if self.rank == root else []
        o = dist.GatherOptions()
        o.rootRank = root
        work = self._queued(self._pg.gather(houts, [hin], o))
        def write() -> None:
            if self.rank == root:
                for dst, h in zip(outputs[0], houts[0]):
                    _write_back(dst, _from_bytes(h, dst))
        return self._then([work], write)

    def scatter(self, outputs: Tensors, inputs: list[Tensors], root: int) -> Finish:
        out = outputs[0]
        hout = _bytes(_empty_host(out))
        hins = [[_host_bytes(t) for t in inputs[0]]] if self.rank == root else []
        o = dist.ScatterOptions()
        o.rootRank = root
        work = self._queued(self._pg.scatter([hout], hins, o))
        return self._then([work], lambda: _write_back(out, _from_bytes(hout, out)))

    def send(self, tensors: Tensors, dst: int, tag: int) -> Finish:
        hs = [_host_bytes(t) for t in tensors]
        work = self._pg.send(hs, dst, tag)
        return self._then([work], lambda: hs.clear())  # the host copies live until sent

    def recv(self, tensors: Tensors, src: int, tag: int) -> Finish:
        hs = [_bytes(_empty_host(t)) for t in tensors]
        work = self._pg.recv_anysource(hs, tag) if src < 0 else self._pg.recv(hs, src, tag)
        def write() -> None:
            for t, h in zip(tensors, hs):
                _write_back(t, _from_bytes(h, t))
        return self._then([work], write)

    def barrier(self) -> Finish:
        return self._then([self._queued(self._pg.barrier(dist.BarrierOptions()))])

    SIGNATURE_BYTES = 192

    def exchange(self, signature: str) -> list[str]:
        """Every rank's signature of the collective it is about to run (blocking).

        gloo aborts the whole process when the sizes of one collective differ
        across ranks; comparing first turns that into an exception."""
        raw = signature.encode()[: self.SIGNATURE_BYTES].ljust(self.SIGNATURE_BYTES, b"\0")
        mine = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        every = torch.empty(self.SIGNATURE_BYTES * self.size, dtype=torch.uint8)
        self._queued(self._pg._allgather_base(every, mine)).wait()
        return [bytes(c.tolist()).rstrip(b"\0").decode(errors="replace")
                for c in every.chunk(self.size)]

    def shutdown(self) -> None:
        """Tears the gloo group down now, on the calling thread (idempotent).

        When every queued work has finished, the group is destroyed while this
        transport still holds those works (gloo joins its worker thread, whose
        last drops are then not the last), and the works are let go here, with
        the GIL. A work still in flight (launched, never waited, the peers not
        there yet) would block that join: then the group and its works are
        left alive for good instead (``_leak``); gloo's threads end with the
        process."""
        _live.discard(self)
        if self._gloo is None:
            return
        if all(w.is_completed() for w in self._held) and sys.getrefcount(self._gloo) <= 2:
            self._gloo = None  # ~ProcessGroupGloo: joins the worker thread
            self._held.clear()
        else:
            self._leak()

    def _leak(self) -> None:
        """Keeps the gloo group and every work its worker may still drop alive
        until the process ends, so that no worker ever drops a last reference."""
        for obj in (self._gloo, *self._held):
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
        self._gloo = None
        self._held.clear()


# transports not shut down yet; at interpreter exit (the interpreter still whole,
# before any module is torn down) those are left alive for good: a worker thread
# may be about to drop the last collective, and a join could wait for a peer
_live: "weakref.WeakSet[HostTransport]" = weakref.WeakSet()


def _exit_hook() -> None:
    for t in list(_live):
        _live.discard(t)
        if t._gloo is not None:
            t._leak()


atexit.register(_exit_hook)


_warned_device = False


def _platform() -> str:
    try:
        from tpuc import _C  # type: ignore[attr-defined]

        return str(_C._runtime_info()["platform_name"])
    except Exception:  # noqa: BLE001 - no runtime: the host transport still works
        return "unknown"


def select_transport(store: dist.Store, rank: int, size: int, timeout: timedelta) -> Transport:
    """The transport for one process group, as ``_topology.choose_transport``
    decides it for the loaded plugin (``tpuc info`` shows the same answer).

    The device transport plugs in here once tpu_dist runs its collectives on a
    multi-process client (``tpuc_runtime_create_multiprocess``: libtpu, the
    CUDA plugin). The XLA CPU plugin cannot run a collective across processes,
    so on it the transport is the host. ``TPUC_DIST_DEVICE=1`` asks for the
    device transport: where it cannot be had, the first group says why, once.
    """
    global _warned_device
    from ._topology import DEVICE, choose_transport

    name, why = choose_transport(_platform())
    if name != DEVICE and os.environ.get("TPUC_DIST_DEVICE", "").strip() == "1" \
            and not _warned_device:
        _warned_device = True
        warnings.warn(f"tpu_dist: TPUC_DIST_DEVICE=1, but collectives use the host transport: "
                      f"{why}", stacklevel=3)
    return HostTransport(store, rank, size, timeout)
