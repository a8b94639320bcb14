"""A deliberately mis-shaped training loop, and the same loop after
following `tpuc doctor`'s advice (docs/tuning.md).

    python examples/tuning/train.py                 # the first version
    tpuc doctor -- python examples/tuning/train.py  # what to change, with file:line
    python examples/tuning/train.py --tuned         # the advice applied

The model: token embeddings, one attention block, masked mean pooling, a
classifier. The data: batches of sequences whose length varies from batch
to batch (17..128 tokens). Each step also logs how many distinct tokens the
batch had.

First version: every batch has its own length, so every op of the step
compiles again for each new length (recompiles), and the metric uses
torch.unique, which has no device lowering (a CPU fallback every step).
Tuned version: batches are padded up to the bucket sizes the doctor names
(32, 64, 128) with a padding mask (the loss is the same: padding is masked
out of the attention and the pooling), and the metric counts distinct tokens
with a scatter into a [vocab] table, which runs on the device.
"""
from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

VOCAB, DIM, CLASSES, BATCH = 512, 128, 4, 8
BUCKETS = (32, 64, 128)


class Classifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, DIM)
        self.qkv = torch.nn.Linear(DIM, 3 * DIM)
        self.proj = torch.nn.Linear(DIM, DIM)
        self.head = torch.nn.Linear(DIM, CLASSES)

    def forward(self, tokens: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """tokens: [B, L]; valid: [B, L] bool (False: padding)."""
        h = self.emb(tokens)
        q, k, v = self.qkv(h).unsqueeze(1).chunk(3, dim=-1)  # one head of 128
        mask = valid[:, None, None, :]  # keys that are real tokens
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).squeeze(1)
        h = h + self.proj(a)
        w = valid.unsqueeze(-1).to(h.dtype)
        pooled = (h * w).sum(1) / w.sum(1)
        return self.head(pooled)


def batches(steps: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        n = int(torch.randint(17, 129, (1,), generator=g))
        tokens = torch.randint(1, VOCAB, (BATCH, n), generator=g)
        labels = torch.randint(0, CLASSES, (BATCH,), generator=g)
        out.append((tokens, labels))
    return out


def pad_to_bucket(tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n = tokens.shape[1]
    bucket = next(b for b in BUCKETS if b >= n)
    padded = F.pad(tokens, (0, bucket - n))  # token 0 is padding
    valid = torch.arange(bucket) < n
    return padded, valid.expand(tokens.shape[0], bucket)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tuned", action="store_true")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print the measurements as JSON")
    args = ap.parse_args()

    torch.manual_seed(0)
    model = Classifier().to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = batches(args.steps, args.seed)
    losses, distinct = [], []
    t0 = time.perf_counter()
    for tokens, labels in data:
        if args.tuned:
            tokens, valid = pad_to_bucket(tokens)
        else:
            valid = torch.ones(tokens.shape, dtype=torch.bool)
        x, m, y = tokens.to("tpu"), valid.to("tpu"), labels.to("tpu")
        loss = F.cross_entropy(model(x, m), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if args.tuned:  # a [vocab] table of tokens seen; padding (token 0) left out
            seen = torch.zeros(VOCAB, device="tpu").scatter_(0, x.flatten(), 1.0)
            distinct.append(int(seen[1:].sum().item()))
        else:
            distinct.append(torch.unique(x).numel())
        losses.append(loss.item())
    seconds = time.perf_counter() - t0
    s = torch.tpu.stats()
    result = {"tuned": args.tuned, "steps": args.steps, "seconds": seconds,
              "compiles": s["compiles"], "recompiles": s["recompiles"],
              "fallbacks": sum(s["fallbacks"].values()), "losses": losses, "distinct": distinct}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{'tuned' if args.tuned else 'first version'}: {args.steps} steps in {seconds:.2f} s, "
              f"{s['compiles']} compiles, {s['recompiles']} recompiles, "
              f"{result['fallbacks']} CPU fallbacks; last loss {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
