"""GRPO's arithmetic: group-relative advantages and the clipped policy-ratio loss with a KL term.

Group Relative Policy Optimization (Shao et al., 2024, DeepSeekMath): for each prompt, ``n``
completions are sampled; each completion's advantage is its reward's z-score within its own
group, so no value model is needed. The loss per completion token is

    -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A) + beta * KL(policy || reference)

with ``ratio = exp(logp - logp_old)`` (``logp_old``: the policy that sampled the rollouts) and
the KL estimated per token as ``exp(ref - logp) - (ref - logp) - 1`` (non-negative, unbiased).
Token terms are averaged over each completion, then over the completions. Everything here is
device-agnostic tensor code: the recipe runs it unchanged on "tpu" and on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """Rewards [G * n] (groups contiguous) -> advantages [G * n]: z-scores within each group.

    A group whose rewards are all equal carries no signal: its advantages are 0.
    """
    if rewards.numel() % group_size:
        raise ValueError(f"group_advantages: {rewards.numel()} rewards are not groups of {group_size}")
    r = rewards.reshape(-1, group_size)
    mean = r.mean(dim=1, keepdim=True)
    std = r.std(dim=1, keepdim=True, unbiased=False)
    return ((r - mean) / (std + eps)).reshape(-1)


def token_logprobs(model: torch.nn.Module, tokens: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """log p(token_t | tokens_<t) for the completion positions: [B, L - prompt_len], float32."""
    logits = model(tokens[:, :-1])[:, prompt_len - 1:].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, prompt_len:, None]).squeeze(-1)


@dataclass(frozen=True)
class LossParts:
    loss: torch.Tensor
    policy: torch.Tensor  # the clipped-surrogate term (to minimise)
    kl: torch.Tensor  # mean per-token KL to the reference
    clipped: torch.Tensor  # fraction of tokens where the clip was active


def grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor,
              advantages: torch.Tensor, mask: torch.Tensor, *, clip_eps: float = 0.2,
              beta: float = 0.04) -> LossParts:
    """All token tensors [B, T] (``mask``: completion tokens up to and including <eos>)."""
    m = mask.to(logp.dtype)
    ratio = torch.exp(logp - old_logp)
    a = advantages[:, None]
    unclipped = ratio * a
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * a
    surrogate = torch.minimum(unclipped, clipped)
    d = ref_logp - logp
    kl = torch.exp(d) - d - 1.0
    per_token = -surrogate + beta * kl
    n_tok = m.sum(dim=1).clamp(min=1.0)
    loss = ((per_token * m).sum(dim=1) / n_tok).mean()
    with torch.no_grad():
        policy = ((-surrogate * m).sum(dim=1) / n_tok).mean()
        kl_mean = (kl * m).sum() / m.sum().clamp(min=1.0)
        frac = ((unclipped != clipped).to(m.dtype) * m).sum() / m.sum().clamp(min=1.0)
    return LossParts(loss, policy, kl_mean, frac)

