"""aten::_grouped_mm (csrc/core/lower/grouped_mm.c) on "tpu" against a float64 reference
and PyTorch's CPU kernel: forward and GroupedMmBackward0 (which calls the 2-D x 3-D and
2-D x 2-D forms) in bf16 (torch 2.13's only dtype for it), empty groups, rows past the last offset, one program for
every routing (no recompiles when the offsets change), and no CPU fallback.

Bound per element (derived, not tuned): the result is a sum of K products rounded once to
the output dtype, so |got - ref64| <= u_out * |ref64| + K * u32 * sum_k |a_k b_k| with
u_out the output dtype's unit roundoff and u32 float32's (the f32 accumulation)."""
import pytest
import torch

import tpuc  # noqa: F401

U = {torch.bfloat16: 2.0**-8, torch.float32: 2.0**-24}
U32 = 2.0**-24


def _ref_rows(a, b, offs):
    """A [M,K] x B [G,K,N] grouped by rows, in float64 (rows past the end: 0)."""
    out = torch.zeros(a.shape[0], b.shape[2], dtype=torch.float64)
    absout = torch.zeros_like(out)
    start = 0
    for gi, end in enumerate(offs.tolist()):
        out[start:end] = a[start:end].double() @ b[gi].double()
        absout[start:end] = a[start:end].double().abs() @ b[gi].double().abs()
        start = end
    return out, absout


def _ref_inner(a, b, offs):
    """A [M,K] x B [K,N] grouped over K -> [G,M,N], float64."""
    G = offs.shape[0]
    out = torch.zeros(G, a.shape[0], b.shape[1], dtype=torch.float64)
    absout = torch.zeros_like(out)
    start = 0
    for gi, end in enumerate(offs.tolist()):
        out[gi] = a[:, start:end].double() @ b[start:end].double()
        absout[gi] = a[:, start:end].double().abs() @ b[start:end].double().abs()
        start = end
    return out, absout


def _check(got, ref, absref, k, dtype):
    bound = U[dtype] * ref.abs() + k * U32 * absref
    err = (got.double() - ref).abs()
    assert bool((err <= bound + 1e-300).all()), f"max excess {(err - bound).max().item()}"


@pytest.mark.parametrize("dtype", [torch.bfloat16])  # the only dtype torch 2.13 accepts
@pytest.mark.parametrize("mkn", [(48, 16, 32), (48, 32, 16)])  # both branches (K<=N, K>N)
def test_rows_forward_and_backward(dtype, mkn):
    torch.manual_seed(0)
    M, K, N = mkn
    G = 4
    a = torch.randn(M, K).to(dtype)
    b = torch.randn(G, K, N).to(dtype)
    offs = torch.tensor([8, 8, 30, 40], dtype=torch.int32)  # an empty group; rows 40.. unused
    ref, absref = _ref_rows(a, b, offs)
    ad = a.to("tpu").requires_grad_()
    bd = b.to("tpu").requires_grad_()
    torch.tpu.reset_stats()
    y = torch._grouped_mm(ad, bd, offs=offs.to("tpu"))
    assert y.dtype == dtype and y.shape == (M, N)
    yc = y.cpu()
    _check(yc, ref, absref, K, dtype)
    assert bool((yc[40:] == 0).all())  # rows of no group are zeros
    # backward: grad A = grouped(g, B^T) (rows); grad B[g] = A_g^T g_g (inner)
    gr = torch.randn(M, N).to(dtype)
    gr[40:] = 0
    y.backward(gr.to("tpu"))
    ga_ref, ga_abs = _ref_rows(gr, b.transpose(-2, -1), offs)
    _check(ad.grad.cpu(), ga_ref, ga_abs, N, dtype)
    gb_ref, gb_abs = _ref_inner(a.t(), gr, offs)
    _check(bd.grad.cpu(), gb_ref, gb_abs, M, dtype)
    assert torch.tpu.stats()["fallbacks"] == {}


def test_matches_cpu_kernel_and_one_program_for_all_routings():
    torch.manual_seed(1)
    M, K, N, G = 64, 16, 16, 8
    a = torch.randn(M, K, dtype=torch.bfloat16)
    b = torch.randn(G, K, N, dtype=torch.bfloat16)
    ad, bd = a.to("tpu"), b.to("tpu")
    compiles = None
    for trial in range(4):
        counts = torch.bincount(torch.randint(0, G, (M,)), minlength=G)
        offs = torch.cumsum(counts, 0).to(torch.int32)
        want = torch._grouped_mm(a, b, offs=offs)  # PyTorch's CPU kernel (all rows used)
        got = torch._grouped_mm(ad, bd, offs=offs.to("tpu")).cpu()
        ref, absref = _ref_rows(a, b, offs)
        _check(got, ref, absref, K, torch.bfloat16)
        _check(want, ref, absref, K, torch.bfloat16)  # the bound holds for the CPU too
        n = torch.tpu.stats()["compiles"]
        if trial == 1:
            compiles = n
    assert torch.tpu.stats()["compiles"] == compiles, "a new routing compiled a new program"


def test_batched_3d():
    torch.manual_seed(2)
    a = torch.randn(3, 8, 16, dtype=torch.bfloat16)
    b = torch.randn(3, 16, 8, dtype=torch.bfloat16)
    got = torch._grouped_mm(a.to("tpu"), b.to("tpu")).cpu()
    ref = torch.bmm(a.double(), b.double())
    _check(got, ref, torch.bmm(a.double().abs(), b.double().abs()), 16, torch.bfloat16)


@pytest.mark.parametrize("M,K,N,G", [(48, 16, 24, 16), (40, 24, 8, 8)])
def test_gather_form_many_groups(M, K, N, G):
    """G >= 8 with a small [M,K,N] takes the gather forms (row-wise gathered matrices,
    scatter-added weight gradients): same bound, rows of no group zero, no fallback, and one
    program for every routing (the gather and scatter indices are data, not shapes)."""
    torch.manual_seed(3)
    a = torch.randn(M, K, dtype=torch.bfloat16)
    b = torch.randn(G, K, N, dtype=torch.bfloat16)
    gr = torch.randn(M, N, dtype=torch.bfloat16)
    torch.tpu.reset_stats()
    compiles = None
    for trial in range(3):
        counts = torch.bincount(torch.randint(0, G, (M - 5,)), minlength=G)
        counts[trial] = 0  # an empty group
        offs = torch.cumsum(counts, 0).to(torch.int32)  # rows offs[-1].. belong to no group
        end = int(offs[-1])
        ad = a.to("tpu").requires_grad_()
        bd = b.to("tpu").requires_grad_()
        y = torch._grouped_mm(ad, bd, offs=offs.to("tpu"))
        ref, absref = _ref_rows(a, b, offs)
        yc = y.cpu()
        _check(yc, ref, absref, K, torch.bfloat16)
        assert bool((yc[end:] == 0).all())
        g2 = gr.clone()
        g2[end:] = 0
        y.backward(g2.to("tpu"))
        ga_ref, ga_abs = _ref_rows(g2, b.transpose(-2, -1), offs)
        _check(ad.grad.cpu(), ga_ref, ga_abs, N, torch.bfloat16)
        gb_ref, gb_abs = _ref_inner(a.t(), g2, offs)
        _check(bd.grad.cpu(), gb_ref, gb_abs, M, torch.bfloat16)
        if trial == 1:
            compiles = torch.tpu.stats()["compiles"]
    assert torch.tpu.stats()["compiles"] == compiles, "a new routing compiled a new program"
    assert torch.tpu.stats()["fallbacks"] == {}
