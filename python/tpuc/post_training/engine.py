"""The rollout-engine interface: what a post-training loop needs from a generator.

A trainer asks an engine for completions of token-id prompts (a group of ``n`` per prompt, for
GRPO's group-relative advantages) and pushes its new weights to it after each optimizer step.
Prompts and completions are token ids, never text: the engine needs no tokenizer, and the
trainer's tokenizer is the only one. Weights are named as in a Hugging Face checkpoint of the
model (``model.layers.0.self_attn.q_proj.weight``), the names vLLM's weight loaders take.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Protocol

import torch


@dataclass(frozen=True)
class SamplingSpec:
    """How to sample one batch of rollouts."""

    n: int = 1  # completions per prompt: the GRPO group size
    max_tokens: int = 16
    temperature: float = 1.0  # 0.0: greedy
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    logprobs: bool = False  # also return each sampled token's log-probability


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[float] | None = None  # one per token in token_ids when asked


@dataclass
class SyncStats:
    """What one weight update moved and how long it took (trainer's view, end to end)."""

    tensors: int
    bytes: int
    seconds: float
    path: str  # "device" (collectives between the processes' devices) or "host"
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else float("inf")


class RolloutEngine(Protocol):
    def generate(self, prompts: list[list[int]], spec: SamplingSpec) -> list[list[Completion]]:
        """``spec.n`` completions for each prompt, in prompt order."""
        ...

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> SyncStats:
        """Load these weights (all of the model's, or a subset) before the next generate()."""
        ...

    def close(self) -> None: ...
