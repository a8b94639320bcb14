"""Training-loop patterns users write that the op tests and the random differential tester
(tests/difftest) do not generate, each run several steps on "tpu" and on the CPU with the
same data, in float64, and every observed value compared: tied weights, an EMA copy updated in
place, gradient accumulation into kept gradients (``zero_grad(set_to_none=False)``) with
clipping, spectral norm (its power iteration updates buffers in place), a gradient penalty
(``create_graph=True``), a second backward over a retained graph after a ``.data`` edit of a
saved weight, gradient hooks (tensor, module output, post-accumulate), activation
checkpointing (reentrant and not, with an in-place ReLU), BatchNorm switching between train
and eval, in-place writes through views of a buffer, freezing, ``load_state_dict`` of a model
and its optimizer mid-run and ``.data`` replacement, an LR scheduler, and indexed writes with
repeated indices. Strict and fused mode; the compiled-mode cases wrap the model in
``torch.compile(backend="tpu")``.

Bound: both sides compute in float64, so they differ only by summation order (a relative
1e-15 per reduction, grown by a few steps); 1e-10 leaves five orders of magnitude for that,
while a value read before an in-place update, or an update lost, is off by the update's size
(1e-3 relative or more here)."""
from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import tpuc  # noqa: F401

Obs = dict[str, object]
F64 = torch.float64


def _randn(dev: str, seed: int = 1) -> Callable[..., torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return lambda *shape: torch.randn(*shape, generator=g, dtype=F64).to(dev)


def _wrap(dev: str, compiled: bool, m: nn.Module) -> Callable[..., torch.Tensor]:
    return torch.compile(m, backend="tpu") if compiled and dev == "tpu" else m


def _state(out: Obs, m: nn.Module, tag: str = "") -> None:
    for k, v in m.state_dict().items():
        out[f"{k}{tag}"] = v.detach().clone()


def tied(dev: str, compiled: bool = False) -> Obs:
    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.head = nn.Linear(16, 50, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            logits = self.head(torch.tanh(self.emb(ids)))
            return F.cross_entropy(logits.flatten(0, 1), ids.flatten())

    torch.manual_seed(3)
    m = LM().to(dev, F64)
    f = _wrap(dev, compiled, m)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(5)
    out: Obs = {}
    for i in range(4):
        loss = f(torch.randint(0, 50, (8, 7), generator=g).to(dev))
        opt.zero_grad()
        loss.backward()
        opt.step()
        out[f"loss{i}"] = loss.detach()
        loss.item()  # a host read between steps
        out[f"weight{i}"] = m.emb.weight.detach().clone()
    return out


def ema(dev: str, compiled: bool = False) -> Obs:
    def make() -> nn.Module:
        return nn.Sequential(nn.Linear(12, 20), nn.GELU(), nn.Linear(20, 4)).to(dev, F64)

    torch.manual_seed(3)
    m, avg = make(), make()
    avg.load_state_dict(m.state_dict())
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    r = _randn(dev)
    out: Obs = {}
    for i in range(4):
        x = r(9, 12)
        loss = m(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            for pa, p in zip(avg.parameters(), m.parameters()):
                if i % 2:
                    pa.lerp_(p, 0.1)
                else:
                    pa.mul_(0.9).add_(p, alpha=0.1)
            out[f"avg_out{i}"] = avg(x).clone()
    _state(out, avg)
    return out


def accumulate(dev: str, compiled: bool = False) -> Obs:
    torch.manual_seed(3)
    m = nn.Sequential(nn.Linear(10, 33), nn.Tanh(), nn.Linear(33, 10)).to(dev, F64)
    f = _wrap(dev, compiled, m)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2, foreach=True)
    r = _randn(dev)
    out: Obs = {}
    for i in range(3):
        opt.zero_grad(set_to_none=False)
        for j in range(3):
            (f(r(5, 10)).sin().sum() / 3).backward()
            out[f"grad{i}.{j}"] = m[0].weight.grad.clone()
        out[f"norm{i}"] = nn.utils.clip_grad_norm_(m.parameters(), 0.5)
        opt.step()
        m[2].weight.data.mul_(0.9)
    _state(out, m)
    return out


def spectral(dev: str, compiled: bool = False) -> Obs:
    torch.manual_seed(3)
    lin = nn.utils.parametrizations.spectral_norm(nn.Linear(8, 6).to(F64)).to(dev)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    r = _randn(dev)
    out: Obs = {}
    for i in range(4):
        loss = lin(r(5, 8)).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        out[f"loss{i}"] = loss.detach()
    lin.eval()
    out["eval"] = lin(r(3, 8)).detach()
    _state(out, lin)
    return out


def penalty(dev: str, compiled: bool = False) -> Obs:
    torch.manual_seed(3)
    m = nn.Sequential(nn.Linear(6, 16), nn.Softplus(), nn.Linear(16, 1)).to(dev, F64)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    r = _randn(dev)
    out: Obs = {}
    for i in range(3):
        x = r(7, 6).requires_grad_()
        y = m(x).sum()
        gx, = torch.autograd.grad(y, x, create_graph=True)
        loss = y + ((gx.norm(dim=1) - 1) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        out[f"gx{i}"] = gx.detach()
        out[f"loss{i}"] = loss.detach()
    _state(out, m)
    return out


def retained(dev: str, compiled: bool = False) -> Obs:
    torch.manual_seed(3)
    lin = nn.Linear(6, 5).to(dev, F64)
    x = _randn(dev)(4, 6).requires_grad_()
    y = lin(x).pow(2).sum()
    y.backward(retain_graph=True)
    out: Obs = {"gx1": x.grad.clone(), "gw1": lin.weight.grad.clone()}
    lin.weight.data.mul_(3.0)  # the graph saved this weight: its second backward sees the edit
    y.backward()
    out.update(gx2=x.grad.clone(), gw2=lin.weight.grad.clone())
    return out


def hooks(dev: str, compiled: bool = False) -> Obs:
    torch.manual_seed(3)
    m = nn.Sequential(nn.Linear(5, 9), nn.ReLU(), nn.Linear(9, 3)).to(dev, F64)
    m[0].weight.register_hook(lambda g: g * 2)

    def halve_output_grad(mod: nn.Module, inp: tuple[torch.Tensor], o: torch.Tensor) -> None:
        o.register_hook(lambda g: g * 0.5)

    m[1].register_forward_hook(halve_output_grad)

    def triple(p: torch.Tensor) -> None:
        p.grad.mul_(3)

    m[2].weight.register_post_accumulate_grad_hook(triple)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    r = _randn(dev)
    out: Obs = {}
    for i in range(3):
        loss = m(r(4, 5)).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        out[f"grad0.{i}"] = m[0].weight.grad.clone()
        out[f"grad2.{i}"] = m[2].weight.grad.clone()
        opt.step()
    return out


def checkpointed(dev: str, compiled: bool = False) -> Obs:
    torch.manual_seed(3)
    blocks = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.ReLU(inplace=True), nn.LayerNorm(8))
                           for _ in range(3)).to(dev, F64)
    opt = torch.optim.AdamW(blocks.parameters(), lr=1e-2)
    r = _randn(dev)
    out: Obs = {}
    for i in range(3):
        h = r(6, 8).requires_grad_()
        for b in blocks:
            h = checkpoint(b, h, use_reentrant=(i % 2 == 0)) + h
        loss = h.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        out[f"loss{i}"] = loss.detach()
    _state(out, blocks)
    return out


def batchnorm(dev: str, compiled: bool = False) -> Obs:
    torch.manual_seed(3)
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                      nn.Linear(64, 2)).to(dev, F64)
    f = _wrap(dev, compiled, m)
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    r = _randn(dev)
    out: Obs = {}
    for i in range(4):
        m.train(i != 2)
        loss = f(r(5, 3, 6, 6)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        out[f"loss{i}"] = loss.detach()
        with torch.no_grad():
            m[0].weight[0].mul_(0.5)
    _state(out, m)
    return out


def views(dev: str, compiled: bool = False) -> Obs:
    w = _randn(dev)(6, 5).requires_grad_()
    out: Obs = {}
    for i in range(3):
        buf = torch.zeros(5, 8, dtype=F64, device=dev)
        v = buf.t()
        v[1:7].add_(w)
        buf.diagonal().mul_(2)
        buf[:, ::2].sub_(buf[:, 1::2])
        buf.unsqueeze_(0).squeeze_(0)
        y = (buf * buf.flip(1)).sum() + v.sum()
        g, = torch.autograd.grad(y, w)
        out[f"buf{i}"] = buf.detach().clone()
        out[f"grad{i}"] = g
        with torch.no_grad():
            w.sub_(0.1 * g)
            w[::2].mul_(-1)
    return out


def freeze_and_load(dev: str, compiled: bool = False) -> Obs:
    torch.manual_seed(3)
    m = nn.Sequential(nn.Linear(7, 11), nn.SiLU(), nn.Linear(11, 7)).to(dev, F64)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, foreach=False)
    r = _randn(dev)
    out: Obs = {}
    for i in range(5):
        if i == 1:
            m[0].requires_grad_(False)
        if i == 2:
            snap = {k: v.clone() for k, v in m.state_dict().items()}
            opt_snap = opt.state_dict()
        if i == 3:
            m.load_state_dict(snap)
            opt.load_state_dict(opt_snap)
            m[0].requires_grad_(True)
        if i == 4:
            m[2].weight.data = m[2].weight.data * 0.5
        loss = m(r(4, 7)).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        out[f"loss{i}"] = loss.detach()
        _state(out, m, f"@{i}")
    return out


def scheduled(dev: str, compiled: bool = False) -> Obs:
    torch.manual_seed(3)
    m = nn.Linear(6, 3).to(dev, F64)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.2, total_steps=10)
    r = _randn(dev)
    out: Obs = {}
    for i in range(4):
        loss = m(r(3, 6)).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        out[f"weight{i}"] = m.weight.detach().clone()
    return out


def indexed(dev: str, compiled: bool = False) -> Obs:
    w = _randn(dev)(10, 4).requires_grad_()
    idx = torch.tensor([1, 3, 3, 0, 9, 1], device=dev)
    out: Obs = {}
    for i in range(3):
        t = torch.zeros(10, 4, dtype=F64, device=dev)
        t.index_put_((idx,), w[idx] * 2, accumulate=True)
        t.index_add_(0, idx, w[:6])
        t[idx] = t[idx] + 1  # repeated indices: equal values, so any write order agrees
        rows = idx[:, None].expand(6, 4)
        s = t.scatter_add(0, rows, w[:6]).gather(0, rows)
        g, = torch.autograd.grad(s.sum() + t.pow(2).sum(), w)
        out[f"t{i}"] = t.detach()
        out[f"grad{i}"] = g
        with torch.no_grad():
            w.add_(g, alpha=-0.01)
    return out


EAGER = [tied, ema, accumulate, spectral, penalty, retained, hooks, checkpointed, batchnorm,
         views, freeze_and_load, scheduled, indexed]
COMPILED = [tied, accumulate, batchnorm]


def _compare(got: Obs, ref: Obs) -> None:
    assert got.keys() == ref.keys()
    for k, r in ref.items():
        assert isinstance(r, torch.Tensor)
        t = got[k]
        assert isinstance(t, torch.Tensor) and t.device.type == "tpu", (k, t)
        t = t.detach().cpu()
        assert t.shape == r.shape, (k, t.shape, r.shape)
        scale = r.abs().max().clamp_min(1e-30) if r.numel() else 1.0
        err = ((t - r).abs().max() / scale).item() if r.numel() else 0.0
        assert err <= 1e-10, f"{k}: relative error {err:.3g} against the CPU"


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("scenario", EAGER, ids=lambda s: s.__name__)
def test_eager_matches_cpu(scenario: Callable[..., Obs], mode: str) -> None:
    ref = scenario("cpu")
    with torch.tpu.eager_mode(mode):
        got = scenario("tpu")
    _compare(got, ref)


@pytest.mark.parametrize("scenario", COMPILED, ids=lambda s: s.__name__)
def test_compiled_matches_cpu(scenario: Callable[..., Obs]) -> None:
    ref = scenario("cpu")
    got = scenario("tpu", compiled=True)
    _compare(got, ref)


def test_inplace_edit_of_a_saved_weight_is_refused_as_on_the_cpu() -> None:
    """An in-place edit (not through .data) of a weight the graph saved makes the backward
    fail on the CPU (autograd's version counter); "tpu" must refuse too, not use either value."""
    for dev in ("cpu", "tpu"):
        lin = nn.Linear(6, 5).to(dev, F64)
        y = lin(_randn(dev)(4, 6).requires_grad_()).sum()
        with torch.no_grad():
            lin.weight.add_(1.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()
