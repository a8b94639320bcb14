"""Every collective of tpu_dist, every dtype of the device, on 2 ranks.

Each rank computes the CPU reference itself from every rank's data (the data
is a function of the rank). With two ranks every reduction is exact: two
values combined once in the accumulation dtype (float32 for 16- and 8-bit
floats, the dtype itself otherwise) and rounded once — so results must be
EQUAL to the reference, bit for bit. Inputs and outputs are non-contiguous
views where the API allows it.
"""
from __future__ import annotations

import torch

import dist_harness as harness

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.float8_e4m3fn,
          torch.float8_e5m2, torch.complex64, torch.complex128, torch.int8, torch.uint8, torch.int16,
          torch.uint16, torch.int32, torch.uint32, torch.int64, torch.uint64, torch.bool]


def _data(rank: int, shape: tuple[int, ...], dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * rank + salt)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype) if not dtype.is_complex \
            else torch.randn(shape, generator=g, dtype=dtype)
    lo = 0 if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64) else -4
    return torch.randint(lo, 5, shape, generator=g).to(dtype)


def _acc(dtype: torch.dtype) -> torch.dtype:
    if dtype in (torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        return torch.float32
    if dtype in (torch.uint16, torch.uint32, torch.uint64, torch.int8, torch.uint8, torch.int16):
        return torch.int64
    return dtype


def _reduce_ref(xs: list[torch.Tensor], op: str, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bool:
        s = torch.stack(xs)
        return {"sum": s.any(0), "max": s.any(0), "min": s.all(0), "product": s.all(0)}[op]
    s = torch.stack([x.to(_acc(dtype)) for x in xs])
    r = {"sum": lambda: s.sum(0), "avg": lambda: s.sum(0) / len(xs), "product": lambda: s.prod(0),
         "min": lambda: s.amin(0), "max": lambda: s.amax(0)}[op]()
    return r.to(dtype)


def _ops_for(dtype: torch.dtype) -> list[str]:
    if dtype == torch.bool:
        return ["sum", "max", "min", "product"]
    if dtype.is_complex:
        return ["sum", "avg"]
    ops = ["sum", "product", "min", "max"]
    if dtype == torch.uint64:
        ops = ["sum", "product"]
    if dtype.is_floating_point:
        ops.append("avg")
    return ops


def _redop(name: str):  # type: ignore[no-untyped-def]
    from torch.distributed import ReduceOp

    return {"sum": ReduceOp.SUM, "avg": ReduceOp.AVG, "product": ReduceOp.PRODUCT,
            "min": ReduceOp.MIN, "max": ReduceOp.MAX}[name]


def _same(fails: list[str], what: str, got: torch.Tensor, ref: torch.Tensor) -> None:
    if got.device.type != "tpu":
        fails.append(f"{what}: result on {got.device}")
        return
    g = got.cpu()
    if g.dtype != ref.dtype or g.shape != ref.shape:
        fails.append(f"{what}: {g.dtype}{tuple(g.shape)} vs reference {ref.dtype}{tuple(ref.shape)}")
    elif not torch.equal(g.view(torch.uint8) if g.dtype.itemsize == 1 and g.is_floating_point() else g,
                         ref.view(torch.uint8) if ref.dtype.itemsize == 1 and ref.is_floating_point() else ref):
        fails.append(f"{what}: values differ\n got {g}\n ref {ref}")


def _noncontig(x: torch.Tensor) -> torch.Tensor:
    """The same values as x (2-D), held by a transposed, non-contiguous tpu view."""
    return x.t().contiguous().to("tpu").t()


def _strided_out(shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    """A non-contiguous tpu output: every other column of a wider buffer."""
    return torch.zeros(shape[0], shape[1] * 2, dtype=dtype, device="tpu")[:, ::2]


def check_collectives(rank: int, world: int) -> list[str]:
    import torch.distributed as dist

    fails: list[str] = []
    shape = (4, 6)
    for dt in DTYPES:
        xs = [_data(r, shape, dt) for r in range(world)]
        # all_reduce, every op, a non-contiguous tensor in place
        for op in _ops_for(dt):
            t = _noncontig(xs[rank])
            dist.all_reduce(t, op=_redop(op))
            _same(fails, f"all_reduce {op} {dt}", t, _reduce_ref(xs, op, dt))
        # reduce to root 0
        t = xs[rank].to("tpu")
        dist.reduce(t, dst=0, op=_redop("sum"))
        _same(fails, f"reduce {dt}", t, _reduce_ref(xs, "sum", dt) if rank == 0 else xs[rank])
        # broadcast from rank 1 into a non-contiguous tensor
        t = _noncontig(xs[rank])
        dist.broadcast(t, src=1)
        _same(fails, f"broadcast {dt}", t, xs[1])
        # all_gather (list of strided outputs) and all_gather_into_tensor
        outs = [_strided_out(shape, dt) for _ in range(world)]
        dist.all_gather(outs, _noncontig(xs[rank]))
        for r in range(world):
            _same(fails, f"all_gather[{r}] {dt}", outs[r], xs[r])
        big = torch.zeros(world * shape[0], shape[1], dtype=dt, device="tpu")
        dist.all_gather_into_tensor(big, xs[rank].to("tpu"))
        _same(fails, f"all_gather_into_tensor {dt}", big, torch.cat(xs))
        # reduce_scatter_tensor and reduce_scatter (list form)
        red_op = "avg" if "avg" in _ops_for(dt) else "sum"
        full = [_data(r, (world * 2, 3), dt, salt=7) for r in range(world)]
        out = torch.zeros(2, 3, dtype=dt, device="tpu")
        dist.reduce_scatter_tensor(out, full[rank].to("tpu"), op=_redop(red_op))
        _same(fails, f"reduce_scatter_tensor {red_op} {dt}", out,
              _reduce_ref(full, red_op, dt)[2 * rank:2 * rank + 2])
        out = _strided_out((2, 3), dt)
        dist.reduce_scatter(out, [c.to("tpu") for c in full[rank].chunk(world)], op=_redop("sum"))
        _same(fails, f"reduce_scatter {dt}", out, _reduce_ref(full, "sum", dt)[2 * rank:2 * rank + 2])
        # all_to_all_single: even, then uneven splits (rank r sends r+1+j rows to rank j)
        src = _data(rank, (world * 2, 3), dt, salt=3)
        out = torch.zeros(world * 2, 3, dtype=dt, device="tpu")
        dist.all_to_all_single(out, src.to("tpu"))
        ref = torch.cat([_data(r, (world * 2, 3), dt, salt=3)[2 * rank:2 * rank + 2] for r in range(world)])
        _same(fails, f"all_to_all_single even {dt}", out, ref)
        ins = [rank + 1 + j for j in range(world)]
        outs_n = [r + 1 + rank for r in range(world)]
        srcs = [_data(r, (sum(r + 1 + j for j in range(world)), 2), dt, salt=5) for r in range(world)]
        out = torch.zeros(sum(outs_n), 2, dtype=dt, device="tpu")
        dist.all_to_all_single(out, srcs[rank].to("tpu"), output_split_sizes=outs_n, input_split_sizes=ins)
        pieces = []
        for r in range(world):
            start = sum(r + 1 + j for j in range(rank))
            pieces.append(srcs[r][start:start + r + 1 + rank])
        _same(fails, f"all_to_all_single uneven {dt}", out, torch.cat(pieces))
        # all_to_all (lists)
        outs = [torch.zeros(2, 3, dtype=dt, device="tpu") for _ in range(world)]
        dist.all_to_all(outs, [c.to("tpu") for c in src.chunk(world)])
        for r in range(world):
            _same(fails, f"all_to_all[{r}] {dt}", outs[r],
                  _data(r, (world * 2, 3), dt, salt=3)[2 * rank:2 * rank + 2])
        # gather to 0, scatter from 1
        gl = [torch.zeros(shape, dtype=dt, device="tpu") for _ in range(world)] if rank == 0 else None
        dist.gather(xs[rank].to("tpu"), gl, dst=0)
        if rank == 0:
            for r in range(world):
                _same(fails, f"gather[{r}] {dt}", gl[r], xs[r])
        o = torch.zeros(shape, dtype=dt, device="tpu")
        dist.scatter(o, [x.to("tpu") for x in xs] if rank == 1 else None, src=1)
        _same(fails, f"scatter {dt}", o, xs[rank])
        # send / recv around the ring
        peer = (rank + 1) % world
        if rank % 2 == 0:
            dist.send(xs[rank].to("tpu"), dst=peer)
            o = torch.zeros(shape, dtype=dt, device="tpu")
            dist.recv(o, src=(rank - 1) % world)
        else:
            o = torch.zeros(shape, dtype=dt, device="tpu")
            dist.recv(o, src=(rank - 1) % world)
            dist.send(xs[rank].to("tpu"), dst=peer)
        _same(fails, f"send/recv {dt}", o, xs[(rank - 1) % world])
    return fails


def check_async_coalesced_functional(rank: int, world: int) -> list[str]:
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.distributed import ReduceOp
    from torch.distributed.distributed_c10d import _coalescing_manager

    fails: list[str] = []
    xs = [_data(r, (5,), torch.float32) for r in range(world)]
    # async work: wait() and get_future()
    t = xs[rank].to("tpu")
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    _same(fails, "async all_reduce wait", t, xs[0] + xs[1])
    t = xs[rank].to("tpu")
    fut = dist.all_reduce(t, async_op=True).get_future()
    _same(fails, "async all_reduce future", fut.wait()[0], xs[0] + xs[1])
    # PREMUL_SUM (FSDP2 with a custom divide factor)
    t = xs[rank].to("tpu")
    dist.all_reduce(t, op=ReduceOp.PREMUL_SUM(0.5))  # type: ignore[operator]
    _same(fails, "all_reduce premul_sum", t, xs[0] * 0.5 + xs[1] * 0.5)
    # coalesced: the manager's fast path and all_reduce_coalesced
    ts = [xs[rank].to("tpu"), (xs[rank] * 2).to("tpu")]
    with _coalescing_manager(device=torch.device("tpu"), async_ops=True) as cm:
        for x in ts:
            dist.all_reduce(x)
    cm.wait()
    _same(fails, "coalesced all_reduce 0", ts[0], xs[0] + xs[1])
    _same(fails, "coalesced all_reduce 1", ts[1], 2 * xs[0] + 2 * xs[1])
    outs = [torch.zeros(world * 5, device="tpu") for _ in range(2)]
    with _coalescing_manager(device=torch.device("tpu"), async_ops=True) as cm:
        for o, x in zip(outs, ts):
            dist.all_gather_into_tensor(o, x)
    cm.wait()
    _same(fails, "coalesced all_gather_into_tensor", outs[1],
          torch.cat([(2 * xs[0] + 2 * xs[1])] * world))
    # batch_isend_irecv around the ring
    o = torch.zeros(5, device="tpu")
    ops = [dist.P2POp(dist.isend, xs[rank].to("tpu"), (rank + 1) % world),
           dist.P2POp(dist.irecv, o, (rank - 1) % world)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    _same(fails, "batch_isend_irecv", o, xs[(rank - 1) % world])
    # functional collectives (what DTensor and compiled graphs call)
    g = dist.group.WORLD
    x = xs[rank].to("tpu")
    _same(fails, "funcol all_reduce", funcol.all_reduce(x, "sum", g).wait(), xs[0] + xs[1])
    _same(fails, "funcol all_gather_tensor", funcol.all_gather_tensor(x, 0, g).wait(), torch.cat(xs))
    full = [_data(r, (world * 3,), torch.float32, salt=2) for r in range(world)]
    _same(fails, "funcol reduce_scatter_tensor",
          funcol.reduce_scatter_tensor(full[rank].to("tpu"), "sum", 0, g).wait(),
          (full[0] + full[1])[3 * rank:3 * rank + 3])
    ins = [1 + rank, 2]
    outs_n = [1 + r if rank == 0 else 2 for r in range(world)]
    srcs = [_data(r, (sum([1 + r, 2]),), torch.float32, salt=9) for r in range(world)]
    got = funcol.all_to_all_single(srcs[rank].to("tpu"), outs_n, ins, g).wait()
    ref = torch.cat([srcs[r][:1 + r] if rank == 0 else srcs[r][1 + r:] for r in range(world)])
    _same(fails, "funcol all_to_all_single uneven", got, ref)
    # autograd through a functional all_gather: the gradient is a reduce_scatter
    w = xs[rank].to("tpu").requires_grad_()
    y = funcol.all_gather_tensor_autograd(w, 0, g)
    (y * torch.arange(world * 5.0, device="tpu")).sum().backward()
    _same(fails, "funcol autograd all_gather grad", w.grad,
          world * torch.arange(world * 5.0)[5 * rank:5 * rank + 5])
    # errors are exceptions, not hangs: an integer AVG and a size mismatch caught locally
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.int32, device="tpu"), op=ReduceOp.AVG)
        fails.append("int AVG did not raise")
    except (RuntimeError, TypeError) as e:
        if "AVG" not in str(e):
            fails.append(f"int AVG error does not say AVG: {e}")
    dist.barrier()
    return fails


def check_mixed_backends(rank: int, world: int) -> list[str]:
    """Under "cpu:gloo,tpu:tpu_dist" both devices' tensors work."""
    import torch.distributed as dist

    fails: list[str] = []
    xs = [_data(r, (3,), torch.float32) for r in range(world)]
    c = xs[rank].clone()
    dist.all_reduce(c)
    if not torch.equal(c, xs[0] + xs[1]):
        fails.append(f"cpu all_reduce {c}")
    t = xs[rank].to("tpu")
    dist.all_reduce(t)
    _same(fails, "tpu all_reduce", t, xs[0] + xs[1])
    objs: list[object] = [None] * world
    dist.all_gather_object(objs, {"rank": rank})
    if objs != [{"rank": r} for r in range(world)]:
        fails.append(f"all_gather_object {objs}")
    return fails


def test_every_collective_every_dtype() -> None:
    # init_process_group() with no backend: "tpu" picks tpu_dist
    for r, fails in enumerate(harness.run(check_collectives, 2, timeout=240, backend=None)):
        assert fails == [], f"rank {r}:\n" + "\n".join(fails)


def test_async_coalesced_functional() -> None:
    for r, fails in enumerate(harness.run(check_async_coalesced_functional, 2, timeout=150)):
        assert fails == [], f"rank {r}:\n" + "\n".join(fails)


def test_cpu_gloo_tpu_tpu_dist() -> None:
    for r, fails in enumerate(harness.run(check_mixed_backends, 2, timeout=120,
                                          backend="cpu:gloo,tpu:tpu_dist")):
        assert fails == [], f"rank {r}:\n" + "\n".join(fails)


def test_registration() -> None:
    import torch.distributed as dist

    import tpuc  # noqa: F401

    assert dist.Backend.default_device_backend_map["tpu"] == "tpu_dist"
    assert "tpu_dist" in dist.Backend.backend_list
    assert dist.Backend.backend_capability["tpu_dist"] == ["tpu"]
