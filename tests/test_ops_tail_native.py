"""The tail of issue 34's CPU fallbacks, now lowered on "tpu": torch.equal (a host bool:
the device compares, one element is read back; cov/corrcoef call it), trace, mode,
channel_shuffle, index_reduce (prod/mean/amax/amin), max_unpool1d/2d/3d, renorm, pdist
(forward and backward), unfold's backward (unfold_backward), replication padding with
negative pads (crops), _native_batch_norm_legit.out (a C++ Meta for it), empty inputs
of avg_pool3d and nanmedian.dim, bicubic upsampling (upsample_bicubic2d and its backward)
and segment_reduce (lengths or offsets, with its backward).

Every test asserts that nothing fell back to the CPU. References are PyTorch on the CPU
in float64 (or exact integer data, where the result must be bit-equal); float32 bounds
come from the computation: a sum or product of n terms errs by at most n units of
roundoff (eps/2) of the sum of magnitudes (Higham, Accuracy and Stability, 2002, §3.1)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tpu_testing import fallback_counts, new_fallbacks, quiet_fallback_warnings  # noqa: F401

F32, F64 = torch.float32, torch.float64
U32 = torch.finfo(F32).eps / 2  # unit roundoff of float32
INTS = [torch.int64, torch.int32]


@pytest.fixture(autouse=True)
def native_only():
    before = fallback_counts()
    yield
    assert new_fallbacks(before) == []


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def exact(t: torch.Tensor, ref: torch.Tensor) -> None:
    assert t.device.type == "tpu" and t.dtype == ref.dtype and t.shape == ref.shape
    assert torch.equal(t.cpu(), ref), (t.cpu(), ref)


# ---- equal (cov, corrcoef) ----

@pytest.mark.parametrize("dtype", [F32, torch.int64, torch.bool])
def test_equal(dtype: torch.dtype) -> None:
    x = torch.randint(0, 2, (4, 5), generator=gen(0)).to(dtype)
    y = x.clone()
    xt, yt = x.to("tpu"), y.to("tpu")
    assert torch.equal(xt, yt) is True
    y[2, 3] = 1 - y[2, 3] if dtype != torch.bool else ~y[2, 3]
    assert torch.equal(xt, y.to("tpu")) is False
    assert torch.equal(xt, xt[:, :4]) is False  # other sizes
    assert torch.equal(xt[:0], yt[:0]) is True


def test_equal_nan_and_promotion() -> None:
    x = torch.tensor([1.0, float("nan")], device="tpu")
    assert torch.equal(x, x) is torch.equal(x.cpu(), x.cpu()) is False
    a = torch.tensor([1, 2], device="tpu")
    assert torch.equal(a, a.double()) is torch.equal(a.cpu(), a.cpu().double()) is True


def test_cov_corrcoef() -> None:
    x = torch.randn(3, 9, generator=gen(1), dtype=F64)
    w = torch.randint(1, 4, (9,), generator=gen(2))
    for got, ref in [(torch.cov(x.float().to("tpu")), torch.cov(x)),
                     (torch.cov(x.float().to("tpu"), fweights=w.to("tpu")), torch.cov(x, fweights=w)),
                     (torch.corrcoef(x.float().to("tpu")), torch.corrcoef(x))]:
        # sums of 9 products of O(3) values: 9 * 2 roundings of magnitudes up to ~10
        torch.testing.assert_close(got.cpu().double(), ref, rtol=0, atol=64 * 9 * 10 * U32)


# ---- trace ----

@pytest.mark.parametrize("dtype", [F32, torch.int64, torch.int32, torch.uint8])
def test_trace(dtype: torch.dtype) -> None:
    x = torch.randint(-5, 6, (6, 4), generator=gen(3)).to(dtype)
    exact(torch.trace(x.to("tpu")), torch.trace(x))  # integer-valued: exact in any order


def test_trace_float_and_grad() -> None:
    x = torch.randn(50, 50, generator=gen(4), dtype=F64)
    xt = x.float().to("tpu").requires_grad_()
    got = torch.trace(xt)
    bound = 50 * U32 * x.diagonal().abs().sum().item() + x.float().diagonal().sub(x.diagonal()).abs().sum().item()
    assert abs(got.item() - torch.trace(x).item()) <= bound
    got.backward()
    exact(xt.grad, torch.eye(50))


# ---- mode ----

@pytest.mark.parametrize("dtype", [F32, torch.int32, torch.bool])
def test_mode(dtype: torch.dtype) -> None:
    x = torch.randint(0, 4, (3, 5, 7), generator=gen(5)).to(dtype)  # rows <= 16: the CPU's order is defined
    for dim, keep in [(-1, False), (1, True), (0, False)]:
        v, i = torch.mode(x.to("tpu"), dim, keep)
        rv, ri = torch.mode(x, dim, keep)
        exact(v, rv)
        exact(i, ri)


def test_mode_grad() -> None:
    x = torch.randint(0, 3, (4, 6), generator=gen(6)).float()
    xt = x.to("tpu").requires_grad_()
    torch.mode(xt, 1).values.sum().backward()
    xc = x.clone().requires_grad_()
    torch.mode(xc, 1).values.sum().backward()
    exact(xt.grad, xc.grad)


# ---- channel_shuffle ----

@pytest.mark.parametrize("dtype", [F32, torch.int64, torch.bool])
def test_channel_shuffle(dtype: torch.dtype) -> None:
    x = torch.randint(0, 9, (2, 6, 3, 2), generator=gen(7)).to(dtype)
    for groups in (2, 3):
        exact(F.channel_shuffle(x.to("tpu"), groups), F.channel_shuffle(x, groups))
    exact(F.channel_shuffle(x[:, :, 0].to("tpu"), 3), F.channel_shuffle(x[:, :, 0], 3))


# ---- index_reduce ----

@pytest.mark.parametrize("reduce", ["amax", "amin", "mean", "prod"])
@pytest.mark.parametrize("dtype", [F32, torch.int64])
def test_index_reduce(reduce: str, dtype: torch.dtype) -> None:
    x = torch.randint(-4, 5, (5, 3), generator=gen(8)).to(dtype)
    src = torch.randint(-3, 4, (6, 3), generator=gen(9)).to(dtype)
    idx = torch.tensor([0, 2, 2, 4, 0, 2])
    # integer-valued data: sums and products are exact, a float mean is one correctly
    # rounded division of exact values (bit-equal), an integer mean a floor division
    for include_self in (True, False):
        got = x.to("tpu").index_reduce(0, idx.to("tpu"), src.to("tpu"), reduce, include_self=include_self)
        exact(got, x.index_reduce(0, idx, src, reduce, include_self=include_self))
    idx1 = torch.tensor([2, 0])
    got = x.to("tpu").index_reduce(1, idx1.to("tpu"), src[:5, :2].to("tpu"), reduce)
    exact(got, x.index_reduce(1, idx1, src[:5, :2], reduce))


def test_index_reduce_grad() -> None:
    x = torch.randn(5, 3, generator=gen(10))
    src = torch.randn(4, 3, generator=gen(11))
    idx = torch.tensor([1, 3, 1, 0])
    for reduce in ("prod", "amax", "mean"):
        xt, st = x.to("tpu").requires_grad_(), src.to("tpu").requires_grad_()
        xt.index_reduce(0, idx.to("tpu"), st, reduce).sum().backward()
        xc, sc = x.double().requires_grad_(), src.double().requires_grad_()
        xc.index_reduce(0, idx, sc, reduce).sum().backward()
        # products of <= 3 factors and their quotients: a few roundings of O(10) values
        torch.testing.assert_close(xt.grad.cpu().double(), xc.grad, rtol=16 * U32, atol=16 * U32)
        torch.testing.assert_close(st.grad.cpu().double(), sc.grad, rtol=16 * U32, atol=16 * U32)


# ---- max_unpool ----

@pytest.mark.parametrize("nd", [1, 2, 3])
def test_max_unpool_and_grad(nd: int) -> None:
    pool = [F.max_pool1d, F.max_pool2d, F.max_pool3d][nd - 1]
    unpool = [F.max_unpool1d, F.max_unpool2d, F.max_unpool3d][nd - 1]
    x = torch.randn((2, 3) + (6,) * nd, generator=gen(12 + nd))
    v, i = pool(x, 2, stride=2, return_indices=True)
    size = x.shape[2:]
    vt = v.to("tpu").requires_grad_()
    got = unpool(vt, i.to("tpu"), 2, stride=2, output_size=size)
    exact(got.detach(), unpool(v, i, 2, stride=2, output_size=size))
    w = torch.randn(got.shape, generator=gen(20))
    (got * w.to("tpu")).sum().backward()
    vc = v.clone().requires_grad_()
    (unpool(vc, i, 2, stride=2, output_size=size) * w).sum().backward()
    exact(vt.grad, vc.grad)  # a gather: exact
    # unbatched input
    exact(unpool(v[0].to("tpu"), i[0].to("tpu"), 2, stride=2), unpool(v[0], i[0], 2, stride=2))


# ---- renorm ----

@pytest.mark.parametrize("p", [2.0, 1.0, float("inf"), 3.0])
def test_renorm_and_grad(p: float) -> None:
    x = torch.randn(4, 5, 3, generator=gen(21), dtype=F64)
    xt = x.float().to("tpu").requires_grad_()
    got = torch.renorm(xt, p, 1, 1.5)
    ref = torch.renorm(x.float().double(), p, 1, 1.5)
    # a norm of 12 terms (|x|^p, a sum, a root: <= 12 + 4 roundings), the factor (2), the product (1)
    torch.testing.assert_close(got.detach().cpu().double(), ref, rtol=24 * U32 * 4, atol=0)
    w = torch.randn(4, 5, 3, generator=gen(22))
    (got * w.to("tpu")).sum().backward()
    xc = x.clone().requires_grad_()
    (torch.renorm(xc, p, 1, 1.5) * w.double()).sum().backward()
    torch.testing.assert_close(xt.grad.cpu().double(), xc.grad, rtol=256 * U32, atol=256 * U32 * xc.grad.abs().max().item())


# ---- unfold backward ----

@pytest.mark.parametrize("size,step", [(3, 2), (2, 3), (4, 1)])
def test_unfold_backward(size: int, step: int) -> None:
    x = torch.randn(3, 9, 2, generator=gen(23))
    w = torch.randint(-3, 4, (3,) + ((9 - size) // step + 1,) + (2, size), generator=gen(24)).float()
    xt = x.to("tpu").requires_grad_()
    (xt.unfold(1, size, step) * w.to("tpu")).sum().backward()
    xc = x.clone().requires_grad_()
    (xc.unfold(1, size, step) * w).sum().backward()
    exact(xt.grad, xc.grad)  # sums of a few small integers: exact


# ---- replication padding with negative pads ----

@pytest.mark.parametrize("pad", [(-1, 2, 1, -2), (2, -1, -1, 0), (-2, -1, 3, 1)])
def test_replicate_negative_pad_and_grad(pad: tuple[int, ...]) -> None:
    x = torch.randn(2, 3, 5, 6, generator=gen(25))
    xt = x.to("tpu").requires_grad_()
    got = F.pad(xt, pad, mode="replicate")
    exact(got.detach(), F.pad(x, pad, mode="replicate"))
    w = torch.randint(-3, 4, got.shape, generator=gen(26)).float()
    (got * w.to("tpu")).sum().backward()
    xc = x.clone().requires_grad_()
    (F.pad(xc, pad, mode="replicate") * w).sum().backward()
    exact(xt.grad, xc.grad)  # sums of small integers: exact
    x1 = x[0, 0]
    exact(F.pad(x1[None].to("tpu"), pad[:2], mode="replicate"), F.pad(x1[None], pad[:2], mode="replicate"))


# ---- pdist ----

def test_pdist_and_grad() -> None:
    x = torch.randn(6, 5, generator=gen(27), dtype=F64)
    x[3] = x[1]  # a zero distance: its gradient is 0, as the CPU's
    w = torch.randn(15, generator=gen(28), dtype=F64)
    for p in (2.0, 1.0, float("inf"), 0.5, 3.0, 0.0):
        xt = x.float().to("tpu").requires_grad_()
        got = F.pdist(xt, p)
        xc = x.float().double().requires_grad_()
        ref = F.pdist(xc, p)
        # 5 differences (1 rounding each), 5 powers, a sum of 5, a root: <= 16 roundings
        torch.testing.assert_close(got.detach().cpu().double(), ref.detach(), rtol=64 * U32, atol=0)
        (got * w.float().to("tpu")).sum().backward()
        (ref * w).sum().backward()
        scale = xc.grad.abs().max().item()
        torch.testing.assert_close(xt.grad.cpu().double(), xc.grad, rtol=0, atol=256 * U32 * scale)


# ---- declined shapes now lowered ----

def test_empty_avg_pool3d_nanmedian_and_0d_unfold() -> None:
    x = torch.randn(0, 2, 4, 4, 4)
    exact(F.avg_pool3d(x.to("tpu"), 2), F.avg_pool3d(x, 2))
    e = torch.randn(0, 4)
    v, i = torch.nanmedian(e.to("tpu"), 1)
    rv, ri = torch.nanmedian(e, 1)
    exact(v, rv)
    exact(i, ri)
    s = torch.tensor(2.5).to("tpu").requires_grad_()
    (s.unfold(0, 1, 1) * 3).sum().backward()
    exact(s.grad, torch.tensor(3.0))


def test_native_batch_norm_legit_out() -> None:
    x = torch.randn(3, 4, 5, generator=gen(29), dtype=F64)
    w, b = torch.rand(4, generator=gen(30), dtype=F64) + 0.5, torch.randn(4, generator=gen(31), dtype=F64)
    rm, rv = torch.zeros(4), torch.ones(4)
    dev = [t.float().to("tpu") for t in (x, w, b)]
    out, sm, si = (torch.empty(0, device="tpu") for _ in range(3))
    rmt, rvt = rm.to("tpu"), rv.to("tpu")
    torch.ops.aten._native_batch_norm_legit.out(*dev, rmt, rvt, True, 0.1, 1e-5, out=out, save_mean=sm, save_invstd=si)
    ref = torch.ops.aten._native_batch_norm_legit(x, w, b, rm.double(), rv.double(), True, 0.1, 1e-5)
    # statistics of 15 values (a sum, a square sum, a root), then a scale: <= 64 roundings of O(10)
    for got, r in zip((out, sm, si), ref):
        torch.testing.assert_close(got.cpu().double(), r, rtol=0, atol=64 * 10 * U32)
    torch.testing.assert_close(rmt.cpu().double(), 0.1 * ref[1], rtol=0, atol=64 * U32)


# ---- bicubic upsampling ----

@pytest.mark.parametrize("align_corners", [False, True])
def test_bicubic_and_grad(align_corners: bool) -> None:
    x = torch.randn(2, 3, 5, 4, generator=gen(32), dtype=F64)
    for size in [(9, 7), (3, 2)]:
        xt = x.float().to("tpu").requires_grad_()
        got = F.interpolate(xt, size=size, mode="bicubic", align_corners=align_corners)
        xc = x.float().double().requires_grad_()
        ref = F.interpolate(xc, size=size, mode="bicubic", align_corners=align_corners)
        # 16 taps with weights of |sum| <= 1.5 per dim, the weights themselves computed in
        # float32: <= 64 roundings of the largest weighted input
        bound = 64 * U32 * 2.25 * x.abs().max().item()
        torch.testing.assert_close(got.detach().cpu().double(), ref.detach(), rtol=0, atol=bound)
        w = torch.randn(got.shape, generator=gen(33), dtype=F64)
        (got * w.float().to("tpu")).sum().backward()
        (ref * w).sum().backward()
        gb = 64 * U32 * 2.25 * w.abs().max().item() * 16  # each input gathers <= 16 * (out/in) terms
        torch.testing.assert_close(xt.grad.cpu().double(), xc.grad, rtol=0, atol=gb)


# ---- segment_reduce ----

@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
def test_segment_reduce_and_grad(reduce: str) -> None:
    x = torch.randn(7, 3, generator=gen(34), dtype=F64)
    x[2, 1] = 0.0  # prod's gradient at a zero: the product of the others
    lengths = torch.tensor([2, 0, 3, 2])  # an empty segment: initial, or NaN for mean
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    w = torch.randn(4, 3, generator=gen(35), dtype=F64)
    for init, kw in [(None, {"lengths": lengths}), (1.5, {"offsets": offsets})]:
        xt = x.float().to("tpu").requires_grad_()
        got = torch.segment_reduce(xt, reduce, axis=0, initial=init, unsafe=True,
                                   **{k: v.to("tpu") for k, v in kw.items()})
        xc = x.float().double().requires_grad_()
        ref = torch.segment_reduce(xc, reduce, axis=0, initial=init, unsafe=True, **kw)
        # at most 3 elements and the initial per segment: <= 8 roundings of values <= 4^3
        torch.testing.assert_close(got.detach().cpu().double(), ref.detach(), rtol=8 * U32, atol=8 * U32,
                                   equal_nan=True)
        (got * w.float().to("tpu")).nan_to_num(0).sum().backward()
        (ref * w).nan_to_num(0).sum().backward()
        torch.testing.assert_close(xt.grad.cpu().double(), xc.grad, rtol=16 * U32, atol=16 * 64 * U32)
