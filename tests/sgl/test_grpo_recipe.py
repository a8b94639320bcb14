"""The GRPO recipe (``tpuc.post_training.recipe``, TorchTitan's llama3 as the policy) with
``engine="sglang"``: its rollouts come from SGLang 0.5.23 on "tpu" in its own process
(``SGLangEngine``, the torch-2.14.1 venv), the trainer runs in *this* Python (the main venv,
torch 2.13.0 + TorchTitan), and every step's weights are renamed by ``titan_to_hf`` and pushed
through SGLang's ``update_weights_from_tensor``.

Checked: the run finishes; every step's sync moved the whole model (the renamed tensors' count,
the bytes of the policy's parameters); the rewards are rewards; and, when the recipe closes the engine, the
engine's greedy answers to 32 held-out prompts equal the trainer's greedy answers with the last
synced weights on "tpu" (the recipe's own ``generate``), the proof that the renamed weights all
landed; the weights moved during the run (so that check compares trained weights, not the
warm-up's). About 2-3 minutes here (engine start, first compiles): not in `make test`;
`make test-sglang-grpo` runs it with the main venv's Python. Under the torch-2.14.1 venv (no
TorchTitan) it is skipped with that reason.
"""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

pytest.importorskip("torchtitan", reason="the recipe's policy is TorchTitan's llama3: run with the "
                    "main venv (make setup titan-setup), as make test-sglang-grpo does")

import tpuc  # noqa: E402,F401
from tpuc.post_training import recipe  # noqa: E402
from tpuc.post_training.engine import SamplingSpec  # noqa: E402
from tpuc.post_training.local_engine import generate  # noqa: E402
from tpuc.post_training.sglang_engine import default_sglang_python  # noqa: E402
from tpuc.post_training.tasks import SortTask  # noqa: E402
from tpuc.post_training.weights import titan_to_hf  # noqa: E402

pytestmark = pytest.mark.skipif(not Path(default_sglang_python()).exists(),
                                reason=f"no SGLang venv ({default_sglang_python()}): make sglang-setup")

LIMIT_S = 600  # the whole run, engine start included
CFG = dict(device="tpu", engine="sglang", steps=2, prompts_per_step=4, group_size=4, lr=3e-3,
           beta=0.02, eval_rounds=1)


class _Recorder:
    """Wraps the recipe's engine: keeps CPU copies of the last synced (TorchTitan-named) weights
    and, at close, asks the engine for greedy answers before closing it."""

    def __init__(self, inner, prompts: list[list[int]], spec: SamplingSpec) -> None:
        self.inner, self.prompts, self.spec = inner, prompts, spec
        self.last: dict[str, torch.Tensor] = {}
        self.greedy: list[list[int]] = []

    def generate(self, prompts, spec):  # type: ignore[no-untyped-def]
        return self.inner.generate(prompts, spec)

    def update_weights(self, named_tensors):  # type: ignore[no-untyped-def]
        named = [(k, v.detach().to("cpu").clone()) for k, v in named_tensors]
        self.last = dict(named)
        return self.inner.update_weights(named)

    def close(self) -> None:
        try:
            self.greedy = [g[0].token_ids for g in self.inner.generate(self.prompts, self.spec)]
        finally:
            self.inner.close()


def _timeout(signum, frame):  # type: ignore[no-untyped-def]
    raise TimeoutError(f"the recipe run took over {LIMIT_S} s")


def test_recipe_with_sglang_engine(monkeypatch) -> None:
    task = SortTask()
    prompts = task.prompts(32, torch.Generator().manual_seed(6))
    spec = SamplingSpec(n=1, max_tokens=task.max_completion, temperature=0.0)
    made: list[_Recorder] = []
    real = recipe.make_engine

    def make_engine(cfg, vocab, state):  # type: ignore[no-untyped-def]
        made.append(_Recorder(real(cfg, vocab, state), prompts, spec))
        made[-1].warm = state
        return made[-1]

    monkeypatch.setattr(recipe, "make_engine", make_engine)
    old = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(LIMIT_S)
    try:
        cfg = recipe.GRPOConfig(**CFG)
        res = recipe.run(cfg, log=print)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    rec = made[0]
    policy = recipe.build_policy(cfg, task.tokenizer.vocab_size, "cpu")
    params = list(policy.parameters())
    # what one sync sends: the policy renamed for SGLang (fused wqkv split into q/k/v)
    mcfg = recipe.policy_config(task.tokenizer.vocab_size, cfg.dim, cfg.n_layers, cfg.n_heads)
    hf = list(titan_to_hf(list(recipe.full_state(policy)), mcfg))
    h = res["history"]
    assert len(h) == CFG["steps"]
    assert all(s["sync_tensors"] == len(hf) for s in h), (len(hf), h)
    assert all(s["sync_bytes"] == sum(t.numel() * t.element_size() for t in params) for s in h), h
    assert all(0.0 <= s["reward"] <= 1.0 for s in h)
    for ev in (res["before"], res["after"]):
        assert 0.0 <= ev["greedy_reward"] <= 1.0 and 0.0 <= ev["sampled_reward"] <= 1.0
    # the policy as the trainer left it: the warm-up weights, then the last synced parameters
    # (named as the trainer's parameters: fused wqkv; its state_dict names are split)
    trained = recipe.build_policy(cfg, task.tokenizer.vocab_size, "tpu", state=rec.warm)
    own = dict(trained.named_parameters())
    assert set(own) == set(rec.last), (sorted(own), sorted(rec.last))
    moved = 0.0
    with torch.no_grad():
        for k, v in rec.last.items():
            moved = max(moved, float((own[k].cpu() - v).abs().max()))
            own[k].copy_(v.to("tpu"))
    assert moved > 0, "the GRPO steps did not change the weights; the greedy check sees nothing new"
    want = [g[0].token_ids for g in generate(trained, prompts, spec, "tpu")]
    print("engine greedy == trainer greedy on", sum(a == b for a, b in zip(rec.greedy, want)),
          "of", len(want), "prompts; largest weight change", moved)
    assert rec.greedy == want
