"""A small Llama-style decoder in plain PyTorch: RMSNorm, rotary embeddings
written with complex numbers, SwiGLU feed-forward, causal attention through
scaled_dot_product_attention. Nothing in it knows which device it runs on."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LlamaConfig:
    vocab_size: int = 256
    dim: int = 128
    n_layers: int = 4
    n_heads: int = 4
    hidden_dim: int = 344
    max_seq_len: int = 256
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0


def _at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """Norms and rotations compute in float32 for 16-bit inputs, and in the input's own
    precision when it is wider (a float64 model is a float64 computation throughout)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = _at_least_float32(x)
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_frequencies(head_dim: int, seq_len: int, theta: float) -> torch.Tensor:
    """Complex rotations exp(i * t * theta^(-2k/d)), shape (seq_len, head_dim // 2)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(seq_len).float(), inv)
    return torch.polar(torch.ones_like(angles), angles)


def apply_rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """x: (batch, seq, heads, head_dim); rotates pairs of features."""
    xc = torch.view_as_complex(_at_least_float32(x).reshape(*x.shape[:-1], -1, 2))
    rotated = xc * freqs[: x.shape[1]].view(1, x.shape[1], 1, -1)
    return torch.view_as_real(rotated).flatten(3).type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, t, self.n_heads, self.head_dim)
        v = self.wv(x).view(b, t, self.n_heads, self.head_dim)
        q, k = apply_rope(q, freqs), apply_rope(k, freqs)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.w2 = nn.Linear(cfg.hidden_dim, cfg.dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), freqs)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.register_buffer(
            "freqs",
            rope_frequencies(cfg.dim // cfg.n_heads, cfg.max_seq_len, cfg.rope_theta),
            persistent=False,
        )
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.freqs)
        logits = self.output(self.norm(h))
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def corpus_bytes(limit: int = 400_000) -> bytes:
    """Training text present on every machine with Python: the source of a
    fixed list of standard-library modules, as bytes (a byte-level vocabulary
    of 256 needs no tokenizer download)."""
    import importlib
    import inspect

    names = ["textwrap", "string", "fnmatch", "shlex", "heapq", "bisect", "queue", "glob",
             "csv", "difflib", "argparse", "dataclasses", "functools", "statistics", "fractions"]
    parts = []
    for name in names:
        try:
            parts.append(inspect.getsource(importlib.import_module(name)))
        except (OSError, TypeError, ImportError):
            continue
    return "\n".join(parts).encode("utf-8")[:limit]


def batches(data: torch.Tensor, batch: int, seq: int, generator: torch.Generator):
    """Endless random (input, target) windows from a 1-D uint8 tensor."""
    while True:
        starts = torch.randint(0, data.numel() - seq - 1, (batch,), generator=generator)
        idx = starts[:, None] + torch.arange(seq + 1)[None, :]
        chunk = data[idx].long()
        yield chunk[:, :-1], chunk[:, 1:]


def flops_per_token(cfg: LlamaConfig, n_params: int, seq: int) -> float:
    """6N for the weights plus attention's 12 * layers * dim * seq (fwd + bwd)."""
    return 6 * n_params + 12 * cfg.n_layers * cfg.dim * seq


def describe(cfg: LlamaConfig, n_params: int) -> str:
    return (f"{n_params / 1e6:.2f}M parameters, dim {cfg.dim}, {cfg.n_layers} layers, "
            f"{cfg.n_heads} heads, vocab {cfg.vocab_size}")


__all__ = ["LlamaConfig", "Llama", "corpus_bytes", "batches", "flops_per_token", "describe",
           "math"]
