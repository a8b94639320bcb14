"""aten::_weight_int8pack_mm on "tpu" (python/tpuc/quantized_mm.py): as accurate as PyTorch's CPU
kernel against the float64 product, in strict, fused and compiled mode, the CPU's errors, an
int8 weight-only quantized linear layer serving as on the CPU, and no CPU fallback.
TPUC_INT8_MM_KERNEL=0 (the fallback) gives the same values."""
from __future__ import annotations

import pytest
import torch

from tpu_testing import (assert_as_accurate, fallback_counts, kernels_on_and_off,
                         new_fallbacks)

OP = "aten::_weight_int8pack_mm"


def _inputs(dtype: torch.dtype, m: int = 6, k: int = 96, n: int = 10) -> tuple:
    g = torch.Generator().manual_seed(m * 1000 + k + n)
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
    scales = (torch.rand(n, generator=g) * 0.02 + 0.001).to(dtype)
    return a, b, scales


def _exact(a: torch.Tensor, b: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return a.double() @ b.double().t() * scales.double()


@pytest.mark.parametrize("mode", ["strict", "fused", "compiled"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
# K >= 16: PyTorch's CPU kernel (the reference; torch 2.13.0, AMD EPYC with AVX-512) crashes the
# process (SIGSEGV) for bfloat16 with K = 8; "tpu" computes that shape (test_short_rows, below)
@pytest.mark.parametrize("shape", [(6, 96, 10), (1, 256, 33), (17, 16, 4)])
def test_as_accurate_as_the_cpu(mode: str, dtype: torch.dtype, shape: tuple) -> None:
    a, b, scales = _inputs(dtype, *shape)
    cpu = torch.ops.aten._weight_int8pack_mm(a, b, scales)
    fn = torch.ops.aten._weight_int8pack_mm
    if mode == "compiled":
        fn = torch.compile(lambda x, y, z: torch.ops.aten._weight_int8pack_mm(x, y, z),
                           backend="tpu", dynamic=False)
    before = fallback_counts()
    with torch.tpu.eager_mode("fused" if mode == "fused" else "strict"):
        got = fn(a.to("tpu"), b.to("tpu"), scales.to("tpu"))
    assert OP not in new_fallbacks(before)
    assert got.dtype == dtype and got.shape == cpu.shape
    assert_as_accurate(got, cpu, _exact(a, b, scales))


def test_short_rows() -> None:
    """bfloat16 with K = 8, which crashes PyTorch's CPU kernel, against the float64 product: the
    float32 sum of 8 products of a bfloat16 by an int8 is exact but for one float32 rounding
    per addition, then rounded once to bfloat16: within one bfloat16 ulp of the exact value."""
    a, b, scales = _inputs(torch.bfloat16, 17, 8, 4)
    got = torch.ops.aten._weight_int8pack_mm(a.to("tpu"), b.to("tpu"), scales.to("tpu")).cpu()
    exact = _exact(a, b, scales)
    assert ((got.double() - exact).abs() <= torch.finfo(torch.bfloat16).eps * exact.abs()).all()


def test_errors_as_on_the_cpu() -> None:
    a, b, s = _inputs(torch.float32)
    bad = [(a, b, s.double()), (a, b.float(), s), (a.double(), b, s.double()), (a, b, s[:3])]
    for args in bad:
        with pytest.raises(RuntimeError) as cpu_error:
            torch.ops.aten._weight_int8pack_mm(*args)
        with pytest.raises(RuntimeError) as tpu_error:
            torch.ops.aten._weight_int8pack_mm(*(t.to("tpu") for t in args))
        assert str(tpu_error.value) == str(cpu_error.value).replace("_weight_int8pack_mm_cpu :",
                                                                     "_weight_int8pack_mm:")


class Int8Linear(torch.nn.Module):
    """An int8 weight-only quantized linear layer as a serving stack writes it: weights
    rounded per output channel to int8 with a float scale, the product through the kernel."""

    def __init__(self, linear: torch.nn.Linear, dtype: torch.dtype) -> None:
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(1).clamp_min(1e-8) / 127
        self.register_buffer("w", torch.round(w / scale[:, None]).clamp(-128, 127).to(torch.int8))
        self.register_buffer("scale", scale.to(dtype))
        self.register_buffer("bias", linear.bias.detach().to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = torch.ops.aten._weight_int8pack_mm(x.reshape(-1, shape[-1]), self.w, self.scale)
        return y.reshape(*shape[:-1], -1) + self.bias


def _serve(device: str, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32))
    q = torch.nn.Sequential(Int8Linear(mlp[0], dtype), torch.nn.GELU(), Int8Linear(mlp[2], dtype))
    q = q.to(device)
    x = torch.randn(3, 5, 64, generator=torch.Generator().manual_seed(1)).to(device, dtype)
    with torch.no_grad():
        return q(x).cpu()


def test_an_int8_quantized_mlp_serves_as_on_the_cpu() -> None:
    """Two quantized layers with a GELU between: within two bfloat16 roundings of the CPU's
    output relative to its largest value (each side rounds each product once to bfloat16, and
    the GELU in between can move a value by an ulp)."""
    before = fallback_counts()
    got = _serve("tpu")
    assert not new_fallbacks(before)
    ref = _serve("cpu")
    tol = 2 * torch.finfo(torch.bfloat16).eps * ref.abs().max().item()
    assert (got.float() - ref.float()).abs().max().item() <= tol


def test_the_switch_gives_the_fallback_and_the_same_values(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """TPUC_INT8_MM_KERNEL=0: the CPU kernel on host copies; float32 products of the same
    inputs agree within the float32 reordering error of a 128-term sum."""
    on, off = kernels_on_and_off("TPUC_INT8_MM_KERNEL", "test_quantized_mm",
                                 "_serve('tpu', torch.float32)", (OP,), str(tmp_path), globals())
    bound = 128 * torch.finfo(torch.float32).eps * off.abs().max().item()  # type: ignore[attr-defined]
    assert (on - off).abs().max().item() <= bound
