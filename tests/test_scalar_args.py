"""Scalar arguments' device buffers are kept between launches (exec/plan.c):
every value still reaches its op, also after the cache's slots are reused,
and kept buffers are never counted as allocated memory."""
from __future__ import annotations

import torch

import tpuc  # noqa: F401


def test_many_scalar_values_each_reach_their_op() -> None:
    x_cpu = torch.arange(8, dtype=torch.float32)
    x = x_cpu.to("tpu")
    # more distinct values than the cache has slots, each used twice, in
    # float, int and bool kinds: a stale kept buffer would give a wrong sum
    for v in [i * 0.37 - 5.0 for i in range(150)] * 2:
        assert torch.equal((x + v).cpu(), x_cpu + v), v
        assert torch.equal((x * v).cpu(), x_cpu * v), v
    xi_cpu = torch.arange(8)
    xi = xi_cpu.to("tpu")
    for v in list(range(-70, 70)) * 2:
        assert torch.equal(xi.add(xi, alpha=v).cpu(), xi_cpu.add(xi_cpu, alpha=v)), v
    assert torch.equal(torch.full((3,), True, device="tpu").cpu(), torch.full((3,), True))


def test_kept_scalar_buffers_are_not_allocated_memory() -> None:
    x = torch.ones(16, device="tpu")
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    for i in range(200):
        y = x * (i + 0.5)
        del y
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == before
