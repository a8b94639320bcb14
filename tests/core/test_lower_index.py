"""The indexing lowerings (csrc/core/lower/index.c) through tpuc_op_run,
against PyTorch on the CPU."""
import pytest
import torch

from harness_nn import Unimplemented, check, noncontig, run, supports_none_in_lists

A = torch.ops.aten
torch.manual_seed(0)


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def test_index_select_gather_take():
    x = r(4, 5)
    check(A.index_select.default, x, 0, torch.tensor([3, 0, 2, 3]))
    check(A.index_select.default, noncontig(x), 1, torch.tensor([4, 1], dtype=torch.int32))
    check(A.index_select.default, x, 1, torch.tensor(2))
    idx = torch.randint(0, 5, (4, 3))
    check(A.gather.default, x, 1, idx)
    check(A.gather.default, x, 0, torch.randint(0, 4, (2, 5)))
    check(A.gather.out, x, 1, idx, out=torch.empty(4, 3))
    check(A.take.default, x, torch.tensor([[0, 19], [-1, 7]]))


def test_embedding():
    w = r(10, 4)
    check(A.embedding.default, w, torch.tensor([[1, 2], [9, 0]]))
    g = r(2, 3, 4)
    idx = torch.tensor([[1, 2, 1], [0, 9, 1]])
    check(A.embedding_dense_backward.default, g, idx, 10, -1, False)
    check(A.embedding_dense_backward.default, g, idx, 10, 1, False)
    check(A.embedding_dense_backward.default, g, idx, 10, -1, True)
    check(A.embedding_dense_backward.default, g.bfloat16(), idx, 10, 2, False)


def test_scatter_family():
    x = r(3, 5)
    idx = torch.tensor([[0, 1, 2], [2, 0, 1]])
    src = r(2, 4)
    check(A.scatter.src, x, 0, torch.tensor([[0, 1, 2, 0, 1]]), r(1, 5))
    check(A.scatter.src, x, 1, torch.tensor([[4, 1], [0, 3], [1, 2]]), r(3, 3))
    check(A.scatter.value, x, 1, torch.tensor([[4], [0], [2]]), 2.5)
    check(A.scatter.reduce, x, 1, idx, src, reduce="add")
    check(A.scatter.reduce, x, 1, idx, src, reduce="multiply")
    check(A.scatter_add.default, x, 1, idx, src)
    check(A.scatter_add_.default, r(3, 5), 0, torch.tensor([[0, 1, 2, 0, 0]]), r(1, 5))
    check(A.scatter_.value, r(3, 5), 0, torch.tensor([[2, 1]]), -1.0)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
    x = r(3, 5)
    idx = torch.tensor([[0, 1, 1, 4], [2, 2, 2, 0]])
    check(A.scatter_reduce.two, x, 1, idx, r(2, 4), reduce, include_self=include_self)
    xi = torch.randint(-9, 9, (3, 5))
    check(A.scatter_reduce.two, xi, 1, idx, torch.randint(-9, 9, (2, 4)), reduce,
          include_self=include_self)


def test_index_add_copy_fill():
    x = r(5, 3)
    idx = torch.tensor([0, 4, 0, 3])
    check(A.index_add.default, x, 0, idx, r(4, 3))
    check(A.index_add.default, x, 1, torch.tensor([2, 0]), r(5, 2), alpha=-2.0)
    check(A.index_add_.default, r(5, 3), 0, idx, r(4, 3), alpha=0.5)
    check(A.index_copy.default, x, 0, torch.tensor([4, 1]), r(2, 3))
    check(A.index_fill.int_Scalar, x, 1, torch.tensor([0, 2]), 7.0)
    check(A.index_fill.int_Tensor, x, 0, torch.tensor([4]), torch.tensor(3.0))
    check(A.index_fill_.int_Scalar, r(5, 3), 0, torch.tensor([1, 3]), -1.0)


needs_none = pytest.mark.skipif(not supports_none_in_lists(),
                                reason="the engine has no encoding for None in Tensor?[] yet")


def test_advanced_index():
    x = r(4, 5, 6)
    i = torch.tensor([[0, 3], [-1, 1]])
    j = torch.tensor([4, 0])
    check(A.index.Tensor, x, [i])
    check(A.index.Tensor, x, [i, j])


@needs_none
def test_advanced_index_none():
    x = r(4, 5, 6)
    i = torch.tensor([[0, 3], [-1, 1]])
    j = torch.tensor([4, 0])
    check(A.index.Tensor, noncontig(x), [i, None, torch.tensor([5, 0])])  # separated: front
    check(A.index.Tensor, x, [None, i, j])  # adjacent, not first
    check(A.index.Tensor, x, [None, None, j])


def test_index_put():
    x = r(4, 5, 6)
    i = torch.tensor([[0, 3], [-1, 1]])
    j = torch.tensor([4, 0])
    check(A.index_put.default, x, [i, j], r(2, 2, 6))
    check(A.index_put.default, x, [torch.tensor([1, 1, 2])], r(6), True)  # accumulate dups
    check(A.index_put_.default, r(4, 5), [torch.tensor([0, 2])], torch.tensor(9.0))
    check(A._index_put_impl_.default, r(4, 5), [torch.tensor([3, 3])], r(2, 5), True)


@needs_none
def test_index_put_none():
    x = r(4, 5, 6)
    i = torch.tensor([[0, 3], [-1, 1]])
    j = torch.tensor([4, 0])
    check(A.index_put.default, x, [None, i, j], r(4, 2, 2))
    check(A.index_put.default, x, [i, None, torch.tensor([5, 0])], r(2, 2, 5))
    check(A.index.Tensor, x, [None, x[0, :, 0] > 0])


def test_bool_masks():
    x = r(4, 5)
    m = x > 0
    check(A.index.Tensor, x, [m])
    check(A.index_put.default, x, [m], torch.tensor(0.0))
    check(A.index_put.default, x, [m], r(int(m.sum())))
    check(A.index_put.default, x, [m[:, 0]], r(5), True)
    check(A.masked_scatter.default, x, m, r(20))
    check(A.masked_scatter.default, r(3, 4), torch.tensor([True, False, True, True]), r(3, 4))


def test_put():
    x = r(3, 4)
    check(A.put.default, x, torch.tensor([0, -1, 5]), r(3))
    check(A.put.default, x, torch.tensor([1, 1, 5]), r(3), True)


def test_unknown_reduce_declines():
    with pytest.raises((Unimplemented, RuntimeError)):
        run(A.scatter.reduce, r(3, 5), 1, torch.tensor([[0]]), r(1, 1), reduce="bogus")
