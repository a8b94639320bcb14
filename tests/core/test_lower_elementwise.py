"""The elementwise lowerings (csrc/core/lower/elementwise*.c) through the C
core's op API, against PyTorch on the CPU: dtypes, broadcasting, views,
Python scalars, in-place and out= overloads, special values, and the
signature cache (a new scalar value compiles nothing)."""
import pytest
import torch

from harness import core

F32, BF16, F16, F64 = torch.float32, torch.bfloat16, torch.float16, torch.float64
I64, I32, U8, BOOL = torch.int64, torch.int32, torch.uint8, torch.bool


@pytest.fixture(scope="module")
def c():
    return core()


def rnd(*shape, dtype=F32, lo=-2.0, hi=2.0, seed=0):
    g = torch.Generator().manual_seed(seed + 7 * len(shape))
    if dtype == BOOL:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(int(lo), int(hi) + 1, shape, generator=g).to(dtype)
    return (torch.rand(shape, generator=g, dtype=F64) * (hi - lo) + lo).to(dtype)


SPECIAL = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.5, -2.5, 0.5])

# op -> input domain
UNARY_FLOAT = {
    "exp": (-3, 3), "exp2": (-3, 3), "expm1": (-2, 2), "log": (0.1, 5), "log2": (0.1, 5),
    "log10": (0.1, 5), "log1p": (-0.5, 3), "sqrt": (0, 4), "rsqrt": (0.2, 4),
    "reciprocal": (0.5, 3), "sin": (-3, 3), "cos": (-3, 3), "tan": (-1.2, 1.2),
    "asin": (-0.9, 0.9), "acos": (-0.9, 0.9), "atan": (-3, 3), "sinh": (-2, 2),
    "cosh": (-2, 2), "tanh": (-3, 3), "asinh": (-3, 3), "acosh": (1.1, 4),
    "atanh": (-0.9, 0.9), "sigmoid": (-4, 4), "erf": (-2, 2), "erfc": (-2, 2),
    "erfinv": (-0.9, 0.9), "floor": (-3, 3), "ceil": (-3, 3), "round": (-3, 3),
    "trunc": (-3, 3), "frac": (-3, 3), "neg": (-3, 3), "abs": (-3, 3), "sign": (-3, 3),
    "sgn": (-3, 3), "relu": (-3, 3), "hardsigmoid": (-4, 4), "hardswish": (-4, 4),
    "mish": (-3, 3), "silu": (-3, 3), "gelu": (-3, 3),
}


@pytest.mark.parametrize("op", sorted(UNARY_FLOAT))
def test_unary(c, op):
    lo, hi = UNARY_FLOAT[op]
    c.check(f"aten::{op}", rnd(3, 5, lo=lo, hi=hi))


# bfloat16 goes through the same code converted to float32 and back: a sample
@pytest.mark.parametrize("op", ["exp", "log", "rsqrt", "tanh", "erfinv", "round", "sign",
                                "gelu", "silu", "hardswish", "mish", "reciprocal"])
def test_unary_bfloat16(c, op):
    lo, hi = UNARY_FLOAT[op]
    c.check(f"aten::{op}", rnd(3, 5, dtype=BF16, lo=lo, hi=hi))


# in-place and out= overloads share the functional lowering: a sample suffices
@pytest.mark.parametrize("op", ["exp", "log", "sqrt", "floor", "abs", "sign", "relu", "gelu",
                                "tanh", "sigmoid", "hardswish", "frac"])
def test_unary_inplace_on_view_and_out(c, op):
    lo, hi = UNARY_FLOAT[op]
    base = rnd(5, 4, lo=lo, hi=hi)
    c.check(f"aten::{op}_", base.t())  # a transposed view, written in place
    c.check(f"aten::{op}.out", rnd(2, 6, lo=lo, hi=hi)[:, ::2], out=torch.empty(2, 3))


@pytest.mark.parametrize("op", ["exp", "sqrt", "sin", "sigmoid", "log1p", "reciprocal", "erf"])
@pytest.mark.parametrize("dtype", [I64, I32, BOOL])
def test_unary_int_to_float(c, op, dtype):
    c.check(f"aten::{op}", rnd(3, 4, dtype=dtype, lo=0, hi=4))


@pytest.mark.parametrize("op", ["neg", "abs", "sign", "floor", "ceil", "round", "trunc", "relu"])
@pytest.mark.parametrize("dtype", [I64, I32])
def test_unary_integer(c, op, dtype):
    c.check(f"aten::{op}", rnd(3, 4, dtype=dtype, lo=-5, hi=5))


@pytest.mark.parametrize("op", ["sign", "sgn", "relu", "floor", "round", "trunc", "frac", "abs",
                                "sigmoid", "exp", "isnan", "isinf", "isfinite", "hardtanh",
                                "leaky_relu", "silu", "nan_to_num", "logical_not"])
def test_unary_special_values(c, op):
    c.check(f"aten::{op}", SPECIAL.clone())


def test_predicates_and_bitwise_not(c):
    c.check("aten::isnan", rnd(4, dtype=I64))
    c.check("aten::isinf", rnd(4, dtype=BF16).div(0))
    c.check("aten::bitwise_not", rnd(3, 4, dtype=I32, lo=-9, hi=9))
    c.check("aten::bitwise_not", rnd(3, 4, dtype=BOOL))
    c.check("aten::logical_not", rnd(3, 4, dtype=I64, lo=-1, hi=1))


def test_round_decimals_and_nan_to_num(c):
    x = rnd(4, 5, lo=-300, hi=300)
    for d in (2, 0, -1):
        c.check("aten::round.decimals", x, decimals=d)
    c.check("aten::round_.decimals", x.clone(), decimals=1)
    c.check("aten::nan_to_num", SPECIAL.clone(), nan=1.0, posinf=2.0, neginf=-3.0)
    c.check("aten::nan_to_num", SPECIAL.to(BF16))
    c.check("aten::nan_to_num_", SPECIAL.to(F16), posinf=7.0)
    c.check("aten::nan_to_num", rnd(3, dtype=I64))


def test_activations_with_arguments(c):
    x = rnd(4, 6, lo=-4, hi=4)
    c.check("aten::leaky_relu", x, 0.2)
    c.check("aten::leaky_relu_", x.clone(), 0.3)
    c.check("aten::hardtanh", x, -0.5, 2.0)
    c.check("aten::hardtanh_", x.clone().t())
    c.check("aten::elu", x, 1.5, 1.1, 0.7)
    c.check("aten::elu_", x.clone())
    c.check("aten::softplus", x * 10, 2.0, 15.0)
    c.check("aten::gelu", x, approximate="tanh")
    c.check("aten::gelu", x.to(BF16), approximate="tanh")
    c.check("aten::gelu_", x.clone(), approximate="none")
    for name in ("hardsigmoid_", "hardswish_", "mish_", "silu_", "relu_"):
        c.check(f"aten::{name}", x.clone())
    c.check("aten::relu.out", x, out=torch.empty(4, 6))


def test_activation_backwards(c):
    g, x = rnd(4, 6, seed=1), rnd(4, 6, lo=-3, hi=3)
    y = torch.sigmoid(x)
    for approx in ("none", "tanh"):
        c.check("aten::gelu_backward", g, x, approximate=approx)
    c.check("aten::gelu_backward", g.to(BF16), x.to(BF16))
    c.check("aten::gelu_backward.grad_input", g, x, grad_input=torch.empty(4, 6))
    c.check("aten::silu_backward", g, x)
    c.check("aten::silu_backward.grad_input", g, x, grad_input=torch.empty(4, 6))
    c.check("aten::sigmoid_backward", g, y)
    c.check("aten::tanh_backward", g, torch.tanh(x))
    c.check("aten::tanh_backward.grad_input", g, torch.tanh(x), grad_input=torch.empty(4, 6))
    c.check("aten::threshold_backward", g, x, 0.5)
    c.check("aten::threshold_backward", g.to(BF16), x.to(BF16), 0)
    c.check("aten::leaky_relu_backward", g, x, 0.2, False)
    c.check("aten::hardtanh_backward", g, x, -1.0, 1.5)
    c.check("aten::hardtanh_backward.grad_input", g, x, -1, 1, grad_input=torch.empty(4, 6))
    c.check("aten::elu_backward", g, 1.5, 1.1, 0.7, False, x)
    c.check("aten::elu_backward", g, 1.5, 1.1, 0.7, True, torch.nn.functional.elu(x, 1.5) * 1.1)
    c.check("aten::softplus_backward", g, x * 10, 2.0, 15.0)
    c.check("aten::hardsigmoid_backward", g, x)
    c.check("aten::hardswish_backward", g, x)
    c.check("aten::hardswish_backward", g.to(BF16), x.to(BF16))
    c.check("aten::threshold", x, 0.5, -2.0)
    c.check("aten::threshold_", x.clone(), 0.0, 0.0)
    c.check("aten::threshold", rnd(5, dtype=I64, lo=-5, hi=5), 1, 9)


# ---- binary ops ----
BINARY_FLOAT = ["add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "remainder.Tensor",
                "fmod.Tensor", "atan2", "maximum", "minimum", "hypot", "logaddexp",
                "xlogy.Tensor", "copysign.Tensor", "pow.Tensor_Tensor", "floor_divide"]


@pytest.mark.parametrize("op,dtype", [(op, F32) for op in BINARY_FLOAT] +
                         [(op, BF16) for op in ("add.Tensor", "div.Tensor", "remainder.Tensor",
                                                "pow.Tensor_Tensor", "hypot", "floor_divide")])
def test_binary_broadcast(c, op, dtype):
    a = rnd(3, 4, dtype=dtype, lo=0.5 if op.startswith("pow") else -3, hi=3)
    b = rnd(4, dtype=dtype, lo=0.5, hi=2.5, seed=3)
    c.check(f"aten::{op}", a, b)
    c.check(f"aten::{op}", b, a)


@pytest.mark.parametrize("op", ["add.Tensor", "sub.Tensor", "mul.Tensor", "remainder.Tensor",
                                "fmod.Tensor", "maximum", "minimum", "floor_divide",
                                "div.Tensor", "pow.Tensor_Tensor"])
@pytest.mark.parametrize("dtype", [I64, I32])
def test_binary_integer(c, op, dtype):
    a = rnd(3, 4, dtype=dtype, lo=-20, hi=20)
    b = rnd(3, 4, dtype=dtype, lo=1, hi=6, seed=2) * (1 - 2 * (rnd(3, 4, dtype=dtype, lo=0, hi=1, seed=5)))
    if op.startswith("pow"):
        a, b = a.clamp(-4, 4), b.abs()
    c.check(f"aten::{op}", a, b)


def test_binary_special_values(c):
    a = SPECIAL.clone()
    b = SPECIAL.flip(0).clone()
    for op in ("maximum", "minimum", "hypot", "logaddexp", "xlogy.Tensor", "copysign.Tensor",
               "atan2", "remainder.Tensor", "fmod.Tensor", "floor_divide"):
        c.check(f"aten::{op}", a, b)
    c.check("aten::div.Tensor_mode", a, b, rounding_mode="floor")
    c.check("aten::logaddexp", torch.tensor([-float("inf"), float("inf")]),
            torch.tensor([-float("inf"), float("inf")]))


def test_div_rounding_modes(c):
    a, b = rnd(5, 6, lo=-20, hi=20), rnd(6, lo=0.3, hi=4, seed=1) * torch.tensor([1.0, -1] * 3)
    ai, bi = rnd(5, 6, dtype=I64, lo=-20, hi=20), torch.tensor([3, -3, 7, -7, 1, 2])
    for mode in ("trunc", "floor", None):
        c.check("aten::div.Tensor_mode", a, b, rounding_mode=mode)
        c.check("aten::div.Tensor_mode", ai, bi, rounding_mode=mode)
        c.check("aten::div.Scalar_mode", ai, -4, rounding_mode=mode)
        c.check("aten::div_.Tensor_mode", a.clone(), b, rounding_mode=mode)
    c.check("aten::div.Tensor", ai, bi)  # true division of integers
    c.check("aten::div.out_mode", a, b, rounding_mode="floor", out=torch.empty(5, 6))
    c.check("aten::floor_divide.Scalar", ai, 3)
    c.check("aten::remainder.Scalar_Tensor", 7, bi)
    c.check("aten::remainder.Scalar", a, -1.5)


def test_add_sub_alpha_and_scalars(c):
    a, b = rnd(3, 4), rnd(3, 1, seed=1)
    c.check("aten::add.Tensor", a, b, alpha=2.5)
    c.check("aten::sub.Tensor", a, b, alpha=-3)
    c.check("aten::add.Scalar", a, 1.25, 2)
    c.check("aten::sub.Scalar", rnd(3, dtype=I64), 3, 2)
    c.check("aten::add_.Tensor", a.clone().t(), b.t(), alpha=0.5)
    c.check("aten::sub_.Scalar", a.clone(), 0.75)
    c.check("aten::add.out", a, b, alpha=2, out=torch.empty(3, 4))
    c.check("aten::add.Tensor", rnd(3, dtype=BOOL), rnd(3, dtype=BOOL, seed=4))
    c.check("aten::mul.Tensor", rnd(3, dtype=BOOL), rnd(3, dtype=BOOL, seed=4))
    c.check("aten::mul.Scalar", rnd(3, 2, dtype=BF16), 0.1)
    c.check("aten::mul_.Tensor", rnd(3, 2, dtype=I32), torch.tensor(3))


def test_type_promotion(c):
    f, i, i32 = rnd(3, 4), rnd(3, 4, dtype=I64, lo=1, hi=5), rnd(4, dtype=I32, lo=1, hi=5)
    c.check("aten::add.Tensor", i, f)              # int + float -> float
    c.check("aten::mul.Tensor", i, 2.5)            # int tensor * float scalar -> float32
    c.check("aten::add.Tensor", i32, i)            # int32 + int64 -> int64
    c.check("aten::add.Tensor", f, torch.tensor(2.0, dtype=F64))  # 0-dim f64 keeps float32
    c.check("aten::add.Tensor", rnd(4, dtype=BF16), rnd(4, dtype=F16))  # -> float32
    c.check("aten::mul.Tensor", rnd(4, dtype=U8, lo=0, hi=9), rnd(4, dtype=torch.int8, lo=-5, hi=5))
    c.check("aten::div.Tensor", i, i32)            # ints divide to float
    c.check("aten::add.Tensor", rnd(3, dtype=BOOL), 3)
    c.check("aten::pow.Tensor_Scalar", i, 2)
    c.check("aten::pow.Tensor_Scalar", f.abs(), 0.5)
    c.check("aten::pow.Scalar", 2.0, f)
    c.check("aten::pow.Scalar", 3, rnd(4, dtype=I64, lo=0, hi=5))
    c.check("aten::pow_.Scalar", f.abs(), -1.5)
    c.check("aten::atan2", i, i32)


def test_complex_arithmetic(c):
    a = torch.randn(3, 4, dtype=torch.complex64)
    b = torch.randn(4, dtype=torch.complex64)
    for op in ("add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor"):
        c.check(f"aten::{op}", a, b)
    c.check("aten::mul.Scalar", a, 2 - 1j)
    c.check("aten::mul.Tensor", rnd(3, 4), b)     # float * complex -> complex
    c.check("aten::eq.Tensor", a, a.clone())
    c.check("aten::neg", a)
    c.check("aten::abs", a)
    c.check("aten::exp", a)
    c.check("aten::sgn", a)


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons(c, op):
    a = rnd(3, 4, lo=-2, hi=2).round()
    b = rnd(4, lo=-2, hi=2, seed=1).round()
    c.check(f"aten::{op}.Tensor", a, b)
    c.check(f"aten::{op}.Tensor", rnd(3, 4, dtype=I64, lo=-2, hi=2), rnd(4, dtype=I32, lo=-2, hi=2))
    c.check(f"aten::{op}.Scalar", a, 0.5)
    c.check(f"aten::{op}.Scalar", rnd(5, dtype=I64, lo=-3, hi=3), 1)
    c.check(f"aten::{op}.Tensor", a.to(BF16), b)
    c.check(f"aten::{op}.Tensor", SPECIAL, SPECIAL.flip(0))
    c.check(f"aten::{op}_.Scalar", a.clone(), 0.0)  # in place: the result converts to float
    c.check(f"aten::{op}.Tensor_out", a, b, out=torch.empty(3, 4, dtype=BOOL))


@pytest.mark.parametrize("op", ["logical_and", "logical_or", "logical_xor"])
def test_logical(c, op):
    a = rnd(3, 4, dtype=I64, lo=-1, hi=1)
    b = torch.tensor([0.0, 1.5, float("nan"), -2.0])
    c.check(f"aten::{op}", a, b)
    c.check(f"aten::{op}", rnd(4, dtype=BOOL), rnd(4, dtype=BOOL, seed=3))
    c.check(f"aten::{op}_", a.clone(), b)
    c.check(f"aten::{op}.out", a, b, out=torch.empty(3, 4, dtype=BOOL))


@pytest.mark.parametrize("op", ["bitwise_and", "bitwise_or", "bitwise_xor"])
def test_bitwise(c, op):
    a, b = rnd(3, 4, dtype=I64, lo=-50, hi=50), rnd(4, dtype=I64, lo=-50, hi=50, seed=2)
    c.check(f"aten::{op}.Tensor", a, b)
    c.check(f"aten::{op}.Tensor", rnd(4, dtype=BOOL), rnd(4, dtype=BOOL, seed=2))
    c.check(f"aten::{op}.Tensor", rnd(4, dtype=U8, lo=0, hi=255), rnd(4, dtype=U8, lo=0, hi=255, seed=1))
    c.check(f"aten::{op}.Scalar", a, 6)
    c.check(f"aten::{op}.Scalar_Tensor", 12, b)
    c.check(f"aten::{op}_.Tensor", a.clone(), b)


def test_where_masked_fill_fill(c):
    cond = rnd(3, 4, dtype=BOOL)
    a, b = rnd(3, 4), rnd(4, seed=1)
    c.check("aten::where.self", cond, a, b)
    c.check("aten::where.self", cond[0], rnd(3, 1, dtype=I64), b)  # promotion + broadcast
    c.check("aten::where.self", cond, a, torch.tensor(0.0))
    c.check("aten::where.self_out", cond, a, b, out=torch.empty(3, 4))
    c.check("aten::masked_fill.Scalar", a, cond, -1.5)
    c.check("aten::masked_fill_.Scalar", a.clone().t(), cond.t(), 2)
    c.check("aten::masked_fill_.Scalar", a.clone(), cond[1], float("-inf"))
    c.check("aten::masked_fill.Tensor", rnd(3, 4, dtype=I64), cond, torch.tensor(7))
    c.check("aten::masked_fill_.Tensor", rnd(3, 4, dtype=BF16), cond, torch.tensor(0.5))
    c.check("aten::fill_.Scalar", a.clone(), 3.5)
    c.check("aten::fill_.Scalar", rnd(3, dtype=I32), 7)
    c.check("aten::fill_.Scalar", rnd(3, dtype=BOOL), True)
    c.check("aten::fill_.Tensor", a.clone()[1:, ::2], torch.tensor(-2.0))
    c.check("aten::zero_", a.clone()[:, 1])


def test_clamp(c):
    x = torch.cat([rnd(3, 4, lo=-3, hi=3).flatten(), SPECIAL])
    c.check("aten::clamp", x, -1.0, 1.0)
    c.check("aten::clamp", x, None, 0.5)
    c.check("aten::clamp", x, -0.5)
    c.check("aten::clamp", x, 1.0, -1.0)  # min > max: max wins
    c.check("aten::clamp", rnd(6, dtype=I64, lo=-9, hi=9), -2, 3)
    c.check("aten::clamp", rnd(6, dtype=I64, lo=-9, hi=9), 0.5)  # promotes to float
    c.check("aten::clamp", rnd(6, dtype=BF16), -0.25, 0.25)
    c.check("aten::clamp_", x.clone(), -1, 1)
    c.check("aten::clamp.out", x, -1, 1, out=torch.empty_like(x))
    lo, hi = rnd(4, lo=-2, hi=0), rnd(3, 1, lo=0, hi=2, seed=1)
    c.check("aten::clamp.Tensor", rnd(3, 4, lo=-3, hi=3), lo, hi)
    c.check("aten::clamp.Tensor", rnd(3, 4, lo=-3, hi=3), None, hi)
    c.check("aten::clamp_.Tensor", rnd(3, 4, lo=-3, hi=3), lo)
    c.check("aten::clamp_min", x, 0.25)
    c.check("aten::clamp_min.Tensor", rnd(3, 4), lo)
    c.check("aten::clamp_max_", x.clone(), 0.25)
    c.check("aten::clamp_max.Tensor", rnd(3, 4), hi)
    c.check("aten::clamp", torch.tensor([1.0, 2.0]), torch.tensor(float("nan")).item(), 3.0)


def test_ternary(c):
    a, b, w = rnd(3, 4), rnd(4, seed=1), rnd(3, 1, lo=-0.5, hi=1.5, seed=2)
    c.check("aten::lerp.Scalar", a, b, 0.3)
    c.check("aten::lerp.Scalar", a, b, 0.9)
    c.check("aten::lerp.Tensor", a, b, w)
    c.check("aten::lerp_.Scalar", a.clone().t(), b[:3].expand(4, 3), 0.75)
    c.check("aten::lerp.Tensor", a.to(BF16), b.to(BF16), w.to(BF16))
    c.check("aten::addcmul", a, b, w, value=0.5)
    c.check("aten::addcmul_", a.clone(), b, w, value=-2)
    c.check("aten::addcmul", rnd(3, 4, dtype=I64), rnd(4, dtype=I64), rnd(3, 1, dtype=I64), value=3)
    c.check("aten::addcdiv", a, b, w.abs() + 0.5, value=0.5)
    c.check("aten::addcdiv_", a.clone(), b, w.abs() + 0.5)
    c.check("aten::addcdiv.out", a.to(BF16), b.to(BF16), (w.abs() + 0.5).to(BF16),
            out=torch.empty(3, 4, dtype=BF16))


def test_new_scalar_value_is_a_cache_hit(c):
    a, b = rnd(3, 4), rnd(3, 4, seed=1)
    c.check("aten::add.Tensor", a, b, alpha=2.0)
    before = c.stats()
    for alpha in (3.0, -0.5, 1e-3):
        c.check("aten::add.Tensor", a, b, alpha=alpha)
    c.check("aten::leaky_relu", a, 0.01)
    mid = c.stats()
    c.check("aten::leaky_relu", a, 0.2)
    c.check("aten::clamp", a, -0.1, 0.7)
    c.check("aten::clamp", a, -0.3, 0.2)
    after = c.stats()
    assert after.fast_hits - before.fast_hits >= 5
    assert after.fast_misses - mid.fast_misses == 1  # only the first clamp compiled
    assert mid.fast_misses - before.fast_misses == 1  # only leaky_relu compiled


def test_every_listed_overload_is_registered(c):
    names = set(c.op_names())
    for op in UNARY_FLOAT:
        for suffix in ("", "_", ".out"):
            assert f"aten::{op}{suffix}" in names, op
    for name in ("aten::add.Scalar_out", "aten::div_.Scalar_mode", "aten::pow.Scalar_out",
                 "aten::bitwise_xor.Scalar_Tensor_out", "aten::masked_fill_.Tensor",
                 "aten::where.self_out", "aten::fill_.Tensor", "aten::zero_"):
        assert name in names


# ---- less common ops (elementwise_special.c) ----
def test_special_unary(c):
    x = rnd(4, 5, lo=0.2, hi=4)
    for op in ("lgamma", "digamma", "sinc", "deg2rad", "rad2deg"):
        c.check(f"aten::{op}", x)
        c.check(f"aten::{op}", (x - 2).to(BF16))
    c.check("aten::lgamma_", x.clone())
    c.check("aten::sinc", torch.tensor([0.0, 1.0, -0.5, 2.5]))
    c.check("aten::deg2rad", rnd(4, dtype=I64, lo=-180, hi=180))
    c.check("aten::signbit", SPECIAL.clone())
    c.check("aten::signbit", rnd(5, dtype=I64, lo=-2, hi=2))
    p = rnd(3, 4, lo=0.01, hi=0.99)
    c.check("aten::logit", p)
    c.check("aten::logit", torch.tensor([0.0, 1e-8, 0.5, 1.0]), 1e-3)
    c.check("aten::logit_", p.clone(), 0.2)
    g = rnd(3, 4, seed=1)
    c.check("aten::logit_backward", g, torch.tensor([-0.1, 0.0, 0.3, 1.2]).expand(3, 4))
    c.check("aten::logit_backward", g, p, 0.1)


def test_special_activations(c):
    x = torch.cat([rnd(20, lo=-3, hi=3), SPECIAL])
    g = torch.randn(x.shape)
    c.check("aten::celu", x, 1.5)
    c.check("aten::celu_", x.clone())
    c.check("aten::softshrink", x, 0.7)
    c.check("aten::hardshrink", x, 0.7)
    c.check("aten::softshrink_backward", g, x, 0.7)
    c.check("aten::hardshrink_backward", g, x, 0.5)
    y = rnd(4, 5, lo=-30, hi=30)
    c.check("aten::log_sigmoid_forward", y)
    c.check("aten::log_sigmoid_forward", y.to(BF16))
    out, buf = torch.ops.aten.log_sigmoid_forward(y)
    c.check("aten::log_sigmoid_backward", rnd(4, 5, seed=2), y, buf)


def test_special_binary(c):
    a, b = SPECIAL.clone(), SPECIAL.flip(0).clone()
    c.check("aten::fmax", a, b)
    c.check("aten::fmin", a, b)
    c.check("aten::fmax", rnd(3, 4, dtype=I64), rnd(4, dtype=I64, seed=1))
    c.check("aten::heaviside", torch.tensor([-1.5, 0.0, 2.0, 0.0]), torch.tensor([0.5, 0.25, 7.0, 1.0]))
    c.check("aten::heaviside", rnd(3, 4, dtype=I64, lo=-1, hi=1), torch.tensor([5]))
    c.check("aten::logaddexp2", rnd(3, 4, lo=-10, hi=10), rnd(4, lo=-10, hi=10, seed=1))
    c.check("aten::logaddexp2", torch.tensor([-float("inf"), float("inf")]),
            torch.tensor([-float("inf"), float("inf")]))
    c.check("aten::ldexp.Tensor", rnd(3, 4), rnd(4, dtype=I64, lo=-3, hi=3))
    c.check("aten::rsub.Tensor", rnd(3, 4), rnd(4, seed=1), alpha=2)
    c.check("aten::rsub.Scalar", rnd(3, 4, dtype=I64), 5)


@pytest.mark.parametrize("dtype", [I64, I32, U8, torch.int8])
def test_shifts(c, dtype):
    hi = 255 if dtype == U8 else 100
    a = rnd(3, 8, dtype=dtype, lo=0 if dtype == U8 else -100, hi=hi)
    bits = torch.iinfo(dtype).bits
    s = torch.tensor([0, 1, 3, bits - 1, bits, bits + 5, 2, 7]).to(dtype)
    c.check("aten::bitwise_left_shift.Tensor", a, s)
    c.check("aten::bitwise_right_shift.Tensor", a, s)
    c.check("aten::__lshift__.Scalar", a, 2)
    c.check("aten::__rshift__.Scalar", a, 1)
    c.check("aten::bitwise_left_shift.Scalar_Tensor", 3, s)
    c.check("aten::__irshift__.Tensor", a.clone(), s)


def test_complex_helpers(c):
    z = torch.randn(3, 4, dtype=torch.complex64)
    c.check("aten::_conj_physical", z)
    c.check("aten::conj_physical_", z.clone())
    c.check("aten::conj_physical.out", z, out=torch.empty(3, 4, dtype=torch.complex64))
    c.check("aten::_conj_physical", rnd(3))
    c.check("aten::angle", z)
    c.check("aten::angle", torch.tensor([-1.0, 0.0, 2.0, float("nan"), -0.0]))
    c.check("aten::angle", rnd(4, dtype=I64, lo=-2, hi=2))
    c.check("aten::complex", rnd(3, 4), rnd(4, seed=1))
    c.check("aten::complex", rnd(3, dtype=F64), rnd(3, dtype=F64, seed=1))
    c.check("aten::polar", rnd(3, 4, lo=0, hi=2), rnd(3, 4, seed=1, lo=-3, hi=3))
