"""The random lowerings (csrc/core/lower/random.c) through the C core's op
API: distribution statistics over 100k samples, ranges, the same
(seed, offset) giving the same numbers and a new one new numbers, and a new
seed being a signature-cache hit. Streams need not equal PyTorch's CPU."""
import math

import pytest
import torch

from harness import core

F32, BF16, F16, F64 = torch.float32, torch.bfloat16, torch.float16, torch.float64
I64, I32, U8, BOOL = torch.int64, torch.int32, torch.uint8, torch.bool
N = 100_000


@pytest.fixture(scope="module")
def c():
    return core()


def close(value, want, tol):
    assert abs(float(value) - want) <= tol, f"{float(value)} is not within {tol} of {want}"


@pytest.mark.parametrize("dtype", [F32, BF16, F64])
def test_uniform(c, dtype):
    x = c.run("aten::uniform_", torch.empty(N, dtype=dtype), -2.0, 3.0, rng=(1, 0)).double()
    assert x.min() >= -2 and x.max() <= 3
    close(x.mean(), 0.5, 0.03)
    close(x.std(), 5 / math.sqrt(12), 0.02)
    y = c.run("aten::uniform_", torch.empty(N, dtype=dtype), rng=(1, 0)).double()
    assert y.min() >= 0 and y.max() < 1
    if dtype != BF16:  # bfloat16 has 256 values in [0, 1): k/256, as PyTorch's CPU
        assert (y.sort().values.diff() > 0).sum() > N * 0.4  # not a few repeated values


def test_same_state_same_numbers(c):
    a = c.run("aten::uniform_", torch.empty(1000), rng=(7, 0))
    b = c.run("aten::uniform_", torch.empty(1000), rng=(7, 0))
    d = c.run("aten::uniform_", torch.empty(1000), rng=(8, 0))
    e = c.run("aten::uniform_", torch.empty(1000), rng=(7, 1000))
    assert torch.equal(a, b)
    assert not torch.equal(a, d) and not torch.equal(a, e)
    n1 = c.run("aten::normal_", torch.empty(1000), rng=(7, 0))
    n2 = c.run("aten::normal_", torch.empty(1000), rng=(7, 0))
    assert torch.equal(n1, n2)


def test_new_seed_is_a_cache_hit(c):
    c.run("aten::normal_", torch.empty(64), 0.0, 1.0, rng=(1, 0))
    before = c.stats()
    for seed in range(2, 6):
        c.run("aten::normal_", torch.empty(64), 0.5, 2.0, rng=(seed, seed * 64))
    after = c.stats()
    assert after.fast_misses == before.fast_misses
    assert after.fast_hits - before.fast_hits == 4


@pytest.mark.parametrize("dtype", [F32, BF16, F64])
def test_normal(c, dtype):
    x = c.run("aten::normal_", torch.empty(N, dtype=dtype), 1.5, 2.0, rng=(3, 0)).double()
    close(x.mean(), 1.5, 0.04)
    close(x.std(), 2.0, 0.04)
    assert torch.isfinite(x).all()
    # a normal's tails: about 4.55% beyond two standard deviations
    close(((x - 1.5).abs() > 4).double().mean(), 0.0455, 0.005)


def test_normal_overloads(c):
    mean = torch.linspace(-5, 5, 10).repeat(N // 10)
    std = torch.linspace(0.5, 2, 10).repeat(N // 10)
    for name, args in [("aten::normal.Tensor_Tensor", (mean, std)),
                       ("aten::normal.Tensor_float", (mean, 2.0)),
                       ("aten::normal.float_Tensor", (3.0, std))]:
        x = c.run(name, *args, rng=(5, 0))
        m = args[0] if isinstance(args[0], torch.Tensor) else torch.full((N,), args[0])
        s = args[1] if isinstance(args[1], torch.Tensor) else torch.full((N,), args[1])
        z = ((x - m) / s).double()
        close(z.mean(), 0.0, 0.03)
        close(z.std(), 1.0, 0.03)
    x = c.run("aten::normal.float_float_out", 2.0, 0.5, [N], out=torch.empty(N), rng=(6, 0))
    close(x.mean(), 2.0, 0.02)
    x = c.run("aten::normal.Tensor_Tensor_out", mean, std, out=torch.empty(N), rng=(6, 0))
    close(((x - mean) / std).mean(), 0.0, 0.03)


@pytest.mark.parametrize("dtype", [F32, BF16, BOOL, I64])
def test_bernoulli(c, dtype):
    x = c.run("aten::bernoulli_.float", torch.empty(N, dtype=dtype), 0.3, rng=(9, 0))
    assert set(x.double().unique().tolist()) <= {0.0, 1.0}
    close(x.double().mean(), 0.3, 0.01)
    rare = c.run("aten::bernoulli_.float", torch.empty(N, dtype=dtype), 0.001, rng=(9, 1))
    close(rare.double().mean(), 0.001, 0.0005)  # full-precision draws, even for bfloat16


def test_bernoulli_overloads(c):
    p = torch.tensor([0.0, 1.0, 0.25, 0.75]).repeat(N // 4)
    x = c.run("aten::bernoulli_.Tensor", torch.empty(N), p, rng=(10, 0)).view(-1, 4)
    assert (x[:, 0] == 0).all() and (x[:, 1] == 1).all()
    close(x[:, 2].mean(), 0.25, 0.015)
    close(x[:, 3].mean(), 0.75, 0.015)
    y = c.run("aten::bernoulli", p, rng=(11, 0)).view(-1, 4)  # p = self
    close(y[:, 2].mean(), 0.25, 0.015)
    z = c.run("aten::bernoulli.p", torch.empty(N, dtype=BF16), 0.6, rng=(12, 0))
    assert z.dtype == BF16
    close(z.double().mean(), 0.6, 0.01)
    w = c.run("aten::bernoulli_.Tensor", torch.empty(8, N // 8), torch.tensor(0.9), rng=(13, 0))
    close(w.mean(), 0.9, 0.01)


def test_random_ranges(c):
    x = c.run("aten::random_.from", torch.empty(N, dtype=I64), -3, 5, rng=(14, 0))
    assert x.min() == -3 and x.max() == 4
    close(x.double().mean(), 0.5, 0.05)
    y = c.run("aten::random_.to", torch.empty(N, dtype=I32), 7, rng=(15, 0))
    assert y.min() == 0 and y.max() == 6
    z = c.run("aten::random_.from", torch.empty(N), 10, None, rng=(16, 0))
    assert z.min() >= 10 and z.max() <= 2**24 and z.mean() > 2**22
    b = c.run("aten::random_", torch.empty(N, dtype=BOOL), rng=(17, 0))
    close(b.double().mean(), 0.5, 0.01)
    u = c.run("aten::random_", torch.empty(N, dtype=U8), rng=(18, 0))
    assert u.min() == 0 and u.max() == 255
    f = c.run("aten::random_", torch.empty(N, dtype=BF16), rng=(19, 0))
    assert f.min() >= 0 and f.max() <= 256
    big = c.run("aten::random_", torch.empty(N, dtype=I64), rng=(20, 0))
    assert big.min() >= 0 and big.double().mean() > 2.0**61
    full = c.run("aten::random_.from", torch.empty(N, dtype=I64), -(2**63), None, rng=(21, 0))
    assert (full < 0).any() and (full > 0).any()
    h = c.run("aten::random_.from", torch.empty(N, dtype=F16), -4, 4, rng=(22, 0))
    assert set(h.unique().tolist()) == set(float(v) for v in range(-4, 4))


def test_other_distributions(c):
    e = c.run("aten::exponential_", torch.empty(N), 2.0, rng=(23, 0)).double()
    assert e.min() >= 0
    close(e.mean(), 0.5, 0.01)
    close(e.std(), 0.5, 0.015)
    g = c.run("aten::geometric_", torch.empty(N), 0.25, rng=(24, 0)).double()
    assert g.min() >= 1 and (g == g.round()).all()
    close(g.mean(), 4.0, 0.1)
    ln = c.run("aten::log_normal_", torch.empty(N), 0.0, 0.5, rng=(25, 0)).double()
    close(ln.log().mean(), 0.0, 0.01)
    close(ln.log().std(), 0.5, 0.01)
    ca = c.run("aten::cauchy_", torch.empty(N), 1.0, 2.0, rng=(26, 0)).double()
    close(ca.median(), 1.0, 0.05)
    q = torch.quantile(ca[:50_000], torch.tensor([0.25, 0.75], dtype=F64))
    close(q[1] - q[0], 4.0, 0.15)  # interquartile range = 2 sigma


def test_randperm(c):
    for n in (1, 10, 1000):
        p = c.run("aten::randperm.generator_out", n, out=torch.empty(n, dtype=I64), rng=(27, 0))
        assert torch.equal(p.sort().values, torch.arange(n))
    p32 = c.run("aten::randperm.generator_out", 500, out=torch.empty(500, dtype=I32), rng=(28, 0))
    assert torch.equal(p32.sort().values, torch.arange(500, dtype=I32))
    assert not torch.equal(p32, torch.arange(500, dtype=I32))


def test_complex_outputs(c):
    x = c.run("aten::normal_", torch.empty(N, dtype=torch.complex64), 2.0, 3.0, rng=(29, 0))
    for part in (x.real.double(), x.imag.double()):  # both parts: mean 2, std 3/sqrt(2)
        close(part.mean(), 2.0, 0.03)
        close(part.std(), 3 / math.sqrt(2), 0.03)
    close((x.real * x.imag).double().mean() - 4.0, 0.0, 0.05)  # independent parts
    u = c.run("aten::uniform_", torch.empty(N, dtype=torch.complex128), 1.0, 3.0, rng=(30, 0))
    for part in (u.real, u.imag):
        assert part.min() >= 1 and part.max() < 3
        close(part.mean(), 2.0, 0.02)
