"""The GRPO recipe on Ray: trainer workers under Ray Train, the vLLM rollout engine in a Ray actor.

    make ray-setup serve-setup
    .venv/bin/python -m tpuc.integrations.ray.grpo --workers 2 --steps 4 --lr 3e-3 --beta 0.02

    from tpuc.integrations.ray.grpo import run_on_ray
    from tpuc.post_training.recipe import GRPOConfig
    res = run_on_ray(GRPOConfig(device="tpu", engine="vllm", steps=4), num_workers=2)

The pieces are the recipe's own (:mod:`tpuc.post_training.recipe`: TorchTitan llama3 policy,
optimizer, FSDP2 through TorchTitan's parallelize function when there is more than one worker,
GRPO loss, rewards); Ray only places them:

- **trainer**: ``ray.train.torch.TorchTrainer`` with :class:`~tpuc.integrations.ray.TpuTorchConfig`
  -- ``num_workers`` Ray Train workers, each on ``tpu:LOCAL_RANK``, process group over tpuc's
  ``tpu_dist``; every worker calls ``recipe.run`` (as every rank does under torchrun).
- **rollout engine**: :class:`EngineHost` as a Ray actor. When rank 0 has its warm weights it
  hands them to the actor (``start``, through Ray's object store); the actor writes them as a
  Hugging Face directory, starts the existing vLLM engine process
  (:class:`~tpuc.post_training.vllm_engine.VLLMEngine`: ``python -m
  tpuc.integrations.vllm.sync_server`` in ``.venv-serve``'s interpreter, vLLM cannot live in the
  trainer's venv), lets go of its connection (``detach``) and returns the engine's address and
  per-job secret as the method's return value -- the secret travels through Ray, never on a
  command line or in a file. Rank 0 attaches to the engine with them; from then on the
  rollouts and every step's weight sync go straight between rank 0 and the engine process over
  tpuc's authenticated 127.0.0.1 wire (:mod:`tpuc.post_training.wire`), exactly as in the
  recipe without Ray (one engine for all ranks, through rank 0). The actor is the engine's
  owner: ``close`` stops and reaps the engine process; ``greedy`` lets the driver query it.

The actor and the workers run in the driver's venv (``.venv``: Ray, TorchTitan); only the engine
process runs in the serving venv (``serve_python=``, default ``$TPUC_SERVE_PYTHON`` or
``.venv-serve/bin/python``).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import torch

RESULT_FILE = "result.json"  # in the checkpoint rank 0 reports: its recipe.run result
WEIGHTS_FILE = "synced.pt"  # and, if asked, the last weights it synced (Hugging Face names)
ENGINE_START_TIMEOUT = 900.0  # seconds: the engine process imports vLLM and compiles


class EngineHost:
    """A Ray actor's body (``ray.remote(EngineHost)``): owns one vLLM engine process on
    ``device`` and hands its address and secret to the trainer's rank 0."""

    def __init__(self, work_dir: str, serve_python: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.work_dir = work_dir
        self.serve_python = serve_python
        self.env = env
        self.engine: Any = None
        self.hf_dir: str | None = None

    def start(self, cfg_dict: dict[str, Any], vocab: int,
              warm_state: dict[str, torch.Tensor]) -> tuple[str, str]:
        """Writes the warm weights as a Hugging Face directory, starts the engine from it and
        detaches; returns ``(address, secret)`` for ``VLLMEngine.attach``."""
        from tpuc.post_training.recipe import POLICY_CONTEXT, GRPOConfig, policy_config
        from tpuc.post_training.vllm_engine import VLLMEngine
        from tpuc.post_training.weights import save_hf_dir

        if self.engine is not None:
            raise RuntimeError("the engine actor already runs an engine")
        cfg = GRPOConfig(**cfg_dict)
        mcfg = policy_config(vocab, cfg.dim, cfg.n_layers, cfg.n_heads)
        os.makedirs(self.work_dir, exist_ok=True)
        self.hf_dir = save_hf_dir(tempfile.mkdtemp(prefix="policy-", dir=self.work_dir), mcfg,
                                  warm_state)
        self.engine = VLLMEngine(self.hf_dir, device=cfg.device, seed=cfg.seed,
                                 max_model_len=POLICY_CONTEXT, python=self.serve_python,
                                 env=self.env, start_timeout=ENGINE_START_TIMEOUT,
                                 log_path=os.path.join(self.work_dir, "engine.log"))
        return self.engine.detach(), self.engine.secret

    def model_dir(self) -> str | None:
        """The Hugging Face directory the engine started from (the warm weights)."""
        return str(self.hf_dir) if self.hf_dir is not None else None

    def greedy(self, prompts: list[list[int]], max_tokens: int,
               stop_token_ids: list[int]) -> list[list[int]]:
        """Greedy completions from the engine with the weights it holds now (the trainer must
        have detached: the engine serves one connection at a time)."""
        from tpuc.post_training.engine import SamplingSpec

        self._live().reattach()
        try:
            groups = self.engine.generate(prompts, SamplingSpec(
                n=1, max_tokens=max_tokens, temperature=0.0, stop_token_ids=tuple(stop_token_ids)))
        finally:
            self.engine.detach()
        return [g[0].token_ids for g in groups]

    def close(self) -> None:
        """Stops the engine and reaps its process."""
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()

    def _live(self) -> Any:
        if self.engine is None:
            raise RuntimeError("the engine actor has no engine (start was not called)")
        return self.engine


class _Recording:
    """Passes the weights on to the engine and keeps a CPU copy of the last ones synced."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.last: dict[str, torch.Tensor] = {}

    def generate(self, prompts: Any, spec: Any) -> Any:
        return self.engine.generate(prompts, spec)

    def update_weights(self, named: Any) -> Any:
        self.last = {}

        def tee() -> Any:
            for name, t in named:
                self.last[name] = t.detach().cpu().clone()
                yield name, t

        return self.engine.update_weights(tee())

    def close(self) -> None:
        self.engine.close()


def _train_loop(config: dict[str, Any]) -> None:
    """Every Ray Train worker: the recipe's ``run``, its engine attached to the actor's."""
    import ray
    import ray.train

    from tpuc.post_training.recipe import (GRPOConfig, _HFNamedEngine, _RankZeroEngine,
                                           policy_config, run, world)
    from tpuc.post_training.vllm_engine import VLLMEngine

    cfg = GRPOConfig(**config["cfg"])
    actor = config["engine_actor"]
    recorder: list[_Recording] = []

    def factory(cfg: GRPOConfig, vocab: int, warm: dict[str, torch.Tensor]) -> Any:
        rank, world_size = world()
        engine: Any = None
        if rank == 0:
            state = {k: v.detach().cpu() for k, v in warm.items()}
            address, secret = ray.get(actor.start.remote(dataclasses.asdict(cfg), vocab, state),
                                      timeout=ENGINE_START_TIMEOUT + 60)
            inner: Any = VLLMEngine.attach(address, secret=secret)
            if config.get("save_weights"):
                inner = _Recording(inner)
                recorder.append(inner)
            engine = _HFNamedEngine(inner, policy_config(vocab, cfg.dim, cfg.n_layers,
                                                         cfg.n_heads))
        return engine if world_size == 1 else _RankZeroEngine(engine, rank, world_size)

    res = run(cfg, log=print, engine_factory=factory)  # closing the attached engine detaches
    if world()[0] != 0:
        ray.train.report({})  # every worker reports (Ray Train 2: a collective)
        return
    # Ray Train 2 keeps only what comes with a checkpoint: rank 0's result goes in one
    with tempfile.TemporaryDirectory(prefix="tpuc-grpo-result-") as d:
        Path(d, RESULT_FILE).write_text(json.dumps(res))
        if recorder:
            torch.save(recorder[0].last, os.path.join(d, WEIGHTS_FILE))
        ray.train.report({"steps": len(res["history"])},
                         checkpoint=ray.train.Checkpoint.from_directory(d))


def run_on_ray(cfg: Any, *, num_workers: int = 1, work_dir: str | None = None,
               serve_python: str | None = None, save_weights: str | None = None,
               keep_engine: bool = False, timeout_s: float = 1800.0,
               storage_path: str | None = None) -> dict[str, Any]:
    """Runs the GRPO recipe (``cfg``: a :class:`~tpuc.post_training.recipe.GRPOConfig` with
    ``engine="vllm"``) with ``num_workers`` Ray Train workers and the engine in a Ray actor, in
    the Ray cluster this process is connected to (``ray.init`` first). Returns rank 0's
    result (the recipe's ``run`` dict; it comes back in the checkpoint rank 0 reports, under
    the run's storage). ``save_weights``: a path; the last weights rank 0 synced to the engine
    (Hugging Face names, CPU tensors, ``torch.save``) are copied there.
    ``keep_engine``: the engine actor is returned in ``result["engine_actor"]`` still running
    (the caller ends it with :func:`stop_engine`); otherwise it is stopped before returning.
    ``work_dir`` (the engine's Hugging Face directory and log, the run's Ray storage): default
    a fresh temporary directory, removed once the engine is stopped here."""
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from tpuc.integrations.ray import TpuTorchConfig

    if cfg.engine != "vllm":
        raise ValueError(f"run_on_ray hosts the vLLM engine in a Ray actor; engine={cfg.engine!r}"
                         " is not supported here (use tpuc.post_training.recipe)")
    from tpuc.post_training.vllm_engine import default_serve_python

    own_dir = work_dir is None  # made here: removed when the engine is stopped here
    work_dir = work_dir or tempfile.mkdtemp(prefix="tpuc-ray-grpo-")
    # resolved here: the actor's working directory is Ray's, not the driver's
    serve_python = serve_python or default_serve_python()
    if not Path(serve_python).exists():
        raise FileNotFoundError(f"the serving venv's Python {serve_python} does not exist: run "
                                "`make serve-setup` or pass serve_python= / set "
                                "TPUC_SERVE_PYTHON")
    env = {k: os.environ[k] for k in ("TPUC_CACHE_DIR",) if k in os.environ}
    actor = ray.remote(num_cpus=1)(EngineHost).remote(work_dir, serve_python, env or None)
    ok = False
    try:
        trainer = TorchTrainer(
            _train_loop,
            train_loop_config={"cfg": dataclasses.asdict(cfg), "engine_actor": actor,
                               "save_weights": bool(save_weights)},
            torch_config=TpuTorchConfig(timeout_s=300),
            scaling_config=ScalingConfig(num_workers=num_workers, resources_per_worker={"CPU": 1}),
            run_config=RunConfig(storage_path=storage_path or os.path.join(work_dir, "ray"),
                                 name="grpo"))
        out: dict[str, Any] = {}

        def go() -> None:
            try:
                out["result"] = trainer.fit()
            except BaseException as e:  # noqa: BLE001  (re-raised below)
                out["error"] = e

        t = threading.Thread(target=go, daemon=True)
        t.start()
        t.join(timeout_s)
        if t.is_alive():
            raise TimeoutError(f"the GRPO run on Ray did not finish within {timeout_s:.0f} s")
        if "error" in out:
            raise out["error"]
        ckpt = out["result"].checkpoint
        if ckpt is None:
            raise RuntimeError("the GRPO run on Ray reported no result")
        with ckpt.as_directory() as d:
            res = json.loads(Path(d, RESULT_FILE).read_text())
            if save_weights:
                shutil.copyfile(os.path.join(d, WEIGHTS_FILE), save_weights)
        if keep_engine:
            res["engine_actor"] = actor
        ok = True
        return res
    finally:
        if not (ok and keep_engine):
            try:
                stop_engine(actor)
            finally:
                if own_dir:
                    shutil.rmtree(work_dir, ignore_errors=True)


def stop_engine(actor: Any, timeout: float = 120.0) -> None:
    """Stops the actor's engine process (reaped), then the actor."""
    import ray

    try:
        ray.get(actor.close.remote(), timeout=timeout)
    finally:
        ray.kill(actor)


def main(argv: list[str] | None = None) -> None:
    from tpuc.post_training.recipe import GRPOConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=1, help="Ray Train workers (1 or 2 tested)")
    for f in dataclasses.fields(GRPOConfig):
        if f.name != "engine":
            ap.add_argument("--" + f.name.replace("_", "-"), type=type(f.default),
                            default=f.default)
    ap.add_argument("--out", default="", help="write the result as JSON here")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds for the whole fit")
    args = ap.parse_args(argv)
    cfg = GRPOConfig(engine="vllm", **{f.name: getattr(args, f.name)
                                       for f in dataclasses.fields(GRPOConfig)
                                       if f.name != "engine"})
    import ray

    ray.init(address="local", include_dashboard=False, _node_ip_address="127.0.0.1",
             num_cpus=max(os.cpu_count() or 1, args.workers + 2))
    try:
        res = run_on_ray(cfg, num_workers=args.workers, timeout_s=args.timeout)
    finally:
        ray.shutdown()
    for h in res["history"]:
        print(f"step {h['step']}: reward {h['reward']:.3f} loss {h['loss']:.4f} kl {h['kl']:.4f}"
              f" sync {h['sync_bytes'] / 1e6:.2f} MB")
    print(f"before: {res['before']}\nafter:  {res['after']}")
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
