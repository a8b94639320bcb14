"""TRL's GRPOTrainer, unmodified, on "tpu" against the same run on the CPU.

The runs are examples/grpo/trl_grpo.py's `run()`: a tiny Qwen3-style policy built offline, eight
distinct prompts, four generations each, a programmatic reward (the share of vowels), SGD, a KL
term against TRL's frozen reference model (beta > 0), generation through transformers'
`generate()` on the trainer's device.

Why the draws are shared: "tpu" has its own random stream (`torch.Generator("tpu")`), so the
same seed samples different tokens on "tpu" and on the CPU, and GRPO's losses would differ by
sampling noise. Greedy (or near-zero temperature) generation would make the completions agree
but gives every completion of a group the same reward, so all advantages are zero, the policy
loss and its gradient vanish and nothing is compared. `SharedDraws` keeps the model, softmax and
logits processing on the device and takes only the uniform numbers from one seeded CPU
generator, so both runs see the same completions and differ only in arithmetic.

The bound is derived, not tuned (tests/tpu_testing.assert_as_accurate): the same run in
float64 on the CPU is the reference; the device's error in the trained weights and the logged
losses/KL must be at most a small multiple of the CPU's own float32 error. Rewards are computed
in Python from the completion text, so they are compared exactly.
"""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("trl", reason="TRL not installed (make test-post installs it: $(VENV)/.deps-trl)")
pytest.importorskip("datasets", reason="datasets not installed (TRL's dependency)")

from tests.tpu_testing import assert_as_accurate  # noqa: E402

STEPS = 3


def _example() -> Any:
    path = Path(__file__).resolve().parents[2] / "examples" / "grpo" / "trl_grpo.py"
    spec = importlib.util.spec_from_file_location("trl_grpo_example", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    if not torch.tpu.is_available():
        pytest.skip(f'device "tpu" unavailable: {torch.tpu.unavailable_reason()}')
    ex = _example()
    root = tmp_path_factory.mktemp("trl")
    model_dir = ex.build_model(root)
    out = {}
    for name, device, dtype in (("tpu", "tpu", torch.float32), ("cpu", "cpu", torch.float32),
                                ("f64", "cpu", torch.float64)):
        out[name] = ex.run(device, model_dir, str(root / name), steps=STEPS, dtype=dtype,
                           shared_draws=True)
    from transformers import AutoModelForCausalLM

    init = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()
    out["init"] = {"params": {k: v.detach() for k, v in init.items()}}
    return out


def test_trains_on_tpu(runs: dict[str, dict[str, Any]]) -> None:
    tpu = runs["tpu"]
    assert tpu["device"].startswith("tpu") and tpu["param_device"].startswith("tpu"), tpu["device"]
    assert len(tpu["logs"]) == STEPS
    for h in tpu["logs"]:
        assert math.isfinite(h["loss"]) and math.isfinite(h["reward"])
    # the policy moved away from the frozen reference: GRPO's update did something
    assert tpu["logs"][-1]["kl"] > 0
    # completions within a group differ (sampling, not greedy): advantages are not all zero
    assert any(len(set(step[i:i + 4])) > 1 for step in tpu["completions"]
               for i in range(0, len(step), 4))


def test_same_completions_and_rewards(runs: dict[str, dict[str, Any]]) -> None:
    tpu, cpu, f64 = runs["tpu"], runs["cpu"], runs["f64"]
    # same draws and probabilities equal to rounding: the same tokens on every device
    assert tpu["completions"] == cpu["completions"] == f64["completions"]
    for a, b in zip(tpu["logs"], cpu["logs"]):
        assert a["reward"] == b["reward"] and a["reward_std"] == b["reward_std"]


def test_losses_and_weights_match_cpu(runs: dict[str, dict[str, Any]]) -> None:
    tpu, cpu, f64, init = runs["tpu"], runs["cpu"], runs["f64"], runs["init"]["params"]

    def series(run: dict[str, Any], key: str) -> torch.Tensor:
        return torch.tensor([h[key] for h in run["logs"]], dtype=torch.float64)

    # The loss is a mean of terms ratio * advantage (plus beta * KL) that cancel to about 0
    # (8e-8 at the first step, 1e-3 after): its rounding error scales with the terms, whose
    # magnitude is at most (G - 1) / sqrt(G) = 1.5 for G = 4 standardized advantages and a
    # ratio near 1 (bound 2), and with about sqrt(n) roundoffs for n = 64 tokens (16). A
    # reduction order other than the CPU's (rank-1 buffers) erred by 0.7 roundoffs of 1 there.
    assert_as_accurate(series(tpu, "loss").float(), series(cpu, "loss").float(),
                       series(f64, "loss"), floor_ulps=16.0, scale=2.0)
    assert_as_accurate(series(tpu, "kl").float(), series(cpu, "kl").float(), series(f64, "kl"))
    for name, w0 in init.items():
        # the update each run made (the trained weights less the initial ones)
        d_tpu = tpu["params"][name].float() - w0
        d_cpu = cpu["params"][name].float() - w0
        d_ref = f64["params"][name].double() - w0.double()
        assert d_ref.abs().max() > 0, name
        assert_as_accurate(d_tpu, d_cpu, d_ref)
