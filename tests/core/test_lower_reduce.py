"""The reduction lowerings (csrc/core/lower/reduce.c) through the C core's op
API, against PyTorch on the CPU: dims (one, several, negative, none, empty),
keepdim, dtype=, views, out= overloads, NaN propagation, runtime scalars
(correction, the norm's p) that do not recompile."""
import pytest
import torch

from harness import core

F32, BF16, F16, F64 = torch.float32, torch.bfloat16, torch.float16, torch.float64
I64, I32, U8, BOOL = torch.int64, torch.int32, torch.uint8, torch.bool
NAN = float("nan")


@pytest.fixture(scope="module")
def c():
    return core()


def rnd(*shape, dtype=F32, lo=-2.0, hi=2.0, seed=0):
    g = torch.Generator().manual_seed(seed + 11 * len(shape))
    if dtype == BOOL:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(int(lo), int(hi) + 1, shape, generator=g).to(dtype)
    return (torch.rand(shape, generator=g, dtype=F64) * (hi - lo) + lo).to(dtype)


DIMS = [[1], [0, 2], [-1], []]


@pytest.mark.parametrize("dtype", [F32, BF16, I64, BOOL])
@pytest.mark.parametrize("dims", DIMS)
def test_sum(c, dtype, dims):
    x = rnd(3, 4, 5, dtype=dtype, lo=-5, hi=5)
    c.check("aten::sum.dim_IntList", x, dims)
    c.check("aten::sum.dim_IntList", x, dims, keepdim=True)


def test_sum_variants(c):
    x = rnd(4, 6)
    c.check("aten::sum", x)
    c.check("aten::sum", rnd(4, 6, dtype=I32), dtype=I64)
    c.check("aten::sum.dim_IntList", x.t()[:, 1:], [0], dtype=F64)
    c.check("aten::sum.dim_IntList", x, None)
    c.check("aten::sum.IntList_out", x, [1], out=torch.empty(4))
    c.check("aten::sum.out", x.to(BF16), out=torch.empty((), dtype=BF16))
    c.check("aten::sum", torch.tensor(3.5))
    c.check("aten::sum.dim_IntList", torch.tensor(3.5), [0])
    c.check("aten::sum.dim_IntList", torch.empty(0, 3), [0])
    c.check("aten::sum", torch.randn(3, 2, dtype=torch.complex64))


@pytest.mark.parametrize("dtype", [F32, BF16, F64])
def test_mean_prod(c, dtype):
    x = rnd(3, 4, 5, dtype=dtype, lo=0.5, hi=1.5)
    c.check("aten::mean.dim", x, [1, 2])
    c.check("aten::mean.dim", x, [-1], keepdim=True)
    c.check("aten::mean", x)
    # PyTorch's CPU multiplies bfloat16 in bfloat16; here it accumulates in float32
    tol = dict(rtol=0.05, atol=1e-3) if dtype == BF16 else {}
    c.check("aten::prod.dim_int", x, 1, **tol)
    c.check("aten::prod", x, **tol)
    c.check("aten::prod.dim_int", x, -1, keepdim=True, **tol)


def test_mean_prod_variants(c):
    x = rnd(3, 4)
    c.check("aten::mean.dim", rnd(3, 4, dtype=I64), [0], dtype=F32)
    c.check("aten::mean.out", x, [0], out=torch.empty(4))
    c.check("aten::mean.dim", torch.empty(0, 4), [0])  # NaN, as PyTorch
    c.check("aten::prod", rnd(6, dtype=I64, lo=-3, hi=3))
    c.check("aten::prod.dim_int", rnd(3, 4, dtype=BOOL), 0)
    c.check("aten::prod.int_out", x, 1, out=torch.empty(3))


@pytest.mark.parametrize("dtype", [F32, BF16, I64, I32, BOOL])
def test_amax_amin_max_min(c, dtype):
    x = rnd(3, 4, 5, dtype=dtype, lo=-9, hi=9)
    for op in ("amax", "amin"):
        c.check(f"aten::{op}", x, [0, 2])
        c.check(f"aten::{op}", x, [], keepdim=True)
    for op in ("max", "min"):
        c.check(f"aten::{op}", x)
        c.check(f"aten::{op}.dim", x, 1)
        c.check(f"aten::{op}.dim", x, -1, keepdim=True)


def test_nan_propagation(c):
    x = rnd(3, 4)
    x[1, 2] = NAN
    x[2, 0] = -float("inf")
    for op in ("amax", "amin"):
        c.check(f"aten::{op}", x, [1])
        c.check(f"aten::{op}", x, [0])
    for op in ("max", "min", "argmax", "argmin"):
        c.check(f"aten::{op}", x)
    for op in ("max.dim", "min.dim", "argmax", "argmin"):
        c.check(f"aten::{op}", x, 1)
    c.check("aten::logsumexp", x, [1])
    c.check("aten::linalg_vector_norm", x, float("inf"), [1])


def test_argmax_argmin(c):
    x = torch.tensor([[1.0, 3.0, 3.0, -1.0], [2.0, 2.0, 0.0, 0.0], [-5.0, -5.0, -5.0, -5.0]])
    for op in ("argmax", "argmin"):
        c.check(f"aten::{op}", x)  # first occurrence of ties
        c.check(f"aten::{op}", x, 1)
        c.check(f"aten::{op}", x, 0, keepdim=True)
        c.check(f"aten::{op}", x, None, keepdim=True)
        c.check(f"aten::{op}", x.to(BF16).t(), 1)
        c.check(f"aten::{op}", rnd(5, 3, dtype=I64, lo=-3, hi=3), 0)
        c.check(f"aten::{op}", torch.tensor(2.0))
        c.check(f"aten::{op}.out", x, 1, out=torch.empty(3, dtype=I64))


def test_max_min_out_overloads(c):
    x = rnd(3, 4)
    c.check("aten::max.dim_max", x, 1, max=torch.empty(3), max_values=torch.empty(3, dtype=I64))
    c.check("aten::min.dim_min", x, 0, True, min=torch.empty(1, 4),
            min_indices=torch.empty(1, 4, dtype=I64))
    c.check("aten::max.unary_out", x, out=torch.empty(()))
    c.check("aten::amax.out", x, [1], out=torch.empty(3))
    c.check("aten::max.dim", torch.tensor(4.0), 0)


@pytest.mark.parametrize("op", ["var", "std"])
def test_var_std(c, op):
    x = rnd(4, 5, 6, lo=-3, hi=5)
    c.check(f"aten::{op}.correction", x)
    c.check(f"aten::{op}.correction", x, [1])
    c.check(f"aten::{op}.correction", x, [0, 2], correction=0, keepdim=True)
    c.check(f"aten::{op}.correction", x, [-1], correction=2.5)
    c.check(f"aten::{op}.correction", x.to(BF16), [1])
    c.check(f"aten::{op}.correction", rnd(3, 1), [1])  # N - correction = 0: inf/nan
    c.check(f"aten::{op}.correction_out", x, [2], out=torch.empty(4, 5))
    c.check(f"aten::{op}_mean.correction", x, [1], correction=0)
    c.check(f"aten::{op}_mean.correction", x)


@pytest.mark.parametrize("p", [2, 1, 0, 3, 0.5, float("inf"), -float("inf")])
def test_norms(c, p):
    x = rnd(3, 4, 5, lo=-2, hi=2)
    x[0, 0, 0] = 0
    c.check("aten::linalg_vector_norm", x, p)
    c.check("aten::linalg_vector_norm", x, p, [1], keepdim=True)
    c.check("aten::norm.ScalarOpt_dim", x, p, [0, 2])


def test_norm_variants(c):
    x = rnd(3, 4)
    c.check("aten::linalg_vector_norm", x.to(BF16), 2, [1])
    c.check("aten::linalg_vector_norm", x.to(BF16), 2, [1], dtype=F32)
    c.check("aten::linalg_vector_norm.out", x, 2, [0], out=torch.empty(4))
    c.check("aten::norm.Scalar", x, 3)
    c.check("aten::norm.ScalarOpt_dim", x, None, [1])
    c.check("aten::norm.ScalarOpt_dim_dtype", x, 2, [1], False, dtype=F64)
    c.check("aten::norm.ScalarOpt_dtype", x, 1, dtype=F64)


@pytest.mark.parametrize("dtype", [BOOL, F32, I64, U8])
def test_all_any(c, dtype):
    x = rnd(3, 4, dtype=dtype, lo=0, hi=2)
    if dtype == F32:
        x = x.round()
        x[0, 1] = NAN
    for op in ("all", "any"):
        c.check(f"aten::{op}", x)
        c.check(f"aten::{op}.dim", x, 1)
        c.check(f"aten::{op}.dim", x, 0, keepdim=True)
        c.check(f"aten::{op}.dims", x, [0, 1])
        c.check(f"aten::{op}.dims", x, None)
    c.check("aten::all.all_out", x, out=torch.empty((), dtype=U8 if dtype == U8 else BOOL))
    c.check("aten::any", torch.zeros(0, 3, dtype=BOOL))
    c.check("aten::all", torch.zeros(0, 3, dtype=BOOL))


def test_count_nonzero_logsumexp(c):
    x = rnd(3, 4, 5, lo=-1, hi=1).round()
    c.check("aten::count_nonzero.dim_IntList", x, [1, 2])
    c.check("aten::count_nonzero.dim_IntList", x, [])
    c.check("aten::count_nonzero", x)
    c.check("aten::count_nonzero", rnd(3, 4, dtype=I64, lo=-1, hi=1), 0)
    y = rnd(3, 4, 5, lo=-50, hi=50)
    c.check("aten::logsumexp", y, [1])
    c.check("aten::logsumexp", y, [0, 2], keepdim=True)
    c.check("aten::logsumexp", y.to(BF16), [-1])
    c.check("aten::logsumexp", rnd(3, 4, dtype=I64, lo=-5, hi=5), [1])
    c.check("aten::logsumexp", torch.tensor([[-float("inf")] * 3, [float("inf"), 1, 2]]), [1])
    c.check("aten::logsumexp.out", y, [2], out=torch.empty(3, 4))


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_scans(c, op):
    x = rnd(3, 4, 5, lo=0.5, hi=1.5)
    for d in (0, 1, -1):
        c.check(f"aten::{op}", x, d)
    c.check(f"aten::{op}", x.to(BF16), 2)
    c.check(f"aten::{op}", rnd(3, 6, dtype=I64, lo=-3, hi=3), 1)
    c.check(f"aten::{op}", rnd(3, 6, dtype=BOOL), 1)  # -> int64
    c.check(f"aten::{op}", rnd(3, 6, dtype=I32, lo=-3, hi=3), 1, dtype=F32)
    c.check(f"aten::{op}_", x.clone().transpose(0, 2), 1)
    c.check(f"aten::{op}.out", x, 0, out=torch.empty(3, 4, 5))
    c.check(f"aten::{op}", torch.tensor(2.5), 0)
    c.check(f"aten::{op}", torch.empty(0, 3), 0)


def test_new_correction_and_runtime_p_are_cache_hits(c):
    # correction is a runtime value: one program for every correction
    x = rnd(4, 5)
    c.check("aten::var.correction", x, [1], correction=1)
    before = c.stats()
    c.check("aten::var.correction", x, [1], correction=0)
    c.check("aten::var.correction", x, [1], correction=3)
    after = c.stats()
    assert after.fast_misses == before.fast_misses
    assert after.fast_hits - before.fast_hits == 2
    # a p outside the special exponents (tpuc_scalar_is_static) is a runtime value too
    c.check("aten::linalg_vector_norm", x, 0.7, [1])
    before = c.stats()
    c.check("aten::linalg_vector_norm", x, float("inf"), [1])
    c.check("aten::linalg_vector_norm", x, 1.7, [1])
    c.check("aten::linalg_vector_norm", x, 4.0, [1])
    after = c.stats()
    assert after.fast_misses == before.fast_misses
    assert after.fast_hits - before.fast_hits == 3


def test_special_p_is_in_the_signature(c):
    # p = 0, 1, 2 (and the other special exponents) are baked into the program, so
    # that only their formula is built (clip_grad_norm_'s p = 2): one program per p,
    # each a cache hit when it recurs
    x = rnd(4, 6)
    before = c.stats()
    for p in (2.0, 1.0, 0.0):
        c.check("aten::linalg_vector_norm", x, p, [1])
    mid = c.stats()
    assert mid.fast_misses - before.fast_misses == 3
    for p in (2.0, 1.0, 0.0):
        c.check("aten::linalg_vector_norm", x, p, [1])
    after = c.stats()
    assert after.fast_misses == mid.fast_misses
    assert after.fast_hits - mid.fast_hits == 3


def test_nansum_aminmax_median(c):
    x = rnd(4, 7, lo=-5, hi=5)
    x[1, 3] = NAN
    c.check("aten::nansum", x)
    c.check("aten::nansum", x, [1], keepdim=True)
    c.check("aten::nansum", x.to(BF16), [0])
    c.check("aten::aminmax", x)
    c.check("aten::aminmax", x, dim=1)
    c.check("aten::aminmax", rnd(3, 4, dtype=I64, lo=-9, hi=9), dim=0, keepdim=True)
    y = torch.randperm(60).reshape(3, 4, 5).float()  # no ties: indices are unique
    c.check("aten::median", y)
    c.check("aten::median", rnd(6, lo=-3, hi=3))
    c.check("aten::median", x)  # NaN
    for d in (0, 1, -1):
        c.check("aten::median.dim", y, d)
    c.check("aten::median.dim", y, 1, True)
    c.check("aten::median.dim", torch.tensor([[1.0, NAN, 3.0, NAN], [4.0, 2.0, 3.0, 1.0]]), 1)
    c.check("aten::median.dim", torch.randperm(12).reshape(3, 4), 1)
    c.check("aten::median.dim", y.to(BF16), 2)
    c.check("aten::median.dim_values", y, 0, values=torch.empty(4, 5),
            indices=torch.empty(4, 5, dtype=I64))
