"""Sparse layouts on "tpu" (csrc/torch/sparse.cpp): COO and CSR tensors live on the device
(their members are tpu tensors), their metadata and members are read there, every other
sparse op runs on the CPU, counted as a fallback like the dense CPU path. Values are checked
against the same ops on the CPU."""
from __future__ import annotations

import warnings

import pytest
import torch

from tpu_testing import quiet_fallback_warnings  # noqa: F401


def _dense(seed: int, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g).to(dtype)
    keep = torch.rand(shape, generator=g) < 0.3
    return x * keep


def _fallbacks() -> dict[str, int]:
    return dict(torch.tpu.stats()["fallbacks"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
def test_to_sparse_round_trip(dtype: torch.dtype) -> None:
    x = _dense(0, (5, 7), dtype)
    s = x.to("tpu").to_sparse()
    ref = x.to_sparse()
    assert s.device.type == "tpu" and s.layout == torch.sparse_coo and s.dtype == dtype
    assert s.is_coalesced() == ref.is_coalesced()
    assert s._nnz() == ref._nnz() and s.sparse_dim() == 2 and s.dense_dim() == 0
    assert s.indices().device.type == "tpu" and s.values().device.type == "tpu"
    assert torch.equal(s.indices().cpu(), ref.indices())
    assert torch.equal(s.values().cpu(), ref.values())
    back = s.to_dense()
    assert back.device.type == "tpu" and back.layout == torch.strided
    assert torch.equal(back.cpu(), x)
    assert torch.equal(s.cpu().to_dense(), x)  # a sparse tpu tensor moved to the host


def test_sparse_mm_and_coalesce() -> None:
    a, b = _dense(1, (6, 5)), torch.randn(5, 3, generator=torch.Generator().manual_seed(2))
    sa = a.to_sparse()
    got = torch.sparse.mm(sa.to("tpu"), b.to("tpu"))
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), torch.sparse.mm(sa, b), rtol=0, atol=0)
    # uncoalesced: a repeated index, summed by coalesce
    i = torch.tensor([[0, 1, 0, 2], [1, 0, 1, 2]])
    v = torch.tensor([1.0, 2.0, 3.0, 4.0])
    u = torch.sparse_coo_tensor(i, v, (3, 3))
    ut = torch.sparse_coo_tensor(i.to("tpu"), v.to("tpu"), (3, 3))
    assert ut.device.type == "tpu" and not ut.is_coalesced()
    c, cref = ut.coalesce(), u.coalesce()
    assert c.device.type == "tpu" and c.is_coalesced()
    assert torch.equal(c.indices().cpu(), cref.indices())
    assert torch.equal(c.values().cpu(), cref.values())
    assert torch.equal(ut.to_dense().cpu(), u.to_dense())


def test_sparse_in_place_and_elementwise() -> None:
    x = _dense(3, (4, 6))
    s = x.to("tpu").to_sparse()
    s.mul_(2.5)  # in place on a sparse tpu tensor: its members are replaced
    assert s.device.type == "tpu" and torch.equal(s.to_dense().cpu(), x * 2.5)
    t = (s + s).coalesce()
    assert torch.equal(t.to_dense().cpu(), (x * 5.0))


def test_csr() -> None:
    x = _dense(4, (5, 6))
    c = x.to("tpu").to_sparse_csr()
    ref = x.to_sparse_csr()
    assert c.device.type == "tpu" and c.layout == torch.sparse_csr
    assert torch.equal(c.crow_indices().cpu(), ref.crow_indices())
    assert torch.equal(c.col_indices().cpu(), ref.col_indices())
    assert torch.equal(c.values().cpu(), ref.values())
    assert c._nnz() == ref._nnz()
    assert torch.equal(c.to_dense().cpu(), x)
    b = torch.randn(6, 2, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close((c @ b.to("tpu")).cpu(), ref @ b, rtol=0, atol=0)
    # built on the device from its members
    c2 = torch.sparse_csr_tensor(ref.crow_indices().to("tpu"), ref.col_indices().to("tpu"),
                                 ref.values().to("tpu"), ref.shape)
    assert c2.device.type == "tpu" and torch.equal(c2.to_dense().cpu(), x)


def test_sparse_ops_are_counted_and_warned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TPUC_FALLBACK", raising=False)
    s = _dense(6, (3, 4)).to("tpu").to_sparse()
    before = _fallbacks().get("aten::_to_dense", 0)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        s.to_dense()
        s.to_dense()
    assert _fallbacks().get("aten::_to_dense", 0) == before + 2
    if before == 0:
        assert sum("aten::_to_dense runs on the CPU (sparse layout" in str(x.message) for x in w) == 1
    # metadata and members are read on the device, not counted
    n = dict(_fallbacks())
    s._nnz(), s.indices(), s.values(), s.sparse_dim(), s.is_coalesced()
    assert _fallbacks() == n


def test_sparse_fallback_error_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _dense(7, (3, 4)).to("tpu").to_sparse()
    monkeypatch.setenv("TPUC_FALLBACK", "error")
    with pytest.raises(RuntimeError, match="TPUC_FALLBACK=error"):
        s.to_dense()


@pytest.mark.parametrize("reduce", ["sum", "amax"])
def test_sparse_mm_reduce_grad(reduce: str) -> None:
    """The CPU kernel returns amax's argmax (for the backward) only when a gradient is wanted:
    the host copies keep requires_grad."""
    a = _dense(8, (4, 5)).to_sparse_csr()
    b = torch.randn(5, 3, generator=torch.Generator().manual_seed(9))
    got = []
    for dev in ("cpu", "tpu"):
        ad = a.to(dev).requires_grad_(True)
        bd = b.to(dev).requires_grad_(True)
        out = torch.sparse.mm(ad, bd, reduce)
        ga, gb = torch.autograd.grad(out.sum(), (ad, bd))
        got.append((out.cpu(), ga.to_dense().cpu(), gb.cpu()))
    for g, w in zip(got[1], got[0]):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
