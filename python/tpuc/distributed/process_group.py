"""``ProcessGroupTpu``: the c10d backend "tpu_dist" as a Python ProcessGroup.

PyTorch calls it two ways, and both land here: ``torch.distributed.*`` calls
the Python methods directly, and C++ callers (DDP's reducer, functional
collectives, ``_broadcast_coalesced``) reach them through PyTorch's
``PyProcessGroup`` trampoline. Every method hands the collective to the
group's ``Transport`` (_transport.py) and returns a ``TpuWork``; tensors may
be on "tpu" or on the CPU (a "cpu:gloo,tpu:tpu_dist" group serves both).

A Python ProcessGroup has no C++ backends behind it, so the places where
PyTorch asks ``pg._get_backend(device)`` for capabilities get a small
description (``_BackendInfo``): no splitting (DeviceMesh then builds its
sub-groups with ``new_group``), no custom allocation, no coalescing manager.
"""
from __future__ import annotations

import os
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from ._transport import Finish, Transport, select_transport

BACKEND_NAME = "tpu_dist"


class TpuWork(dist._Work):
    """One launched collective: ``wait()`` finishes it (outputs written);
    ``get_future()`` finishes it and returns a completed future of the outputs."""

    def __init__(self, finish: Finish, result: Any, what: str, pg: "ProcessGroupTpu") -> None:
        super().__init__()
        self._finish: Finish | None = finish
        self._result = result
        self._what = what
        self._pg_desc = f"rank {pg._rank_} of {pg._size_}, group {pg._group_name_ or 'default'}"
        self._error: BaseException | None = None

    def wait(self, timeout: timedelta | None = None) -> bool:
        if self._error is not None:
            raise self._error
        if self._finish is not None:
            finish, self._finish = self._finish, None
            try:
                finish()
            except Exception as e:  # name the collective: the user sees which one failed
                self._error = RuntimeError(f"tpu_dist {self._what} failed ({self._pg_desc}): {e}")
                raise self._error from e
        return True

    def is_completed(self) -> bool:
        return self._finish is None

    def is_success(self) -> bool:
        return self._finish is None and self._error is None

    def exception(self) -> BaseException | None:
        return self._error

    def result(self) -> Any:
        self.wait()
        return self._result

    def get_future(self) -> torch.futures.Future:
        fut: torch.futures.Future = torch.futures.Future()
        try:
            self.wait()
        except Exception as e:
            fut.set_exception(e)
        else:
            fut.set_result(self._result)
        return fut


class _BackendInfo:
    """What ``pg._get_backend(device)`` callers read from a backend."""

    supports_splitting = False
    supports_coalescing = False
    supports_time_estimate = False
    supports_shrinking = False

    def __init__(self, pg: "ProcessGroupTpu") -> None:
        self._pg = pg

    def name(self) -> str:
        return BACKEND_NAME

    def supports_tensor_alloc(self, device: torch.device) -> bool:
        return False

    def rank(self) -> int:
        return self._pg.rank()

    def size(self) -> int:
        return self._pg.size()

    def eager_connect_single_device(self, device: torch.device | None) -> None:
        pass


def _op(opts: Any) -> Any:
    return opts.reduceOp


def _name(op: Any) -> str:
    t = op.op if hasattr(op, "op") else op
    return str(getattr(t, "name", t))


def _meta(tensors: list[torch.Tensor]) -> list[str]:
    """What must agree across ranks: each tensor's dtype and number of elements."""
    return [f"{str(t.dtype).replace('torch.', '')}[{t.numel()}]" for t in tensors]


class ProcessGroupTpu(dist.ProcessGroup):
    """The process group of backend "tpu_dist" (one per group of ranks)."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._rank_, self._size_ = rank, size
        self._group_name_ = ""
        self._group_desc_ = ""
        self._timeout = timeout
        self._transport: Transport = select_transport(store, rank, size, timeout)
        self._coalescing = 0
        self._coalesced: list[TpuWork] = []  # launched inside a coalescing manager
        # compare every collective's signature across ranks first (TPUC_DIST_CHECK=0: off)
        self._check = os.environ.get("TPUC_DIST_CHECK", "1") != "0"

    @classmethod
    def create(cls, store: dist.Store, rank: int, size: int, timeout: timedelta) -> "ProcessGroupTpu":
        """The factory given to ``Backend.register_backend``."""
        return cls(store, rank, size, timeout)

    # ---- identity
    def getBackendName(self) -> str:
        return BACKEND_NAME

    def getRank(self) -> int:
        return self._rank_

    def getSize(self) -> int:
        return self._size_

    def setGroupName(self, name: str) -> None:
        self._group_name_ = name

    def getGroupName(self) -> str:
        return self._group_name_

    def setGroupDesc(self, desc: str) -> None:
        self._group_desc_ = desc

    def getGroupDesc(self) -> str:
        return self._group_desc_

    def _get_backend(self, device: Any = None) -> _BackendInfo:
        return _BackendInfo(self)

    @property
    def transport(self) -> str:
        """Which transport carries this group's collectives ("host-gloo" here)."""
        return self._transport.name

    def __repr__(self) -> str:
        return f"ProcessGroupTpu(rank={self._rank_}, size={self._size_}, transport={self.transport})"

    # ---- plumbing
    def _launch(self, what: str, start: Callable[[], Finish], result: Any,
                sig: tuple | None = None) -> TpuWork:
        try:
            if self._check and sig is not None:
                mine = f"{what} {sig}"
                every = self._transport.exchange(mine)
                if any(e != mine for e in every):
                    raise ValueError("the ranks called different collectives or shapes:\n" + "\n".join(
                        f"  rank {r}: {e}" for r, e in enumerate(every)))
            finish = start()
        except Exception as e:
            raise RuntimeError(f"tpu_dist {what} failed (rank {self._rank_} of {self._size_}): {e}") from e
        work = TpuWork(finish, result, what, self)
        if self._coalescing:
            self._coalesced.append(work)
        return work

    def _root(self, opts: Any) -> int:
        return int(opts.rootRank)

    # ---- collectives (names and signatures as PyTorch calls them)
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> TpuWork:
        opts = opts or dist.AllreduceOptions()
        return self._launch("all_reduce", lambda: self._transport.all_reduce(tensors, _op(opts)), tensors,
                            (_name(_op(opts)), _meta(tensors)))

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> TpuWork:
        opts = opts or dist.AllreduceCoalescedOptions()
        return self._launch("all_reduce_coalesced",
                            lambda: self._transport.all_reduce(tensors, _op(opts)), tensors,
                            (_name(_op(opts)), _meta(tensors)))

    def reduce(self, tensors: list[torch.Tensor], opts: Any) -> TpuWork:
        return self._launch("reduce", lambda: self._transport.reduce(tensors, self._root(opts), _op(opts)),
                            tensors, (self._root(opts), _name(_op(opts)), _meta(tensors)))

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> TpuWork:
        opts = opts or dist.BroadcastOptions()
        return self._launch("broadcast", lambda: self._transport.broadcast(tensors, self._root(opts)), tensors,
                            (self._root(opts), _meta(tensors)))

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                  opts: Any = None) -> TpuWork:
        return self._launch("all_gather", lambda: self._transport.all_gather(outputs, inputs), outputs,
                            (_meta(inputs),))

    def allgather_coalesced(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                            opts: Any = None) -> TpuWork:
        return self._launch("all_gather_coalesced", lambda: self._transport.all_gather(outputs, inputs),
                            outputs, (_meta(inputs),))

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> TpuWork:
        return self._launch("all_gather_into_tensor",
                            lambda: self._transport.all_gather_into_tensor(output, input), [output],
                            (_meta([input]),))

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                    opts: Any = None) -> TpuWork:
        def start() -> Finish:
            fs = [self._transport.all_gather_into_tensor(o, i) for o, i in zip(outputs, inputs)]
            return lambda: [f() for f in fs] and None
        return self._launch("all_gather_into_tensor_coalesced", start, outputs, (_meta(inputs),))

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                       opts: Any = None) -> TpuWork:
        opts = opts or dist.ReduceScatterOptions()
        return self._launch("reduce_scatter",
                            lambda: self._transport.reduce_scatter(outputs, inputs, _op(opts)), outputs,
                            (_name(_op(opts)), [_meta(i) for i in inputs]))

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> TpuWork:
        opts = opts or dist.ReduceScatterOptions()
        return self._launch("reduce_scatter_tensor",
                            lambda: self._transport.reduce_scatter_tensor(output, input, _op(opts)), [output],
                            (_name(_op(opts)), _meta([input])))

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> TpuWork:
        opts = opts or dist.ReduceScatterOptions()

        def start() -> Finish:
            fs = [self._transport.reduce_scatter_tensor(o, i, _op(opts)) for o, i in zip(outputs, inputs)]
            return lambda: [f() for f in fs] and None
        return self._launch("reduce_scatter_tensor_coalesced", start, outputs,
                            (_name(_op(opts)), _meta(inputs)))

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor, output_splits: list[int],
                          input_splits: list[int], opts: Any = None) -> TpuWork:
        return self._launch(
            "all_to_all_single",
            lambda: self._transport.all_to_all_single(output, input, list(output_splits), list(input_splits)),
            [output], (str(input.dtype),))

    alltoall_base = all_to_all_single

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None) -> TpuWork:
        return self._launch("all_to_all", lambda: self._transport.all_to_all(outputs, inputs), outputs,
                            (len(inputs), sorted({str(t.dtype) for t in inputs})))

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any) -> TpuWork:
        return self._launch("gather", lambda: self._transport.gather(outputs, inputs, self._root(opts)),
                            outputs, (self._root(opts), _meta(inputs)))

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any) -> TpuWork:
        return self._launch("scatter", lambda: self._transport.scatter(outputs, inputs, self._root(opts)),
                            outputs, (self._root(opts), _meta(outputs)))

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> TpuWork:
        return self._launch("send", lambda: self._transport.send(tensors, dst, tag), tensors)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> TpuWork:
        return self._launch("recv", lambda: self._transport.recv(tensors, src, tag), tensors)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> TpuWork:
        return self._launch("recv", lambda: self._transport.recv(tensors, -1, tag), tensors)

    def barrier(self, opts: Any = None) -> TpuWork:
        work = self._launch("barrier", self._transport.barrier, [], ())
        return work

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> None:
        self.barrier().wait()

    # ---- coalescing: each call inside the manager launches on its own; the work the
    # manager's end returns finishes all of them (PyTorch waits only that one)
    def start_coalescing(self, device: torch.device) -> None:
        self._coalescing += 1

    def end_coalescing(self, device: torch.device) -> TpuWork:
        self._coalescing = max(0, self._coalescing - 1)
        works, self._coalesced = self._coalesced, []

        def finish() -> None:
            for w in works:
                w.wait()
        return TpuWork(finish, [t for w in works for t in (w._result or [])], "coalesced", self)

    # torch 2.13's trampoline does not forward these; Python callers reach them here
    _start_coalescing = start_coalescing
    _end_coalescing = end_coalescing

    # ---- lifetime
    def shutdown(self) -> None:
        self._transport.shutdown()

    def abort(self) -> None:
        self._transport.shutdown()
