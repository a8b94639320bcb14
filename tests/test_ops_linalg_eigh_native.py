"""The symmetric eigendecomposition on the device "tpu" (lower/linalg_eig.c:
cyclic Jacobi, sweeps unrolled): linalg.eigh, linalg.eigvalsh, both UPLO
triangles, batched, float32 and float64, odd and even n up to the unrolled
limit (8), gradients, and no CPU fallback.

Eigenvalues are unique: compared with test_ops_fft.check (|tpu - f64| <=
8 |cpu - f64| + 64 eps, the float64 CPU result as the reference). Eigenvectors
are unique only up to sign (LAPACK's signs are not normalised, nor are ours),
so they are checked by what defines them, with the bounds a backward-stable
eigensolver meets: ||A V - V diag(w)|| <= 8 n eps ||A|| and
||V^T V - I|| <= 8 n eps, and by comparing |V| with the float64 reference for
well-separated eigenvalues."""
from __future__ import annotations

import pytest
import torch

from test_ops_fft import check
from tpu_testing import fallback_counts, new_fallbacks

DEV = "tpu"
DTYPES = [torch.float32, torch.float64]


def sym(*shape: int, dtype=torch.float32) -> torch.Tensor:
    """Random non-symmetric matrices: eigh reads only one triangle."""
    return torch.randn(*shape, dtype=dtype)


def bounds(a: torch.Tensor, uplo: str, w: torch.Tensor, v: torch.Tensor) -> None:
    eps = torch.finfo(a.dtype).eps
    n = a.shape[-1]
    s = a.tril() + a.tril(-1).mT if uplo == "L" else a.triu() + a.triu(1).mT
    s64, w64, v64 = s.double(), w.cpu().double(), v.cpu().double()
    scale = torch.linalg.matrix_norm(s64).clamp_min(1e-30)
    res = torch.linalg.matrix_norm(s64 @ v64 - v64 * w64.unsqueeze(-2)) / scale
    assert res.max().item() <= 8 * n * eps, res.max().item()
    orth = torch.linalg.matrix_norm(v64.mT @ v64 - torch.eye(n, dtype=torch.float64))
    assert orth.max().item() <= 8 * n * eps, orth.max().item()
    assert torch.all(w64[..., 1:] >= w64[..., :-1])  # ascending
    # |V| against the float64 reference where the eigenvalues are well separated
    w_ref, v_ref = torch.linalg.eigh(s64)
    gap = (w_ref[..., 1:] - w_ref[..., :-1]).abs().min().item()
    if gap > 1e-2 * w_ref.abs().max().item():
        err = (v64.abs() - v_ref.abs()).abs().max().item()
        assert err <= 8 * n * eps * w_ref.abs().max().item() / gap, err


def spectra(dtype: torch.dtype) -> torch.Tensor:
    """[4, 8, 8] at the unrolled limit (n = 8): random, clustered (1e-6 spread),
    graded (1e-8..1e8) and nearly diagonal symmetric matrices."""
    torch.manual_seed(1)
    n = 8
    q, _ = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64))
    clustered = torch.cat([torch.ones(n // 2), 1 + 1e-6 * torch.randn(n - n // 2)]).double()
    graded = 10.0 ** torch.empty(n).uniform_(-8, 8).double()
    mats = [torch.randn(n, n, dtype=torch.float64), q @ torch.diag(clustered) @ q.T,
            q @ torch.diag(graded) @ q.T,
            torch.diag(torch.arange(n, dtype=torch.float64)) + 1e-3 * torch.randn(n, n).double()]
    return torch.stack([(m + m.T) / 2 for m in mats]).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh(dtype):
    """Odd n (5, padded) both triangles, and n = 8 (the limit, even) with hard spectra."""
    torch.manual_seed(0)
    a = sym(2, 5, 5, dtype=dtype)
    check(lambda t: torch.linalg.eigvalsh(t, UPLO="U"), a)
    check(lambda t: torch.linalg.eigh(t).eigenvalues, a)
    before = fallback_counts()
    for uplo in ("L", "U"):
        w, v = torch.linalg.eigh(a.to(DEV), UPLO=uplo)
        bounds(a, uplo, w, v)
    b = spectra(dtype)
    check(lambda t: torch.linalg.eigh(t).eigenvalues, b[:1])  # random: vs the f64 reference
    w, v = torch.linalg.eigh(b.to(DEV))
    assert new_fallbacks(before) == []
    bounds(b, "L", w, v)
    # every spectrum's eigenvalues within 8 n eps ||A|| of float64's (LAPACK's bound)
    ref = torch.linalg.eigvalsh(b.double())
    err = (w.cpu().double() - ref).abs().amax(-1) / torch.linalg.matrix_norm(b.double(), 2)
    assert err.max().item() <= 8 * 8 * torch.finfo(dtype).eps, err


def test_above_limit_falls_back():
    a = sym(9, 9)
    before = fallback_counts()
    w = torch.linalg.eigvalsh(a.to(DEV))
    assert new_fallbacks(before) != []
    torch.testing.assert_close(w.cpu(), torch.linalg.eigvalsh(a))


def test_special_matrices():
    """Diagonal (no rotation at all), zero and empty."""
    d = torch.stack([torch.diag(torch.tensor([3.0, -1.0, 2.0, 2.0, 0.5])), torch.zeros(5, 5)])
    w, v = torch.linalg.eigh(d.to(DEV))
    assert torch.equal(w.cpu()[0], torch.tensor([-1.0, 0.5, 2.0, 2.0, 3.0]))
    assert torch.equal(v.cpu()[0].abs(), torch.linalg.eigh(d[0])[1].abs())
    assert torch.equal(w.cpu()[1], torch.zeros(5)) and torch.equal(v.cpu()[1], torch.eye(5))
    e = torch.linalg.eigh(torch.zeros(0, 3, 3).to(DEV))
    assert e.eigenvalues.shape == (0, 3) and e.eigenvectors.shape == (0, 3, 3)


def test_eigh_backward():
    """PyTorch's eigh backward composes lowered ops; sign-independent losses
    (eigenvalues, |V|, as OpInfo's output_process_fn_grad)."""
    torch.manual_seed(2)
    a = sym(2, 5, 5)

    def grad(fn, x):
        x = x.detach().requires_grad_()
        return torch.autograd.grad(fn(x), x)[0]

    def loss(m):
        w, v = torch.linalg.eigh(m)
        return w.pow(2).sum() + v.abs().sum()

    check(lambda x: grad(lambda m: torch.linalg.eigvalsh(m).pow(2).sum(), x), a)
    check(lambda x: grad(loss, x), a)
