"""Sharded embeddings: TorchRec's DistributedModelParallel over tpuc's
tpu_dist backend on 2 processes (127.0.0.1 only: a file store; bounded in
time by tests/distributed/dist_harness.py), table-wise and row-wise, with
TorchRec's own TPU compute kernel ("unfused_tpu"), against one process.

TorchRec's data-parallel dense part averages gradients over ranks (DDP) and
its embedding communication divides the tables' gradients by the world size
(torchrec.distributed.comm_ops gradient division, on by default): the
one-process reference averages the ranks' batches' gradients likewise."""
from __future__ import annotations

import os
import sys

import pytest
import torch

pytest.importorskip("torchrec", reason="torchrec is not installed (make rec-setup)")

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "distributed"))
import dist_harness  # noqa: E402
import dlrm_setup as d  # noqa: E402

WORLD = 2
STEPS = 3
LR = 0.1
SHAPE = d.Shape(dim=16, dense_layers=(8, 16))  # TorchRec's TPU kernel wants dims in 16s
# the ops the sharded step still runs on the CPU, with the reason (docs/torchrec.md): none
EXPECTED_FALLBACKS: dict[str, str] = {}


def _plan(model: torch.nn.Module, kind: str, world: int):  # type: ignore[no-untyped-def]
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan, row_wise, table_wise
    from torchrec.distributed.types import ShardingPlan

    ebc = model.sparse_arch.embedding_bag_collection
    gen = {f"t{i}": (table_wise(rank=i % world, compute_kernel="unfused_tpu") if kind == "tw"
                     else row_wise(compute_kernel="unfused_tpu")) for i in range(len(SHAPE.rows))}
    return ShardingPlan({"sparse_arch.embedding_bag_collection": construct_module_sharding_plan(
        ebc, gen, local_size=world, world_size=world, device_type="tpu")})


def _full_params(state: dict) -> dict[str, tuple[list[tuple[list[int], torch.Tensor]], list[int]]]:
    """name -> ([(offsets, local shard)], full size) for every parameter."""
    from torch.distributed._shard.sharded_tensor import ShardedTensor

    out = {}
    for name, t in state.items():
        if isinstance(t, ShardedTensor):
            out[name] = ([(list(s.metadata.shard_offsets), s.tensor.detach().cpu()) for s in t.local_shards()],
                         list(t.size()))
        elif isinstance(t, torch.Tensor) and t.is_floating_point():
            out[name] = ([([0] * t.dim(), t.detach().cpu())], list(t.shape))
    return out


def _load_tables(dmp: torch.nn.Module, init: dict[str, torch.Tensor]) -> None:
    """The sharded tables start from the unsharded model's weights (sharding
    initialises them afresh): each local shard gets its slice."""
    from torch.distributed._shard.sharded_tensor import ShardedTensor

    with torch.no_grad():
        for name, t in dmp.state_dict().items():
            if not isinstance(t, ShardedTensor):
                continue
            src = init[next(k for k in init if name.endswith(k))]
            for s in t.local_shards():
                o, n = s.metadata.shard_offsets, s.tensor.shape
                s.tensor.copy_(src[o[0]:o[0] + n[0], o[1]:o[1] + n[1]])


def _trainable(dmp: torch.nn.Module) -> list[torch.Tensor]:
    """The dense parameters and the local table shards. With the "unfused_tpu"
    kernel, torchrec 1.9.2's named_parameters() yields 0-element placeholders
    for the tables; the shards (with their gradients) are the state dict's."""
    from torch.distributed._shard.sharded_tensor import ShardedTensor

    params = [p for p in dmp.parameters() if p.numel()]
    for t in dmp.state_dict(keep_vars=True).values():
        if isinstance(t, ShardedTensor):
            params += [s.tensor for s in t.local_shards()]
    return params


def worker(rank: int, world: int, kinds: tuple[str, ...]) -> dict[str, dict]:
    """Both shardings in the same 2 processes (one start, one process group)."""
    return {kind: _train_sharded(rank, world, kind) for kind in kinds}


def _train_sharded(rank: int, world: int, kind: str) -> dict:
    import warnings

    warnings.filterwarnings("ignore")
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel

    dev = torch.device("tpu", rank)
    model = d.build(SHAPE, seed=0)
    dmp = DistributedModelParallel(model, device=dev, plan=_plan(model, kind, world),
                                   sharders=[EmbeddingBagCollectionSharder()])
    _load_tables(dmp, d.build(SHAPE, seed=0).state_dict())
    opt = torch.optim.SGD(_trainable(dmp), lr=LR)
    losses = []
    torch.tpu.reset_stats()
    for step in range(STEPS):
        dense, kjt, labels = d.batch(SHAPE, step * world + rank)
        logits = dmp(dense.to(dev), d.kjt_to(kjt, dev)).squeeze(-1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels.to(dev))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach().cpu()))
    fell = {k: v for k, v in torch.tpu.stats()["fallbacks"].items() if v}
    return {"losses": losses, "params": _full_params(dmp.state_dict()), "fallbacks": fell}


def _reference(dtype: torch.dtype, world: int) -> tuple[list[list[float]], dict[str, torch.Tensor]]:
    """One process on the CPU: per-rank losses; every gradient averaged over the ranks' batches."""
    model = d.build(SHAPE, seed=0, dtype=dtype)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses: list[list[float]] = [[] for _ in range(world)]
    for step in range(STEPS):
        opt.zero_grad()
        for rank in range(world):
            dense, kjt, labels = d.batch(SHAPE, step * world + rank, dtype)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(dense, kjt).squeeze(-1), labels)
            loss.backward()
            losses[rank].append(float(loss.detach()))
        for p in model.parameters():
            p.grad /= world
        opt.step()
    return losses, {n: p.detach().double() for n, p in model.named_parameters()}


def _assemble(per_rank: list[dict], name: str) -> torch.Tensor:
    size = per_rank[0]["params"][name][1]
    full = torch.full(size, float("nan"), dtype=torch.float64)
    for r in per_rank:
        for offs, shard in r["params"][name][0]:
            full[tuple(slice(o, o + n) for o, n in zip(offs, shard.shape))] = shard.double()
    return full


def _ok(got: torch.Tensor, cpu: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """The bound of test_dlrm.py: 8 |cpu_f32 - f64| + 64 eps32 (|f64| + max |f64|)."""
    eps = torch.finfo(torch.float32).eps
    return (got - ref).abs() <= 8 * (cpu.double() - ref).abs() + 64 * eps * (ref.abs() + ref.abs().max())


KINDS = ("tw", "rw")  # table-wise, row-wise


@pytest.fixture(scope="module")
def sharded_runs() -> dict[str, list[dict]]:
    per_rank = dist_harness.run(worker, WORLD, KINDS, timeout=170)
    return {kind: [r[kind] for r in per_rank] for kind in KINDS}


@pytest.fixture(scope="module")
def references() -> tuple:
    return _reference(torch.float32, WORLD), _reference(torch.float64, WORLD)


@pytest.mark.parametrize("kind", KINDS)
def test_dmp_two_processes_match_one(kind: str, sharded_runs: dict, references: tuple) -> None:
    per_rank = sharded_runs[kind]
    (l_cpu, p_cpu), (l_ref, p_ref) = references
    for rank, r in enumerate(per_rank):
        got = torch.tensor(r["losses"], dtype=torch.float64)
        ok = _ok(got, torch.tensor(l_cpu[rank]), torch.tensor(l_ref[rank], dtype=torch.float64))
        assert ok.all(), (rank, r["losses"], l_ref[rank])
        extra = set(r["fallbacks"]) - set(EXPECTED_FALLBACKS)
        assert not extra, f"rank {rank}: ops on the CPU: {r['fallbacks']}"
    init = {n: p.detach().double() for n, p in d.build(SHAPE, seed=0).named_parameters()}
    for name, ref in p_ref.items():
        # training moved the parameter by far more than the bound allows (a table that
        # never updates cannot pass)
        eps = torch.finfo(torch.float32).eps
        allowed = (8 * (p_cpu[name].double() - ref).abs() + 64 * eps * (ref.abs() + ref.abs().max())).max()
        assert (ref - init[name]).abs().max() > 10 * allowed, name
        key = next(k for k in per_rank[0]["params"] if k.endswith(name))
        got = _assemble(per_rank, key)
        assert not got.isnan().any(), f"{name}: not every row came back from the ranks"
        ok = _ok(got, p_cpu[name], ref)
        assert ok.all(), f"{kind} {name}: {int((~ok).sum())} elements out of bounds, max err " \
                         f"{(got - ref).abs().max().item():.3g}"
