"""LU with partial pivoting on the device "tpu" (lower/linalg_lu.c: the column
steps as elementwise HLO, unrolled up to 4 columns, in a stablehlo.while above;
solves by stablehlo.triangular_solve):
linalg.lu_factor(_ex), linalg.lu, lu_unpack, linalg.lu_solve, linalg.solve(_ex),
linalg.inv(_ex), det, slogdet, logdet, matrix_power with a negative power, their
gradients, and info for singular matrices. Values against a float64 CPU
reference with a bound derived from the CPU's own error in the same dtype
(test_ops_fft.check); no CPU fallback for these ops."""
from __future__ import annotations

import pytest
import torch

from test_ops_fft import check
from test_ops_linalg_native import grad_of
from tpu_testing import fallback_counts, new_fallbacks

DEV = "tpu"
DTYPES = [torch.float32, torch.float64, torch.complex64]


def general(*batch: int, n: int, dtype=torch.float32) -> torch.Tensor:
    """Random square matrices, moderately conditioned (cond ~ n), that need row swaps."""
    return torch.randn(*batch, n, n, dtype=dtype) + 0.5 * torch.eye(n, dtype=dtype)


def test_factor_pivots_match_cpu():
    """The pivot choice is LAPACK's (first row of largest magnitude), so the pivots are
    equal to the CPU's and the packed factors agree within rounding; the internal ops'
    LU outputs (which PyTorch's backward formulas read) are of the same matrix as the
    CPU's (det and slogdet factor A^T for a contiguous real A, solve A itself)."""
    torch.manual_seed(0)
    for shape in [(4, 4), (2, 3, 4, 4), (5, 3), (3, 5)]:
        a = torch.randn(*shape, dtype=torch.float64)
        before = fallback_counts()
        lu, piv, info = torch.linalg.lu_factor_ex(a.to(DEV))
        assert new_fallbacks(before) == []
        lu_c, piv_c, info_c = torch.linalg.lu_factor_ex(a)
        assert piv.dtype == torch.int32 and info.dtype == torch.int32
        assert torch.equal(piv.cpu(), piv_c) and torch.equal(info.cpu(), info_c)
        # |LU - LU_cpu| <= a few n eps |A| (both backward stable, same pivots)
        torch.testing.assert_close(lu.cpu(), lu_c, rtol=0, atol=8 * shape[-1] * 2.3e-16 * a.abs().max().item() * 4)
    a = torch.randn(2, 4, 4, dtype=torch.float64)
    b = torch.randn(2, 4, 1, dtype=torch.float64)
    aten = torch.ops.aten
    for op, args, lu_at in [(aten._linalg_solve_ex, (a, b), 1), (aten._linalg_det, (a,), 1),
                            (aten._linalg_slogdet, (a,), 2), (aten._linalg_det, (a.mT,), 1)]:
        got, want = op(*[x.to(DEV) for x in args]), op(*args)
        assert torch.equal(got[lu_at + 1].cpu(), want[lu_at + 1]), op
        torch.testing.assert_close(got[lu_at].cpu(), want[lu_at], rtol=0, atol=1e-13)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lu_and_unpack(dtype):
    torch.manual_seed(1)
    a = general(2, n=4, dtype=dtype)
    r = torch.randn(2, 5, 3, dtype=dtype)  # rectangular
    for k in range(3):
        check(lambda t: torch.linalg.lu(t)[k], a)
        check(lambda t: torch.linalg.lu(t)[k], r)
        check(lambda t: torch.linalg.lu(t)[k], r.mT)
    lu, piv = torch.linalg.lu_factor(a)
    for k in range(3):
        before = fallback_counts()
        got = torch.lu_unpack(lu.to(DEV), piv.to(DEV))[k].cpu()
        assert new_fallbacks(before) == []
        torch.testing.assert_close(got, torch.lu_unpack(lu, piv)[k], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lu_solve(dtype):
    torch.manual_seed(2)
    a = general(2, 1, n=4, dtype=dtype)
    b = torch.randn(2, 3, 4, 2, dtype=dtype)
    modes = [(True, False), (False, True)] if dtype != torch.float32 else \
        [(True, False), (True, True), (False, False), (False, True)]
    for left, adjoint in modes:
        bb = b if left else b.mT
        check(lambda x, y: torch.linalg.lu_solve(*torch.linalg.lu_factor(x), y, left=left,
                                                 adjoint=adjoint), a, bb)


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_inv_det(dtype):
    torch.manual_seed(3)
    a = general(3, n=4, dtype=dtype)
    b, v = torch.randn(3, 4, 2, dtype=dtype), torch.randn(4, dtype=dtype)
    check(torch.linalg.solve, a, b)
    check(torch.linalg.inv, a)
    check(torch.linalg.det, a)
    check(lambda x: torch.linalg.slogdet(x)[0], a)
    check(lambda x: torch.linalg.slogdet(x)[1], a)
    if dtype != torch.float32:
        return
    check(lambda x, y: torch.linalg.solve(x, y, left=False), a, b.mT)
    check(torch.linalg.solve, a, v)  # a vector right-hand side, broadcast over the batch
    check(lambda x: torch.linalg.solve(x, x[..., 0]), a)  # batch of vectors
    check(torch.linalg.inv, a.mT)  # a non-contiguous input (factored as is, not transposed)
    check(torch.linalg.det, a.mT)
    check(lambda x: torch.linalg.matrix_power(x, -3), a)
    check(torch.logdet, a @ a.mT)


def test_singular_info():
    """info is the first zero pivot's 1-based column, as LAPACK's getrf; the solve and
    inverse do not raise in the _ex forms, det is 0, slogdet (0, -inf), and the
    raising forms raise the CPU's error."""
    a = torch.eye(4).repeat(3, 1, 1)
    a[1, 2, 2] = 0.0  # column 3 zero below its diagonal: info 3
    a[2] = torch.ones(4, 4)  # rank 1: info 2
    before = fallback_counts()
    info = torch.linalg.lu_factor_ex(a.to(DEV))[2].cpu()
    inv_info = torch.linalg.inv_ex(a.to(DEV))[1].cpu()
    solve_info = torch.linalg.solve_ex(a.to(DEV), torch.ones(3, 4, 1, device=DEV))[1].cpu()
    det = torch.linalg.det(a.to(DEV)).cpu()
    sign, logabs = (t.cpu() for t in torch.linalg.slogdet(a.to(DEV)))
    assert new_fallbacks(before) == []
    want = torch.linalg.lu_factor_ex(a)[2]
    assert want.tolist() == [0, 3, 2]
    assert info.tolist() == want.tolist()
    assert inv_info.ne(0).tolist() == solve_info.ne(0).tolist() == [False, True, True]
    assert det.tolist() == [1.0, 0.0, 0.0]
    assert sign.tolist() == [1.0, 0.0, 0.0] and logabs[1:].eq(float("-inf")).all()
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        torch.linalg.inv(a[1].to(DEV))


@pytest.mark.parametrize("dtype", [torch.float32])
def test_gradients(dtype):
    """The backward formulas (PyTorch's, from the returned LU and pivots) run natively."""
    torch.manual_seed(4)
    a, b = general(2, n=4, dtype=dtype), torch.randn(2, 4, 3, dtype=dtype)
    check(lambda x, y: grad_of(torch.linalg.solve, x, y), a, b)
    check(lambda x: grad_of(torch.linalg.inv, x), a)
    check(lambda x: grad_of(torch.linalg.det, x), a)
    check(lambda x: grad_of(lambda m: torch.linalg.slogdet(m)[1], x), a)
    check(lambda x: grad_of(lambda m: torch.linalg.lu_factor(m)[0], x), a)
    lu, piv = torch.linalg.lu_factor(a)
    check(lambda x, y: grad_of(lambda m, r: torch.linalg.lu_solve(m, piv.to(m.device), r), x, y),
          lu, b)


def test_empty():
    """Empty batches and 0 x 0 matrices run natively: det 1, slogdet (1, 0), as the CPU."""
    before = fallback_counts()
    z = torch.empty(3, 0, 0, device=DEV)
    assert torch.linalg.det(z).cpu().tolist() == [1.0] * 3
    assert torch.linalg.slogdet(z)[1].cpu().tolist() == [0.0] * 3
    assert torch.linalg.inv(z).shape == (3, 0, 0)
    assert torch.linalg.lu_factor_ex(torch.empty(0, 4, 4, device=DEV))[1].shape == (0, 4)
    assert torch.linalg.solve(torch.eye(2, device=DEV), torch.empty(2, 0, device=DEV)).shape == (2, 0)
    assert new_fallbacks(before) == []


def test_over_old_cap_is_native():
    """Over 32 columns (the old unroll cap) the steps run in one stablehlo.while
    (tests/test_ops_linalg_loop_native.py has the 512 x 512 cases): no fallback."""
    torch.manual_seed(8)
    a = general(n=33)  # float32: the float64 reference differs from the CPU's own result
    check(torch.linalg.det, a)
