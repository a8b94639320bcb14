"""histc and isin (csrc/core/lower/count.c) through the C core's op API.

histc of floating dtypes is compared with PyTorch's CPU kernel. For integer
dtypes the CPU has no kernel (CUDA has: int64 arithmetic, integer division);
the reference is then the CPU's float64 histc of the same values, which is
exact here ((v - lo) * bins fits a double exactly and the quotient's rounding
cannot cross an integer while hi - lo < 2^26), and an exact integer count
written out in Python as well."""
import pytest
import torch

from harness import core

F32, BF16, F16, F64 = torch.float32, torch.bfloat16, torch.float16, torch.float64
INTS = [torch.int64, torch.int32, torch.int8, torch.uint8]


@pytest.fixture(scope="module")
def c():
    return core()


def exact_int_histc(x: torch.Tensor, bins: int, lo: int, hi: int) -> torch.Tensor:
    if lo == hi:
        lo, hi = (int(x.min()), int(x.max())) if x.numel() else (lo, hi)
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    out = [0] * bins
    for v in x.flatten().tolist():
        if lo <= v <= hi:
            out[min((v - lo) * bins // (hi - lo), bins - 1)] += 1
    return torch.tensor(out)


@pytest.mark.parametrize("dtype", [F32, F64, BF16, F16])
def test_histc_float_matches_cpu(c, dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(300, generator=g, dtype=F64) * 2).to(dtype)
    c.check("aten::histc", x, bins=7, min=-3.0, max=2.5)
    c.check("aten::histc", x.view(30, 10)[:, 1::2], bins=5)  # data range, a strided view
    # values on the bin edges and both ends
    edges = torch.linspace(-2, 2, 9, dtype=F64).to(dtype)
    c.check("aten::histc", torch.cat([edges, edges]), bins=8, min=-2, max=2)
    c.check("aten::histc", torch.full((4,), 3.0, dtype=dtype), bins=4)  # flat range: +-1
    c.check("aten::histc.out", x, bins=3, min=-1.0, max=1.0, out=torch.empty(3, dtype=dtype))


def test_histc_float_nan_and_inf_not_counted(c):
    x = torch.tensor([0.1, float("nan"), 0.5, float("inf"), -float("inf"), 0.9])
    c.check("aten::histc", x, bins=4, min=0.0, max=1.0)


@pytest.mark.parametrize("dtype", INTS)
def test_histc_int_matches_float64_cpu(c, dtype):
    g = torch.Generator().manual_seed(1)
    lo_v = 0 if dtype == torch.uint8 else -20
    n = 120 if dtype.itemsize == 1 else 513  # counts must fit the dtype
    x = torch.randint(lo_v, 40, (n,), generator=g).to(dtype)
    for bins, lo, hi in [(8, 0, 7), (5, -3, 30), (16, 0, 0), (3, 10, 10)]:
        if dtype == torch.uint8 and lo < 0:
            continue
        got = c.run("aten::histc", x, bins=bins, min=lo, max=hi)
        assert got.dtype == dtype and got.shape == (bins,)
        ref = torch.histc(x.to(F64), bins=bins, min=lo, max=hi)
        torch.testing.assert_close(got.to(F64), ref, rtol=0, atol=0)
        torch.testing.assert_close(got.to(torch.int64), exact_int_histc(x, bins, lo, hi),
                                   rtol=0, atol=0)


def test_histc_int_moe_router(c):
    # Qwen3-MoE / Mixtral: histc(selected_experts.int(), bins=E, min=0, max=E - 1)
    experts = torch.randint(0, 8, (64, 2), generator=torch.Generator().manual_seed(2)).int()
    got = c.run("aten::histc", experts, bins=8, min=0, max=7)
    torch.testing.assert_close(got, torch.bincount(experts.flatten(), minlength=8).int())


def test_histc_large_input_scatters(c):
    # past the one-hot size the lowering scatter-adds: same counts
    g = torch.Generator().manual_seed(3)
    x = torch.randn(300_000, generator=g)
    c.check("aten::histc", x, bins=50, min=-2.0, max=2.0)
    xi = torch.randint(-5, 200, (300_000,), generator=g, dtype=torch.int32)
    got = c.run("aten::histc", xi, bins=64, min=0, max=150)
    ref = torch.histc(xi.to(F64), bins=64, min=0, max=150)
    torch.testing.assert_close(got.to(F64), ref, rtol=0, atol=0)


def test_histc_runtime_bounds_do_not_recompile(c):
    x = torch.randn(100)
    c.check("aten::histc", x, bins=6, min=-1.0, max=1.0)
    before = c.stats().fast_misses
    c.check("aten::histc", x, bins=6, min=-0.5, max=2.0)
    c.check("aten::histc", x, bins=6, min=0.0, max=0.0)
    assert c.stats().fast_misses == before  # the same program, new scalars


def test_histc_empty(c):
    c.check("aten::histc", torch.empty(0), bins=4, min=0.0, max=1.0)
    got = c.run("aten::histc", torch.empty(0, dtype=torch.int32), bins=3, min=0, max=2)
    assert got.tolist() == [0, 0, 0] and got.dtype == torch.int32


@pytest.mark.parametrize("dtype", [F32, torch.int64, torch.int32, BF16, torch.uint8])
def test_isin_matches_cpu(c, dtype):
    g = torch.Generator().manual_seed(4)
    e = torch.randint(0, 20, (3, 5, 4), generator=g).to(dtype)
    t = torch.randint(0, 20, (7,), generator=g).to(dtype)
    c.check("aten::isin.Tensor_Tensor", e, t)
    c.check("aten::isin.Tensor_Tensor", e, t.view(7, 1), invert=True)
    c.check("aten::isin.Tensor_Tensor", e.transpose(0, 2), t[::2], assume_unique=True)
    c.check("aten::isin.Tensor_Scalar", e, 3)
    c.check("aten::isin.Tensor_Scalar", e, 3, invert=True)
    c.check("aten::isin.Scalar_Tensor", 5, t)
    c.check("aten::isin.Tensor_Tensor_out", e, t, out=torch.empty(3, 5, 4, dtype=torch.bool))


def test_isin_type_promotion_and_nan(c):
    e = torch.tensor([0.5, 1.0, 2.0, float("nan"), 3.0])
    c.check("aten::isin.Tensor_Tensor", e, torch.tensor([1, 3, 7]))           # int set, float elements
    c.check("aten::isin.Tensor_Tensor", torch.tensor([1, 2, 3]), torch.tensor([1.5, 2.0]))
    c.check("aten::isin.Tensor_Tensor", e, torch.tensor([float("nan"), 2.0]))  # NaN is in no set
    c.check("aten::isin.Tensor_Scalar", torch.tensor([1, 2, 3]), 2.5)
    big = torch.tensor([2**24 + 1], dtype=torch.int64)
    c.check("aten::isin.Tensor_Tensor", big, torch.tensor([2.0**24], dtype=F32))  # compared in f32
    c.check("aten::isin.Tensor_Tensor", torch.empty(0), torch.tensor([1.0]))
    c.check("aten::isin.Tensor_Tensor", torch.tensor([1.0]), torch.empty(0), invert=True)
