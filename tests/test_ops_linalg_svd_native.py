"""The SVD on the device "tpu" (lower/linalg_eig.c: one-sided Jacobi, sweeps
unrolled, U from the Householder QR of the orthogonalised columns):
linalg.svd (reduced and, for square inputs, full), svdvals, and what composes
from them (pinv, matrix_rank, matrix_norm "nuc" / 2, cond), tall, wide,
batched, rank-deficient, float32 and float64, min(M, N) up to the unrolled
limit (8), gradients, no CPU fallback.

Singular values are unique: compared with test_ops_fft.check (|tpu - f64| <=
8 |cpu - f64| + 64 eps, the float64 CPU result as the reference), as are the
sign-free compositions. Singular vectors are unique only up to sign, so they
are checked by what defines them, with a backward-stable SVD's bounds:
||U S Vh - A|| <= 8 max(M, N) eps ||A||, ||U^T U - I||, ||Vh Vh^T - I|| <=
8 max(M, N) eps."""
from __future__ import annotations

import pytest
import torch

from test_ops_fft import check
from tpu_testing import fallback_counts, new_fallbacks

DEV = "tpu"
DTYPES = [torch.float32, torch.float64]


def bounds(a: torch.Tensor, u: torch.Tensor, s: torch.Tensor, vh: torch.Tensor) -> None:
    eps = torch.finfo(a.dtype).eps
    m, n = a.shape[-2:]
    bound = 8 * max(m, n) * eps
    a64, u64, s64, vh64 = a.double(), u.cpu().double(), s.cpu().double(), vh.cpu().double()
    k = s64.shape[-1]
    scale = torch.linalg.matrix_norm(a64).clamp_min(1e-30)
    rec = torch.linalg.matrix_norm((u64[..., :k] * s64.unsqueeze(-2)) @ vh64[..., :k, :] - a64) / scale
    assert rec.max().item() <= bound, rec.max().item()
    for x in (u64.mT @ u64, vh64 @ vh64.mT):
        err = torch.linalg.matrix_norm(x - torch.eye(x.shape[-1], dtype=torch.float64))
        assert err.max().item() <= bound, err.max().item()
    assert torch.all(s64[..., 1:] <= s64[..., :-1]) and torch.all(s64 >= 0)


def cases(dtype: torch.dtype) -> torch.Tensor:
    """[3, 6, 4]: random, rank 2 (zero singular values: U must still be
    orthonormal, the QR completes the basis) and all zero."""
    torch.manual_seed(0)
    a = torch.randn(3, 6, 4, dtype=dtype)
    a[1] = torch.randn(6, 2, dtype=dtype) @ torch.randn(2, 4, dtype=dtype)
    a[2] = 0
    return a


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_tall(dtype):
    a = cases(dtype)
    r = torch.randn(3, 6, 4, dtype=dtype)  # full rank: singular values vs the f64 reference
    check(lambda t: torch.linalg.svdvals(t), r)
    check(lambda t: torch.linalg.svd(t, full_matrices=False).S, r)
    before = fallback_counts()
    u, s, vh = torch.linalg.svd(a.to(DEV), full_matrices=False)
    assert new_fallbacks(before) == []
    bounds(a, u, s, vh)
    assert torch.equal(s[2].cpu(), torch.zeros(4))


def test_svd_wide_and_full():
    """Wide (computed on A^T) and square with full_matrices (a square U is complete)."""
    torch.manual_seed(1)
    a = torch.randn(2, 3, 5)
    check(lambda t: torch.linalg.svdvals(t), a)
    before = fallback_counts()
    bounds(a, *torch.linalg.svd(a.to(DEV), full_matrices=False))
    b = torch.randn(2, 4, 4)
    bounds(b, *torch.linalg.svd(b.to(DEV), full_matrices=True))
    assert new_fallbacks(before) == []


def test_compositions():
    """pinv, matrix_norm nuc / 2 / -2, cond, matrix_rank: sign-free, compared directly."""
    a = cases(torch.float32)
    r = torch.randn(3, 6, 4)
    check(lambda t: torch.linalg.pinv(t), r)
    check(lambda t: torch.linalg.matrix_norm(t, "nuc"), r)
    check(lambda t: torch.linalg.matrix_norm(t, 2), r)
    check(lambda t: torch.linalg.matrix_norm(t, -2), r)
    check(lambda t: torch.linalg.cond(t), r)
    before = fallback_counts()
    rank = torch.linalg.matrix_rank(a.to(DEV))
    assert new_fallbacks(before) == []
    assert torch.equal(rank.cpu(), torch.tensor([4, 2, 0]))


def test_empty():
    for shape in [(0, 3, 3), (3, 0), (0, 4)]:
        a = torch.randn(*shape)
        for full in (True, False):
            got = torch.linalg.svd(a.to(DEV), full_matrices=full)
            want = torch.linalg.svd(a, full_matrices=full)
            for x, y in zip(got, want):
                assert torch.equal(x.cpu(), y), (shape, full)


def test_above_limit_falls_back():
    a = torch.randn(9, 9)
    before = fallback_counts()
    s = torch.linalg.svdvals(a.to(DEV))
    assert new_fallbacks(before) != []
    torch.testing.assert_close(s.cpu(), torch.linalg.svdvals(a))


def test_svd_backward():
    """svd_backward composes lowered ops; losses free of the sign choice."""
    torch.manual_seed(3)
    a = torch.randn(3, 6, 4)

    def grad(fn, x):
        x = x.detach().requires_grad_()
        return torch.autograd.grad(fn(x), x)[0]

    def loss(m):
        u, s, vh = torch.linalg.svd(m, full_matrices=False)
        return s.sum() + (u @ vh).sum() + u.abs().sum() + vh.abs().sum()

    check(lambda x: grad(lambda m: torch.linalg.svdvals(m).sum(), x), a)
    check(lambda x: grad(loss, x), a)
