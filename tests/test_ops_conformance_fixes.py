"""Regressions for what the OpInfo sweep (tests/conformance) found wrong on "tpu",
each against PyTorch on the CPU and run natively where the op has a lowering:
batch norm's eval-mode save statistics, conv_transpose2d's backward with an
output_padding past the stride, erfinv's float32 accuracy near +-1, and
torch.mode's out= form."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import tpuc  # noqa: F401  (registers "tpu")
from tpu_testing import fallback_counts, new_fallbacks

DEV = "tpu"


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def _bn_args(dev):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 2, 4, generator=g)
    w, b = torch.randn(2, generator=g), torch.randn(2, generator=g)
    rm, rv = torch.randn(2, generator=g), torch.rand(2, generator=g) + 0.5
    return [t.to(dev) for t in (x, w, b, rm, rv)]


@pytest.mark.parametrize("op", ["native_batch_norm", "_native_batch_norm_legit"])
@pytest.mark.parametrize("training", [False, True])
def test_batch_norm_save_stats(op, training):
    fn = getattr(torch.ops.aten, op)
    want = fn(*_bn_args("cpu"), training, 0.1, 1e-5)
    before = fallback_counts()
    got = fn(*_bn_args(DEV), training, 0.1, 1e-5)
    assert new_fallbacks(before) == []
    for g, w in zip(got, want):
        assert g.device.type == DEV and g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w, rtol=1e-5, atol=1e-5)
    if not training:
        assert got[1].shape == (0,) and got[2].shape == (0,)


def test_batch_norm_eval_no_training_and_out():
    want = torch.ops.aten._native_batch_norm_legit_no_training(*_bn_args("cpu"), 0.1, 1e-5)
    got = torch.ops.aten._native_batch_norm_legit_no_training(*_bn_args(DEV), 0.1, 1e-5)
    assert [tuple(t.shape) for t in got] == [tuple(t.shape) for t in want] == [(3, 2, 4), (0,), (0,)]
    torch.testing.assert_close(got[0].cpu(), want[0])

    # out=: the CPU leaves save_mean/save_invstd as they were in eval mode
    def with_out(dev):
        outs = [torch.empty(0, device=dev), torch.full((5,), 7.0, device=dev), torch.empty(0, device=dev)]
        torch.ops.aten.native_batch_norm.out(*_bn_args(dev), False, 0.1, 1e-5, out=outs[0],
                                             save_mean=outs[1], save_invstd=outs[2])
        return outs

    before = fallback_counts()
    got = with_out(DEV)
    assert new_fallbacks(before) == []
    for g, w in zip(got, with_out("cpu")):
        assert g.shape == w.shape
    torch.testing.assert_close(got[0].cpu(), with_out("cpu")[0])
    torch.testing.assert_close(got[1].cpu(), torch.full((5,), 7.0))


def test_batch_norm_eval_module_backward():
    m = torch.nn.BatchNorm2d(3).eval()
    m.running_mean.uniform_(-1, 1)
    m.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 3, 4, 4, requires_grad=True)
    md = torch.nn.BatchNorm2d(3).eval()
    md.load_state_dict(m.state_dict())
    md = md.to(DEV)
    xd = x.detach().to(DEV).requires_grad_()
    before = fallback_counts()
    yd = md(xd)
    gxd, gwd = torch.autograd.grad(yd.square().sum(), (xd, md.weight))
    assert new_fallbacks(before) == []
    y = m(x)
    gx, gw = torch.autograd.grad(y.square().sum(), (x, m.weight))
    torch.testing.assert_close(yd.cpu(), y)
    torch.testing.assert_close(gxd.cpu(), gx, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gwd.cpu(), gw, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kw,shapes", [
    # output_padding (2, 3) is below the dilation but past the stride (3, 2)
    (dict(groups=2, dilation=(4, 4), stride=(3, 2), padding=(1, 2), output_padding=(2, 3)),
     ((2, 2, 4, 4), (2, 2, 4, 5))),
    (dict(stride=2, output_padding=1, dilation=3), ((1, 3, 5, 6), (3, 2, 3, 3))),
    (dict(stride=(1, 2), output_padding=(1, 1), dilation=(2, 1), padding=1), ((2, 2, 3, 4), (2, 4, 2, 3))),
])
def test_conv_transpose2d_backward_output_padding(kw, shapes):
    x, w = torch.randn(*shapes[0], requires_grad=True), torch.randn(*shapes[1], requires_grad=True)
    y = F.conv_transpose2d(x, w, **kw)
    gy = torch.randn_like(y)
    gx, gw = torch.autograd.grad(y, (x, w), gy)
    xd, wd = x.detach().to(DEV).requires_grad_(), w.detach().to(DEV).requires_grad_()
    before = fallback_counts()
    yd = F.conv_transpose2d(xd, wd, **kw)
    gxd, gwd = torch.autograd.grad(yd, (xd, wd), gy.to(DEV))
    assert new_fallbacks(before) == []
    torch.testing.assert_close(yd.cpu(), y, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gxd.cpu(), gx, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gwd.cpu(), gw, rtol=1e-4, atol=1e-4)


def test_erfinv_float32_near_one():
    # the float32 values nearest +-1 and a sweep of (-1, 1), plus the edges
    near = 1 - torch.arange(1, 2000, dtype=torch.float64) * 2.0 ** -24
    x = torch.cat([near, -near, torch.linspace(-0.999, 0.999, 20001, dtype=torch.float64)]).float()
    x = torch.cat([x, torch.tensor([1.0, -1.0, 0.0, -0.0, 1.5, float("nan")])])
    before = fallback_counts()
    got = torch.erfinv(x.to(DEV)).cpu()
    assert new_fallbacks(before) == []
    want = torch.erfinv(x)
    exact = torch.erfinv(x.double())
    torch.testing.assert_close(got, want, rtol=1.3e-6, atol=1e-5, equal_nan=True)
    assert torch.equal(torch.signbit(got[-6:-2]), torch.signbit(want[-6:-2]))
    # within 3 ulp of the float64 value everywhere (XLA's approximation alone
    # was off by up to ~50 ulp near +-1, 1.5e-5 at 2.66; the CPU is within 0.5 ulp)
    fin = torch.isfinite(exact) & (exact != 0)
    err_tpu = (got.double() - exact)[fin].abs()
    ulp = torch.finfo(torch.float32).eps * exact[fin].abs()
    assert (err_tpu <= 3 * ulp).all(), (err_tpu / ulp).max()
    # the gradient sqrt(pi)/2 exp(erfinv(x)^2) follows
    xg = x[:-2].clone().requires_grad_()
    xd = x[:-2].to(DEV).requires_grad_()
    (g,) = torch.autograd.grad(torch.erfinv(xg).sum(), xg)
    (gd,) = torch.autograd.grad(torch.erfinv(xd).sum(), xd)
    torch.testing.assert_close(gd.cpu(), g, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_mode_out(dtype):
    x = torch.randint(0, 3, (4, 5, 6)).to(dtype)
    v, i = torch.empty(0, dtype=dtype), torch.empty(0, dtype=torch.int64)
    vd, id_ = v.to(DEV), i.to(DEV)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rows over 16 run through the CPU fallback (lower/sort.c)
        r = torch.mode(x.to(DEV), 1, out=(vd, id_))
    torch.mode(x, 1, out=(v, i))
    assert r[0] is vd and r[1] is id_ and vd.device.type == DEV
    torch.testing.assert_close(vd.cpu(), v)
    torch.testing.assert_close(id_.cpu(), i)
