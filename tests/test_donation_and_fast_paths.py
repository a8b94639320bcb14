"""Buffer donation and the specialised fast paths, against PyTorch on the CPU.

- Donation: a program that computes a storage's new value may reuse the old
  buffer's memory when nothing else holds it (in-place ops, optimizer steps,
  compiled whole steps). Values must be exactly those of the CPU whether or
  not a buffer was donated; a buffer still shared (a clone, a view's base kept
  elsewhere) is never donated.
- pow with a constant special exponent (2, 3, 0.5, -0.5, -1, -2, 1) is baked
  into the program as PyTorch's CPU kernel computes it (x * x, sqrt, ...);
  other exponents stay runtime values (no recompile when they change).
- scaled_dot_product_attention without dropout runs as one fused attention
  op (the CPU "flash" op the core lowers), with dropout through the math path.
"""
from __future__ import annotations

import sys
import os

import pytest
import torch
import torch.nn.functional as F

import tpuc  # noqa: F401
from tpuc import _C

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
sys.path.insert(0, EXAMPLES)


def _stat(name: str) -> int:
    torch.tpu.synchronize()
    return torch.tpu.stats()[name]


def test_inplace_op_donates_and_matches_cpu() -> None:
    ref = torch.arange(1000, dtype=torch.float32)
    x = ref.to("tpu")
    d0 = _stat("donations")
    for _ in range(5):
        x.mul_(1.5).add_(1)
        ref.mul_(1.5).add_(1)
    assert _stat("donations") - d0 == 10  # every in-place op reused its buffer
    assert torch.equal(x.cpu(), ref)


def test_shared_buffer_is_not_donated() -> None:
    x = torch.arange(64, dtype=torch.float32).to("tpu")
    y = x.clone()  # may share x's buffer until either is written
    v = x.view(8, 8)
    x.add_(1)
    assert torch.equal(y.cpu(), torch.arange(64, dtype=torch.float32))
    assert torch.equal(v.cpu(), (torch.arange(64, dtype=torch.float32) + 1).view(8, 8))


def test_donation_off_gives_the_same_values() -> None:
    torch.manual_seed(0)
    a = torch.randn(256, 64)
    outs = []
    for on in (True, False):
        _C._set_donation(on)
        try:
            x = a.to("tpu")
            d0 = _stat("donations")
            for _ in range(3):
                x.mul_(0.5).add_(x.sin())
            outs.append((x.cpu(), _stat("donations") - d0))
        finally:
            _C._set_donation(True)
    assert torch.equal(outs[0][0], outs[1][0])
    assert outs[0][1] > 0 and outs[1][1] == 0


def _whole_step_peaks() -> tuple[dict[bool, int], int]:
    """Peak device bytes of one compiled AdamW step with donation on and off."""
    from llama import Llama, LlamaConfig

    peaks = {}
    # the joined whole-step program (replay runs each graph as its own program,
    # which donates the same buffers: tests/test_replay.py compares the counts)
    torch.tpu.set_graph_replay("join")
    torch._dynamo.reset()
    for on in (True, False):
        _C._set_donation(on)
        try:
            torch.manual_seed(0)
            cfg = LlamaConfig(vocab_size=64, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                              max_seq_len=16)
            model = Llama(cfg).to("tpu")
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True)
            x = torch.randint(0, 64, (2, 16)).to("tpu")

            @torch.compile(backend="tpu")
            def step() -> torch.Tensor:
                _, loss = model(x, x)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                return loss

            for _ in range(3):
                step().item()
            torch.tpu.synchronize()
            torch.tpu.reset_peak_memory_stats()
            step().item()
            torch.tpu.synchronize()
            peaks[on] = torch.tpu.max_memory_allocated()
            rewritten = sum(p.numel() * 4 for p in model.parameters()) * 3  # param, exp_avg, exp_avg_sq
            del model, opt, step
        finally:
            _C._set_donation(True)
    torch.tpu.set_graph_replay("replay")
    torch._dynamo.reset()
    return peaks, rewritten


def test_whole_step_donation_saves_params_and_state() -> None:
    """A compiled whole training step: the peak with donation is lower than
    without by about the parameters + optimizer state the step rewrites.

    Measured in a fresh process: after other tests in the same process the
    saving was seen to drop to 0.85x of the rewritten bytes (state left by
    earlier programs, not yet explained; docs/execution.md), so the claim is
    checked where it is defined, a process that runs only this step."""
    import json
    import subprocess

    code = ("import json, sys; sys.path[:0] = [%r, %r]; import torch, tpuc; "
            "import test_donation_and_fast_paths as t; p, r = t._whole_step_peaks(); "
            "print(json.dumps([{str(k): v for k, v in p.items()}, r]))"
            % (os.path.dirname(os.path.abspath(__file__)), EXAMPLES))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    p, rewritten = json.loads(out.stdout.strip().splitlines()[-1])
    peaks = {True: p["True"], False: p["False"]}
    assert peaks[False] - peaks[True] >= 0.9 * rewritten, (peaks, rewritten)


@pytest.mark.parametrize("e", [2, 3, 0.5, -0.5, -1, -2, 1, 2.0, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pow_special_exponents_match_cpu(e: float, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.rand(4, 300, dtype=torch.float32).add(0.25).to(dtype)  # positive: roots defined
    got = x.to("tpu").pow(e).cpu()
    want = x.pow(e)
    tol = {} if dtype == torch.float32 else {"rtol": 1.6e-2, "atol": 1e-5}
    torch.testing.assert_close(got, want, **tol)
    if e in (2, 3, 1, 2.0, 1.0) and dtype == torch.float32:  # products: bitwise
        assert torch.equal(got, want)


def test_pow_other_exponents_do_not_recompile() -> None:
    x = torch.rand(64).add(0.5).to("tpu")
    for e in (1.7, 2.3, 4.1):
        x.pow(e).cpu()
    c0 = _stat("compiles")
    for e in (1.1, 2.9, 3.7, 5.5):
        torch.testing.assert_close(x.pow(e).cpu(), x.cpu().pow(e))
    assert _stat("compiles") == c0  # one program serves every other exponent


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_runs_as_one_fused_op(causal: bool) -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, requires_grad=True) for _ in range(3))
    qt, kt, vt = (t.detach().to("tpu").requires_grad_() for t in (q, k, v))
    before = dict(torch.tpu.stats()["fallbacks"])
    calls0 = _stat("op_calls")
    out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    calls = _stat("op_calls") - calls0
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(ref)
    ref.backward(g)
    out.backward(g.to("tpu"))
    for a, b in ((q, qt), (k, kt), (v, vt)):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5)
    assert calls <= 2, calls  # the fused attention op, not matmul + softmax + ...
    assert dict(torch.tpu.stats()["fallbacks"]) == before


def test_sdpa_with_dropout_takes_the_math_path() -> None:
    q = torch.randn(1, 2, 8, 4, device="tpu")
    torch.manual_seed(0)
    out = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert out.shape == q.shape and torch.isfinite(out.cpu()).all()
    torch.manual_seed(0)
    out2 = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert torch.equal(out.cpu(), out2.cpu())  # the device generator, reproducibly
