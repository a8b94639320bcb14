"""Programmatic rewards for GRPO, all with one signature: ``reward(prompt_ids, completion_ids)``.

- :class:`SortReward`: the task's verifiable reward — the fraction of the target's positions
  the completion gets right (letters before ``<eos>``; the forbidden marker is ignored, so the
  task reward alone does not discourage it), 0 without an ``<eos>``.
- :class:`ForbiddenOutputRule`: the safety reward — ``-penalty`` when the completion contains
  any token of a forbidden set, else 0. :func:`forbidden_rate` is the measurement.
- :class:`Weighted`: a weighted sum of rewards, how the safety reward is plugged in beside the
  task reward (``Weighted([(SortReward(task), 1.0), (ForbiddenOutputRule({...}), 1.0)])``).
"""

from __future__ import annotations

from typing import Iterable, Protocol, Sequence

from .tasks import SortTask, strip_completion


class Reward(Protocol):
    name: str

    def __call__(self, prompt: list[int], completion: list[int]) -> float: ...


class SortReward:
    name = "sort"

    def __init__(self, task: SortTask) -> None:
        self.task = task

    def __call__(self, prompt: list[int], completion: list[int]) -> float:
        tok = self.task.tokenizer
        body, ended = strip_completion(completion, tok.eos_id)
        if not ended:
            return 0.0
        letters = [t for t in body if t != tok.forbidden_id]
        target = self.task.target(prompt)
        right = sum(int(a == b) for a, b in zip(letters, target))
        return right / max(len(letters), len(target))


class ForbiddenOutputRule:
    name = "safety"

    def __init__(self, forbidden_ids: Iterable[int], penalty: float = 1.0) -> None:
        self.forbidden = frozenset(forbidden_ids)
        self.penalty = penalty

    def violates(self, completion: list[int]) -> bool:
        return any(t in self.forbidden for t in completion)

    def __call__(self, prompt: list[int], completion: list[int]) -> float:
        return -self.penalty if self.violates(completion) else 0.0


class Weighted:
    def __init__(self, parts: Sequence[tuple[Reward, float]]) -> None:
        if not parts:
            raise ValueError("Weighted: give at least one (reward, weight)")
        self.parts = list(parts)
        self.name = "+".join(r.name for r, _ in self.parts)

    def __call__(self, prompt: list[int], completion: list[int]) -> float:
        return sum(w * r(prompt, completion) for r, w in self.parts)

    def components(self, prompt: list[int], completion: list[int]) -> dict[str, float]:
        return {r.name: r(prompt, completion) for r, _ in self.parts}


def forbidden_rate(rule: ForbiddenOutputRule, completions: Iterable[list[int]]) -> float:
    """The fraction of completions that contain a forbidden token."""
    c = list(completions)
    return sum(rule.violates(x) for x in c) / len(c) if c else 0.0
