"""multinomial and rrelu_with_noise lowered on "tpu" (csrc/core/lower/random.c): their draws
cannot equal the CPU's (another generator), so each is checked by what it must satisfy --
counts within 6 binomial standard deviations of the probabilities, no category of probability
0, no repeats without replacement, rrelu's slopes in [lower, upper) and its eval slope -- and
that it ran without a fallback. The conformance sweep compares both with the CPU's draws by
distribution too (tests/conformance/distribution.py)."""
from __future__ import annotations

import math

import pytest
import torch

DEV = "tpu"


pytestmark = pytest.mark.usefixtures("tpu_no_fallbacks")  # tests/conftest.py


def _within(counts: torch.Tensor, p: torch.Tensor, n: int) -> None:
    for c, q in zip(counts.tolist(), p.tolist()):
        sd = math.sqrt(n * q * (1 - q))
        assert abs(c - n * q) <= 6 * sd + 1, (counts.tolist(), p.tolist(), n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_multinomial_with_replacement_follows_the_probabilities(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    w = torch.tensor([[1.0, 0.0, 6.0, 3.0], [1.0, 1.0, 1.0, 1.0]])  # unnormalised weights
    n = 20000
    s = torch.multinomial(w.to(DEV, dtype), n, replacement=True).cpu()
    assert s.shape == (2, n) and s.dtype == torch.int64
    for row in range(2):
        counts = torch.bincount(s[row], minlength=4)
        _within(counts, w[row] / w[row].sum(), n)
    assert (s[0] != 1).all()  # probability 0: never drawn
    one = torch.multinomial(w[0].to(DEV, dtype), 5, replacement=True)
    assert one.shape == (5,)


def test_multinomial_without_replacement() -> None:
    torch.manual_seed(1)
    w = torch.tensor([2.0, 0.0, 5.0, 3.0, 0.0, 10.0])
    rows = 20000
    s = torch.multinomial(w.expand(rows, 6).to(DEV), 4, replacement=False).cpu()
    assert s.shape == (rows, 4)
    # no repeats within a row, and the zero-probability categories come only after the others
    assert (s.sort(1).values.diff(dim=1) != 0).all()
    assert not torch.isin(s[:, :3], torch.tensor([1, 4])).any()
    # the first pick is a draw from the probabilities
    _within(torch.bincount(s[:, 0], minlength=6), w / w.sum(), rows)


def test_multinomial_draws_advance_and_repeat_under_a_seed() -> None:
    p = torch.ones(3, 50).to(DEV)
    torch.manual_seed(7)
    a, b = torch.multinomial(p, 10), torch.multinomial(p, 10)
    torch.manual_seed(7)
    a2 = torch.multinomial(p, 10)
    assert not torch.equal(a.cpu(), b.cpu()) and torch.equal(a.cpu(), a2.cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rrelu_training_and_eval(dtype: torch.dtype) -> None:
    torch.manual_seed(2)
    x = torch.randn(20000, dtype=dtype)
    neg = x < 0
    noise = torch.empty(20000, dtype=dtype, device=DEV)
    y = torch.ops.aten.rrelu_with_noise(x.to(DEV), noise, 0.1, 0.3, True).cpu()
    nz = noise.cpu()
    assert (nz[~neg] == 1).all() and nz[neg].min() >= 0.1 and nz[neg].max() <= 0.3
    # uniform on [0.1, 0.3): mean 0.2, sd 0.2 / sqrt(12)
    k = int(neg.sum())
    assert abs(nz[neg].double().mean().item() - 0.2) < 6 * 0.2 / math.sqrt(12 * k)
    torch.testing.assert_close(y, x * nz, rtol=0, atol=0)
    kept = torch.full((20000,), 7.0, dtype=dtype, device=DEV)
    y = torch.ops.aten.rrelu_with_noise(x.to(DEV), kept, 0.1, 0.3, False).cpu()
    torch.testing.assert_close(y, torch.where(neg, x * 0.2, x))
    assert (kept.cpu() == 7).all()  # eval leaves noise alone


def test_rrelu_module_gradient_is_the_drawn_slope() -> None:
    torch.manual_seed(3)
    x = torch.randn(1000, device=DEV, requires_grad=True)
    y = torch.nn.functional.rrelu(x, 0.1, 0.3, training=True)
    y.sum().backward()
    xc, g = x.detach().cpu(), x.grad.cpu()
    slope = torch.where(xc < 0, y.detach().cpu() / xc, torch.ones_like(xc))
    torch.testing.assert_close(g, slope, rtol=1e-6, atol=0)
    assert ((g[xc < 0] >= 0.1) & (g[xc < 0] <= 0.3)).all()
