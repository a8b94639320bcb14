"""The fused ops of nn.MultiheadAttention's and nn.TransformerEncoder's inference fast path on
"tpu" (csrc/torch/fastpath.cpp), each against PyTorch's CPU kernel with the same inputs, with
nothing run on the CPU fallback: the layer and attention ops, and the three ops inside them
that PyTorch has CPU and CUDA kernels for only."""
from __future__ import annotations

import pytest
import torch

from tpu_testing import no_fallback  # noqa: F401  (the fixture)

pytestmark = pytest.mark.usefixtures("no_fallback")

F64 = torch.float64


def _both(fn, *args, **kw) -> tuple:
    """fn on the CPU and on "tpu" (tensor arguments moved), results on the CPU."""
    cpu = fn(*args, **kw)
    dev = fn(*[a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args], **kw)
    as_tuple = (lambda r: r if isinstance(r, tuple) else (r,))
    return as_tuple(cpu), tuple(t.cpu() for t in as_tuple(dev))


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_transform_bias_rescale_qkv(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(2, 5, 3 * 12, generator=g, dtype=dtype)
    bias = torch.randn(3 * 12, generator=g, dtype=dtype)
    want, got = _both(torch.ops.aten._transform_bias_rescale_qkv, qkv, bias, 3)
    assert len(got) == 3
    for w, t in zip(want, got):
        assert t.shape == w.shape == (2, 3, 5, 4)
        torch.testing.assert_close(t, w)


@pytest.mark.parametrize("mask_type,shape", [(0, (5, 5)), (1, (2, 5)), (2, (2, 3, 5, 5))])
def test_masked_softmax_with_every_mask_type(mask_type: int, shape: tuple) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 5, 5, generator=g, dtype=F64)
    mask = torch.rand(shape, generator=g) < 0.4
    mask.view(-1, shape[-1])[0] = True  # one row (or column set) with every entry masked
    want, got = _both(torch.ops.aten._masked_softmax, x, mask, 3, mask_type)
    torch.testing.assert_close(got[0], want[0], equal_nan=True)
    assert got[0].isnan().any()  # a row with every entry masked: NaN, as on the CPU


def test_masked_softmax_over_another_dim_and_16_bit() -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 6, generator=g, dtype=F64)
    mask = torch.rand(4, 6, generator=g) < 0.3
    want, got = _both(torch.ops.aten._masked_softmax, x, mask, 0)
    torch.testing.assert_close(got[0], want[0])
    want, got = _both(torch.ops.aten._masked_softmax, x.bfloat16(), mask, 1)
    assert got[0].dtype == torch.bfloat16
    torch.testing.assert_close(got[0], want[0])


@pytest.mark.parametrize("use_gelu", [False, True])
def test_addmm_activation_and_its_out_variant(use_gelu: bool) -> None:
    g = torch.Generator().manual_seed(3)
    bias, a, b = (torch.randn(s, generator=g, dtype=F64) for s in [(7,), (4, 5), (5, 7)])
    want, got = _both(torch.ops.aten._addmm_activation, bias, a, b, beta=0.5, alpha=2.0,
                      use_gelu=use_gelu)
    torch.testing.assert_close(got[0], want[0])
    out = torch.empty(0, dtype=F64, device="tpu")
    torch.ops.aten._addmm_activation.out(bias.to("tpu"), a.to("tpu"), b.to("tpu"), beta=0.5,
                                         alpha=2.0, use_gelu=use_gelu, out=out)
    torch.testing.assert_close(out.cpu(), want[0])


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_inference_runs_on_the_device(norm_first: bool, activation: str) -> None:
    """eval under no_grad: transformer.py calls _transformer_encoder_layer_fwd (and through it
    _native_multi_head_attention) with a padding mask; float32 against the CPU."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True,
                                             norm_first=norm_first, activation=activation).eval()
    dev = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True,
                                           norm_first=norm_first, activation=activation).eval()
    dev.load_state_dict(layer.state_dict())
    dev = dev.to("tpu")
    x = torch.randn(3, 7, 16)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[1, 5:] = True
    with torch.no_grad():
        want = layer(x, src_key_padding_mask=pad)
        got = dev(x.to("tpu"), src_key_padding_mask=pad.to("tpu")).cpu()
    keep = ~pad
    torch.testing.assert_close(got[keep], want[keep])
