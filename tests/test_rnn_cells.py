"""nn.LSTM, nn.GRU and their cells on "tpu" (csrc/torch/rnn_cells.cpp).

ATen's recurrent layers call the fused cell kernels _thnn_fused_lstm_cell and
_thnn_fused_gru_cell (and their backward kernels) for a PrivateUse1 input, kernels
PyTorch has for CUDA only; before tpuc had its own, nn.LSTM and nn.GRU raised on
"tpu". Each result here is checked against the same module in float64 on the CPU:
exactly as float64 on "tpu" (to a few ulps of float64), and in float32 within a bound
derived from the CPU's own float32 error against that reference."""
from __future__ import annotations

from typing import Callable

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import tpuc  # noqa: F401

EPS32 = torch.finfo(torch.float32).eps
EPS64 = torch.finfo(torch.float64).eps

CONFIGS = [
    ("LSTM", {}),
    ("LSTM", {"num_layers": 2, "batch_first": True}),
    ("LSTM", {"bidirectional": True}),
    ("LSTM", {"proj_size": 3}),
    ("LSTM", {"bias": False}),
    ("GRU", {}),
    ("GRU", {"num_layers": 2, "batch_first": True}),
    ("GRU", {"bidirectional": True}),
    ("GRU", {"bias": False}),
]


def _loss(out: tuple) -> torch.Tensor:
    """Every output counts, each with its own weight (y, h_n and, for LSTM, c_n)."""
    y, h = out
    hs = h if isinstance(h, tuple) else (h,)
    total = y.pow(2).sum()
    for k, t in enumerate(hs):
        total = total + (k + 2) * t.sum()
    return total


def _run(make: Callable[[], torch.nn.Module], state: dict, x: torch.Tensor,
         device: str, dtype: torch.dtype) -> list[torch.Tensor]:
    """Outputs, then the gradients of the input and of every parameter, on the CPU in float64."""
    m = make()
    m.load_state_dict(state)
    m = m.to(device, dtype)
    xx = x.detach().to(device, dtype).clone().requires_grad_()
    out = m(xx)
    _loss(out).backward()
    y, h = out
    hs = list(h) if isinstance(h, tuple) else [h]
    res = [y, *hs, xx.grad] + [p.grad for p in m.parameters()]
    return [t.detach().cpu().double() for t in res]


def _bound(ref: torch.Tensor, cpu32: torch.Tensor) -> float:
    # "tpu" may round differently from the CPU: 4x the CPU's own float32 error against
    # float64, plus a few ulps of the largest magnitude
    return 4 * (cpu32 - ref).abs().max().item() + 16 * EPS32 * ref.abs().max().item()


@pytest.mark.parametrize("kind,kw", CONFIGS, ids=[f"{k}-{'-'.join(map(str, kw)) or 'default'}"
                                                   for k, kw in CONFIGS])
def test_layer_matches_the_cpu_forward_and_backward(kind: str, kw: dict) -> None:
    torch.manual_seed(0)
    cls = getattr(torch.nn, kind)
    make = lambda: cls(4, 5, **kw)  # noqa: E731
    state = make().state_dict()
    x = torch.randn(6, 3, 4, dtype=torch.float64)
    ref = _run(make, state, x, "cpu", torch.float64)
    got64 = _run(make, state, x, "tpu", torch.float64)
    cpu32 = _run(make, state, x, "cpu", torch.float32)
    got32 = _run(make, state, x, "tpu", torch.float32)
    assert len(ref) == len(got64) == len(got32)
    for i, (r, g64, c32, g32) in enumerate(zip(ref, got64, cpu32, got32)):
        assert g64.shape == r.shape, i
        err64 = (g64 - r).abs().max().item()
        assert err64 <= 64 * EPS64 * max(1.0, r.abs().max().item()), (i, err64)
        err32 = (g32 - r).abs().max().item()
        assert err32 <= _bound(r, c32), (i, err32, _bound(r, c32))


def _pair(kind: str, *args, **kw) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The module in float64 on the CPU and a copy in float64 on "tpu"."""
    m = getattr(torch.nn, kind)(*args, **kw).double()
    mt = getattr(torch.nn, kind)(*args, **kw)
    mt.load_state_dict(m.state_dict())
    return m, mt.to("tpu", torch.float64)


def _assert_close64(got: torch.Tensor, want: torch.Tensor) -> None:
    """float64 on both sides: a few ulps of the magnitude."""
    assert (got - want).abs().max().item() <= 64 * EPS64 * max(1.0, want.abs().max().item())


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell"])
def test_cell_module_with_a_given_state(kind: str) -> None:
    torch.manual_seed(1)
    m, mt = _pair(kind, 4, 5)
    x = torch.randn(3, 4, dtype=torch.float64)
    h0 = torch.randn(3, 5, dtype=torch.float64)
    state = (h0, h0.flip(0)) if kind == "LSTMCell" else h0

    def grads(mod: torch.nn.Module, dev: str) -> list[torch.Tensor]:
        xx = x.detach().to(dev).clone().requires_grad_()
        ss = tuple(s.to(dev).clone().requires_grad_() for s in state) if isinstance(state, tuple) \
            else state.to(dev).clone().requires_grad_()
        out = mod(xx, ss)
        outs = out if isinstance(out, tuple) else (out,)
        sum((k + 1) * o.pow(2).sum() for k, o in enumerate(outs)).backward()
        leaves = [xx, *(ss if isinstance(ss, tuple) else (ss,))]
        return [o.detach().cpu() for o in outs] + [t.grad.cpu() for t in leaves] + \
            [p.grad.cpu() for p in mod.parameters()]

    for r, g in zip(grads(m, "cpu"), grads(mt, "tpu")):
        _assert_close64(g, r)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_double_backward_through_the_layer(kind: str) -> None:
    """create_graph=True: autograd's second derivative goes through ATen's differentiable
    cell backward, built from the device's ops."""
    torch.manual_seed(2)
    m, mt = _pair(kind, 4, 5)
    x = torch.randn(3, 2, 4, dtype=torch.float64)

    def second(mod: torch.nn.Module, dev: str) -> tuple[torch.Tensor, torch.Tensor]:
        xx = x.detach().to(dev).clone().requires_grad_()
        g, = torch.autograd.grad(mod(xx)[0].pow(2).sum(), xx, create_graph=True)
        g.pow(2).sum().backward()
        return g.detach().cpu(), xx.grad.cpu()

    for r, g in zip(second(m, "cpu"), second(mt, "tpu")):
        _assert_close64(g, r)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_packed_sequences(kind: str) -> None:
    torch.manual_seed(3)
    m, mt = _pair(kind, 4, 5, batch_first=True)
    x = torch.randn(3, 6, 4, dtype=torch.float64)
    lengths = torch.tensor([6, 4, 2])
    ref, _ = pad_packed_sequence(m(pack_padded_sequence(x, lengths, batch_first=True))[0],
                                 batch_first=True)
    got, _ = pad_packed_sequence(mt(pack_padded_sequence(x.to("tpu"), lengths, batch_first=True))[0],
                                 batch_first=True)
    assert got.device.type == "tpu"
    _assert_close64(got.cpu(), ref)


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_training_steps_follow_the_float64_run(kind: str, mode: str) -> None:
    """Four AdamW steps, the parameters updated in place between them: float32 on "tpu" stays
    within the bound that float32 on the CPU sets against float64, step after step."""
    torch.manual_seed(4)
    cls = getattr(torch.nn, kind)
    init = cls(8, 16, num_layers=2, batch_first=True).state_dict()
    x = torch.randn(4, 5, 8, dtype=torch.float64)

    def train(dev: str, dtype: torch.dtype) -> list[list[torch.Tensor]]:
        m = cls(8, 16, num_layers=2, batch_first=True)
        m.load_state_dict(init)
        m = m.to(dev, dtype)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        xx = x.to(dev, dtype)
        seen = []
        for _ in range(4):
            m(xx)[0].pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            seen.append([p.detach().cpu().double() for p in m.parameters()])
        return seen

    ref = train("cpu", torch.float64)
    cpu32 = train("cpu", torch.float32)
    if mode == "fused":
        torch.tpu.set_eager_mode("fused")
    try:
        got = train("tpu", torch.float32)
    finally:
        torch.tpu.set_eager_mode("strict")
    for step, (r, c, g) in enumerate(zip(ref, cpu32, got)):
        for k, (rp, cp, gp) in enumerate(zip(r, c, g)):
            assert not torch.equal(rp, init[list(init)[k]].double()), "the step changed nothing"
            err = (gp - rp).abs().max().item()
            assert err <= _bound(rp, cp), (step, k, err, _bound(rp, cp))


def _lstm64(ig, hg, cx, bi, bh):
    i, f, g, o = (ig + hg + bi + bh).chunk(4, 1)
    cy = f.sigmoid() * cx + i.sigmoid() * g.tanh()
    return [o.sigmoid() * cy.tanh(), cy]


def _gru64(ig, hg, hx, bi, bh):
    ir, iz, inn = (ig + bi).chunk(3, 1)
    hr, hz, hn = (hg + bh).chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
    n = (inn + r * hn).tanh()
    return [n + z * (hx - n)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_16_bit_cells_compute_in_float32_and_round_once(kind: str, dtype: torch.dtype) -> None:
    """16-bit inputs: the fused cell computes in float32 and rounds its results once, as
    CUDA's kernels do, so each result is within one ulp of the float64 value computed from
    the same 16-bit inputs (the CPU's unfused cell, which rounds every step, is not)."""
    torch.manual_seed(6)
    gates, op, ref = (4, torch.ops.aten._thnn_fused_lstm_cell, _lstm64) if kind == "lstm" \
        else (3, torch.ops.aten._thnn_fused_gru_cell, _gru64)
    ins = [torch.randn(64, gates * 32) * 2, torch.randn(64, gates * 32) * 2, torch.randn(64, 32),
           torch.randn(gates * 32), torch.randn(gates * 32)]
    ins = [t.to(dtype) for t in ins]
    want = ref(*[t.double() for t in ins])
    got = op(*[t.to("tpu") for t in ins])
    eps = torch.finfo(dtype).eps
    tiny = torch.finfo(dtype).tiny
    for w, g in zip(want, got):
        assert g.dtype == dtype
        err = (g.cpu().double() - w).abs()
        assert (err <= eps * w.abs() + tiny).all(), err.max().item()


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_bfloat16_layers_stay_within_the_cpus_error(kind: str) -> None:
    """A bfloat16 layer over a 12-step sequence: outputs and gradients stay within the CPU's
    own bfloat16 error against float64, plus 4 ulps of the largest magnitude (the bfloat16
    matmuls dominate both)."""
    torch.manual_seed(5)
    cls = getattr(torch.nn, kind)
    make = lambda: cls(8, 16)  # noqa: E731
    state = make().state_dict()
    x = torch.randn(12, 3, 8, dtype=torch.float64)
    ref = _run(make, state, x, "cpu", torch.float64)
    cpu16 = _run(make, state, x, "cpu", torch.bfloat16)
    got16 = _run(make, state, x, "tpu", torch.bfloat16)
    eps16 = torch.finfo(torch.bfloat16).eps
    for i, (r, c, g) in enumerate(zip(ref, cpu16, got16)):
        bound = (c - r).abs().max().item() + 4 * eps16 * r.abs().max().item()
        assert (g - r).abs().max().item() <= bound, (i, (g - r).abs().max().item(), bound)
