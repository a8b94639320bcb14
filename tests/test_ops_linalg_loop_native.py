"""LU and Householder QR as one stablehlo.while (ir/loop.c, lower/linalg_steps.c):
above the unroll thresholds (LU_UNROLL_MAX, QR_UNROLL_MAX: 4 columns) the column
steps run in a counted loop whose program size does not grow with the matrix, so a
512 x 512 float32 linalg.solve and linalg.qr run on the device "tpu" with no CPU
fallback.

Bounds come from the float64 CPU reference of the same input, never tuned:
  solve: the normwise backward error ||b - A x|| / (||A|| ||x|| + ||b||) (infinity
    norms, computed in float64) <= 4 n eps rho, rho the growth factor max|U| / max|A|
    of the float64 LU (Wilkinson's bound for Gaussian elimination with partial
    pivoting, with a constant of 4 for the norm changes), and the forward error
    ||x - x64|| / ||x64|| <= 8 times the CPU float32 solve's + 64 eps;
  qr: ||QR - A|| / ||A|| and ||Q^T Q - I|| <= 8 n eps (Householder QR's backward
    error), and R against the float64 R within 8 times the CPU float32 R's error
    + 64 eps (the same sign convention: LAPACK's);
  det, slogdet, inv, lu_factor at medium sizes and the solve's gradients:
    test_ops_fft.check (as accurate as the CPU in the same dtype, both against
    float64)."""
from __future__ import annotations

import torch

from test_ops_fft import check
from tpu_testing import fallback_counts, new_fallbacks

DEV = "tpu"
N = 512


def _inf(x: torch.Tensor) -> float:
    return torch.linalg.matrix_norm(x, ord=float("inf")).item() if x.dim() == 2 else \
        x.abs().max().item()


def test_solve_512_float32():
    torch.manual_seed(0)
    a = torch.randn(N, N)
    b = torch.randn(N, 2)
    before = fallback_counts()
    x = torch.linalg.solve(a.to(DEV), b.to(DEV)).cpu().double()
    assert new_fallbacks(before) == []
    a64, b64 = a.double(), b.double()
    lu64, _ = torch.linalg.lu_factor(a64)
    rho = lu64.triu().abs().max().item() / a64.abs().max().item()
    eps = torch.finfo(torch.float32).eps
    bound = 4 * N * eps * rho
    r = b64 - a64 @ x
    eta = _inf(r) / (_inf(a64) * _inf(x) + _inf(b64))
    assert eta <= bound, (eta, bound)
    # forward error: as accurate as the CPU's float32 solve, both against float64
    x64 = torch.linalg.solve(a64, b64)
    fwd = _inf(x - x64) / _inf(x64)
    fwd_cpu = _inf(torch.linalg.solve(a, b).double() - x64) / _inf(x64)
    assert fwd <= 8 * fwd_cpu + 64 * eps, (fwd, fwd_cpu)


def test_qr_512_float32():
    torch.manual_seed(1)
    a = torch.randn(N, N)
    before = fallback_counts()
    q, r = torch.linalg.qr(a.to(DEV))
    assert new_fallbacks(before) == []
    q64, r64, a64 = q.cpu().double(), r.cpu().double(), a.double()
    eps = torch.finfo(torch.float32).eps
    bound = 8 * N * eps
    assert torch.equal(r.cpu(), r.cpu().triu())
    recon = (torch.linalg.matrix_norm(q64 @ r64 - a64) / torch.linalg.matrix_norm(a64)).item()
    assert recon <= bound, recon
    orth = torch.linalg.matrix_norm(q64.mT @ q64 - torch.eye(N, dtype=torch.float64)).item()
    assert orth <= bound, orth
    # LAPACK's sign convention: R is the float64 one, as accurately as the CPU's float32 R
    _, rr = torch.linalg.qr(a64)
    _, rc = torch.linalg.qr(a)
    err = ((r64 - rr).abs().max() / rr.abs().max()).item()
    err_cpu = ((rc.double() - rr).abs().max() / rr.abs().max()).item()
    assert err <= 8 * err_cpu + 64 * eps, (err, err_cpu)


def test_lu_loop_batched_properties():
    """The loop keeps batching and getrf's semantics: |L| <= 1 (partial pivoting),
    P L U = A, int32 pivots in range, info 0, for a [2, 3, 20, 20] batch."""
    torch.manual_seed(2)
    a = torch.randn(2, 3, 20, 20, dtype=torch.float64)
    before = fallback_counts()
    lu, piv, info = torch.linalg.lu_factor_ex(a.to(DEV))
    p, l, u = torch.linalg.lu(a.to(DEV))
    assert new_fallbacks(before) == []
    assert piv.dtype == torch.int32 and info.dtype == torch.int32
    assert bool((info.cpu() == 0).all())
    assert bool(((piv.cpu() >= 1) & (piv.cpu() <= 20)).all())
    assert l.cpu().abs().max().item() <= 1.0
    eps = torch.finfo(torch.float64).eps
    err = torch.linalg.matrix_norm((p @ l @ u).cpu() - a) / torch.linalg.matrix_norm(a)
    assert err.max().item() <= 8 * 20 * eps
    # the same pivots as LAPACK (the float64 inputs leave no near-ties here)
    _, piv0 = torch.linalg.lu_factor(a)
    assert torch.equal(piv.cpu(), piv0)
    # lu_unpack and lu_solve replay the pivots in a loop too
    p2, _, _ = torch.lu_unpack(lu, piv)
    assert torch.equal(p2.cpu(), p.cpu())
    b = torch.randn(2, 3, 20, 4)
    check(lambda m, y: torch.linalg.lu_solve(*torch.linalg.lu_factor(m), y), a.float(), b)


def test_singular_info_in_loop():
    """A zero column at 12 (inside the loop): info = 13, the factorization goes on."""
    torch.manual_seed(3)
    a = torch.randn(16, 16, dtype=torch.float64)
    a[:, 12] = 0
    _, _, info = torch.linalg.lu_factor_ex(a.to(DEV))
    _, _, info0 = torch.linalg.lu_factor_ex(a)
    assert info.item() == info0.item() == 13


def test_det_slogdet_inv_64():
    torch.manual_seed(4)
    a = torch.randn(64, 64)
    check(torch.linalg.det, a)
    check(lambda t: torch.linalg.slogdet(t).logabsdet, a)
    check(lambda t: torch.linalg.slogdet(t).sign, a)
    check(torch.linalg.inv, a)


def test_complex_lu_loop():
    torch.manual_seed(5)
    a = torch.randn(12, 12, dtype=torch.complex64)
    check(torch.linalg.det, a)
    check(lambda t: torch.linalg.solve(t, t[:, :2]), a)


def test_qr_loop_tall_and_householder():
    torch.manual_seed(6)
    a = torch.randn(2, 10, 7)
    check(lambda t: torch.linalg.qr(t).Q, a)
    check(lambda t: torch.linalg.qr(t, mode="complete").R, a)
    f, tau = torch.geqrf(a)
    check(lambda x, y: torch.linalg.householder_product(x, y), f, tau)
    check(lambda x, y, c: torch.ormqr(x, y, c), f, tau, torch.randn(2, 10, 3))


def test_solve_gradients():
    torch.manual_seed(7)
    a = torch.randn(12, 12)
    b = torch.randn(12, 3)

    def grad(x, y):
        x, y = x.detach().requires_grad_(), y.detach().requires_grad_()
        ga, gb = torch.autograd.grad((torch.linalg.solve(x, y) ** 2).sum(), (x, y))
        return torch.cat([ga.flatten(), gb.flatten()])

    check(grad, a, b)
