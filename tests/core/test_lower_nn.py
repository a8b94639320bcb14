"""The nn lowerings (csrc/core/lower/nn*.c) through tpuc_op_run, against
PyTorch on the CPU: softmax, dropout, losses, normalization, convolution,
pooling and attention, forward and backward."""
import pytest
import torch

from harness_nn import RNG, check, noncontig, run

A = torch.ops.aten
torch.manual_seed(0)


def r(*shape, dtype=torch.float32):
    return torch.randn(shape).to(dtype)


BF16 = dict(rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax(dtype):
    x = r(3, 7, dtype=dtype)
    tol = BF16 if dtype == torch.bfloat16 else {}
    check(A._softmax.default, x, 1, False, **tol)
    check(A._log_softmax.default, noncontig(r(4, 5, dtype=dtype)), 0, False, **tol)
    y = torch.softmax(x.float(), 1).to(dtype)
    check(A._softmax_backward_data.default, r(3, 7, dtype=dtype), y, 1, dtype, **tol)
    check(A._log_softmax_backward_data.default, r(3, 7, dtype=dtype), y.log(), 1, dtype, **tol)


def test_safe_softmax():
    x = r(3, 5)
    x[1] = float("-inf")
    check(A._safe_softmax.default, x, -1)


def test_dropout():
    x = r(64, 64) + 3
    (out, mask), _ = run(A.native_dropout.default, x, 0.25, True, rng=RNG(7, 0))
    keep = mask.float().mean().item()
    assert 0.7 < keep < 0.8
    torch.testing.assert_close(out, torch.where(mask, x / 0.75, torch.zeros_like(x)))
    (out2, mask2), _ = run(A.native_dropout.default, x, 0.25, True, rng=RNG(7, 0))
    assert torch.equal(mask, mask2)
    (out3, mask3), _ = run(A.native_dropout.default, x, 0.25, True, rng=RNG(7, 4096))
    assert not torch.equal(mask, mask3)
    check(A.native_dropout.default, x, 0.25, False)
    check(A.native_dropout_backward.default, r(4, 5), torch.rand(4, 5) > 0.5, 1.25)


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_nll_loss(reduction):
    x = torch.log_softmax(r(6, 5), 1)
    t = torch.tensor([0, 4, 2, -100, 1, 2])
    w = torch.rand(5)
    for weight in (None, w):
        _, (out, total) = check(A.nll_loss_forward.default, x, t, weight, reduction, -100)
        g = r(*out.shape)
        check(A.nll_loss_backward.default, g, x, t, weight, reduction, -100, total)
    check(A.nll_loss_forward.default, x[0], t[0], None, reduction, -100)
    x4 = torch.log_softmax(r(2, 3, 4, 5), 1)
    t4 = torch.randint(0, 3, (2, 4, 5))
    _, (out, total) = check(A.nll_loss2d_forward.default, x4, t4, w[:3], reduction, 1)
    check(A.nll_loss2d_backward.default, r(*out.shape), x4, t4, w[:3], reduction, 1, total)


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_regression_losses(reduction):
    x, t = r(4, 5), r(4, 5)
    check(A.mse_loss.default, x, t, reduction)
    g = r(4, 5) if reduction == 0 else torch.randn(())
    check(A.mse_loss_backward.default, g, x, t, reduction)
    p, y, w = torch.rand(4, 5) * 0.9 + 0.05, torch.rand(4, 5), torch.rand(5)
    check(A.binary_cross_entropy.default, p, y, w, reduction)
    check(A.binary_cross_entropy_backward.default, g, p, y, None, reduction)
    check(A.binary_cross_entropy_with_logits.default, x, y, w, torch.rand(5) + 0.5, reduction)
    check(A.binary_cross_entropy_with_logits.default, x * 30, y, None, None, reduction)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm(dtype):
    tol = BF16 if dtype == torch.bfloat16 else {}
    x, w, b = r(3, 4, 8, dtype=dtype), r(8, dtype=dtype), r(8, dtype=dtype)
    _, (y, mean, rstd) = check(A.native_layer_norm.default, x, [8], w, b, 1e-5, **tol)
    check(A.native_layer_norm.default, noncontig(r(4, 6)), [4, 6], None, None, 1e-3)
    g = r(3, 4, 8, dtype=dtype)
    if dtype == torch.bfloat16:  # f32 accumulation here, bf16 sums in PyTorch's kernel
        tol = dict(rtol=5e-2, atol=5e-2)
    check(A.native_layer_norm_backward.default, g, x, [8], mean, rstd, w, b,
          [True, True, True], **tol)
    check(A.native_layer_norm_backward.default, g, x, [4, 8], *A.native_layer_norm.default(
        x, [4, 8], None, None, 1e-5)[1:], None, None, [True, False, False], **tol)


def test_batch_norm():
    x, w, b = r(4, 3, 5, 5), r(3), r(3)
    rm, rv = r(3), torch.rand(3) + 0.5
    _, (y, sm, si, *_) = check(A.native_batch_norm.default, x, w, b, rm, rv, True, 0.1, 1e-5)
    check(A.native_batch_norm.default, x, w, b, rm, rv, False, 0.1, 1e-5)
    check(A.native_batch_norm.default, r(6, 3), None, None, None, None, True, 0.1, 1e-5)
    check(A._native_batch_norm_legit.default, x, w, b, rm.clone(), rv.clone(), True, 0.3, 1e-5)
    check(A._native_batch_norm_legit.no_stats, x, w, b, True, 0.1, 1e-5)
    check(A._native_batch_norm_legit_no_training.default, x, w, b, rm, rv, 0.1, 1e-5)
    check(A._batch_norm_with_update.default, x, w, b, rm.clone(), rv.clone(), 0.1, 1e-5)
    check(A._batch_norm_with_update_functional.default, x, w, b, rm, rv, 0.1, 1e-5)
    check(A._batch_norm_no_update.default, x, w, b, rm, rv, 0.1, 1e-5)
    g = r(4, 3, 5, 5)
    check(A.native_batch_norm_backward.default, g, x, w, rm, rv, sm, si, True, 1e-5,
          [True, True, True])
    check(A.native_batch_norm_backward.default, g, x, w, rm, rv, None, None, False, 1e-5,
          [True, True, True])
    check(A.native_batch_norm_backward.default, g, x, None, None, None, sm, si, True, 1e-5,
          [True, False, False])


def test_group_norm():
    x, w, b = r(2, 6, 4, 3), r(6), r(6)
    _, (y, mean, rstd) = check(A.native_group_norm.default, x, w, b, 2, 6, 12, 3, 1e-5)
    check(A.native_group_norm_backward.default, r(2, 6, 4, 3), x, mean, rstd, w, 2, 6, 12, 3,
          [True, True, True])


CONVS = [
    # (input, weight, stride, padding, dilation, groups)
    ((2, 4, 9, 8), (6, 4, 3, 3), [1, 1], [1, 1], [1, 1], 1),
    ((2, 4, 9, 8), (6, 2, 3, 2), [2, 1], [0, 1], [1, 2], 2),
    ((1, 3, 10, 11), (3, 1, 3, 3), [2, 2], [1, 0], [1, 1], 3),  # depthwise, odd sizes
    ((2, 4, 12), (5, 4, 3), [2], [1], [2], 1),  # 1-D
]


@pytest.mark.parametrize("case", CONVS)
def test_convolution(case):
    xs, ws, s, p, d, groups = case
    x, w, b = r(*xs), r(*ws), r(ws[0])
    nsp = len(xs) - 2
    _, (y,) = check(A.convolution.default, x, w, b, s, p, d, False, [0] * nsp, groups)
    g = r(*y.shape)
    check(A.convolution_backward.default, g, x, w, [ws[0]], s, p, d, False, [0] * nsp, groups,
          [True, True, True], rtol=1e-4, atol=1e-4)
    check(A.convolution_backward.default, g, x, w, None, s, p, d, False, [0] * nsp, groups,
          [False, True, False], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", [
    ((2, 4, 5, 6), (4, 3, 3, 3), [2, 2], [1, 1], [1, 1], [1, 0], 1),
    ((1, 4, 5, 5), (4, 1, 2, 3), [1, 2], [0, 1], [2, 1], [0, 1], 2),
])
def test_transposed_convolution(case):
    xs, ws, s, p, d, op, groups = case
    x, w, b = r(*xs), r(*ws), r(ws[1] * groups)
    _, (y,) = check(A.convolution.default, x, w, b, s, p, d, True, op, groups, rtol=1e-4,
                    atol=1e-4)
    check(A.convolution_backward.default, r(*y.shape), x, w, [ws[1] * groups], s, p, d, True, op,
          groups, [True, True, True], rtol=1e-4, atol=1e-4)


def test_convolution_overrideable():
    """The extension points ATen's convolution reaches for an out-of-tree device."""
    x, w, b = r(2, 4, 9, 8), r(6, 2, 3, 2), r(6)
    args = ([2, 1], [0, 1], [1, 2], False, [0, 0], 2)
    y = torch.nn.functional.conv2d(x, w, b, *args[:3], groups=2)
    (z,), _ = run(A.convolution_overrideable.default, x, w, b, *args, out_like=[y])
    torch.testing.assert_close(z, y)
    g = r(*y.shape)
    ref = A.convolution_backward.default(g, x, w, [6], *args, [True, True, True])
    (gi, gw, gb), _ = run(A.convolution_backward_overrideable.default, g, x, w, *args,
                          [True, True, True], out_like=list(ref))
    for a_, b_ in zip((gi, gw, gb), ref):
        torch.testing.assert_close(a_, b_, rtol=1e-4, atol=1e-4)


def test_conv_bf16():
    x, w = r(2, 3, 8, 8, dtype=torch.bfloat16), r(4, 3, 3, 3, dtype=torch.bfloat16)
    check(A.convolution.default, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, **BF16)


@pytest.mark.parametrize("args", [
    ([2, 2], [], [0, 0], [1, 1], False),
    ([3, 3], [2, 2], [1, 1], [1, 1], False),
    ([3, 2], [2, 1], [1, 0], [1, 1], True),
    ([2, 2], [1, 1], [0, 0], [2, 2], False),
])
def test_max_pool(args):
    x = r(2, 3, 7, 8)
    x[0, 0, 0, :3] = 5.0  # ties: the first index wins
    _, (y, idx) = check(A.max_pool2d_with_indices.default, x, *args)
    k, s, p, d, ceil = args
    check(A.max_pool2d_with_indices_backward.default, r(*y.shape), x, k, s or k, p, d, ceil, idx)


@pytest.mark.parametrize("args", [
    ([2, 2], [], [0, 0], False, True, None),
    ([3, 3], [2, 2], [1, 1], False, True, None),
    ([3, 3], [2, 2], [1, 1], True, False, None),
    ([3, 2], [2, 1], [1, 0], True, True, 5),
])
def test_avg_pool(args):
    x = r(2, 3, 7, 8)
    _, (y,) = check(A.avg_pool2d.default, x, *args)
    k, s, p, ceil, inc, div = args
    check(A.avg_pool2d_backward.default, r(*y.shape), x, k, s or k, p, ceil, inc, div)


@pytest.mark.parametrize("out", [[1, 1], [2, 4], [3, 5]])
def test_adaptive_avg_pool(out):
    x = r(2, 3, 8, 10)
    _, (y,) = check(A._adaptive_avg_pool2d.default, x, out)
    check(A._adaptive_avg_pool2d_backward.default, r(*y.shape), x)
    check(A._adaptive_avg_pool2d.default, r(3, 7, 9), out)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_flash_cpu(causal):
    q, k, v = r(2, 3, 5, 4), r(2, 3, 7, 4), r(2, 3, 7, 4)
    _, (o, lse) = check(A._scaled_dot_product_flash_attention_for_cpu.default, q, k, v, 0.0, causal)
    go = r(2, 3, 5, 4)
    check(A._scaled_dot_product_flash_attention_for_cpu_backward.default, go, q, k, v, o, lse,
          0.0, causal, rtol=1e-4, atol=1e-4)
    mask = torch.rand(5, 7) > 0.3
    mask[:, 0] = True
    check(A._scaled_dot_product_flash_attention_for_cpu.default, q, k, v, 0.0, causal,
          attn_mask=torch.zeros(5, 7).masked_fill(~mask, float("-inf")), scale=0.3)


def test_empty_batches():
    x = r(0, 3, 4, 4)
    check(A.avg_pool2d.default, x, [2, 2])
    check(A.max_pool2d_with_indices.default, x, [2, 2])
    check(A._adaptive_avg_pool2d.default, x, [2, 2])
    check(A._softmax.default, r(0, 3), 1, False)
    check(A.nll_loss_forward.default, r(0, 5), torch.zeros(0, dtype=torch.long), None, 1, -100)
    check(A.convolution.default, x, r(4, 3, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
