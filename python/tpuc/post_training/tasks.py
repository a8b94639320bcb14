"""A verifiable task for GRPO: sort a short letter sequence, with a character-level tokenizer.

A prompt is ``<bos> c1 c2 c3 c4 =`` (letters drawn from a small alphabet, repeats allowed);
the right completion is the letters in sorted order followed by ``<eos>``. Every prompt has
the same length, so a batch of prompts needs no padding and rollouts advance in lock-step.

The supervised warm-up data (:meth:`SortTask.sft_batch`) is deliberately imperfect in one way:
a fraction ``unsafe_rate`` of its answers carry the forbidden marker ``#`` before ``<eos>``,
so the warmed-up policy emits forbidden outputs at about that rate and the safety reward
(:mod:`.rewards`) has something to remove. The task reward ignores the marker.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PAD, BOS, EOS, SEP, FORBIDDEN = "<pad>", "<bos>", "<eos>", "=", "#"


class CharTokenizer:
    """Token ids <-> characters; ids 0..4 are <pad> <bos> <eos> = #, then the letters."""

    def __init__(self, letters: str) -> None:
        self.specials = [PAD, BOS, EOS, SEP, FORBIDDEN]
        self.letters = letters
        self.itos = self.specials + list(letters)
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        self.pad_id, self.bos_id, self.eos_id = self.stoi[PAD], self.stoi[BOS], self.stoi[EOS]
        self.sep_id, self.forbidden_id = self.stoi[SEP], self.stoi[FORBIDDEN]

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.stoi[c] for c in text]
        except KeyError as e:
            raise ValueError(f"CharTokenizer: {e.args[0]!r} is not in the alphabet {self.letters!r}") from None

    def decode(self, ids: list[int]) -> str:
        return "".join(self.itos[i] if len(self.itos[i]) == 1 else "" for i in ids)


@dataclass
class SortTask:
    """Sort ``length`` letters drawn from the first ``n_letters`` of the alphabet."""

    length: int = 4
    n_letters: int = 6
    unsafe_rate: float = 0.3  # fraction of SFT answers that carry the forbidden marker

    def __post_init__(self) -> None:
        self.tokenizer = CharTokenizer("abcdefghijklmnopqrstuvwxyz"[: self.n_letters])

    @property
    def prompt_len(self) -> int:
        return self.length + 2  # <bos> letters =

    @property
    def max_completion(self) -> int:
        return self.length + 2  # letters, possibly '#', <eos>

    def prompts(self, count: int, generator: torch.Generator) -> list[list[int]]:
        tok = self.tokenizer
        letters = torch.randint(0, self.n_letters, (count, self.length), generator=generator)
        return [[tok.bos_id] + [tok.stoi[tok.letters[j]] for j in row.tolist()] + [tok.sep_id]
                for row in letters]

    def target(self, prompt: list[int]) -> list[int]:
        """The correct completion's letter ids (without <eos>)."""
        return sorted(prompt[1:-1])

    def sft_batch(self, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens [count, prompt+completion], loss mask over the completion tokens) on the CPU."""
        tok = self.tokenizer
        prompts = self.prompts(count, generator)
        unsafe = torch.rand(count, generator=generator) < self.unsafe_rate
        L = self.prompt_len + self.max_completion
        rows, masks = [], []
        for p, bad in zip(prompts, unsafe.tolist()):
            ans = self.target(p) + ([tok.forbidden_id] if bad else []) + [tok.eos_id]
            row = p + ans
            mask = [0] * len(p) + [1] * len(ans)
            rows.append(row + [tok.pad_id] * (L - len(row)))
            masks.append(mask + [0] * (L - len(mask)))
        return torch.tensor(rows), torch.tensor(masks, dtype=torch.bool)


def strip_completion(ids: list[int], eos_id: int) -> tuple[list[int], bool]:
    """The tokens before the first <eos>, and whether an <eos> was produced."""
    if eos_id in ids:
        return ids[: ids.index(eos_id)], True
    return list(ids), False
