"""Run by torchrun (2 processes) from test_sync.py: an FSDP=2 trainer syncs a running engine.

Each rank takes tpu:LOCAL_RANK, builds the policy with weights from --seed, shards it with
FSDP2 (``fully_shard`` per block and at the root, tpu_dist), computes greedy continuations with
the sharded model, then ``push_weights`` gathers each parameter on both ranks and rank 0 streams
it to the engine at --engine (started and detached by the test process). Rank 0 writes the
engine's greedy outputs, its own, and the SyncStats to --out.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sync_common as sc  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from tpuc.post_training.engine import SamplingSpec
    from tpuc.post_training.vllm_engine import VLLMEngine
    from tpuc.post_training.weights import push_weights, titan_to_hf

    local = int(os.environ["LOCAL_RANK"])
    dev = torch.device("tpu", local)
    torch.tpu.set_device(dev)
    dist.init_process_group(device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg, model = sc.build(a.seed, "cpu")
    nbytes = sc.model_bytes(model)
    model = model.to(dev)
    mesh = init_device_mesh("tpu", (world,))
    for block in model.layers.values():
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    sharded = any(type(p).__name__ == "DTensor" for p in model.parameters())
    trainer, gap = sc.greedy(model, sc.PROMPTS, sc.MAX_TOKENS, str(dev))

    engine = VLLMEngine.attach(a.engine) if rank == 0 else None
    stats = push_weights(engine, model, convert=lambda it: titan_to_hf(it, cfg))
    if rank == 0:
        assert engine is not None and stats is not None
        outs = engine.generate(sc.PROMPTS, SamplingSpec(max_tokens=sc.MAX_TOKENS,
                                                         temperature=0.0))
        engine.close()  # detaches; the test process owns the engine
        Path(a.out).write_text(json.dumps({
            "world": world, "sharded": sharded, "trainer": trainer, "min_gap": gap,
            "engine": [g[0].token_ids for g in outs], "model_bytes": nbytes,
            "sync_bytes": stats.bytes, "sync_tensors": stats.tensors, "path": stats.path,
            "seconds": stats.seconds}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
