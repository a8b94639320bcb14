"""scaled_dot_product_attention with a boolean mask that masks a whole query row (what a
left-padded batch gives at its padding positions): PyTorch's CPU kernel returns 0 for that row,
and so must "tpu" - NaN there survives a later multiply by a zero loss mask (TRL's GRPO loss
turned NaN that way)."""
import torch
import torch.nn.functional as F

from tests.tpu_testing import assert_same


def test_fully_masked_row_is_zero_forward_and_backward() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))
    m = torch.tril(torch.ones(4, 4, dtype=torch.bool))
    m[0, :] = False  # query 0 sees no key
    m = m[None, None]
    outs, grads = [], []
    for dev in ("cpu", "tpu"):
        xs = [t.to(dev).requires_grad_(True) for t in (q.clone(), k.clone(), v.clone())]
        o = F.scaled_dot_product_attention(*xs, attn_mask=m.to(dev))
        o.sum().backward()
        outs.append(o.detach())
        grads.append([x.grad for x in xs])
    assert torch.equal(outs[0][0, :, 0], torch.zeros(2, 8))
    assert_same(outs[1], outs[0])
    for g_tpu, g_cpu in zip(grads[1], grads[0]):
        assert_same(g_tpu, g_cpu)
