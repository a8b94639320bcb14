"""The ``moe`` swap's fixed-capacity expert-parallel dispatcher (python/tpuc/integrations/
torchtitan/ep_dispatch.py) against the block it replaces, TorchTitan 0.3.0's
``AllToAllTokenDispatcher``, on the CPU with gloo: 4 ranks (EP=4), random routing per rank,
dispatch -> experts -> combine, in float64. The experts multiply each row by its expert's
matrix one row at a time, so both dispatchers' real rows see identical products and the
results must be equal bit for bit: the outputs, the input gradients and the expert-weight
gradients (the padding rows are exact zeros, so they add exact zeros there). The swap must
also give every rank the same received shape for any routing (what keeps "tpu" from
recompiling). ``make test-titan-long`` only (4 processes)."""
from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

LONG = os.environ.get("TPUC_TITAN_LONG") == "1"
EP, T, K, E, D = 4, 6, 3, 16, 5


def _experts(x_RD, counts_e, w_eDD):
    """Row-by-row expert products (identical arithmetic for any row count)."""
    ends = counts_e.cumsum(0)
    rows = torch.arange(x_RD.shape[0])
    group = (rows.unsqueeze(1) >= ends.unsqueeze(0)).sum(1).clamp(max=w_eDD.shape[0] - 1)
    assert int(counts_e.sum()) == x_RD.shape[0], "every received row belongs to an expert"
    return torch.bmm(x_RD.unsqueeze(1), w_eDD[group]).squeeze(1)


def _run(dispatcher, x_TD, scores, ids, w):
    counts = torch.zeros(E, dtype=torch.int64).scatter_add_(0, ids.reshape(-1), torch.ones(T * K, dtype=torch.int64))
    routed, per_expert, meta = dispatcher.dispatch(x_TD, scores, ids, counts)
    out = dispatcher.combine(_experts(routed, per_expert, w), meta, x_TD)
    return out, routed.shape


def _worker(rank: int, port: int, q) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torchtitan.distributed.utils import set_spmd_backend
    from torchtitan.models.common.token_dispatcher import AllToAllTokenDispatcher

    from tpuc.integrations.torchtitan.ep_dispatch import fixed_capacity_class

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=EP)
    try:
        _compare(rank, q, set_spmd_backend, AllToAllTokenDispatcher, fixed_capacity_class, init_device_mesh)
    except BaseException as exc:  # report it instead of leaving the parent waiting
        q.put((rank, "error", repr(exc)))
        raise
    finally:
        dist.destroy_process_group()


def _compare(rank, q, set_spmd_backend, AllToAllTokenDispatcher, fixed_capacity_class, init_device_mesh):
    set_spmd_backend("partial_dtensor")  # the layout the trainer tests use (--parallelism.spmd_backend)
    mesh = init_device_mesh("cpu", (EP,), mesh_dim_names=("ep",))
    cfg = AllToAllTokenDispatcher.Config(num_experts=E, top_k=K)
    stock = AllToAllTokenDispatcher(cfg)
    stock.wire_meshes(ep_mesh=mesh)
    fixed = AllToAllTokenDispatcher(cfg)
    fixed.__class__ = fixed_capacity_class()
    fixed.wire_meshes(ep_mesh=mesh)
    shapes = set()
    for trial in range(3):
        g = torch.Generator().manual_seed(100 * trial + rank)
        x = torch.randn(T, D, dtype=torch.float64, generator=g)
        # skewed routing: some experts get many rows, some none
        ids = torch.stack([torch.randperm(E // (1 + trial), generator=g)[:K] for _ in range(T)])
        scores = torch.rand(T, K, dtype=torch.float64, generator=g)
        w = torch.randn(E // EP, D, D, dtype=torch.float64, generator=torch.Generator().manual_seed(7 + rank))
        gout = torch.randn(T, D, dtype=torch.float64, generator=g)
        res = []
        for d in (stock, fixed):
            xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
            out, shape = _run(d, xs, scores, ids, ws)
            (out * gout).sum().backward()
            res.append((out.detach(), xs.grad, ws.grad, shape))
        (o0, gx0, gw0, _), (o1, gx1, gw1, shape1) = res
        shapes.add(tuple(shape1))
        ok = torch.equal(o0, o1) and torch.equal(gx0, gx1) and torch.equal(gw0, gw1)
        if not ok:
            q.put((rank, trial, float((o0 - o1).abs().max()), float((gx0 - gx1).abs().max()),
                   float((gw0 - gw1).abs().max())))
            return
    q.put((rank, "ok", sorted(shapes)))


@pytest.mark.skipif(not LONG, reason="4 gloo processes: make test-titan-long (TPUC_TITAN_LONG=1)")
def test_fixed_capacity_dispatch_equals_stock_all_to_all():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, port, q)) for r in range(EP)]
    for p in procs:
        p.start()
    try:
        got = [q.get(timeout=240) for _ in range(EP)]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
    for r in got:
        assert r[1] == "ok", f"rank {r[0]} ({r[1]}): {r[2:]}"
        assert r[2] == [(EP * T * K, D)], r  # one received shape whatever the routing
