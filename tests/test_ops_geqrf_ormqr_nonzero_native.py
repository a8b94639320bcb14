"""geqrf, ormqr (lower/linalg_qr.c; geqrf's Meta kernel from the glue, csrc/torch/fallback.cpp),
nonzero_static and hash_tensor (lower/count.c) on "tpu" against the CPU, with no fallback.

Bounds: geqrf and ormqr are compared in float64 against LAPACK's float64 results, within
64 * n * eps64 * max|A| (Householder QR's backward error is O(n eps |A|); n <= 8 here, and the
two sides round differently); nonzero_static and hash_tensor are exact."""
from __future__ import annotations

import pytest
import torch

DEV = "tpu"
EPS64 = torch.finfo(torch.float64).eps


pytestmark = pytest.mark.usefixtures("tpu_no_fallbacks")  # tests/conftest.py


def _close(got: torch.Tensor, ref: torch.Tensor, scale: float, n: int) -> None:
    torch.testing.assert_close(got.cpu(), ref, rtol=0, atol=64 * n * EPS64 * scale)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4), (6, 6), (1, 1)])
def test_geqrf_matches_lapack(shape: tuple[int, ...]) -> None:
    a = torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    r, tau = torch.geqrf(a)
    rd, taud = torch.geqrf(a.to(DEV))
    assert rd.shape == r.shape and taud.shape == tau.shape
    n = max(shape[-2:])
    _close(rd, r, a.abs().max().item(), n)
    _close(taud, tau, 2.0, n)  # tau is in [0, 2] for real reflectors


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [True, False])
def test_ormqr_matches_lapack(left: bool, transpose: bool) -> None:
    g = torch.Generator().manual_seed(1)
    a = torch.randn(2, 6, 4, dtype=torch.float64, generator=g)
    r, tau = torch.geqrf(a)
    c = torch.randn(2, 6, 3, dtype=torch.float64, generator=g)
    if not left:
        c = c.mT.contiguous()
    ref = torch.ormqr(r, tau, c, left, transpose)
    got = torch.ormqr(r.to(DEV), tau.to(DEV), c.to(DEV), left, transpose)
    _close(got, ref, c.abs().max().item(), 6)


def test_nonzero_static_pads_and_truncates() -> None:
    x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, float("nan")], [0.0, -0.0, 3.0]])
    for size in (0, 2, 4, 9):
        for fill in (-1, 7):
            ref = torch.nonzero_static(x, size=size, fill_value=fill)
            got = torch.nonzero_static(x.to(DEV), size=size, fill_value=fill).cpu()
            assert torch.equal(got, ref), (size, fill, got, ref)
    b = torch.rand(4, 5, 6, generator=torch.Generator().manual_seed(2)) > 0.7
    assert torch.equal(torch.nonzero_static(b.to(DEV), size=40).cpu(), torch.nonzero_static(b, size=40))
    i = torch.tensor([0, 3, 0, 0, 5], dtype=torch.int32)
    assert torch.equal(torch.nonzero_static(i.to(DEV), size=3).cpu(), torch.nonzero_static(i, size=3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int32,
                                   torch.int64, torch.bool])
def test_hash_tensor_equals_the_cpu(dtype: torch.dtype) -> None:
    """mode 0: the xor of the elements' bits as float64 (floats) or int64 (the rest)."""
    x = (torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(3)) * 50).to(dtype)
    for kw in ({}, {"dim": 1}, {"dim": (0, 2), "keepdim": True}):
        ref = torch.hash_tensor(x, **kw)
        got = torch.hash_tensor(x.to(DEV), **kw).cpu()
        assert got.dtype == torch.uint64 and torch.equal(got, ref), (kw, got, ref)
    s = x[0, 0, 0]  # 0-d: dim 0 names the tensor itself
    assert torch.equal(torch.hash_tensor(s.to(DEV), dim=0, keepdim=True).cpu(),
                       torch.hash_tensor(s, dim=0, keepdim=True))
