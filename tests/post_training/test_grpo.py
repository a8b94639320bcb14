"""The GRPO recipe (tpuc.post_training.recipe) on "tpu" against the same run on the CPU.

Sizes are tiny (a 2-layer, 64-wide TorchTitan llama3 with an 11-token vocabulary; 8 prompts x
6 rollouts per step) and the steps bounded. Both devices run identical code from the same
warm-up weights, and sampling draws its Gumbel noise from one seeded CPU generator, so the two
runs sample the same tokens wherever their logits order the same way.

Bands (derived, not tuned): an evaluation is a mean of S sampled rewards in [0, 1] or of S
Bernoulli outcomes (forbidden or not). If the two devices'
runs diverged completely they would be two independent runs of the same process, and each
mean has a standard deviation of at most 0.5 / sqrt(S) (any variable in [0, 1]) or
sqrt(p (1 - p) / S). The devices' improvements must agree within 3 standard deviations of
the difference of two such estimates per evaluation (before and after): 3 * sqrt(4) * 0.5 /
sqrt(S). A "fall" of the forbidden rate must exceed 3 standard deviations of the difference of
two independent rate estimates at the starting rate.
"""

from __future__ import annotations

import math

import pytest
import torch

import tpuc  # noqa: F401
from tpuc.post_training import grpo
from tpuc.post_training.engine import SamplingSpec
from tpuc.post_training.local_engine import LocalEngine, generate
from tpuc.post_training.recipe import (GRPOConfig, build_optimizer, build_policy, full_state, run,
                                       supervised_warmup)
from tpuc.post_training.tasks import SortTask

pytest.importorskip("torchtitan", reason="the recipe's policy is TorchTitan's llama3 (make titan-setup)")

STEPS = 8
CFG = dict(engine="local", steps=STEPS, prompts_per_step=8, group_size=6, lr=3e-3, beta=0.02, eval_rounds=4)


@pytest.fixture(scope="module")
def runs() -> dict[str, dict]:
    out = {}
    for dev in ("cpu", "tpu"):
        out[dev] = run(GRPOConfig(device=dev, **CFG))
    out["tpu+safety"] = run(GRPOConfig(device="tpu", safety_weight=1.0, **CFG))
    return out


def test_loss_pieces_match_float64_cpu() -> None:
    g = torch.Generator().manual_seed(3)
    r = torch.rand(12, generator=g)
    adv = grpo.group_advantages(r, 4)
    assert torch.allclose(adv.reshape(3, 4).mean(1), torch.zeros(3), atol=1e-6)
    assert torch.equal(grpo.group_advantages(torch.ones(8), 4), torch.zeros(8))  # no signal
    B, T = 12, 5
    logp, old, ref = (-torch.rand(B, T, generator=g) * 3 for _ in range(3))
    mask = torch.rand(B, T, generator=g) > 0.3
    want = grpo.grpo_loss(logp.double(), old.double(), ref.double(), adv.double(), mask, beta=0.1)
    got_cpu = grpo.grpo_loss(logp, old, ref, adv, mask, beta=0.1)
    got_tpu = grpo.grpo_loss(*(t.to("tpu") for t in (logp, old, ref, adv, mask)), beta=0.1)
    err_cpu = abs(got_cpu.loss.double().item() - want.loss.item())
    err_tpu = abs(got_tpu.loss.cpu().double().item() - want.loss.item())
    # A few float32 roundings per token term: the CPU's own error, or 64 ulps of the value.
    assert err_tpu <= max(4 * err_cpu, 64 * 2.0**-24 * abs(want.loss.item()))
    assert 0.0 <= got_tpu.clipped.item() <= 1.0 and got_tpu.kl.item() >= 0.0


def test_engine_greedy_equals_trainer_after_sync() -> None:
    cfg = GRPOConfig(device="tpu", **CFG)
    task = SortTask()
    warm, _ = supervised_warmup(cfg, task)
    V = task.tokenizer.vocab_size
    policy = build_policy(cfg, V, "tpu", state=warm)
    engine = LocalEngine(build_policy(cfg, V, "tpu", state=warm), "tpu")
    # Move the trainer away from the engine: a few steps on a random objective.
    opt = build_optimizer(policy, 1e-2)
    x = torch.tensor(task.prompts(48, torch.Generator().manual_seed(5)), device="tpu")
    for _ in range(3):
        policy(x).float().logsumexp(-1).mean().backward()
        opt.step()
        opt.zero_grad()
    prompts = task.prompts(48, torch.Generator().manual_seed(6))
    spec = SamplingSpec(n=1, max_tokens=task.max_completion, temperature=0.0)
    trainer_out = [g[0].token_ids for g in generate(policy, prompts, spec, "tpu")]
    stale = [g[0].token_ids for g in engine.generate(prompts, spec)]
    stats = engine.update_weights(full_state(policy))
    synced = [g[0].token_ids for g in engine.generate(prompts, spec)]
    params = list(policy.parameters())
    assert stats.tensors == len(params)
    assert stats.bytes == sum(t.numel() * t.element_size() for t in params)
    assert synced == trainer_out
    assert stale != trainer_out, "the trainer's update did not change any greedy output; the test sees nothing"


def test_reward_rises_on_tpu_as_on_cpu(runs: dict[str, dict]) -> None:
    # GRPO's objective: the expected reward of the sampling policy, estimated on S held-out
    # samples (the greedy reward is printed; it is not what GRPO maximises).
    S = runs["cpu"]["before"]["samples"]
    band = 3 * math.sqrt(4) * 0.5 / math.sqrt(S)
    rise = {d: runs[d]["after"]["sampled_reward"] - runs[d]["before"]["sampled_reward"] for d in ("cpu", "tpu")}
    print("sampled reward rise", rise, "band", band, "greedy:",
          {d: (runs[d]["before"]["greedy_reward"], runs[d]["after"]["greedy_reward"]) for d in ("cpu", "tpu")})
    assert rise["cpu"] > 0 and rise["tpu"] > 0
    assert abs(rise["tpu"] - rise["cpu"]) <= band
    # The warm-up weights are identical, so the starting evaluations agree exactly.
    assert runs["tpu"]["before"] == runs["cpu"]["before"]
    for d in ("cpu", "tpu"):
        h = runs[d]["history"]
        assert len(h) == STEPS and all(s["sync_tensors"] > 0 and s["sync_bytes"] > 0 for s in h)
        assert all(set(s["times"]) == {"generation", "scoring", "training", "sync"} for s in h)


def test_safety_reward_lowers_forbidden_rate(runs: dict[str, dict]) -> None:
    before = runs["tpu+safety"]["before"]
    after = runs["tpu+safety"]["after"]
    p, S = before["forbidden_rate"], before["samples"]
    margin = 3 * math.sqrt(2 * p * (1 - p) / S)
    print("forbidden rate", p, "->", after["forbidden_rate"], "(task reward only:",
          runs["tpu"]["after"]["forbidden_rate"], ") margin", margin)
    assert p > margin, "the warm-up policy emits too few forbidden outputs to measure a fall"
    assert after["forbidden_rate"] < p - margin
    assert after["forbidden_rate"] <= runs["tpu"]["after"]["forbidden_rate"]


@pytest.mark.parametrize("engine", ["local", "vllm"])
def test_fsdp2_recipe_run_matches_one_process(tmp_path, engine: str) -> None:
    """torchrun, 2 processes on 127.0.0.1, tpu_dist: TorchTitan's parallelize function shards
    the policy (FSDP2); the weights synced after each step are the gathered full tensors.
    ``local``: each rank generates its own prompts with its own engine. ``vllm``: one vLLM
    engine process on "tpu" (.venv-serve) serves both ranks through rank 0, which streams the
    gathered weights to it every step. Bounded in time; the children are reaped."""
    import os
    import socket
    import subprocess
    import sys

    import torch.distributed as dist

    if "tpu_dist" not in getattr(dist.Backend, "backend_list", []):
        pytest.skip("the c10d backend tpu_dist is not registered in this build")
    if engine == "vllm":
        from pathlib import Path

        from tpuc.post_training.vllm_engine import default_serve_python

        if not Path(default_serve_python()).exists():
            pytest.skip(f"the serving venv ({default_serve_python()}) is absent: make serve-setup")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "fsdp.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
           f"--master_port={port}", "-m", "tpuc.post_training.recipe", "--device", "tpu", "--engine", engine,
           "--steps", "2", "--eval-rounds", "1", "--lr", "3e-3", "--beta", "0.02", "--group-size", "6",
           "--prompts-per-step", "4", "--out", str(out)]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        log, _ = proc.communicate()
        pytest.fail("the FSDP=2 run did not finish in 600 s:\n" + log[-3000:])
    assert proc.returncode == 0, log[-4000:]
    import json

    res = json.loads(out.read_text())
    assert res["world_size"] == 2 and len(res["history"]) == 2
    cfg = GRPOConfig(**{k: v for k, v in res["config"].items()})
    task = SortTask()  # each sync moves the full (gathered) model
    full = build_policy(cfg, task.tokenizer.vocab_size, "cpu")
    want = sum(t.numel() * t.element_size() for t in full.parameters())
    assert all(h["sync_bytes"] == want for h in res["history"]), (want, res["history"])
    assert all(0.0 <= h["reward"] <= 1.0 for h in res["history"])
