"""`python -m tests.conformance.model_usage`: which ATen ops still fall back to the CPU
in small transformer and vision models, ranked by how many models call them.

Every model is built offline with plain torch.nn (no downloads, no torchvision), run
forward and backward on "tpu" (generation runs under no_grad), and the fallbacks it caused
are read from torch.tpu.stats()["fallbacks"]. Each model also runs on the CPU with the
same seed and the loss is compared, so a model that is wrong on "tpu" shows up in the
table. Writes docs/op_coverage_models.md (pass --no-write to only print)."""
from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

import tpuc  # noqa: F401  (registers "tpu")

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "docs" / "op_coverage_models.md"


# ---- models -------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w


def rotary(x, pos):
    d = x.shape[-1]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = pos[:, None].float() * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.h = heads
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate, self.up = nn.Linear(d, 2 * d, bias=False), nn.Linear(d, 2 * d, bias=False)
        self.down = nn.Linear(2 * d, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        pos = torch.arange(t, device=x.device)
        q, k = rotary(q, pos), rotary(k, pos)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, vocab=64, d=32, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(LlamaBlock(d) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


def sample_top_k_top_p(logits, k=10, p=0.9, temperature=0.8):
    logits = logits / temperature
    v, _ = torch.topk(logits, k)
    logits = logits.masked_fill(logits < v[:, -1:], float("-inf"))
    sorted_logits, order = torch.sort(logits, descending=True)
    cum = torch.cumsum(F.softmax(sorted_logits, -1), -1)
    drop = cum > p
    drop[:, 1:] = drop[:, :-1].clone()
    drop[:, 0] = False
    drop = drop.scatter(1, order, drop)
    logits = logits.masked_fill(drop, float("-inf"))
    return torch.multinomial(F.softmax(logits, -1), 1)


def run_llama(dev):
    m = Llama().to(dev)
    ids = torch.randint(0, 64, (2, 12)).to(dev)
    logits = m(ids)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, 64), ids[:, 1:].reshape(-1))
    loss.backward()
    with torch.no_grad():
        seq = ids[:, :4]
        for _ in range(4):
            nxt = sample_top_k_top_p(m(seq)[:, -1])
            seq = torch.cat([seq, nxt], 1)
        seq.cpu()
    return loss


class MoE(nn.Module):
    def __init__(self, d=16, experts=4, k=2):
        super().__init__()
        self.k = k
        self.gate = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(d, 32), nn.GELU(), nn.Linear(32, d)) for _ in range(experts))

    def forward(self, x):
        probs = F.softmax(self.gate(x), -1)
        w, idx = torch.topk(probs, self.k, -1)
        w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            tok, slot = torch.where(idx == e)
            if tok.numel() == 0:
                continue
            y = expert(x.index_select(0, tok)) * w[tok, slot].unsqueeze(-1)
            out = out.index_add(0, tok, y)
        # load-balancing loss: tokens per expert through a scatter_add
        counts = torch.zeros(probs.shape[-1], device=x.device).scatter_add(
            0, idx.reshape(-1), torch.ones(idx.numel(), device=x.device))
        aux = (counts / idx.numel() * probs.mean(0)).sum()
        return out, aux


def run_moe(dev):
    m = MoE().to(dev)
    x = torch.randn(24, 16).to(dev)
    out, aux = m(x)
    loss = out.pow(2).mean() + 0.01 * aux
    loss.backward()
    return loss


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                      if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + self.short(x))


def run_resnet(dev):
    m = nn.Sequential(
        nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
        BasicBlock(8, 8, 1), BasicBlock(8, 16, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Dropout(0.0), nn.Linear(16, 10)).to(dev)
    x, y = torch.randn(2, 3, 32, 32).to(dev), torch.tensor([1, 7]).to(dev)
    loss = F.cross_entropy(m(x), y, label_smoothing=0.1)
    loss.backward()
    return loss


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.d1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.d2 = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.mid = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.up1 = nn.ConvTranspose2d(16, 16, 2, 2)
        self.u1 = nn.Sequential(nn.Conv2d(32, 8, 3, padding=1), nn.ReLU())
        self.u2 = nn.Sequential(nn.Conv2d(16, 8, 3, padding=1), nn.ReLU())
        self.out = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        c = self.mid(F.max_pool2d(b, 2))
        c = torch.cat([self.up1(c), b], 1)
        c = self.u1(c)
        c = F.interpolate(c, scale_factor=2, mode="nearest")
        c = self.u2(torch.cat([c, a], 1))
        # a second head at another resolution, bilinear both ways
        aux = F.interpolate(c, size=(20, 20), mode="bilinear", align_corners=False)
        aux = F.interpolate(aux, size=(16, 16), mode="bilinear", align_corners=True)
        return self.out(c), aux


def run_unet(dev):
    m = UNet().to(dev)
    x = torch.randn(2, 3, 16, 16).to(dev)
    seg, aux = m(x)
    target = (x[:, :1] > 0).long().squeeze(1)
    loss = F.cross_entropy(seg, target) + aux.pow(2).mean() + F.binary_cross_entropy_with_logits(
        seg[:, 1], target.float())
    loss.backward()
    return loss


class ViT(nn.Module):
    def __init__(self, d=32, patch=4, img=16, layers=2):
        super().__init__()
        self.patch = patch
        n = (img // patch) ** 2
        self.proj = nn.Linear(3 * patch * patch, d)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        p = F.unfold(x, self.patch, stride=self.patch).transpose(1, 2)  # [B, N, 3*p*p]
        t = self.proj(p)
        t = torch.cat([self.cls.expand(x.shape[0], -1, -1), t], 1) + self.pos
        t = self.enc(t)
        return self.head(self.norm(t[:, 0]))


def run_vit(dev):
    m = ViT().to(dev)
    x, y = torch.randn(2, 3, 16, 16).to(dev), torch.tensor([3, 4]).to(dev)
    loss = F.cross_entropy(m(x), y)
    loss.backward()
    return loss


def run_detection(dev):
    torch.manual_seed(1)
    backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1)).to(dev)
    cls_head, box_head = nn.Conv2d(8, 1, 1).to(dev), nn.Conv2d(8, 4, 1).to(dev)
    x = torch.randn(2, 3, 16, 16).to(dev)
    feat = backbone(x)
    scores = cls_head(feat).sigmoid().squeeze(1)            # [B, H, W]
    boxes = box_head(feat).permute(0, 2, 3, 1)              # [B, H, W, 4]
    pos = scores > 0.5
    idx = pos.nonzero()
    sel_scores = scores.masked_select(pos)
    target = torch.where(boxes.detach() > 0, torch.ones_like(boxes), torch.zeros_like(boxes))
    loss_box = F.smooth_l1_loss(boxes, target, beta=0.5) + F.huber_loss(boxes, target, delta=1.0)
    # RoI-ish crops: a sampling grid over the feature map, and a fixed-size pooled summary
    theta = torch.tensor([[[0.5, 0.0, 0.1], [0.0, 0.5, -0.1]]] * 2).to(dev)
    grid = F.affine_grid(theta, [2, 8, 7, 7], align_corners=False)
    crops = F.grid_sample(feat, grid, mode="bilinear", align_corners=False)
    pooled = F.adaptive_max_pool2d(feat, (4, 4))
    small = F.interpolate(feat, size=(8, 8), mode="bilinear", align_corners=False)
    loss = (loss_box + sel_scores.sum() * 0.01 + crops.pow(2).mean() + pooled.mean() + small.mean()
            + idx.shape[0] * 0.0)
    loss.backward()
    return loss


class GatedMLP(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.l1 = nn.Linear(d, 4 * d)
        self.act1 = nn.GLU()
        self.l2 = nn.Linear(2 * d, 2 * d)
        self.act2 = nn.PReLU(2 * d)
        self.l3 = nn.Linear(2 * d, d)
        self.act3 = nn.SiLU()
        self.l4 = nn.Linear(d, 1)

    def forward(self, x):
        return self.l4(self.act3(self.l3(self.act2(self.l2(self.act1(self.l1(x)))))))


def run_gated_mlp(dev):
    m = GatedMLP().to(dev)
    x, y = torch.randn(8, 16).to(dev), torch.randn(8, 1).to(dev)
    loss = F.huber_loss(m(x), y) + F.mse_loss(m(x), y)
    loss.backward()
    return loss


class RecSys(nn.Module):
    """Tabular/recommendation: bucketized numeric features, a max-norm embedding, ragged
    bags expanded with repeat_interleave."""

    def __init__(self):
        super().__init__()
        self.bounds = torch.linspace(-2, 2, 9)
        self.num_emb = nn.Embedding(10, 8)
        self.item_emb = nn.Embedding(50, 8, max_norm=1.0)
        self.mlp = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, num, items, lengths):
        b = torch.bucketize(num, self.bounds.to(num.device))
        f_num = self.num_emb(b).mean(1)
        seg = torch.repeat_interleave(torch.arange(lengths.numel(), device=num.device), lengths,
                                      output_size=items.numel())
        e = self.item_emb(items)
        f_items = torch.zeros(lengths.numel(), 8, device=num.device).index_add(0, seg, e)
        f_items = f_items / lengths.unsqueeze(1)
        return self.mlp(torch.cat([f_num, f_items], 1))


def run_recsys(dev):
    m = RecSys().to(dev)
    num = torch.randn(4, 3).to(dev)
    lengths = torch.tensor([2, 3, 1, 4]).to(dev)
    items = torch.randint(0, 50, (10,)).to(dev)
    loss = F.binary_cross_entropy_with_logits(m(num, items, lengths).squeeze(1),
                                              torch.tensor([1.0, 0.0, 1.0, 0.0]).to(dev))
    loss.backward()
    return loss


def run_video(dev):
    m = nn.Sequential(
        nn.Conv3d(3, 8, 3, padding=1), nn.BatchNorm3d(8), nn.ReLU(), nn.MaxPool3d(2),
        nn.Conv3d(8, 8, 3, padding=1), nn.ReLU(), nn.AvgPool3d(2), nn.AdaptiveAvgPool3d(1),
        nn.Flatten(), nn.Linear(8, 5)).to(dev)
    x, y = torch.randn(2, 3, 4, 8, 8).to(dev), torch.tensor([0, 3]).to(dev)
    loss = F.cross_entropy(m(x), y)
    loss.backward()
    return loss


MODELS: dict[str, Callable[[str], torch.Tensor]] = {
    "llama+sampling": run_llama,
    "moe": run_moe,
    "resnet": run_resnet,
    "unet": run_unet,
    "vit": run_vit,
    "detection": run_detection,
    "gated-mlp": run_gated_mlp,
    "recsys": run_recsys,
    "video-3d": run_video,
}


# ---- measuring ----------------------------------------------------------------------

def measure(name: str, fn: Callable[[str], torch.Tensor]) -> tuple[dict[str, int], str]:
    """The fallbacks one model causes on "tpu", and its status against the CPU."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        ref = float(fn("cpu"))
        before = dict(torch.tpu.stats()["fallbacks"])
        torch.manual_seed(0)
        try:
            got = float(fn("tpu"))
        except Exception as e:  # noqa: BLE001 - reported in the table
            status = f"error: {type(e).__name__}: {str(e).splitlines()[0][:80]}"
            got = None
        after = dict(torch.tpu.stats()["fallbacks"])
    if got is not None:
        # sampling draws from the tpu generator, so only the loss (before sampling) is compared
        ok = math.isclose(got, ref, rel_tol=1e-3, abs_tol=1e-4)
        status = "loss matches CPU" if ok else f"loss {got:.6g} vs CPU {ref:.6g}"
    return {k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)}, status


# Why an op still falls back (shown under the ranking when it is listed).
NOTES = {
    "aten::nonzero": "data-dependent output size: the Meta kernel cannot size it, so the glue would have to "
                     "read the count back from the device first",
    "aten::masked_select": "data-dependent output size (as nonzero)",
    "aten::convolution": "3-D convolution (the 3-D model): nn_conv.c lowers 1-D/2-D",
    "aten::convolution_backward": "3-D convolution, as above",
}


def table(results: dict[str, tuple[dict[str, int], str]]) -> str:
    per_op: dict[str, list[str]] = {}
    calls: dict[str, int] = {}
    for model, (fb, _) in results.items():
        for op, n in fb.items():
            per_op.setdefault(op, []).append(model)
            calls[op] = calls.get(op, 0) + n
    ranked = sorted(per_op, key=lambda op: (-len(per_op[op]), -calls[op], op))
    lines = [
        "# Ops that fall back to the CPU in small models",
        "",
        "Generated by `python -m tests.conformance.model_usage` (tests/conformance/model_usage.py);",
        "do not edit by hand. Each model is built offline with plain torch.nn, runs forward and",
        "backward on \"tpu\" (the llama model also generates with top-k/top-p sampling), and the ops",
        "counted in `torch.tpu.stats()[\"fallbacks\"]` during its run are listed. Ranked by the",
        "number of models that call the op, then by calls.",
        "",
        f"torch {torch.__version__}.",
        "",
        "| model | fallbacks (ops) | fallback calls | status |",
        "|---|---:|---:|---|",
    ]
    for model, (fb, status) in results.items():
        lines.append(f"| {model} | {len(fb)} | {sum(fb.values())} | {status} |")
    lines += ["", "| rank | op | models | calls | in |", "|---:|---|---:|---:|---|"]
    for i, op in enumerate(ranked, 1):
        lines.append(f"| {i} | `{op}` | {len(per_op[op])} | {calls[op]} | {', '.join(per_op[op])} |")
    if not ranked:
        lines.append("| | (none) | | | |")
    notes = [op for op in ranked if op in NOTES]
    if notes:
        lines += ["", "Why these still fall back:", ""]
        lines += [f"- `{op}`: {NOTES[op]}" for op in notes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--models", help="comma-separated subset of: " + ", ".join(MODELS))
    args = ap.parse_args(argv)
    names = args.models.split(",") if args.models else list(MODELS)
    results = {}
    for name in names:
        t0 = time.time()
        results[name] = measure(name, MODELS[name])
        print(f"{name}: {len(results[name][0])} ops fell back, {results[name][1]} "
              f"({time.time() - t0:.1f}s)", file=sys.stderr)
    text = table(results)
    print(text)
    if not args.no_write and not args.models:
        OUT.write_text(text)
        print(f"wrote {OUT.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
