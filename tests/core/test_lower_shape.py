"""The shape lowerings (csrc/core/lower/shape.c) through tpuc_op_run,
against PyTorch on the CPU."""
import pytest
import torch

from harness_nn import check, noncontig

A = torch.ops.aten
torch.manual_seed(0)


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def test_cat_stack():
    a, b = r(2, 3), r(4, 3)
    check(A.cat.default, [a, b])
    check(A.cat.default, [r(2, 3), noncontig(r(2, 5))], 1)
    check(A.cat.default, [a, torch.empty(0), b], -2)  # legacy empty 1-D skipped
    check(A.cat.default, [a, b.to(torch.bfloat16)])  # type promotion to out's dtype
    check(A.cat.out, [a, b], 0, out=torch.empty(6, 3))
    check(A.stack.default, [a, r(2, 3), r(2, 3)], 1)
    check(A.stack.default, [a, r(2, 3)], -1)


def test_flip_roll_repeat():
    x = r(2, 3, 4)
    check(A.flip.default, x, [0, -1])
    check(A.roll.default, x, [1, -2], [0, 2])
    check(A.roll.default, x, [5])
    check(A.roll.default, noncontig(r(3, 4)), [7], [1])
    check(A.repeat.default, x, [2, 1, 3])
    check(A.repeat.default, r(3), [2, 2, 1])
    check(A.repeat.default, torch.arange(6).reshape(2, 3), [1, 2])


@pytest.mark.parametrize("k", [-1, 0, 2])
def test_tril_triu(k):
    x = r(2, 4, 5)
    check(A.tril.default, x, k)
    check(A.triu.default, x, k)
    check(A.triu_.default, r(4, 4), k)
    check(A.tril.default, torch.ones(3, 3, dtype=torch.bool), k)
    check(A.tril_indices.default, 4, 3, k)
    check(A.triu_indices.default, 3, 5, k)


def test_padding():
    x = r(2, 3, 4, 5)
    check(A.constant_pad_nd.default, x, [1, 2, 0, 3], 1.5)
    check(A.constant_pad_nd.default, x, [-1, 2, 1, -2])
    check(A.constant_pad_nd.default, torch.arange(6).reshape(2, 3), [1, 1], 7)
    check(A.reflection_pad2d.default, x, [1, 2, 2, 1])
    check(A.replication_pad2d.default, x, [1, 2, 2, 1])
    check(A.reflection_pad1d.default, r(2, 6), [3, 2])
    check(A.replication_pad3d.default, r(1, 2, 3, 4, 5), [1, 0, 2, 1, 0, 2])


def test_padding_backward():
    x = r(2, 3, 4, 5)
    for fwd, bwd in [(A.reflection_pad2d.default, A.reflection_pad2d_backward.default),
                     (A.replication_pad2d.default, A.replication_pad2d_backward.default)]:
        g = r(*fwd(x, [1, 2, 3, 1]).shape)
        check(bwd, g, x, [1, 2, 3, 1])
    g = r(2, 11)
    check(A.reflection_pad1d_backward.default, g, r(2, 6), [3, 2])


def test_diag_embed():
    x = r(2, 3)
    for off in (-1, 0, 2):
        check(A.diag_embed.default, x, off)
        check(A.diag_embed.default, x, off, 0, 2)


def test_view_copies():
    x = r(4, 6)
    check(A.split_with_sizes_copy.default, x, [1, 3, 2], 1)
    check(A.split_copy.Tensor, x, 3)
    check(A.unbind_copy.int, x, 1)
    check(A.slice_copy.Tensor, x, 1, 1, -1, 2)
    check(A.select_copy.int, x, 0, -1)
    check(A.narrow_copy.default, x, 1, 2, 3)
    check(A.view_copy.default, x, [3, 8])
    check(A.expand_copy.default, r(4, 1), [2, 4, 5])
    check(A.permute_copy.default, r(2, 3, 4), [2, 0, 1])
    check(A.transpose_copy.int, noncontig(x), 0, 1)
    check(A.t_copy.default, x)
    check(A.unsqueeze_copy.default, x, 1)
    check(A.squeeze_copy.dim, r(4, 1, 3), 1)
