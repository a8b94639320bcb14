"""The copy and factory lowerings (csrc/core/lower/copy.c) through the C
core's op API, against PyTorch on the CPU: dtype conversions, broadcasting,
copies into views (the rest of the storage is kept), clone of views, and the
out= factories arange, linspace, eye, full/zeros/ones."""
import pytest
import torch

from harness import core

F32, BF16, F16, F64 = torch.float32, torch.bfloat16, torch.float16, torch.float64
I64, I32, U8, BOOL, C64 = torch.int64, torch.int32, torch.uint8, torch.bool, torch.complex64


@pytest.fixture(scope="module")
def c():
    return core()


def rnd(*shape, dtype=F32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 4).to(dtype)


@pytest.mark.parametrize("src,dst", [(F32, BF16), (BF16, F32), (F32, I64), (I64, F32),
                                     (F32, BOOL), (BOOL, F32), (I32, I64), (F32, F16),
                                     (F64, F32), (I64, I32), (F32, C64), (F32, F32)])
def test_copy_converts(c, src, dst):
    c.check("aten::copy_", torch.empty(3, 4, dtype=dst), rnd(3, 4, dtype=src))


def test_copy_into_views_and_broadcast(c):
    x = rnd(5, 6)
    c.check("aten::copy_", x.clone()[1:4, ::2], rnd(3, 3, seed=1))  # rest of x kept
    c.check("aten::copy_", x.clone().t(), rnd(6, 5, seed=2))
    c.check("aten::copy_", x.clone(), rnd(6, seed=3))              # broadcast a row
    c.check("aten::copy_", x.clone(), torch.tensor(2.5))
    c.check("aten::copy_", x.clone()[2], rnd(6, seed=4).to(I64))
    c.check("aten::copy_", torch.empty(3, 4, dtype=F32), rnd(4, 3, seed=5).t())
    c.check("aten::copy", x, rnd(6, seed=6))
    c.check("aten::copy_", torch.empty(4), torch.randn(4, dtype=C64))  # keeps the real part


def test_to_copy_and_clone(c):
    x = rnd(4, 5)
    c.check("aten::_to_copy", x, dtype=BF16)
    c.check("aten::_to_copy", x.t(), dtype=I32)
    c.check("aten::_to_copy", x[:, 1:3])
    c.check("aten::_to_copy.out", x, out=torch.empty(4, 5, dtype=F64))
    c.check("aten::clone", x.t()[1:])
    c.check("aten::clone", rnd(3, dtype=BF16).expand(2, 3))
    c.check("aten::clone.out", x, out=torch.empty(4, 5))


def test_copy_from(c):
    # _copy_from has no CPU kernel (it is the cross-device hook): compare with copy_
    x, dst = rnd(3, 4), torch.empty(3, 4, dtype=BF16)
    got = c.run("aten::_copy_from", x, dst, outs=[torch.empty(3, 4, dtype=BF16)])
    torch.testing.assert_close(got, x.to(BF16))


@pytest.mark.parametrize("dtype", [F32, F64, BF16, I64, I32])
def test_arange(c, dtype):
    cases = [(0, 10, 1), (-3, 7, 2), (5, -5, -1.5), (0.5, 5, 1)]
    if dtype.is_floating_point:
        cases.append((1.5, 4.0, 0.25))  # a step that truncates to 0 is an error for integers
    for start, end, step in cases:
        n = len(torch.arange(start, end, step, dtype=dtype))
        c.check("aten::arange.start_out", start, end, step, out=torch.empty(n, dtype=dtype))
    c.check("aten::arange.out", 7, out=torch.empty(7, dtype=dtype))


@pytest.mark.parametrize("dtype", [F32, F64, BF16, I64, I32])
def test_linspace(c, dtype):
    for start, end, steps in [(0, 1, 11), (-3, 4, 6), (0.5, 7.9, 5), (2, 2, 3), (1, 5, 1),
                              (0, 1, 0), (10, -10, 101)]:
        c.check("aten::linspace.out", start, end, steps, out=torch.empty(steps, dtype=dtype))
    c.check("aten::linspace.Tensor_Tensor_out", torch.tensor(-1.0), torch.tensor(3.0), 9,
            out=torch.empty(9, dtype=dtype))


def test_eye_full_zeros_ones(c):
    c.check("aten::eye.out", 4, out=torch.empty(4, 4))
    c.check("aten::eye.m_out", 3, 5, out=torch.empty(3, 5, dtype=I64))
    c.check("aten::eye.m_out", 4, 2, out=torch.empty(4, 2, dtype=BOOL))
    c.check("aten::full.out", [2, 3], 1.5, out=torch.empty(2, 3))
    c.check("aten::full.out", [2, 3], 7, out=torch.empty(2, 3, dtype=I32))
    c.check("aten::zeros.out", [3], out=torch.empty(3, dtype=BF16))
    c.check("aten::ones.out", [2, 2], out=torch.empty(2, 2, dtype=I64))


def test_new_bounds_are_cache_hits(c):
    c.check("aten::arange.start_out", 0, 8, 1, out=torch.empty(8))
    c.check("aten::full.out", [4], 1.0, out=torch.empty(4))
    before = c.stats()
    c.check("aten::arange.start_out", -4.0, 4.0, 1.0, out=torch.empty(8))
    c.check("aten::arange.start_out", 2, 10, 1, out=torch.empty(8))
    c.check("aten::full.out", [4], -3.0, out=torch.empty(4))
    after = c.stats()
    # the float bounds change the scalars' kind (int -> float) once; values never recompile
    assert after.fast_misses - before.fast_misses <= 1
    assert after.fast_hits - before.fast_hits >= 2
