"""Householder QR on the device "tpu" (lower/linalg_qr.c): linalg.qr in its three
modes and linalg.householder_product, batched, tall and wide, float32 and float64,
their gradients, with no CPU fallback.

The lowering follows LAPACK's conventions (the reflector's sign choice, v[0] = 1,
tau), so Q and R are unique for a full-rank matrix and are compared directly:
|tpu - f64| <= 8 |cpu - f64| + 64 eps, the float64 CPU result as the reference
(test_ops_fft.check). The factorisation's own bounds hold too: ||QR - A|| and
||Q^T Q - I|| within 8 * eps * max(M, N) (relative to ||A||), Householder QR's
backward-error bound with a constant of 8. Up to 4 columns the steps are unrolled,
above in a stablehlo.while; each distinct shape is one compile, so the cases share shapes."""
from __future__ import annotations

import pytest
import torch

from test_ops_fft import check
from tpu_testing import fallback_counts, new_fallbacks

DEV = "tpu"


def factor_bounds(a: torch.Tensor, q: torch.Tensor, r: torch.Tensor) -> None:
    eps = torch.finfo(a.dtype).eps
    m, n = a.shape[-2:]
    bound = 8 * eps * max(m, n)
    a64, q64, r64 = a.double(), q.cpu().double(), r.cpu().double()
    scale = torch.linalg.matrix_norm(a64).clamp_min(1e-30)
    recon = torch.linalg.matrix_norm(q64 @ r64 - a64) / scale
    assert recon.max().item() <= bound, recon.max().item()
    eye = torch.eye(q64.shape[-1], dtype=torch.float64)
    orth = torch.linalg.matrix_norm(q64.mT @ q64 - eye)
    assert orth.max().item() <= bound, orth.max().item()
    assert torch.equal(r.cpu(), r.cpu().triu())


def tall(dtype: torch.dtype) -> torch.Tensor:
    """[3, 6, 4]: random, one with a zero column and a repeated one (tau = 0 and
    rank deficiency, as LAPACK handles them), and one all zero."""
    torch.manual_seed(0)
    a = torch.randn(3, 6, 4, dtype=dtype)
    a[1, :, 1] = 0
    a[1, :, 3] = a[1, :, 0]
    a[2] = 0
    return a


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_qr_tall(dtype):
    a = tall(dtype)
    for mode in ("reduced", "complete"):
        r3 = torch.randn(3, 6, 4, dtype=dtype)  # full rank: Q and R unique, compared directly
        check(lambda t: torch.linalg.qr(t, mode=mode).Q, r3)
        check(lambda t: torch.linalg.qr(t, mode=mode).R, r3)
        before = fallback_counts()
        q, r = torch.linalg.qr(a.to(DEV), mode=mode)
        assert new_fallbacks(before) == []
        factor_bounds(a, q, r)
        q0, r0 = torch.linalg.qr(a, mode=mode)
        # the zero matrix: Q = I, R = 0 exactly (every tau is 0)
        assert torch.equal(q[2].cpu(), q0[2]) and torch.equal(r[2].cpu(), r0[2])


def test_qr_wide_and_r_mode():
    torch.manual_seed(1)
    a = torch.randn(2, 3, 5)
    check(lambda t: torch.linalg.qr(t).Q, a)
    check(lambda t: torch.linalg.qr(t).R, a)
    check(lambda t: torch.qr(t)[1], a)
    check(lambda t: torch.linalg.qr(t, mode="r").R, a)
    assert torch.linalg.qr(a.to(DEV), mode="r").Q.shape == (0,)
    q, r = torch.linalg.qr(a.to(DEV))
    factor_bounds(a, q, r)


def test_householder_product():
    torch.manual_seed(2)
    a = torch.randn(2, 6, 4)
    f, tau = torch.geqrf(a)  # geqrf itself runs on the CPU (no Meta kernel in PyTorch)
    check(lambda x, y: torch.linalg.householder_product(x, y), f, tau)
    # fewer reflectors than columns: the rest are identity columns
    check(lambda x, y: torch.linalg.householder_product(x, y), f, tau[..., :2].contiguous())


def test_over_old_cap_is_native():
    """min(M, N) > 16 (the old unroll cap) runs in a stablehlo.while: no fallback."""
    a = torch.randn(17, 17)
    before = fallback_counts()
    q, r = torch.linalg.qr(a.to(DEV))
    assert new_fallbacks(before) == []
    factor_bounds(a, q, r)


def test_empty():
    for shape in [(0, 3, 3), (3, 0), (0, 4)]:
        a = torch.randn(*shape)
        for mode in ("reduced", "complete"):
            q, r = torch.linalg.qr(a.to(DEV), mode=mode)
            q0, r0 = torch.linalg.qr(a, mode=mode)
            assert torch.equal(q.cpu(), q0) and torch.equal(r.cpu(), r0), (shape, mode)


def test_backward():
    """linalg_qr_backward and householder_product_backward compose lowered ops."""
    torch.manual_seed(3)
    a = torch.randn(2, 6, 4)

    def grad(fn, *xs):
        xs = [x.detach().requires_grad_() for x in xs]
        g = torch.autograd.grad(fn(*xs), xs)
        return torch.cat([t.flatten() for t in g])

    check(lambda x: grad(lambda m: sum(t.sum() for t in torch.linalg.qr(m)), x), a)
    f, tau = torch.geqrf(a)
    check(lambda x, y: grad(lambda v, t: torch.linalg.householder_product(v, t).sum(), x, y), f, tau)
