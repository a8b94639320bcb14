"""Runs a generated program (gen.py) on the CPU and on "tpu", compares, shrinks.

Every program runs in float64 on the CPU (the truth), in float32 on the CPU (how much
float32 rounding this computation amplifies on this machine) and in float32 on "tpu" in
each mode asked for (strict, fused, compiled). Every observation (loss, gradients,
parameters, intermediate values, every step) is checked with the derived bound of
docs/testing.md:

    |tpu - f64| / max|f64|  <=  FACTOR * |cpu32 - f64| / max|f64|
                                 + (FLOOR_ULPS + SUM_ULPS * sqrt(n)) * eps32/2
                                 + (n / m - 1) * eps32/2

where n is the element count of the program's largest tensor and m the observation's. A
float32 sum of random-signed terms (a dot) taken in another order errs by about sqrt(n) ulps
(n bounds any reduction's length); a sum reducing n elements to m outputs adds at most n/m
terms per output, and for same-signed terms (a broadcast's gradient: 12,192 equal terms for a
scalar added to a [127, 96] tensor) XLA's blocked order errs systematically, up to the
classical (k - 1) ulps of k terms in any order. The CPU's own pairwise sums can be nearly
exact, so its error alone does not show either spread.

A stale or missing term is off by far more than any reordering of float32 sums; a
reordering never is. A failure on "tpu" where the CPU ran is a finding too; a program the
CPU rejects is not a test of anything and is skipped.
"""
from __future__ import annotations

import copy
import math
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .gen import Program

FACTOR = 8.0
FLOOR_ULPS = 64.0
SUM_ULPS = 8.0  # times sqrt(n): a float32 sum of n terms in another order (below)
EPS32 = torch.finfo(torch.float32).eps / 2
MODES = ("strict", "fused", "compiled")


# ---- blocks of train programs -----------------------------------------------------------------

class Attention(nn.Module):
    """Causal self-attention with one fused qkv projection (as Llama/GPT code writes it)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead, t, d = x.shape[:-2], x.shape[-2], x.shape[-1]
        h = x.reshape(-1, t, d)
        q, k, v = self.qkv(h).split(d, dim=-1)
        q, k, v = (z.view(z.shape[0], t, self.heads, d // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(o.transpose(1, 2).reshape(-1, t, d)).reshape(*lead, t, d)


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class RMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


class Conv1d(nn.Module):
    """A conv over the rows (sequence) dimension, channels last outside."""

    def __init__(self, dim: int, k: int):
        super().__init__()
        self.conv = nn.Conv1d(dim, dim, k, padding=k // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead, t, d = x.shape[:-2], x.shape[-2], x.shape[-1]
        y = self.conv(x.reshape(-1, t, d).transpose(1, 2)).transpose(1, 2)
        return y.reshape(*lead, t, d)


class Residual(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Act(nn.Module):
    def __init__(self, name: str):
        super().__init__()
        self.fn = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu, "tanh": torch.tanh}[name]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def block(spec: list[Any]) -> nn.Module:
    kind = spec[0]
    if kind == "linear":
        return nn.Linear(spec[1], spec[2], bias=spec[3])
    if kind == "embedding":
        return nn.Embedding(spec[1], spec[2])
    if kind == "attn":
        return Attention(spec[1], spec[2])
    if kind == "swiglu":
        return SwiGLU(spec[1], spec[2])
    if kind == "norm":
        return nn.LayerNorm(spec[1]) if spec[2] == "layer" else RMSNorm(spec[1])
    if kind == "act":
        return Act(spec[1])
    if kind == "conv1d":
        return Conv1d(spec[1], spec[2])
    if kind == "residual":
        return Residual(spec[1], spec[2])
    raise ValueError(f"unknown block {kind!r}")


# ---- running ----------------------------------------------------------------------------------

Obs = dict[str, torch.Tensor]


def _to_host(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", torch.float64).clone()


def _set_mode(device: str, mode: str) -> None:
    if device == "tpu":
        torch.tpu.set_eager_mode("fused" if mode == "fused" else "strict")


def run_train(prog: Program, device: str, dtype: torch.dtype, mode: str) -> Obs:
    obs: Obs = {}
    g = torch.Generator().manual_seed(prog["seed"])
    torch.manual_seed(prog["seed"])
    model = nn.Sequential(*[block(b) for b in prog["blocks"]]).double()
    model = model.to(device, dtype)
    lead = list(prog["batch_shape"])
    if prog["tokens"]:
        vocab = prog["blocks"][0][1]
        xs = [torch.randint(0, vocab, (*lead, prog["rows"]), generator=g)
              for _ in prog["steps"]]
    else:
        xs = [torch.randn(*lead, prog["rows"], prog["dim"], generator=g, dtype=torch.float64)
              for _ in prog["steps"]]
    fwd: Callable[[torch.Tensor], torch.Tensor] = model
    if mode == "compiled" and device == "tpu":
        torch._dynamo.reset()
        fwd = torch.compile(model, backend="tpu")
    name, kw = prog["optim"]
    opt_cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[name]
    opt = opt_cls(model.parameters(), lr=prog["lr"], **kw)
    params = list(model.named_parameters())
    first_w = next((p for n, p in params if p.dim() == 2), params[0][1])
    accumulate = False
    for i, actions in enumerate(prog["steps"]):
        if not accumulate:
            opt.zero_grad(set_to_none=True)
        accumulate = False
        x = xs[i].to(device) if prog["tokens"] else xs[i].to(device, dtype).requires_grad_(True)
        out = fwd(x)
        target = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).reshape(out.shape)
        loss = ((out - target.to(device, dtype)) ** 2).mean()
        loss.backward()
        obs[f"s{i}.loss"] = _to_host(loss)
        if not prog["tokens"]:
            obs[f"s{i}.x.grad"] = _to_host(x.grad)
        if "item_loss" in actions:
            loss.item()
        if "read_grad" in actions and first_w.grad is not None:
            first_w.grad.cpu()
        if "read_param" in actions:
            first_w.cpu()
        if "clip" in actions:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for n, p in params:
            if p.grad is not None:
                obs[f"s{i}.grad.{n}"] = _to_host(p.grad)
        opt.step()
        with torch.no_grad():
            if "param_add" in actions:
                first_w.add_(0.01)
            if "param_mul" in actions:
                first_w.mul_(0.99)
            if "slice_zero" in actions:
                first_w[:1].zero_()
            if "slice_add" in actions and first_w.shape[0] > 1:
                first_w[1:].add_(0.01)
        if "grad_none" in actions:
            accumulate = True  # the next step adds to these gradients
        for n, p in params:
            obs[f"s{i}.param.{n}"] = _to_host(p)
    if device == "tpu":
        torch.tpu.synchronize()
    return obs


def body_source(prog: Program) -> str:
    names = [l[0] for l in prog["leaves"]]
    lines = [f"def body({', '.join(names)}):"]
    lines += ["    " + b for b in prog["body"]]
    lines.append("    return {k: v for k, v in locals().items() if isinstance(v, torch.Tensor) "
                 f"and k not in {names!r}}}")
    return "\n".join(lines)


def run_ops(prog: Program, device: str, dtype: torch.dtype, mode: str) -> Obs:
    obs: Obs = {}
    g = torch.Generator().manual_seed(prog["seed"])
    leaves = [torch.randn(tuple(shape), generator=g, dtype=torch.float64).to(device, dtype)
              .requires_grad_(True) for _, shape in prog["leaves"]]
    ns: dict[str, Any] = {"torch": torch}
    exec(body_source(prog), ns)
    fn = ns["body"]
    if mode == "compiled" and device == "tpu":
        torch._dynamo.reset()
        fn = torch.compile(fn, backend="tpu")
    for i, action in enumerate(prog["steps"]):
        for leaf in leaves:
            leaf.grad = None
        outs = fn(*leaves)
        loss = None
        for k, (name, v) in enumerate(sorted(outs.items())):
            obs[f"s{i}.{name}"] = _to_host(v)
            if v.requires_grad and v.is_floating_point():
                term = (v * (1.0 / (k + 1))).sum()
                loss = term if loss is None else loss + term
        if loss is not None:
            loss.backward()
        for (name, _), leaf in zip(prog["leaves"], leaves):
            if leaf.grad is not None:
                obs[f"s{i}.{name}.grad"] = _to_host(leaf.grad)
        with torch.no_grad():
            for leaf in leaves:
                if action == "add":
                    leaf.add_(0.125)
                elif action == "mul":
                    leaf.mul_(0.75)
                elif action == "slice" and leaf.dim() > 0 and leaf.shape[0] > 0:
                    leaf[:1].add_(1.0)
    if device == "tpu":
        torch.tpu.synchronize()
    return obs


def run(prog: Program, device: str, dtype: torch.dtype, mode: str = "strict") -> Obs:
    _set_mode(device, mode)
    try:
        fn = run_train if prog["kind"] == "train" else run_ops
        return fn(prog, device, dtype, mode)
    finally:
        if device == "tpu":
            torch.tpu.set_eager_mode("strict")


# ---- comparing --------------------------------------------------------------------------------

@dataclass
class Finding:
    mode: str
    what: str          # "mismatch" | "error" | "missing"
    name: str          # the first observation that failed
    detail: str
    prog: Program = field(default_factory=dict)

    def summary(self) -> str:
        return f"[{self.mode}] {self.what} at {self.name}: {self.detail}"


def _rel(x: torch.Tensor, exact: torch.Tensor) -> float:
    fin = torch.isfinite(exact)
    if not fin.any():
        return 0.0
    scale = exact[fin].abs().max().clamp_min(1e-30)
    return ((x[fin] - exact[fin]).abs().max() / scale).item()


def largest(prog: Program, ref: Obs) -> int:
    """Elements in the program's largest tensor (observed, or a train program's activation)."""
    n = max([v.numel() for v in ref.values()] + [1])
    if prog.get("kind") == "train":
        widths = [x for b in prog["blocks"] for x in b[1:] if isinstance(x, int) and x > 0]
        n = max(n, prog["rows"] * math.prod(prog["batch_shape"]) * 3 * max(widths + [1]))
    return n


def compare(dev: Obs, cpu: Obs, ref: Obs, n: int = 1) -> tuple[str, str] | None:
    """The first observation where `dev` breaks the bound, as (name, detail), else None;
    n: the element count of the program's largest tensor."""
    n = max([v.numel() for v in ref.values()] + [n])
    floor = (FLOOR_ULPS + SUM_ULPS * math.sqrt(n)) * EPS32
    for name, exact in ref.items():
        if name not in cpu:
            continue
        if name not in dev:
            return name, "not produced on tpu"
        got, c32 = dev[name], cpu[name]
        if got.shape != exact.shape:
            return name, f"shape {tuple(got.shape)} vs {tuple(exact.shape)}"
        if got.numel() == 0:
            continue
        # non-finite values: where the CPU's float32 agrees with float64, tpu must too
        agree = torch.isfinite(c32) == torch.isfinite(exact)
        if (agree & (torch.isfinite(got) != torch.isfinite(exact))).any():
            return name, "non-finite values where the CPU has finite ones (or the reverse)"
        mask = torch.isfinite(exact) & torch.isfinite(c32) & torch.isfinite(got)
        if not mask.any():
            continue
        e_dev = _rel(got[mask], exact[mask])
        e_cpu = _rel(c32[mask], exact[mask])
        bound = FACTOR * e_cpu + floor + max(n / max(got.numel(), 1) - 1, 0) * EPS32
        if not e_dev <= bound:
            return name, f"error {e_dev:.3g} vs the CPU's {e_cpu:.3g} (bound {bound:.3g})"
    return None


def check(prog: Program, modes: tuple[str, ...] = MODES) -> list[Finding] | None:
    """Findings of one program (empty: it passed); None when the CPU rejects it."""
    try:
        ref = run(prog, "cpu", torch.float64)
        cpu = run(prog, "cpu", torch.float32)
    except Exception:  # noqa: BLE001 — a program the CPU rejects tests nothing
        return None
    found = []
    for mode in modes:
        try:
            dev = run(prog, "tpu", torch.float32, mode)
        except Exception as e:  # noqa: BLE001
            tb = traceback.format_exception_only(type(e), e)[-1].strip()
            found.append(Finding(mode, "error", "-", tb[:300], prog))
            continue
        bad = compare(dev, cpu, ref, largest(prog, ref))
        if bad:
            found.append(Finding(mode, "mismatch", bad[0], bad[1], prog))
    return found


# ---- shrinking --------------------------------------------------------------------------------

def _fails(prog: Program, mode: str) -> bool:
    r = check(prog, (mode,))
    return bool(r)


def _candidates(prog: Program) -> list[Program]:
    """Smaller programs: one list item dropped, or one size made smaller."""
    out = []
    keys = ["steps", "blocks"] if prog["kind"] == "train" else ["body", "steps", "leaves"]
    for key in keys:
        items = prog[key]
        for i in range(len(items)):
            if key == "steps" and len(items) <= 1:
                break
            p = copy.deepcopy(prog)
            del p[key][i]
            out.append(p)
    if prog["kind"] == "train":
        for i, acts in enumerate(prog["steps"]):
            for a in acts:
                p = copy.deepcopy(prog)
                p["steps"][i].remove(a)
                out.append(p)
        if prog["batch_shape"]:
            p = copy.deepcopy(prog)
            p["batch_shape"] = []
            p["rows"] = prog["rows"] * math.prod(prog["batch_shape"])
            out.append(p)
    return out


def shrink(prog: Program, mode: str, budget: int = 60) -> Program:
    """Greedy delta debugging: keep any smaller program that still fails in `mode`."""
    tries = 0
    progress = True
    while progress and tries < budget:
        progress = False
        for cand in _candidates(prog):
            tries += 1
            if _fails(cand, mode):
                prog = cand
                progress = True
                break
            if tries >= budget:
                break
    return prog
