"""A one-process c10d backend for "tpu" tensors, used until ``tpu_dist`` is registered.

TorchTitan initialises torch.distributed even for one process and then applies FSDP on a
one-rank mesh, so DTensor's RNG tracker broadcasts device state and FSDP all-gathers /
reduce-scatters device tensors. gloo refuses "tpu" tensors. At world size 1 every
collective is the identity (a copy where the output is another tensor), which this
ProcessGroup does on the device. It refuses any other world size (that needs
``tpu_dist``), and the integration prefers ``tpu_dist`` whenever it is registered.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

NAME = "tpu_loopback"


def _done(result: Any) -> Any:
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


class LoopbackProcessGroup(dist.ProcessGroup):
    """World size 1: collectives are identities computed on the tensors' own device."""

    def __init__(self, rank: int, world_size: int):
        if world_size != 1 or rank != 0:
            raise RuntimeError(
                f"tpuc: the '{NAME}' backend serves one process only (got world size "
                f"{world_size}); more processes need the c10d backend 'tpu_dist'"
            )
        super().__init__(rank, world_size)

    def getBackendName(self) -> str:  # noqa: N802 (c10d's name)
        return NAME

    def name(self) -> str:
        return NAME

    def broadcast(self, tensors, opts=None):
        return _done(tensors)

    def allreduce(self, tensors, opts=None):
        return _done(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return _done(tensors)

    def reduce(self, tensors, opts=None):
        return _done(tensors)

    def allgather(self, output_lists, inputs, opts=None):
        for outs, inp in zip(output_lists, inputs):
            outs[0].copy_(inp)
        return _done(output_lists)

    def _allgather_base(self, output, inp, opts=None):
        output.copy_(inp.reshape(output.shape))
        return _done([output])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            o.copy_(i.reshape(o.shape))
        return _done(outputs)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        for o, ins in zip(outputs, input_lists):
            o.copy_(ins[0])
        return _done(outputs)

    def _reduce_scatter_base(self, output, inp, opts=None):
        output.copy_(inp.reshape(output.shape))
        return _done([output])

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            o.copy_(i.reshape(o.shape))
        return _done(outputs)

    def alltoall_base(self, output, inp, output_split_sizes, input_split_sizes, opts=None):
        output.copy_(inp.reshape(output.shape))
        return _done([output])

    def alltoall(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            o.copy_(i)
        return _done(outputs)

    def barrier(self, opts=None):
        return _done(None)


def register() -> str:
    """Registers the backend (idempotent); returns its name."""
    if NAME.upper() not in dist.Backend._plugins:

        def create(opts: Any, backend_options: Any) -> LoopbackProcessGroup:
            pg = LoopbackProcessGroup(opts.group_rank, opts.group_size)
            # A ProcessGroup's name lives on its backends (C++), and a Python ProcessGroup
            # has none: give it a one-rank gloo backend for host tensors, named as the
            # group (DeviceMesh and functional collectives look groups up by name).
            gloo = dist.ProcessGroupGloo(opts.store, opts.group_rank, opts.group_size, opts.timeout)
            gloo.options.group_name = opts.group_id
            gloo.options.global_ranks_in_group = list(opts.global_ranks_in_group)
            pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, gloo)
            return pg

        dist.Backend.register_backend(NAME, create, extended_api=True, devices=["tpu", "cpu"])
    return NAME
