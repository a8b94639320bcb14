"""The models and batches the replay tests train (tests/test_replay.py: compiled
graphs replayed; tests/test_fused_replay.py: fused chunks replayed): an MLP with
BatchNorm and dropout, and the example transformer with dropout on its logits."""
from __future__ import annotations

import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 64), nn.BatchNorm1d(64), nn.GELU(), nn.Dropout(0.3),
                         nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 10))


class DropLlama(nn.Module):
    """The example transformer with dropout on its logits."""

    def __init__(self) -> None:
        super().__init__()
        from llama import Llama, LlamaConfig

        cfg = LlamaConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                          max_seq_len=16)
        self.llama = Llama(cfg)
        self.drop = nn.Dropout(0.2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.drop(self.llama(tokens))


def batches(kind: str, steps: int, batch_of=lambda i: 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(steps):
        b = batch_of(i)
        if kind == "mlp":
            out.append((torch.randn(b, 16, generator=g), torch.randint(0, 10, (b,), generator=g)))
        else:
            out.append((torch.randint(0, 64, (b, 12), generator=g),
                        torch.randint(0, 64, (b, 12), generator=g)))
    return out
