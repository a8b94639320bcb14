"""The GRPO recipe on Ray (tpuc.integrations.ray.grpo, issue 33): one Ray Train worker on "tpu"
(TpuTorchConfig, tpu_dist), the vLLM engine on "tpu" in a Ray actor's engine process
(.venv-serve), the weights synced over tpuc's authenticated wire after every step.

- the same recipe without Ray (``python -m tpuc.post_training.recipe --engine vllm``, a
  subprocess started before the cluster, so it runs meanwhile) gives the same history: the
  warm-up losses, the rollouts' rewards (functions of the sampled tokens: equal) and the loss
  and KL per step within float32 rounding of each other (both run the same float32 programs
  on the same inputs: bound below);
- two workers (FSDP2) give the same history as the recipe under torchrun --nproc_per_node=2;
- after the run, the engine actor's greedy completions equal a float64 transformers greedy
  decode with the trainer's last synced weights, and differ from the decode with the warm
  weights the engine started from: the syncs are what changed the engine's outputs.

A one-node Ray cluster on 127.0.0.1 (no dashboard, usage stats off, temp dir under /tmp),
started and stopped here; every wait bounded; after ray.shutdown() the test fails if any
process naming the cluster's temp dir (the engine process inherits it) is still alive.
Needs Ray (make ray-setup), TorchTitan, transformers and .venv-serve; make test-ray-grpo."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

ray = pytest.importorskip("ray", reason="Ray is not installed in this venv: make ray-setup")
pytest.importorskip("torchtitan", reason="TorchTitan is absent: make titan-setup")
pytest.importorskip("transformers", reason="transformers is absent: make setup")

from tpuc.post_training.recipe import GRPOConfig  # noqa: E402
from tpuc.post_training.tasks import SortTask  # noqa: E402
from tpuc.post_training.vllm_engine import default_serve_python  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import ray_cluster  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not Path(default_serve_python()).exists(),
                       reason=f"the serving venv ({default_serve_python()}) is absent: "
                              "make serve-setup"),
    pytest.mark.skipif(not (hasattr(torch, "tpu") and torch.tpu.is_available()),
                       reason='device "tpu" unavailable'),
]

CFG = dict(device="tpu", engine="vllm", steps=3, eval_rounds=1, lr=3e-3, beta=0.02,
           group_size=6, prompts_per_step=4)
RUN_TIMEOUT = 900.0  # seconds for one run (engine start, compiles, 3 steps, 2 evaluations)
# float32's unit roundoff; the loss is a mean of per-token terms of two float32 forwards, so
# two runs on identical inputs may differ by a few roundings of it (bit-equal in practice)
EPS32 = 2.0 ** -24
# greedy equality is asserted up to the first position whose float64 top-1/top-2 logit gap is
# below this share of the largest logit (float32 rounding could order them differently; as in
# tests/post_training/test_sync.py)
MIN_GAP = 1e-4
N_GREEDY = 32


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray cluster (tests/ray_cluster.py); the engine process the actor starts inherits
    its session marker, so it is reaped with the cluster too."""
    with ray_cluster.local_cluster("tpuc-rg-") as tmp:
        yield tmp


def _start_reference(out: Path, log: Path, workers: int = 1) -> subprocess.Popen:
    """The recipe without Ray: one process (or ``torchrun`` with ``workers`` on 127.0.0.1),
    the vLLM engine process beside it."""
    import socket

    cmd = [sys.executable, "-m", "tpuc.post_training.recipe", "--out", str(out)]
    if workers > 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd[1:3] = ["-m", "torch.distributed.run", f"--nproc_per_node={workers}",
                    "--master_addr=127.0.0.1", f"--master_port={port}",
                    "-m", "tpuc.post_training.recipe"]
    for k, v in CFG.items():
        cmd += ["--" + k.replace("_", "-"), str(v)]
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1")
    with open(log, "wb") as fh:
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def _wait(proc: subprocess.Popen, log: Path, timeout: float) -> None:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
        pytest.fail(f"the reference run did not finish in {timeout:.0f} s:\n"
                    f"{log.read_text(errors='replace')[-3000:]}")
    assert proc.returncode == 0, log.read_text(errors="replace")[-4000:]


@torch.no_grad()
def _hf_greedy(model_dir: str, state: dict[str, torch.Tensor] | None, prompts: list[list[int]],
               max_tokens: int, eos: int) -> tuple[list[list[int]], list[int]]:
    """transformers' LlamaForCausalLM in float64 on the CPU, greedy by full recomputation;
    returns the completions (up to and including <eos>) and, per prompt, how many leading
    tokens were decided by a gap of at least MIN_GAP (beyond that, float32 may differ)."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float64).eval()
    if state is not None:
        missing, unexpected = model.load_state_dict(
            {k: v.to(torch.float64) for k, v in state.items()}, strict=False)
        assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    outs, decided = [], []
    for p in prompts:
        seq, out, firm = list(p), [], None
        for _ in range(max_tokens):
            row = model(torch.tensor([seq])).logits[0, -1]
            top = torch.topk(row, 2).values
            if firm is None and float((top[0] - top[1]) / row.abs().max()) < MIN_GAP:
                firm = len(out)
            tok = int(row.argmax())
            out.append(tok)
            seq.append(tok)
            if tok == eos:
                break
        outs.append(out)
        decided.append(len(out) if firm is None else firm)
    return outs, decided


def _cut(ids: list[int], eos: int) -> list[int]:
    return ids[: ids.index(eos) + 1] if eos in ids else list(ids)


def test_grpo_on_ray_matches_recipe_and_syncs_engine(cluster: str, tmp_path: Path) -> None:
    from tpuc.integrations.ray.grpo import run_on_ray, stop_engine

    ref_out, ref_log = tmp_path / "ref.json", tmp_path / "ref.log"
    ref_proc = _start_reference(ref_out, ref_log)
    try:
        weights = tmp_path / "synced.pt"
        res: dict[str, Any] = run_on_ray(
            GRPOConfig(**CFG), num_workers=1, work_dir=str(Path(cluster) / "grpo"),
            save_weights=str(weights), keep_engine=True, timeout_s=RUN_TIMEOUT)
        actor = res.pop("engine_actor")
        try:
            task = SortTask()
            eos = task.tokenizer.eos_id
            g = torch.Generator().manual_seed(1234)
            prompts = task.prompts(N_GREEDY, g)
            T = task.max_completion
            engine_out = ray.get(actor.greedy.remote(prompts, T, [eos]), timeout=300)
            model_dir = ray.get(actor.model_dir.remote(), timeout=60)
        finally:
            stop_engine(actor)
        synced = torch.load(weights)
        after, firm_after = _hf_greedy(model_dir, synced, prompts, T, eos)
        before, _ = _hf_greedy(model_dir, None, prompts, T, eos)
        engine_out = [_cut(o, eos) for o in engine_out]
        assert sum(f == len(a) for f, a in zip(firm_after, after)) >= N_GREEDY // 2, firm_after
        for e, a, f in zip(engine_out, after, firm_after):
            assert e[:f] == a[:f], (e, a, f)
        assert any(a != b for a, b in zip(after, before)), "the steps changed no greedy output"
        assert any(e != b for e, b, in zip(engine_out, before))
        print(f"greedy: {sum(f == len(a) for f, a in zip(firm_after, after))}/{N_GREEDY} prompts "
              f"decided to the end, {sum(a != b for a, b in zip(after, before))} changed by the "
              "steps")
    finally:
        _wait(ref_proc, ref_log, RUN_TIMEOUT)
    _check_same_run(res, json.loads(ref_out.read_text()), 1)


def test_two_workers_match_torchrun(cluster: str, tmp_path: Path) -> None:
    """2 Ray Train workers (FSDP2 through TorchTitan's parallelize function, one engine actor
    serving both through rank 0) against the same recipe under torchrun --nproc_per_node=2."""
    from tpuc.integrations.ray.grpo import run_on_ray

    ref_out, ref_log = tmp_path / "ref.json", tmp_path / "ref.log"
    ref_proc = _start_reference(ref_out, ref_log, workers=2)
    try:
        res = run_on_ray(GRPOConfig(**CFG), num_workers=2, work_dir=str(Path(cluster) / "grpo2"),
                         timeout_s=RUN_TIMEOUT)
    finally:
        _wait(ref_proc, ref_log, RUN_TIMEOUT)
    _check_same_run(res, json.loads(ref_out.read_text()), 2)


def _check_same_run(res: dict[str, Any], ref: dict[str, Any], world_size: int) -> None:
    assert res["world_size"] == ref["world_size"] == world_size
    assert len(res["history"]) == CFG["steps"]
    assert res["sft_losses"] == ref["sft_losses"]  # the same warm weights
    for h, r in zip(res["history"], ref["history"]):
        for k in ("reward", "task_reward", "forbidden_rate", "sync_bytes", "sync_tensors"):
            assert h[k] == r[k], (k, h, r)
        for k in ("loss", "kl"):
            assert abs(h[k] - r[k]) <= 64 * EPS32 * (1.0 + abs(r[k])), (k, h, r)
    print("loss/kl differences:", [(h["loss"] - r["loss"], h["kl"] - r["kl"])
                                   for h, r in zip(res["history"], ref["history"])])
    print("rewards:", [h["reward"] for h in res["history"]])
    assert res["before"] == ref["before"]
    for k in ("greedy_reward", "sampled_reward", "forbidden_rate"):
        assert res["after"][k] == pytest.approx(ref["after"][k], abs=0.0), k
