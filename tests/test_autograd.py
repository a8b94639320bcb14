"""Autograd on "tpu": backward runs on autograd's device thread without
error, and gradients equal the CPU's for the same data."""
from __future__ import annotations

import threading

import torch
import torch.nn as nn

from tpu_testing import assert_same, native, quiet_fallback_warnings  # noqa: F401

TOL = {"rtol": 1e-4, "atol": 1e-5}


def test_backward_runs_on_the_device_thread(native: bool) -> None:
    x = torch.randn(4, 3).to("tpu").requires_grad_()
    threads: list[int] = []

    def hook(g: torch.Tensor) -> torch.Tensor:
        threads.append(threading.get_ident())
        assert g.device.type == "tpu"
        return g

    y = (x * x).sum()
    y.register_hook(hook)
    y.backward()
    assert threads and threads[0] != threading.get_ident()  # autograd's thread for tpu
    assert_same(x.grad, 2 * x.detach().cpu(), **TOL)


def test_elementwise_and_reduction_gradients(native: bool) -> None:
    a = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    xc = a.clone().requires_grad_()
    xt = a.clone().to("tpu").requires_grad_()
    for x in (xc, xt):
        y = (torch.tanh(x) * x.exp() - x.pow(2).mean(dim=0, keepdim=True)).sum()
        y.backward()
    assert_same(xt.grad, xc.grad, **TOL)


def test_views_and_inplace_in_the_graph(native: bool) -> None:
    a = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    grads = []
    for dev in ("cpu", "tpu"):
        x = a.clone().to(dev).requires_grad_()
        y = x * 1.0
        y[:, 1:3].mul_(3)  # in-place through a view, recorded by autograd
        z = y.t().reshape(-1)[::2]
        (z * z).sum().backward()
        grads.append(x.grad)
    assert_same(grads[1], grads[0], **TOL)


def test_mlp_gradients_match_cpu(native: bool) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    data = torch.randn(6, 8, generator=torch.Generator().manual_seed(2))
    target = torch.tensor([0, 2, 1, 1, 0, 2])
    grads = {}
    for dev in ("cpu", "tpu"):
        m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
        m.load_state_dict(model.state_dict())
        m = m.to(dev)
        loss = nn.functional.cross_entropy(m(data.to(dev)), target.to(dev))
        loss.backward()
        grads[dev] = [p.grad for p in m.parameters()]
    for gt, gc in zip(grads["tpu"], grads["cpu"]):
        assert_same(gt, gc, **TOL)


def test_optimizer_step_matches_cpu(native: bool) -> None:
    torch.manual_seed(0)
    init = nn.Linear(4, 2)
    data = torch.randn(8, 4, generator=torch.Generator().manual_seed(3))
    final = {}
    for dev in ("cpu", "tpu"):
        m = nn.Linear(4, 2)
        m.load_state_dict(init.state_dict())
        m = m.to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            m(data.to(dev)).pow(2).mean().backward()
            opt.step()
        final[dev] = [p.detach() for p in m.parameters()]
    for pt, pc in zip(final["tpu"], final["cpu"]):
        assert_same(pt, pc, **TOL)


def test_grad_accumulates_across_backwards(native: bool) -> None:
    x = torch.ones(3, device="tpu", requires_grad=True)
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    assert_same(x.grad, torch.full((3,), 5.0))


def test_no_grad_and_detach(native: bool) -> None:
    x = torch.ones(3, device="tpu", requires_grad=True)
    with torch.no_grad():
        y = x * 2
    assert not y.requires_grad
    d = x.detach()
    assert d.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert not d.requires_grad


def test_checkpoint_recomputes_with_the_forwards_dropout_masks() -> None:
    """torch.utils.checkpoint restores a device's random state before the recompute only when
    the device module says `_initialized` (as torch.cuda does); torch.tpu did not, so in eager
    mode a checkpointed block's dropout drew a new mask in the backward: gradients that were
    neither the model's nor the CPU's, with no error. Every variant must give the gradients of
    the model run without checkpointing, bit for bit, in strict and fused mode."""
    from torch.utils.checkpoint import checkpoint, checkpoint_sequential

    def grads(variant: str, mode: str) -> list[torch.Tensor]:
        with torch.tpu.eager_mode(mode):
            torch.manual_seed(0)
            m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 32),
                              nn.Dropout(0.3), nn.Linear(32, 4)).to("tpu")
            x = torch.randn(8, 16).to("tpu").requires_grad_()
            torch.manual_seed(123)
            if variant == "plain":
                y = m(x)
            elif variant == "reentrant":
                y = checkpoint(m, x, use_reentrant=True)
            elif variant == "non-reentrant":
                y = checkpoint(m, x, use_reentrant=False)
            else:
                y = checkpoint_sequential(m, 3, x, use_reentrant=False)
            y.square().sum().backward()
            return [t.grad.cpu() for t in (x, *m.parameters())]

    for mode in ("strict", "fused"):
        want = grads("plain", mode)
        for variant in ("reentrant", "non-reentrant", "sequential"):
            got = grads(variant, mode)
            assert all(torch.equal(a, b) for a, b in zip(got, want)), (mode, variant)
