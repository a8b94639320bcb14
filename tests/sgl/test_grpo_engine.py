"""GRPO with SGLang as the rollout engine (``tpuc.post_training.sglang_engine.SGLangEngine``):
the trainer (a tiny Hugging Face Llama on "tpu", this process) samples groups from SGLang on
"tpu" (its own process, ``sglang.Engine(device="tpu")``), takes GRPO steps
(``tpuc.post_training.grpo``) and pushes its weights through SGLang's
``update_weights_from_tensor`` after each step. After every sync the engine's greedy tokens
equal transformers' greedy ``generate()`` on the CPU with the trainer's current weights -- the
proof that the sync moved every weight -- and at least one sync changed them (so the check
sees something). Then bad requests (a token id one past the vocabulary, a prompt longer than the
context) fail with a clear error and the engine keeps serving. The engine process is bounded
in time and reaped. About 3 minutes here (engine start and first compiles): not in `make
test`; `make test-sglang-grpo` runs it.

The reward is dense on purpose (the share of the completion that is the letter ``a``): a random
tiny policy never finishes the sort task, and a reward that is always 0 gives GRPO nothing to
move the weights with.
"""
from __future__ import annotations

import os
import time

import pytest
import torch

from sgl_common import needs_sglang

pytestmark = [needs_sglang,
              pytest.mark.skipif(not (hasattr(torch, "tpu") and torch.tpu.is_available()),
                                 reason='device "tpu" unavailable')]

STEPS = 3
GROUP = 4
PROMPTS = 4
LIMIT_S = 300  # the whole run, engine start included
# a top-1/top-2 gap below this share of the largest logit could let float32 rounding order two
# candidates differently on two correct implementations (tests/post_training/test_sync.py
# derives it); the reference checks every greedy step it compares stays above it
MIN_GAP = 1e-4


def _config(vocab: int):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, max_position_embeddings=64, initializer_range=0.2,
                       tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                       pad_token_id=0, torch_dtype="float32")


def _cpu_greedy(model, prompts: list[list[int]], n: int) -> tuple[list[list[int]], float]:
    """transformers' greedy generate() on the CPU (EOS ignored: scored like any other token, as
    the engine does) and the smallest relative top-1/top-2 logit gap over every generated
    token."""
    outs, gap = [], float("inf")
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        x = torch.tensor(prompts)
        y = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n,
                           do_sample=False, pad_token_id=0,
                           output_scores=True, return_dict_in_generate=True)
        for s in y.scores:  # [batch, vocab] per step
            top = s.double().topk(2, dim=-1).values
            rel = (top[:, 0] - top[:, 1]) / top.abs().max(dim=-1).values.clamp(min=1e-30)
            gap = min(gap, float(rel.min()))
        outs = y.sequences[:, x.shape[1]:].tolist()
    return outs, gap


def test_grpo_steps_with_sglang_engine_sync_matches_transformers(tmp_path):
    from transformers import LlamaForCausalLM

    from tpuc.post_training import grpo
    from tpuc.post_training.engine import SamplingSpec
    from tpuc.post_training.sglang_engine import SGLangEngine
    from tpuc.post_training.vllm_engine import EngineError
    from tpuc.post_training.tasks import SortTask

    t_start = time.monotonic()
    task = SortTask()
    tok = task.tokenizer
    a_id = tok.stoi["a"]
    V, T = tok.vocab_size, task.max_completion
    torch.manual_seed(0)
    cpu = LlamaForCausalLM(_config(V)).eval()
    model_dir = tmp_path / "policy"
    cpu.save_pretrained(model_dir)
    policy = LlamaForCausalLM(_config(V))
    policy.load_state_dict(cpu.state_dict())
    policy = policy.to("tpu").train()
    opt = torch.optim.AdamW(policy.parameters(), lr=3e-2, weight_decay=0.0)
    gen = torch.Generator().manual_seed(1)
    check = task.prompts(6, torch.Generator().manual_seed(2))
    greedy = SamplingSpec(n=1, max_tokens=T, temperature=0.0)
    model_bytes = sum(p.numel() * p.element_size() for p in policy.parameters())
    env = {"TPUC_CACHE_DIR": os.environ.get("TPUC_CACHE_DIR", str(tmp_path / "cache"))}
    changed = 0
    with SGLangEngine(model_dir, device="tpu", context_length=64, seed=0, env=env,
                      start_timeout=LIMIT_S, request_timeout=LIMIT_S) as engine:
        first, gap = _cpu_greedy(cpu, check, T)
        assert gap > MIN_GAP, gap
        assert [g[0].token_ids for g in engine.generate(check, greedy)] == first
        for step in range(STEPS):
            prompts = task.prompts(PROMPTS, gen)
            groups = engine.generate(prompts, SamplingSpec(n=GROUP, max_tokens=T,
                                                           temperature=1.0))
            assert [len(g) for g in groups] == [GROUP] * PROMPTS
            assert all(len(c.token_ids) == T for g in groups for c in g)
            rows = [p + c.token_ids for p, g in zip(prompts, groups) for c in g]
            rewards = torch.tensor([c.token_ids.count(a_id) / T for g in groups for c in g])
            adv = grpo.group_advantages(rewards, GROUP)
            tokens = torch.tensor(rows, device="tpu")
            logits_of = lambda x: policy(x).logits  # noqa: E731
            with torch.no_grad():
                old = grpo.token_logprobs(logits_of, tokens, task.prompt_len)
            logp = grpo.token_logprobs(logits_of, tokens, task.prompt_len)
            mask = torch.ones_like(logp, dtype=torch.bool)
            parts = grpo.grpo_loss(logp, old, old, adv.to("tpu"), mask, beta=0.0)
            parts.loss.backward()
            opt.step()
            opt.zero_grad()
            stale = [g[0].token_ids for g in engine.generate(check, greedy)]
            stats = engine.update_weights(policy.named_parameters())
            assert stats.tensors == len(list(policy.parameters()))
            assert stats.bytes == model_bytes and stats.path == "host"
            cpu.load_state_dict({k: v.detach().cpu() for k, v in policy.state_dict().items()})
            want, gap = _cpu_greedy(cpu, check, T)
            assert gap > MIN_GAP, (step, gap)
            synced = [g[0].token_ids for g in engine.generate(check, greedy)]
            assert synced == want, (step, synced, want)
            changed += stale != want
            print(f"step {step}: reward {rewards.mean():.3f}, sync {stats.bytes} B in "
                  f"{stats.seconds:.2f} s, greedy changed: {stale != want}")
        assert engine.engine_stats()["updates"] == STEPS
        # bad requests through the rollout engine: a clear error for that request (SGLang's own
        # context check; tpuc's vocabulary check, at the first id past the vocabulary), then
        # the engine keeps serving
        with pytest.raises(EngineError, match=rf"token id {V}, outside the model's vocabulary"):
            engine.generate([[tok.bos_id, V, tok.sep_id]], greedy)
        with pytest.raises(EngineError, match=r"longer than the model's context length \(64"):
            engine.generate([[tok.bos_id] * 70], greedy)
        assert [g[0].token_ids for g in engine.generate(check, greedy)] == want
    assert engine.pid is None  # closed and reaped
    assert changed > 0, "no GRPO step changed a greedy output: the sync check saw nothing"
    assert time.monotonic() - t_start < LIMIT_S
