"""The device kernels of tpuc.integrations.torchrec against FBGEMM's CPU kernels: the fbgemm
jagged/permute operators, run on "tpu" without the CPU fallback (nn.EmbeddingBag's kernels
are tpuc's own: tests/test_embedding_bag.py)."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("torchrec", reason="torchrec is not installed (make rec-setup)")

import torchrec  # noqa: E402,F401  (imports fbgemm_gpu: the kernels get registered)

import tpuc  # noqa: E402,F401
from tpu_testing import no_fallback  # noqa: E402,F401  (the fixture)

F = torch.ops.fbgemm

pytestmark = pytest.mark.usefixtures("no_fallback")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_asynchronous_complete_cumsum(dtype: torch.dtype) -> None:
    t = torch.tensor([3, 0, 2, 5, 1], dtype=dtype)
    got = F.asynchronous_complete_cumsum(t.to("tpu"))
    assert got.device.type == "tpu" and got.dtype == dtype
    assert torch.equal(got.cpu(), F.asynchronous_complete_cumsum(t))


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("pass_sum", [False, True])
def test_permute_2D_sparse_data(weighted: bool, pass_sum: bool) -> None:
    g = _gen(1)
    lengths = torch.randint(0, 4, (4, 3), generator=g)
    n = int(lengths.sum())
    values = torch.randint(0, 100, (n,), generator=g)
    weights = torch.rand(n, generator=g) if weighted else None
    perm = torch.tensor([3, 0, 2, 1], dtype=torch.int32)
    total = int(lengths[perm.long()].sum()) if pass_sum else None
    want = F.permute_2D_sparse_data(perm, lengths, values, weights, total)
    t = (lambda x: None if x is None else x.to("tpu"))
    got = F.permute_2D_sparse_data(t(perm), t(lengths), t(values), t(weights), total)
    for a, b in zip(got, want):
        assert (a is None) == (b is None)
        if b is not None:
            assert torch.equal(a.cpu(), b)


def test_permute_1D_sparse_data_repeats_and_drops() -> None:
    lengths = torch.tensor([2, 0, 3, 1], dtype=torch.int32)
    values = torch.arange(6, dtype=torch.float32)
    perm = torch.tensor([2, 2, 0], dtype=torch.int32)  # segment 2 twice, 1 and 3 dropped
    want = F.permute_1D_sparse_data(perm, lengths, values, None, None)
    got = F.permute_1D_sparse_data(perm.to("tpu"), lengths.to("tpu"), values.to("tpu"), None, None)
    assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])


def test_segment_sum_csr() -> None:
    values = torch.randn(12, generator=_gen(2))
    csr = torch.tensor([0, 1, 3, 4], dtype=torch.int32)
    torch.testing.assert_close(F.segment_sum_csr(3, csr.to("tpu"), values.to("tpu")).cpu(),
                               F.segment_sum_csr(3, csr, values))


def test_permute_pooled_embs() -> None:
    emb = torch.randn(4, 10, generator=_gen(3))
    off, perm = torch.tensor([0, 3, 5, 10]), torch.tensor([2, 0, 1])
    inv_off, inv = torch.tensor([0, 5, 8, 10]), torch.tensor([1, 2, 0])
    want = F.permute_pooled_embs(emb, off, perm, inv_off, inv)
    got = F.permute_pooled_embs(*(x.to("tpu") for x in (emb, off, perm, inv_off, inv)))
    assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("weighted", [False, True])
def test_block_bucketize_sparse_features(weighted: bool) -> None:
    """Row-wise sharding's split; ids past my_size blocks take the modulo path."""
    lengths = torch.tensor([2, 0, 3, 1, 2, 1])  # 2 features x batch 3
    ids = torch.tensor([5, 19, 0, 7, 12, 3, 25, 8, 1])
    blocks = torch.tensor([10, 4])
    w = torch.rand(9, generator=_gen(4)) if weighted else None
    want = F.block_bucketize_sparse_features(lengths, ids, False, False, blocks, 2, w)
    t = (lambda x: None if x is None else x.to("tpu"))
    got = F.block_bucketize_sparse_features(t(lengths), t(ids), False, False, t(blocks), 2, t(w))
    for a, b in zip(got, want):
        assert (a is None) == (b is None)
        if b is not None:
            assert torch.equal(a.cpu(), b)
