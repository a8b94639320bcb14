"""Ray Train against torchrun (issue 33): the same DDP training on "tpu" launched two ways, at 1
and 2 workers, step time, tokens/s and the whole launch's wall time, side by side.

The model, data and loop are one function (``_train``) that both launchers call:
examples/llama.py at dim 128, 2 layers, vocab 512, AdamW, a fixed 4 x 64-token batch per worker
(weak scaling), DDP over tpuc's ``tpu_dist``, each worker on ``tpu:LOCAL_RANK``; a barrier before
each step, the loss read after it (the step has finished), 2 warm-up steps, the median of the
timed ones. torchrun: ``python -m torch.distributed.run --nproc-per-node N`` on 127.0.0.1. Ray:
``TorchTrainer`` with ``TpuTorchConfig`` (tpuc.integrations.ray) on a local cluster started once
(127.0.0.1), one ``ray.train.report`` at the end (per-step reports would time Ray's reporting,
not the step). Both share one disk compile cache, warmed by an untimed run first, so neither
launch pays compiles the other did not. Runs alternate (torchrun, Ray, torchrun, Ray, ...).
Ratios: Ray / torchrun (> 1: Ray slower). Needs Ray (``make ray-setup``): ``make bench-ray``.
Writes bench/results/ray_train.json; docs/ray.md shows it."""
from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

COMMAND = "make bench-ray"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
BATCH, SEQ = 4, 64


def _train(steps: int) -> dict[str, float]:
    """One worker's training (either launcher); the process group is already up."""
    import torch
    import torch.distributed as dist

    sys.path.insert(0, EXAMPLES)
    from llama import Llama, LlamaConfig

    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("tpu", local)
    torch.tpu.set_device(local)
    cfg = LlamaConfig(vocab_size=512, dim=128, n_layers=2, n_heads=4, hidden_dim=256,
                      max_seq_len=SEQ)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(Llama(cfg).to(dev))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    tok = torch.randint(0, cfg.vocab_size, (BATCH, SEQ + 1), generator=g).to(dev)
    x, y = tok[:, :-1], tok[:, 1:]
    ts = []
    for s in range(steps + 2):
        dist.barrier()
        t0 = time.perf_counter()
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        float(loss.detach())
        if s >= 2:
            ts.append(time.perf_counter() - t0)
    return {"step_s": statistics.median(ts), "world": float(world)}


def torchrun_main() -> None:
    """The torchrun child: env:// process group from torchrun's variables."""
    import torch.distributed as dist

    dist.init_process_group("tpu_dist")
    out = _train(int(sys.argv[2]))
    if dist.get_rank() == 0:
        print(json.dumps(out), flush=True)
    dist.destroy_process_group()


def _ray_fn(config: dict[str, Any]) -> None:
    import ray.train

    out = _train(config["steps"])
    if ray.train.get_context().get_world_rank() == 0:
        # Ray Train 2.60's Result keeps metrics only of reports with a checkpoint: the step time
        # goes back through a file
        with open(config["result"], "w") as f:
            json.dump(out, f)
    ray.train.report(out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _torchrun(world: int, steps: int, env: dict[str, str]) -> tuple[dict[str, float], float]:
    argv = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={world}",
            "--master-addr=127.0.0.1", f"--master-port={_free_port()}",
            "-m", "bench.cases.ray_train", "--torchrun-child", str(steps)]
    t0 = time.perf_counter()
    p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"torchrun x{world} failed: {p.stderr[-1500:]}")
    return json.loads(p.stdout.strip().splitlines()[-1]), wall


def _ray(world: int, steps: int, storage: str) -> tuple[dict[str, float], float]:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from tpuc.integrations.ray import TpuTorchConfig

    path = os.path.join(storage, f"result-{time.time_ns()}.json")
    os.makedirs(storage, exist_ok=True)
    t0 = time.perf_counter()
    result = TorchTrainer(
        _ray_fn, train_loop_config={"steps": steps, "result": path}, torch_config=TpuTorchConfig(),
        scaling_config=ScalingConfig(num_workers=world),
        run_config=RunConfig(storage_path=storage, name=f"bench-{world}-{time.time_ns()}"),
    ).fit()
    wall = time.perf_counter() - t0
    if result.error:
        raise RuntimeError(f"Ray Train x{world} failed: {result.error}")
    with open(path) as f:
        return json.load(f), wall


def run(quick: bool) -> dict:
    import ray

    steps, repeats = (3, 1) if quick else (10, 3)
    tmp = tempfile.mkdtemp(prefix="tpuc-bench-ray-")
    cache = os.path.join(tmp, "cache")
    # the launchers' children inherit these (Ray's workers from this process's environment)
    os.environ["TPUC_CACHE_DIR"] = cache
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, EXAMPLES, os.environ.get("PYTHONPATH", "")])
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ["TPUC_RAY_BENCH_SESSION"] = tmp  # every process of the cluster inherits it
    env = dict(os.environ)
    ray.init(address="local", num_cpus=4, include_dashboard=False,
             _node_ip_address="127.0.0.1", _temp_dir=os.path.join(tmp, "ray"),
             log_to_driver=False)
    rows = []
    try:
        for world in (1, 2):
            _torchrun(world, 1, env)  # warms the cache
            tr: list[tuple[dict[str, float], float]] = []
            ry: list[tuple[dict[str, float], float]] = []
            for _ in range(repeats):
                tr.append(_torchrun(world, steps, env))
                ry.append(_ray(world, steps, os.path.join(tmp, "runs")))
            t_step = statistics.median(r["step_s"] for r, _ in tr)
            r_step = statistics.median(r["step_s"] for r, _ in ry)
            t_wall = statistics.median(w for _, w in tr)
            r_wall = statistics.median(w for _, w in ry)
            rows.append({
                "workers": world,
                "torchrun_step_s": round(t_step, 4), "ray_step_s": round(r_step, 4),
                "torchrun_tokens_per_s": round(world * BATCH * SEQ / t_step, 1),
                "ray_tokens_per_s": round(world * BATCH * SEQ / r_step, 1),
                "step_ratio": round(r_step / t_step, 3),
                "torchrun_launch_s": round(t_wall, 1), "ray_launch_s": round(r_wall, 1),
                "launch_ratio": round(r_wall / t_wall, 2),
            })
    finally:
        ray.shutdown()
        # Ray Train's controller actor has been seen to outlive ray.shutdown(): the cluster's
        # processes (they name its temp directory) are reaped here, and only those
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        import ray_cluster

        left = ray_cluster.reap(tmp)
        if left:
            print(f"bench ray_train: killed {len(left)} Ray process(es) left after shutdown",
                  file=sys.stderr)
    return {
        "title": "Ray Train against torchrun: the same DDP training on \"tpu\"",
        "command": COMMAND,
        "rows": rows,
        "notes": f"examples/llama.py at dim 128, 2 layers, vocab 512, AdamW, {BATCH} x {SEQ} tokens "
                 f"per worker, DDP over tpu_dist; median of {steps} steps after 2 warm-up steps "
                 f"(a barrier before each), median over {repeats} alternating launches of each; "
                 "a shared disk compile cache warmed first. launch s: the whole torchrun command "
                 "or TorchTrainer.fit() (process start-up, import, process group, steps, exit). "
                 "ratios: Ray / torchrun. The workers share this machine's 2 cores.",
    }


def main() -> int:
    if sys.argv[1:2] == ["--torchrun-child"]:
        torchrun_main()
        return 0
    sys.path.insert(0, ROOT)
    from bench import env as bench_env

    result = run(quick="--quick" in sys.argv)
    result["case"] = "ray_train"
    result["machine"] = bench_env.describe()
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "ray_train.json"), "w") as f:
        json.dump(result, f, indent=2, default=str)
    print(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
