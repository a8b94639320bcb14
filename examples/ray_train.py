"""Ray Train on "tpu": the example Llama-style model (examples/llama.py) trained by
``ray.train.torch.TorchTrainer`` on N workers of a local Ray cluster (127.0.0.1), DDP over
tpuc's "tpu_dist", each worker on ``tpu:LOCAL_RANK``. The training function is plain Ray
Train code; the only tpuc-specific line is ``torch_config=TpuTorchConfig()``.

    make ray-setup
    .venv/bin/python examples/ray_train.py --workers 2 --steps 20

docs/ray.md explains the pieces."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def train_fn(config: dict[str, Any]) -> None:
    import torch

    import ray.train
    from ray.train.torch import get_device, prepare_data_loader, prepare_model
    from llama import Llama, LlamaConfig

    cfg = LlamaConfig(vocab_size=256, dim=64, n_layers=2, n_heads=4, hidden_dim=172,
                      max_seq_len=32)
    torch.manual_seed(0)
    model = prepare_model(Llama(cfg))  # to ray.train.torch.get_device() == tpu:LOCAL_RANK, DDP
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, cfg.vocab_size, (config["steps"] * config["batch"], 33), generator=g)
    data = torch.utils.data.TensorDataset(tokens[:, :-1], tokens[:, 1:])
    world = ray.train.get_context().get_world_size()
    loader = prepare_data_loader(torch.utils.data.DataLoader(
        data, batch_size=config["batch"] // world))  # a DistributedSampler; batches on the device
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step, (tok, tgt) in enumerate(loader):
        _, loss = model(tok, tgt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss_value = float(loss.detach())
        if ray.train.get_context().get_world_rank() == 0:
            print(f"step {step}: loss {loss_value:.4f} on {get_device()}", flush=True)
        ray.train.report({"step": step, "loss": loss_value})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8, help="global batch (split over the workers)")
    a = ap.parse_args()

    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from tpuc.integrations.ray import TpuTorchConfig

    os.environ["PYTHONPATH"] = os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    tmp = tempfile.mkdtemp(prefix="tpuc-ray-")
    ray.init(address="local", num_cpus=a.workers + 2, include_dashboard=False,
             _node_ip_address="127.0.0.1", _temp_dir=tmp)
    try:
        result = TorchTrainer(
            train_fn, train_loop_config={"steps": a.steps, "batch": a.batch},
            torch_config=TpuTorchConfig(),
            scaling_config=ScalingConfig(num_workers=a.workers),
            run_config=RunConfig(storage_path=os.path.join(tmp, "runs"), name="llama"),
        ).fit()
        print("done:", "failed" if result.error else "ok", result.path)
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
