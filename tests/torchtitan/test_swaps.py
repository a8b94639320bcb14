"""The block swaps against the blocks they replace, on the CPU and on "tpu".

Bounds are derived: each side's error against a float64 reference must stay within a small
multiple of the CPU float32 computation's own error (plus a few float32 roundings of the
reference's magnitude), never a tolerance tuned to this machine."""
import pytest
import torch
import torch.nn.functional as F

import tpuc  # noqa: F401
from tpuc.integrations.torchtitan import swaps

EPS32 = 2.0**-24


def _within(got, ref64, cpu32, name):
    cpu_err = (cpu32.double() - ref64).abs().max().item()
    err = (got.double().cpu() - ref64).abs().max().item()
    bound = 4 * cpu_err + 16 * EPS32 * ref64.abs().max().item()
    assert err <= bound, f"{name}: error {err:.3g} > bound {bound:.3g} (cpu32 error {cpu_err:.3g})"


def _packed_positions(B, L, seed):
    g = torch.Generator().manual_seed(seed)
    pos = torch.zeros(B, L, dtype=torch.long)
    for b in range(B):
        p = 0
        for i in range(L):
            if i > 0 and torch.rand(1, generator=g).item() < 0.08:
                p = 0
            pos[b, i] = p
            p += 1
    return pos


@pytest.mark.parametrize("B", [1, 2])  # TorchTitan's two packed-document mask forms
def test_dense_mask_equals_flex_block_mask(B):
    from torch.nn.attention.flex_attention import and_masks, create_mask
    from torchtitan.models.common.attention import (
        get_causal_mask_mod, get_efficient_causal_mask_mod_for_packed_document)

    L = 64
    pos = _packed_positions(B, L, seed=B)
    mod = and_masks(get_causal_mask_mod(), get_efficient_causal_mask_mod_for_packed_document(pos))
    want = create_mask(mod, B, 1, L, L, device="cpu")
    got = swaps.dense_attention_mask(mod, B, None, L, L, device="cpu").materialize()
    assert torch.equal(got, want)
    # the same mask_mod evaluated on the device
    pos_d = pos.to("tpu")
    mod_d = and_masks(get_causal_mask_mod(), get_efficient_causal_mask_mod_for_packed_document(pos_d))
    got_d = swaps.dense_attention_mask(mod_d, B, None, L, L, device="tpu").materialize()
    assert torch.equal(got_d.cpu(), want)


def _math_attention(q, k, v, mask, scale):
    """(B, L, N, H) attention in float64 with GQA by repetition: the reference."""
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    s = (q @ k.transpose(-2, -1)) * scale
    s = s.masked_fill(~mask, float("-inf"))
    return (s.softmax(-1) @ v).transpose(1, 2)


def test_device_attention_matches_reference_values_and_grads():
    from torch.nn.attention.flex_attention import and_masks
    from torchtitan.models.common.attention import (
        get_causal_mask_mod, get_efficient_causal_mask_mod_for_packed_document)

    torch.manual_seed(0)
    B, L, NQ, NKV, H = 2, 48, 4, 2, 16  # GQA: 2 query heads per KV head
    scale = H**-0.5
    pos = _packed_positions(B, L, seed=3)
    q, k, v = (torch.randn(B, L, n, H, dtype=torch.float64) for n in (NQ, NKV, NKV))
    g_out = torch.randn(B, L, NQ, H, dtype=torch.float64)

    def run(device, dtype):
        p = pos.to(device)
        mod = and_masks(get_causal_mask_mod(), get_efficient_causal_mask_mod_for_packed_document(p))
        m = swaps.dense_attention_mask(mod, B, None, L, L, device=device)
        ts = [t.to(device, dtype).requires_grad_() for t in (q, k, v)]
        out = swaps.DeviceAttention()(*ts, attention_masks=m, scale=scale, enable_gqa=True)
        out.backward(g_out.to(device, dtype))
        return [out.detach()] + [t.grad for t in ts]

    mask = swaps.dense_attention_mask(
        and_masks(get_causal_mask_mod(), get_efficient_causal_mask_mod_for_packed_document(pos)),
        B, None, L, L).materialize()
    ts = [t.clone().requires_grad_() for t in (q, k, v)]
    ref_out = _math_attention(*ts, mask, scale)
    ref_out.backward(g_out)
    ref = [ref_out.detach()] + [t.grad for t in ts]
    cpu = run("cpu", torch.float32)
    dev = run("tpu", torch.float32)
    for name, r, c, d in zip(("out", "dq", "dk", "dv"), ref, cpu, dev):
        _within(d, r, c, name)


def test_fused_linear_cross_entropy_matches_plain_loss():
    torch.manual_seed(1)
    N, D, V = 300, 32, 500
    h = torch.randn(N, D, dtype=torch.float64)
    w = torch.randn(V, D, dtype=torch.float64) * 0.2
    y = torch.randint(0, V, (N,))
    y[::7] = -100  # ignored tokens

    def plain(h, w):
        return F.cross_entropy(h @ w.t(), y.to(h.device), reduction="sum", ignore_index=-100)

    def fused(h, w):
        return swaps.linear_cross_entropy(h, w, y.to(h.device), chunk=64, ignore_index=-100)

    def grads(fn, device, dtype):
        hh = h.to(device, dtype).detach().clone().requires_grad_()
        ww = w.to(device, dtype).detach().clone().requires_grad_()
        loss = fn(hh, ww)
        loss.backward()
        return [loss.detach().reshape(1), hh.grad, ww.grad]

    ref = grads(plain, "cpu", torch.float64)
    cpu_plain = grads(plain, "cpu", torch.float32)
    for device in ("cpu", "tpu"):
        got = grads(fused, device, torch.float32)
        for name, r, c, g in zip(("loss", "dh", "dw"), ref, cpu_plain, got):
            _within(g, r, c, f"{device} {name}")
    f64 = grads(fused, "cpu", torch.float64)  # the algorithm itself, in float64
    for r, g in zip(ref, f64):
        assert (r - g).abs().max().item() <= 1e3 * 2.0**-53 * max(1.0, r.abs().max().item())


def test_fused_loss_never_materialises_the_logits_on_device():
    """Peak device memory of loss+backward: fused stays below plain by most of the logits."""
    torch.manual_seed(2)
    N, D, V = 2048, 64, 2048
    logits_bytes = N * V * 4
    h0 = torch.randn(N, D) * 0.1
    w0 = torch.randn(V, D) * 0.1
    y = torch.randint(0, V, (N,)).to("tpu")

    def peak(fn):
        h = h0.to("tpu").requires_grad_()
        w = w0.to("tpu").requires_grad_()
        torch.tpu.synchronize()
        base = torch.tpu.memory_allocated()
        torch.tpu.reset_peak_memory_stats()
        fn(h, w).backward()
        torch.tpu.synchronize()
        return torch.tpu.max_memory_allocated() - base

    plain = peak(lambda h, w: F.cross_entropy(h @ w.t(), y, reduction="sum"))
    fused = peak(lambda h, w: swaps.linear_cross_entropy(h, w, y, chunk=256))
    print(f"\nloss swap peak: plain {plain / 2**20:.1f} MiB, fused {fused / 2**20:.1f} MiB")
    assert plain >= logits_bytes  # the plain loss holds the full logits at least once
    assert fused < plain - logits_bytes // 2


def test_swap_parse():
    assert swaps.parse("attention,loss") == {"attention", "loss"}
    assert swaps.parse("none") == set()
    with pytest.raises(ValueError, match="unknown TorchTitan swaps"):
        swaps.parse("attention,bogus")
