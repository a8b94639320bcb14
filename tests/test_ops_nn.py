"""nn building blocks on the device "tpu" against PyTorch on the CPU, forward
and backward, through the real PyTorch device: the ops must run natively
(not counted in torch.tpu.stats()["fallbacks"])."""
from __future__ import annotations

import copy
import os
import re
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tpuc  # noqa: F401  (registers "tpu")

DEV = "tpu"
HERE = os.path.dirname(os.path.abspath(__file__))


def _family_ops() -> set[str]:
    """Op names (without overload) lowered by the linalg/shape/index/nn files."""
    names = set()
    root = os.path.join(HERE, "..", "csrc", "core", "lower")
    for f in ("linalg.c", "shape.c", "index.c", "nn.c"):
        with open(os.path.join(root, f)) as fh:
            names |= {n.split(".")[0] for n in re.findall(r'\{"aten::([A-Za-z0-9_.]+)"', fh.read())}
    return names


FAMILY = _family_ops()


def _fallbacks() -> dict[str, int]:
    return dict(torch.tpu.stats()["fallbacks"])


def _own_fallbacks(before: dict[str, int]) -> list[str]:
    """Ops of these families that fell back since `before`."""
    after = _fallbacks()
    new = [k for k, v in after.items() if v > before.get(k, 0)]
    return [k for k in new if k.split("::")[-1].split(".")[0] in FAMILY]


def to_dev(v):
    if isinstance(v, torch.Tensor):
        t = v.detach().to(DEV)
        return t.requires_grad_(v.requires_grad)
    return v


def compare(fn, *inputs, module: nn.Module | None = None, tol=None):
    """Runs fn(module, *inputs) on the CPU and on tpu; compares outputs and
    the gradients of inputs and parameters; returns the ops of these
    families that fell back."""
    tol = tol or dict(rtol=1e-4, atol=1e-5)
    mod_d = copy.deepcopy(module).to(DEV) if module is not None else None
    ins_d = [to_dev(x) for x in inputs]
    before = _fallbacks()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out_c = fn(module, *inputs)
        out_d = fn(mod_d, *ins_d)
        torch.testing.assert_close(out_d.cpu(), out_c.detach(), **tol)
        g = torch.randn_like(out_c)
        out_c.backward(g)
        out_d.backward(g.to(DEV))
        for a, b in zip(ins_d, inputs):
            if isinstance(b, torch.Tensor) and b.requires_grad:
                torch.testing.assert_close(a.grad.cpu(), b.grad, **tol)
        if module is not None:
            for (name, pd), pc in zip(mod_d.named_parameters(), module.parameters()):
                assert pd.grad is not None, name
                torch.testing.assert_close(pd.grad.cpu(), pc.grad, **tol, msg=lambda m: f"{name}: {m}")
    return _own_fallbacks(before)


def rq(*shape):
    return torch.randn(*shape).requires_grad_()


torch.manual_seed(0)


def test_linear():
    assert compare(lambda m, x: m(x), rq(4, 8), module=nn.Linear(8, 3)) == []
    assert compare(lambda m, x: m(x), rq(2, 5, 8), module=nn.Linear(8, 6, bias=False)) == []


def test_mlp_and_mse():
    mlp = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 4))
    t = torch.randn(5, 4)
    assert compare(lambda m, x: F.mse_loss(m(x), t.to(x.device)), rq(5, 6), module=mlp) == []


def test_layer_norm():
    assert compare(lambda m, x: m(x), rq(3, 5, 16), module=nn.LayerNorm(16)) == []


def test_cross_entropy():
    t = torch.tensor([1, 0, 4, 2])
    fb = compare(lambda m, x: F.cross_entropy(x, t.to(x.device)), rq(4, 5))
    assert fb == []
    fb = compare(lambda m, x: F.cross_entropy(x, t.to(x.device), label_smoothing=0.1,
                                              ignore_index=2), rq(4, 5))
    assert fb == []


def test_softmax_and_log_softmax():
    assert compare(lambda m, x: torch.softmax(x, -1) * 3, rq(4, 7)) == []
    assert compare(lambda m, x: torch.log_softmax(x, 0), rq(4, 7)) == []


def test_embedding():
    emb = nn.Embedding(10, 4)
    idx = torch.tensor([[1, 2, 9], [0, 2, 2]])
    assert compare(lambda m, i: m(i.to(m.weight.device)), idx, module=emb) == []


# convolution and convolution_backward have CompositeExplicitAutograd kernels;
# the glue routes them to the boxed kernel so they reach their lowerings.


def test_conv2d():
    conv = nn.Conv2d(3, 4, 3, padding=1)
    assert compare(lambda m, x: m(x), rq(2, 3, 8, 8), module=conv) == []


def test_conv2d_no_bias_frozen_input():
    conv = nn.Conv2d(4, 4, 3, stride=2, groups=2, bias=False)
    assert compare(lambda m, x: m(x), torch.randn(2, 4, 9, 9), module=conv) == []


def test_pools():
    assert compare(lambda m, x: F.max_pool2d(x, 2), rq(2, 3, 8, 8)) == []
    assert compare(lambda m, x: F.max_pool2d(x, 3, 2, 1), rq(2, 3, 9, 9)) == []
    assert compare(lambda m, x: F.avg_pool2d(x, 2), rq(2, 3, 8, 8)) == []
    assert compare(lambda m, x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
                   rq(2, 3, 9, 9)) == []
    assert compare(lambda m, x: F.adaptive_avg_pool2d(x, (2, 3)), rq(2, 3, 8, 9)) == []


def test_batch_norm_training_updates_running_stats():
    bn = nn.BatchNorm2d(3)
    bn_d = copy.deepcopy(bn).to(DEV)
    x = torch.randn(4, 3, 5, 5)
    before = _fallbacks()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y, y_d = bn(x), bn_d(x.to(DEV))
    torch.testing.assert_close(y_d.cpu(), y.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(bn_d.running_mean.cpu(), bn.running_mean)
    torch.testing.assert_close(bn_d.running_var.cpu(), bn.running_var)
    assert _own_fallbacks(before) == []


def test_batch_norm_backward():
    assert compare(lambda m, x: m(x), rq(4, 3, 5, 5), module=nn.BatchNorm2d(3)) == []


def test_dropout_train_and_eval():
    x = torch.ones(64, 64, device=DEV, requires_grad=True)
    before = _fallbacks()
    y = F.dropout(x, 0.25, training=True)
    kept = (y != 0).float().mean().item()
    assert 0.7 < kept < 0.8
    torch.testing.assert_close(y[y != 0].cpu(), torch.full_like(y[y != 0].cpu(), 1 / 0.75))
    y.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), (y.detach() != 0).float().cpu() / 0.75)
    assert F.dropout(x, 0.25, training=False) is x or torch.equal(
        F.dropout(x, 0.25, training=False).cpu(), x.detach().cpu())
    assert [k for k in _own_fallbacks(before) if "dropout" in k] == []


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa(causal):
    def f(m, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert compare(f, rq(2, 3, 6, 8), rq(2, 3, 6, 8), rq(2, 3, 6, 8)) == []


def test_bf16_linear_and_softmax():
    lin = nn.Linear(16, 8).to(torch.bfloat16)
    fb = compare(lambda m, x: torch.softmax(m(x), -1), rq(4, 16).bfloat16().detach().requires_grad_(),
                 module=lin, tol=dict(rtol=2e-2, atol=2e-2))
    assert fb == []
