"""Cholesky and triangular solves on the device "tpu" (lower/linalg.c:
stablehlo.cholesky and stablehlo.triangular_solve): linalg.cholesky(_ex),
cholesky, linalg.solve_triangular, triangular_solve, cholesky_solve,
cholesky_inverse, their gradients, and info / errors for matrices that are not
positive definite. Values against a float64 CPU reference with a bound derived
from the CPU's own error; no CPU fallback for these ops."""
from __future__ import annotations

import pytest
import torch

from test_ops_fft import check
from tpu_testing import fallback_counts, new_fallbacks

DEV = "tpu"


def spd(*batch: int, n: int, dtype=torch.float32) -> torch.Tensor:
    """Well-conditioned Hermitian positive-definite matrices."""
    x = torch.randn(*batch, n, n, dtype=dtype)
    return x @ x.mH / n + torch.eye(n, dtype=dtype)


def tri(*batch: int, n: int, upper: bool, dtype=torch.float32) -> torch.Tensor:
    """Well-conditioned triangular matrices (the other triangle holds noise the solvers
    must not read)."""
    x = torch.randn(*batch, n, n, dtype=dtype) / n
    keep = x.triu(1) if upper else x.tril(-1)
    noise = x.tril(-1) if upper else x.triu(1)
    return keep + 2 * torch.eye(n, dtype=dtype) + 100 * noise


DTYPES = [torch.float32, torch.float64, torch.complex64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(dtype, upper):
    torch.manual_seed(0)
    a = spd(3, n=9, dtype=dtype)
    check(lambda t: torch.linalg.cholesky(t, upper=upper), a)
    check(lambda t: torch.cholesky(t, upper=upper), a)
    check(lambda t: torch.linalg.cholesky_ex(t, upper=upper)[0], a)
    info = torch.linalg.cholesky_ex(a.to(DEV))[1]
    assert info.dtype == torch.int32 and info.shape == (3,) and info.cpu().eq(0).all()


def test_cholesky_not_positive_definite():
    """info is nonzero exactly where the CPU's is, and linalg.cholesky raises. XLA returns
    a factor of NaN for a failed matrix, so info names the failing leading minor only when
    the factor keeps its leading columns (lower/linalg.c, chol_info); here it is >= 1."""
    a = spd(3, n=5)
    a[1, 2, 2] = -50.0  # leading minors of order 1 and 2 positive, order 3 not
    a[2] = -a[2]  # order 1 already not
    before = fallback_counts()
    info = torch.linalg.cholesky_ex(a.to(DEV))[1].cpu()
    want = torch.linalg.cholesky_ex(a)[1]
    assert want.tolist() == [0, 3, 1]
    assert info.ne(0).tolist() == want.ne(0).tolist() and info[2] == 1 and 1 <= info[1] <= 3
    with pytest.raises(torch.linalg.LinAlgError, match="not positive-definite"):
        torch.linalg.cholesky(a[1].to(DEV))
    assert new_fallbacks(before) == []


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
def test_solve_triangular(dtype, upper, left):
    torch.manual_seed(1)
    a = tri(2, 1, n=6, upper=upper, dtype=dtype)
    b = torch.randn(2, 3, 6, 4, dtype=dtype) if left else torch.randn(1, 3, 4, 6, dtype=dtype)
    check(lambda x, y: torch.linalg.solve_triangular(x, y, upper=upper, left=left), a, b)
    check(lambda x, y: torch.linalg.solve_triangular(x, y, upper=upper, left=left,
                                                     unitriangular=True), a, b)


@pytest.mark.parametrize("transpose", [False, True])
def test_triangular_solve_legacy(transpose):
    torch.manual_seed(2)
    a, b = tri(2, n=5, upper=False), torch.randn(2, 5, 3)
    check(lambda y, x: torch.triangular_solve(y, x, upper=False, transpose=transpose)[0], b, a)
    check(lambda y, x: torch.triangular_solve(y, x, upper=False, transpose=transpose)[1], b, a)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_and_inverse(dtype, upper):
    torch.manual_seed(3)
    f = torch.linalg.cholesky(spd(2, n=7, dtype=dtype), upper=upper)
    b = torch.randn(3, 1, 7, 2, dtype=dtype)  # broadcast against f's batch
    check(lambda y, x: torch.cholesky_solve(y, x, upper=upper), b, f)
    check(lambda x: torch.cholesky_inverse(x, upper=upper), f[0])
    check(lambda x: torch.cholesky_inverse(x, upper=upper), f)


def test_empty():
    before = fallback_counts()
    z = torch.empty(0, 3, 3, device=DEV)
    assert torch.linalg.cholesky(z).shape == (0, 3, 3)
    assert torch.linalg.solve_triangular(z, z, upper=True).shape == (0, 3, 3)
    assert new_fallbacks(before) == []


def grad_of(fn, *xs: torch.Tensor) -> torch.Tensor:
    xs = [x.detach().requires_grad_() for x in xs]
    y = fn(*xs)
    g = torch.linspace(0.5, 1.5, y.numel(), dtype=y.real.dtype, device=y.device).reshape(y.shape)
    (y.real * g).sum().backward()
    return torch.cat([x.grad.reshape(-1) for x in xs])


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_gradients(dtype):
    torch.manual_seed(4)
    a, t, b = spd(2, n=6, dtype=dtype), tri(2, n=6, upper=True, dtype=dtype), torch.randn(2, 6, 3, dtype=dtype)
    check(lambda x: grad_of(lambda m: torch.linalg.cholesky(m), x), a)
    check(lambda x, y: grad_of(lambda m, r: torch.linalg.solve_triangular(m.triu(), r, upper=True), x, y), t, b)
    f = torch.linalg.cholesky(a)
    check(lambda x, y: grad_of(lambda m, r: torch.cholesky_solve(r, m.tril()), x, y), f, b)
    check(lambda x: grad_of(lambda m: torch.cholesky_inverse(m.tril()), x), f)
