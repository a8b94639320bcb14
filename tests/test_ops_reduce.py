"""Reductions and scans on the device "tpu" against PyTorch on the CPU,
through the real PyTorch device: dims, keepdim, dtype=, NaN propagation,
max/min with indices, gradients — and every op runs natively (no new entry
in torch.tpu.stats()["fallbacks"])."""
from __future__ import annotations

import re
import warnings

import pytest
import numpy as np
import torch

import tpuc  # noqa: F401  (registers "tpu")
from test_ops_elementwise import _fallbacks, _new_fallbacks, r, same, seeded  # noqa: F401

DEV = "tpu"
BF16, I64 = torch.bfloat16, torch.int64


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
def test_sum_mean_prod(dtype):
    x = r(3, 4, 5, dtype=dtype, lo=0.5, hi=1.5)
    same(lambda x: (x.sum(), x.sum(1), x.sum((0, 2), keepdim=True), x.sum(-1, dtype=torch.float64)), x)
    same(lambda x: (x.mean(), x.mean(1), x.mean((0, 1), keepdim=True)), x)
    same(lambda x: (x.prod(1), x[0].prod()), x, tol=dict(rtol=0.05, atol=1e-3) if dtype == BF16 else None)
    same(lambda x: (x.t().sum(0) if x.dim() == 2 else x.transpose(0, 2).sum(0)), x)


def test_integer_and_bool_reductions():
    i, b = r(4, 5, dtype=I64, lo=-5, hi=5), r(4, 5) > 0
    same(lambda i, b: (i.sum(), i.sum(0), b.sum(1), i.prod(1), i.amax(0), i.min(), b.any(), b.all(1)), i, b)
    same(lambda i: (i.cumsum(1), i.max(1), i.argmin(0), torch.count_nonzero(i, 1)), i)


def test_max_min_arg():
    x = r(4, 6)
    x[1, 2] = float("nan")
    same(lambda x: (x.max(), x.min(), x.amax(1), x.amin((0, 1))), x)
    same(lambda x: (*x.max(1), *x.min(0, keepdim=True)), x)
    same(lambda x: (x.argmax(), x.argmin(1), x.argmax(0, keepdim=True)), x)
    y = r(5, 3)
    same(lambda y: (*torch.max(y, 1), torch.argmax(y.to(BF16), 0)), y)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_max_min_of_nothing_raises_as_on_the_cpu(mode: str) -> None:
    # a max over no element was XLA's identity (-inf / +inf); PyTorch raises
    before = torch.tpu.get_eager_mode()
    torch.tpu.set_eager_mode(mode)
    try:
        for name in ("max", "min"):
            with pytest.raises(RuntimeError) as cpu:
                getattr(torch.empty(0), name)()
            with pytest.raises(RuntimeError, match=re.escape(str(cpu.value))):
                getattr(torch.empty(0, 3, device=DEV), name)()
        assert torch.tensor([1.0, 3.0], device=DEV).max().item() == 3.0
    finally:
        torch.tpu.set_eager_mode(before)


def test_var_std_norm():
    x = r(4, 5, 6, lo=-3, hi=5)
    same(lambda x: (x.var(), x.var(1), x.std((0, 2), keepdim=True), x.var(1, correction=0)), x)
    same(lambda x: (*torch.var_mean(x, 1), *torch.std_mean(x, (0, 1), correction=2)), x)
    same(lambda x: (x.norm(), x.norm(1), x.norm(float("inf"), dim=1), x.norm(3, dim=(0, 2))), x)
    same(lambda x: (torch.linalg.vector_norm(x), torch.linalg.vector_norm(x, 0.5, dim=-1)), x)
    same(lambda x: torch.linalg.vector_norm(x.to(BF16), dim=1), x)


def test_norm_orders_built_into_the_program():
    """p = 0, 1, 2 are baked into the signature (only their formula is built);
    one input through every order in turn, so a program cached for one p must
    not answer for another; other orders (0.5, 3, +-inf) stay runtime values."""
    x = r(4, 5, 6, lo=-3, hi=5)
    x[0, 1] = 0.0  # zeros count for p = 0
    for p in (2, 1, 0, 2.0, 0.5, 3, float("inf"), float("-inf"), 1):
        same(lambda x: (torch.linalg.vector_norm(x, p), torch.linalg.vector_norm(x, p, dim=(0, 2)),
                        x.norm(p, dim=1, keepdim=True)), x)
    same(lambda x: torch._foreach_norm([x, x[1:], x[:, :2]], 1), x)
    same(lambda x: torch._foreach_norm([x, x[1:]]), x)


def test_logical_logsumexp_scans():
    x = r(3, 4, 5, lo=-1, hi=1)
    same(lambda x: ((x > 0).all(), (x > 0).any(1), x.round().bool().all((0, 2))), x)
    same(lambda x: (torch.logsumexp(x * 30, 1), torch.logsumexp(x, (0, 2), keepdim=True)), x)
    same(lambda x: (x.cumsum(2), x.cumprod(0), x.to(BF16).cumsum(1)), x)
    same(lambda x: (torch.count_nonzero(x.round()), torch.count_nonzero(x.round(), (0, 1))), x)


def test_nansum_aminmax_median():
    x = torch.randperm(20).reshape(4, 5).float()
    same(lambda x: (x.median(), *x.median(1), *torch.aminmax(x, dim=0), x.nansum(1)), x)


@pytest.mark.parametrize("fn", [lambda x: x.sum(1), lambda x: x.mean(), lambda x: x.var(0),
                                lambda x: x.norm(dim=1), lambda x: x.amax(1),
                                lambda x: torch.logsumexp(x, 1), lambda x: x.cumsum(1),
                                lambda x: x.prod(1), lambda x: x.max(1).values])
def test_reduction_gradients(fn):
    x = r(3, 5, lo=0.5, hi=2)
    g_out = torch.randn_like(fn(x))
    xc, xd = x.clone().requires_grad_(), x.to(DEV).requires_grad_()
    before = _fallbacks()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn(xd).backward(g_out.to(DEV))
        fell = _new_fallbacks(before)
    fn(xc).backward(g_out)
    torch.testing.assert_close(xd.grad.cpu(), xc.grad)
    assert fell == [], f"fell back to the CPU: {fell}"


def test_float_sums_over_leading_or_trailing_dims_are_not_sequential() -> None:
    """Sums over several trailing or leading dims run as products with a ones vector
    (blocked accumulation): 0.2 summed 80 to 4,000 times ends at least 8x closer to the
    exact sum than a sequential float32 sum does (the sequential error is simulated here,
    in float32, so the bound holds on any CPU). (Before rank-1 buffers this test compared
    a (5, 5, 10) tensor's sums with the CPU's at rtol 2e-7: at 10 to 50 elements a blocked
    and a sequential sum differ by one or two ulps, and XLA's code for the same product
    over a rank-1 parameter rounded one ulp differently.)"""
    x = torch.full((4, 20, 50), 0.2)
    t = x.to("tpu")
    v = float(np.float32(0.2))
    for dims in [(0, 1, 2), (1, 2), (0, 1)]:
        n = int(np.prod([x.shape[d] for d in dims]))
        seq = float(np.cumsum(np.full(n, 0.2, dtype=np.float32), dtype=np.float32)[-1])
        err = (t.sum(dims).cpu().double() - v * n).abs().max().item()
        assert err <= abs(seq - v * n) / 8, (dims, err, seq - v * n)
        assert (t.mean(dims).cpu().double() - v).abs().max().item() <= abs(seq - v * n) / 8 / n


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_long_float32_sums_are_as_accurate_as_the_cpus(request, mode) -> None:
    """XLA CPU's dot adds each row in one running sum: the sum of 4 million uniform float32
    values erred by ~2e-5 relative (the CPU's cascade sum: ~4e-8), and column sums of 16384
    rows by ~1e-5. lower/reduce.c sums in levels of at most TPUC_SUM_BLOCK (256) elements.
    Bound: assert_as_accurate, the CPU's own error against float64 (any CPU)."""
    from tpu_testing import assert_as_accurate

    before = torch.tpu.get_eager_mode()
    request.addfinalizer(lambda: torch.tpu.set_eager_mode(before))
    torch.tpu.set_eager_mode(mode)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(4_000_000, generator=g)
    t = x.to("tpu")
    assert_as_accurate(t.sum(), x.sum(), x.double().sum())
    assert_as_accurate(t.mean(), x.mean(), x.double().mean())
    m = torch.rand(16384, 64, generator=g)
    tm = m.to("tpu")
    for dims in [(0,), (1,), (0, 1)]:
        assert_as_accurate(tm.sum(dims), m.sum(dims), m.double().sum(dims))
    w = torch.rand(3, 4099, generator=g)  # a count that is no multiple of the block: padded
    assert_as_accurate(w.to("tpu").sum(1), w.sum(1), w.double().sum(1))


def _relative_error_by_block(body: str) -> dict[str, float]:
    """Runs `body` (after `import torch, tpuc` and a seeded generator g; it prints one relative
    error) in a subprocess with TPUC_SUM_BLOCK=0 and =256 (the runtime reads it at start)."""
    import os
    import subprocess
    import sys

    code = "import torch, tpuc; g = torch.Generator().manual_seed(0);" + body
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    errs = {}
    for block in ("0", "256"):
        r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                           env=dict(os.environ, TPUC_SUM_BLOCK=block), timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        errs[block] = float(r.stdout.strip().splitlines()[-1])
    return errs


def test_sum_block_switch_off_gives_the_one_pass_sum() -> None:
    """TPUC_SUM_BLOCK=0 (the one-pass sum, as before): same values within the one-pass
    error, and measurably less accurate than the default on a long sum (so the switch
    reaches the lowering). Run in a subprocess: the runtime reads it at start."""
    errs = _relative_error_by_block("x = torch.rand(4_000_000, generator=g); e = x.double().sum().item();"
                                    "print(abs(x.to('tpu').sum().item() - e) / e)")
    eps = torch.finfo(torch.float32).eps
    assert errs["0"] < 4_000_000 * eps  # the one-pass sum's worst-case bound
    assert errs["256"] * 16 < errs["0"], errs


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_long_dots_and_statistics_are_as_accurate_as_the_cpus(request, mode) -> None:
    """More sums XLA's CPU compiler ran in one running sum: torch.dot/mv/addmv with a long
    contraction (its dot emitter; torch.dot of 1e6 uniform values erred by 4e-4 relative,
    the CPU's 6e-7: now blocks of TPUC_SUM_BLOCK as torch.sum), and the sums inside other
    lowerings (lo_reduce: batch norm's per-channel statistics over (0, 2, 3) erred 27x the
    CPU's in the normalized output, var over every element of an offset tensor 10x). Bound:
    assert_as_accurate, the CPU's own error against float64."""
    from tpu_testing import assert_as_accurate

    before = torch.tpu.get_eager_mode()
    request.addfinalizer(lambda: torch.tpu.set_eager_mode(before))
    torch.tpu.set_eager_mode(mode)
    g = torch.Generator().manual_seed(1)
    a, b = torch.rand(1_000_003, generator=g), torch.rand(1_000_003, generator=g)
    assert_as_accurate(torch.dot(a.to("tpu"), b.to("tpu")), torch.dot(a, b), torch.dot(a.double(), b.double()))
    m, v = torch.rand(8, 100_000, generator=g), torch.rand(100_000, generator=g)
    for fn in (lambda m, v: torch.mv(m, v), lambda m, v: torch.mv(m.T.contiguous().T, v),
               lambda m, v: torch.addmv(torch.ones(8, dtype=m.dtype, device=m.device), m, v, alpha=0.5),
               lambda m, v: v @ m.T):
        assert_as_accurate(fn(m.to("tpu"), v.to("tpu")), fn(m, v), fn(m.double(), v.double()))
    x = torch.rand(32, 4, 64, 64, generator=g) + 10  # offset: the mean's error shows in the output
    bn = lambda t: torch.nn.functional.batch_norm(t, None, None, training=True)  # noqa: E731
    assert_as_accurate(bn(x.to("tpu")), bn(x), bn(x.double()))
    y = torch.rand(1_000_000, generator=g) + 1000
    assert_as_accurate(y.to("tpu").var(), y.var(), y.double().var())


def test_sum_block_switch_off_reaches_dot_and_the_statistics() -> None:
    """TPUC_SUM_BLOCK=0 turns the blocked dot off too: a long torch.dot is then measurably
    less accurate (so the switch reaches linalg.c). (The statistics' sums follow the same
    switch through sum_as_dot; the difftest slice runs training with it off.)"""
    errs = _relative_error_by_block("a = torch.rand(1_000_000, generator=g);"
                                    "e = torch.dot(a.double(), a.double()).item();"
                                    "print(abs(torch.dot(a.to('tpu'), a.to('tpu')).item() - e) / e)")
    eps = torch.finfo(torch.float32).eps
    assert errs["0"] < 1_000_000 * eps
    assert errs["256"] * 16 < errs["0"], errs
