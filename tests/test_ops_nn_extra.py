"""The nn ops that small models still sent to the CPU (see tests/conformance/model_usage.py):
on "tpu" against PyTorch on the CPU, forward and backward, and natively (no new entry in
torch.tpu.stats()["fallbacks"] for the ops lowered in nn_extra.c, nn_pool_nd.c and upsample.c)."""
from __future__ import annotations

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


def _lowered() -> set[str]:
    """Op names (without overload) lowered by nn_extra.c, nn_pool_nd.c and upsample.c."""
    names = set()
    root = os.path.join(HERE, "..", "csrc", "core", "lower")
    for f in ("nn_extra.c", "nn_pool_nd.c", "upsample.c"):
        path = os.path.join(root, f)
        if os.path.exists(path):
            with open(path) as fh:
                names |= {n.split(".")[0] for n in re.findall(r'\{"aten::([A-Za-z0-9_.]+)"', fh.read())}
    return names


LOWERED = _lowered()


def _fallbacks() -> dict[str, int]:
    return dict(torch.tpu.stats()["fallbacks"])


def _new_fallbacks(before: dict[str, int]) -> list[str]:
    after = _fallbacks()
    return [k for k, v in after.items() if v > before.get(k, 0)]


def run_both(fn, *inputs, tol=None, grad=True, check_native=()):
    """fn(*inputs) on the CPU and on tpu: outputs and the inputs' gradients
    match; the ops named in check_native (and every op of these files) did
    not fall back. Returns the tpu output."""
    tol = tol or dict(rtol=1e-4, atol=1e-5)
    ins_d = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            t = x.detach().to(DEV)
            ins_d.append(t.requires_grad_(x.requires_grad))
        else:
            ins_d.append(x)
    before = _fallbacks()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out_c = fn(*inputs)
        out_d = fn(*ins_d)
        outs_c = out_c if isinstance(out_c, tuple) else (out_c,)
        outs_d = out_d if isinstance(out_d, tuple) else (out_d,)
        for a, b in zip(outs_d, outs_c):
            torch.testing.assert_close(a.cpu(), b.detach(), **tol)
        if grad:
            g = torch.randn_like(outs_c[0])
            outs_c[0].backward(g)
            outs_d[0].backward(g.to(DEV))
            for a, b in zip(ins_d, inputs):
                if isinstance(b, torch.Tensor) and b.requires_grad:
                    torch.testing.assert_close(a.grad.cpu(), b.grad, **tol)
    new = _new_fallbacks(before)
    own = [k for k in new if k.split("::")[-1].split(".")[0] in LOWERED | set(check_native)]
    assert not own, f"fell back: {own}"
    return out_d


def rq(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype).requires_grad_()


# ---- glu, prelu ----

@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_glu(dim):
    run_both(lambda x: F.glu(x, dim), rq(4, 6, 2), check_native=["glu", "glu_backward"])


def test_glu_bf16():
    run_both(lambda x: F.glu(x), rq(3, 8, dtype=torch.bfloat16), tol=dict(rtol=2e-2, atol=2e-2),
             check_native=["glu", "glu_backward"])


@pytest.mark.parametrize("shape,nw", [((4, 6), 6), ((2, 3, 5, 5), 3), ((2, 3, 5), 1), ((7,), 1)])
def test_prelu(shape, nw):
    x = rq(*shape)
    with torch.no_grad():
        x[..., 0] = 0.0  # the boundary: x == 0 takes the negative branch
    w = (torch.rand(nw) * 0.5).requires_grad_()
    run_both(lambda a, b: F.prelu(a, b), x, w, check_native=["_prelu_kernel", "_prelu_kernel_backward"])


def test_prelu_module():
    m = nn.PReLU(4)
    md = nn.PReLU(4).to(DEV)
    md.weight.data.copy_(m.weight.data.to(DEV))
    x = torch.randn(3, 4, 2)
    before = _fallbacks()
    m(x).sum().backward()
    md(x.to(DEV)).sum().backward()
    torch.testing.assert_close(md.weight.grad.cpu(), m.weight.grad)
    assert not [k for k in _new_fallbacks(before) if "prelu" in k]


# ---- huber, smooth L1 ----

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("param", [1.0, 0.3, 2.5])
def test_huber(reduction, param):
    x, t = rq(5, 7) * 2, torch.randn(5, 7) * 2
    x = x.detach().requires_grad_()
    with torch.no_grad():
        t[0, :3] = x[0, :3] + torch.tensor([param, -param, 0.0])  # the branch boundaries
    run_both(lambda a, b: F.huber_loss(a, b, reduction=reduction, delta=param), x, t,
             check_native=["huber_loss", "huber_loss_backward"])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("param", [1.0, 0.5, 0.0])
def test_smooth_l1(reduction, param):
    x, t = (rq(4, 6) * 2).detach().requires_grad_(), torch.randn(4, 6) * 2
    with torch.no_grad():
        t[0, :3] = x[0, :3] + torch.tensor([param, -param, 0.0])
    run_both(lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=param), x, t,
             check_native=["smooth_l1_loss", "smooth_l1_loss_backward"])


def test_huber_new_delta_does_not_recompile():
    x, t = torch.randn(8).to(DEV), torch.randn(8).to(DEV)
    F.huber_loss(x, t, delta=0.5).cpu()
    before = torch.tpu.stats()["compiles"]
    for d in (0.7, 1.3):
        got = F.huber_loss(x, t, delta=d)
        torch.testing.assert_close(got.cpu(), F.huber_loss(x.cpu(), t.cpu(), delta=d))
    assert torch.tpu.stats()["compiles"] == before


# ---- upsampling ----

UP_NATIVE = ["upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "upsample_bilinear2d",
             "upsample_linear1d", "upsample_trilinear3d", "_upsample_nearest_exact2d",
             "upsample_nearest2d_backward", "upsample_bilinear2d_backward"]


@pytest.mark.parametrize("size,scale", [((8, 10), None), ((5, 7), None), ((3, 2), None), (None, 2.0),
                                        (None, 1.7), (None, 0.5), ((4, 5), None)])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "bilinear", "bilinear-ac"])
def test_upsample2d(mode, size, scale):
    ac = None
    if mode.startswith("bilinear"):
        ac = mode.endswith("-ac")
        mode = "bilinear"
    x = rq(2, 3, 4, 5)
    run_both(lambda a: F.interpolate(a, size=size, scale_factor=scale, mode=mode, align_corners=ac), x,
             check_native=UP_NATIVE)


@pytest.mark.parametrize("scale", [(1.5, 2.5), (0.75, 3.0)])
def test_upsample2d_scales_are_used(scale):
    """With recompute_scale_factor=False the given scales (not in/out) place the samples."""
    x = rq(1, 2, 6, 5)
    for mode in ("nearest", "bilinear"):
        x.grad = None
        run_both(lambda a: F.interpolate(a, scale_factor=scale, mode=mode, recompute_scale_factor=False), x,
                 check_native=UP_NATIVE)


def test_upsample_new_scale_does_not_recompile():
    x = torch.randn(1, 2, 6, 6).to(DEV)
    F.interpolate(x, scale_factor=1.5, mode="bilinear").cpu()
    before = torch.tpu.stats()["compiles"]
    for s in (1.501, 1.55):  # same output size, other scale: a runtime value
        got = F.interpolate(x, scale_factor=s, mode="bilinear", recompute_scale_factor=False)
        torch.testing.assert_close(got.cpu(), F.interpolate(x.cpu(), scale_factor=s, mode="bilinear",
                                                            recompute_scale_factor=False))
    assert torch.tpu.stats()["compiles"] == before


@pytest.mark.parametrize("mode,ac", [("nearest", None), ("linear", False), ("linear", True)])
def test_upsample1d(mode, ac):
    run_both(lambda a: F.interpolate(a, size=11, mode=mode, align_corners=ac), rq(2, 3, 4),
             check_native=UP_NATIVE)


@pytest.mark.parametrize("mode,ac", [("nearest", None), ("trilinear", False), ("trilinear", True)])
def test_upsample3d(mode, ac):
    run_both(lambda a: F.interpolate(a, size=(3, 6, 5), mode=mode, align_corners=ac), rq(1, 2, 2, 3, 4),
             check_native=UP_NATIVE)


def test_upsample_bf16():
    x = rq(1, 2, 4, 4, dtype=torch.bfloat16)
    run_both(lambda a: F.interpolate(a, scale_factor=2, mode="bilinear"), x,
             tol=dict(rtol=2e-2, atol=2e-2), check_native=UP_NATIVE)


def test_upsample_nearest_uint8():
    x = torch.randint(0, 255, (1, 3, 4, 4), dtype=torch.uint8)
    run_both(lambda a: F.interpolate(a, size=(7, 9), mode="nearest"), x, grad=False, check_native=UP_NATIVE)


def test_upsample_module_in_unet_block():
    up = nn.Sequential(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True), nn.Conv2d(3, 4, 3, padding=1))
    x = rq(2, 3, 5, 5)
    ud = __import__("copy").deepcopy(up).to(DEV)
    run_both(lambda a: (up if a.device.type == "cpu" else ud)(a), x, tol=dict(rtol=1e-4, atol=1e-4),
             check_native=UP_NATIVE)


# ---- pooling ----

@pytest.mark.parametrize("shape,out", [((2, 3, 7, 9), (3, 4)), ((2, 3, 8, 8), (4, 4)), ((3, 5, 6), (5, 2)),
                                       ((1, 2, 5, 5), (1, 1)), ((1, 2, 4, 4), (6, 5))])
def test_adaptive_max_pool2d(shape, out):
    x = rq(*shape)
    run_both(lambda a: F.adaptive_max_pool2d(a, out, return_indices=True), x,
             check_native=["adaptive_max_pool2d", "adaptive_max_pool2d_backward"])


def test_adaptive_max_pool2d_ties_take_the_first():
    x = torch.zeros(1, 1, 4, 4)
    x[0, 0, 1, 1] = x[0, 0, 2, 2] = 1.0
    run_both(lambda a: F.adaptive_max_pool2d(a, (1, 1), return_indices=True), x, grad=False,
             check_native=["adaptive_max_pool2d"])


@pytest.mark.parametrize("k,s,p,d,ceil", [(2, 2, 0, 1, False), (3, 2, 1, 1, False), (3, 2, 1, 1, True),
                                          ((2, 3, 2), (1, 2, 2), (1, 1, 0), 1, False), (2, 1, 0, 2, False)])
def test_max_pool3d(k, s, p, d, ceil):
    x = rq(2, 3, 5, 6, 7)
    run_both(lambda a: F.max_pool3d(a, k, s, p, d, ceil_mode=ceil, return_indices=True), x,
             check_native=["max_pool3d_with_indices", "max_pool3d_with_indices_backward"])


@pytest.mark.parametrize("k,s,p,ceil,cip,div", [(2, 2, 0, False, True, None), (3, 2, 1, False, True, None),
                                                (3, 2, 1, False, False, None), (3, 2, 1, True, False, None),
                                                (3, 2, 1, True, True, None), ((2, 3, 2), (1, 2, 2), (1, 1, 0), False, True, None),
                                                (2, 2, 1, False, True, 3)])
def test_avg_pool3d(k, s, p, ceil, cip, div):
    x = rq(2, 3, 5, 6, 7)
    run_both(lambda a: F.avg_pool3d(a, k, s, p, ceil_mode=ceil, count_include_pad=cip, divisor_override=div), x,
             check_native=["avg_pool3d", "avg_pool3d_backward"])


def test_pool3d_unbatched():
    x = rq(3, 4, 5, 6)
    run_both(lambda a: F.max_pool3d(a, 2), x, check_native=["max_pool3d_with_indices"])
    x.grad = None
    run_both(lambda a: F.avg_pool3d(a, 2), x, check_native=["avg_pool3d"])


# ---- unfold / fold ----

@pytest.mark.parametrize("k,d,p,s", [(2, 1, 0, 2), (3, 1, 1, 1), ((2, 3), (2, 1), (1, 0), (1, 2))])
def test_unfold_fold(k, d, p, s):
    x = rq(2, 3, 7, 8)
    cols = run_both(lambda a: F.unfold(a, k, dilation=d, padding=p, stride=s), x, check_native=["im2col", "col2im"])
    c = rq(*cols.shape)
    run_both(lambda a: F.fold(a, (7, 8), k, dilation=d, padding=p, stride=s), c, check_native=["im2col", "col2im"])


def test_unfold_unbatched():
    run_both(lambda a: F.unfold(a, 2, stride=2), rq(3, 4, 6), check_native=["im2col", "col2im"])


# ---- embedding max_norm, repeat_interleave, bucketize, searchsorted ----

@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
def test_embedding_max_norm(norm_type):
    w = torch.randn(10, 4) * 2
    idx = torch.tensor([[1, 3, 3], [0, 9, 1]])
    e_c = nn.Embedding(10, 4, max_norm=1.5, norm_type=norm_type, _weight=w.clone())
    e_d = nn.Embedding(10, 4, max_norm=1.5, norm_type=norm_type, _weight=w.clone()).to(DEV)
    before = _fallbacks()
    out_c, out_d = e_c(idx), e_d(idx.to(DEV))
    torch.testing.assert_close(out_d.cpu(), out_c)
    torch.testing.assert_close(e_d.weight.detach().cpu(), e_c.weight.detach())  # rows renormed in place
    out_c.sum().backward()
    out_d.sum().backward()
    torch.testing.assert_close(e_d.weight.grad.cpu(), e_c.weight.grad)
    assert not [k for k in _new_fallbacks(before) if "embedding_renorm" in k]


@pytest.mark.parametrize("reps", [[2, 0, 3, 1], [1], [0, 0, 4]])
def test_repeat_interleave(reps):
    r = torch.tensor(reps)
    n = int(r.sum())
    x = rq(len(reps), 3)
    run_both(lambda a, rr: torch.repeat_interleave(a, rr, dim=0, output_size=n), x, r,
             check_native=["repeat_interleave"])
    run_both(lambda rr: torch.repeat_interleave(rr, output_size=n), r, grad=False, check_native=["repeat_interleave"])


@pytest.mark.parametrize("right", [False, True])
def test_bucketize(right):
    b = torch.tensor([-1.0, 0.0, 0.5, 0.5, 2.0])
    x = torch.tensor([[-2.0, -1.0, 0.0, 0.25], [0.5, 1.0, 2.0, float("nan")]])
    run_both(lambda a, bb: torch.bucketize(a, bb, right=right), x, b, grad=False, check_native=["bucketize"])
    run_both(lambda a, bb: torch.bucketize(a, bb, right=right, out_int32=True), x, b, grad=False,
             check_native=["bucketize"])


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted(side):
    seq = torch.sort(torch.randn(3, 6)).values
    v = torch.randn(3, 4)
    v[0, :2] = seq[0, 1:3]
    run_both(lambda s, a: torch.searchsorted(s, a, side=side), seq, v, grad=False, check_native=["searchsorted"])
    run_both(lambda s, a: torch.searchsorted(s, a, side=side), seq[0], v, grad=False, check_native=["searchsorted"])
    perm = torch.randperm(6)
    run_both(lambda s, a, srt: torch.searchsorted(s, a, side=side, sorter=srt), seq[0][perm.argsort()].contiguous(), v,
             perm.argsort().argsort(), grad=False, check_native=["searchsorted"])


# ---- multinomial ----

def test_multinomial_distribution():
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 1.0, 0.0]])
    before = _fallbacks()
    torch.manual_seed(0)
    s = torch.multinomial(probs.to(DEV) * 7.0, 20000, replacement=True).cpu()  # unnormalised weights
    assert s.shape == (2, 20000) and s.dtype == torch.int64
    freq = torch.stack([torch.bincount(r, minlength=4).float() / r.numel() for r in s])
    torch.testing.assert_close(freq, probs, atol=0.015, rtol=0)
    assert (s[:, :] != 1).all() and (s[1] == 2).all()  # weight 0 never drawn
    assert not [k for k in _new_fallbacks(before) if "multinomial" in k]


def test_multinomial_one_sample_without_replacement_and_seeding():
    p = torch.softmax(torch.randn(3, 50), -1).to(DEV)
    before = _fallbacks()
    torch.manual_seed(5)
    a = torch.multinomial(p, 1)
    torch.manual_seed(5)
    b = torch.multinomial(p, 1)
    c = torch.multinomial(p, 1)
    assert a.shape == (3, 1) and torch.equal(a.cpu(), b.cpu())
    assert ((a.cpu() >= 0) & (a.cpu() < 50)).all()
    v = torch.multinomial(p[0], 1)
    assert v.shape == (1,)
    assert not [k for k in _new_fallbacks(before) if "multinomial" in k]
    draws = torch.cat([torch.multinomial(p, 1).cpu() for _ in range(20)] + [c.cpu()])
    assert draws.unique().numel() > 3  # fresh numbers each call


def test_multinomial_without_replacement_many_samples_falls_back_correctly():
    p = torch.tensor([0.2, 0.3, 0.5, 0.0]).to(DEV)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the expected fallback's warning
        s = torch.multinomial(p, 3).cpu()
    assert sorted(s.tolist()) == [0, 1, 2]


def test_every_registered_name_is_a_real_overload():
    names = set()
    root = os.path.join(HERE, "..", "csrc", "core", "lower")
    for f in ("nn_extra.c", "nn_pool_nd.c", "upsample.c"):
        with open(os.path.join(root, f)) as fh:
            src = fh.read()
        names |= set(re.findall(r'\{"(aten::[A-Za-z0-9_.]+)"', src))
        for op in re.findall(r'UP_ENTRIES\("([a-z0-9_]+)", \w+\)', src):
            names |= {f"aten::{op}{s}" for s in ("", ".out", "_backward", "_backward.grad_input")}
    assert len(names) > 60
    for n in sorted(names):
        base, _, overload = n[len("aten::"):].partition(".")
        assert (overload or "default") in getattr(torch.ops.aten, base).overloads(), n
