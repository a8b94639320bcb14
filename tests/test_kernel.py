"""tpuc.kernel: StableHLO (and, when JAX is installed, JAX and Pallas
functions) as torch.library custom ops on "tpu": values and gradients
against PyTorch on the CPU, in strict and fused eager mode and inside
torch.compile(backend="tpu")."""
from __future__ import annotations

import importlib.util

import pytest
import torch

import tpuc.kernel
from tpuc.kernel_examples import rmsnorm_stablehlo

N, D, EPS = 16, 128, 1e-6


def rmsnorm_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


@pytest.fixture(scope="module")
def rms() -> tpuc.kernel.Kernel:
    fwd, bwd = rmsnorm_stablehlo(N, D, EPS)
    return tpuc.kernel.from_stablehlo(fwd, name=f"test_rmsnorm_{N}x{D}", backward=bwd)


def inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, D, generator=g)
    w = torch.rand(D, generator=g) + 0.5
    dy = torch.randn(N, D, generator=g)
    return x, w, dy


def reference(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, dtype: torch.dtype):
    """(y, dx, dw) computed by PyTorch on the CPU in `dtype`."""
    xr = x.detach().to(dtype).clone().requires_grad_()
    wr = w.detach().to(dtype).clone().requires_grad_()
    y = rmsnorm_ref(xr, wr)
    y.backward(dy.to(dtype))
    return y.detach(), xr.grad, wr.grad


def assert_close_derived(got: torch.Tensor, x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor,
                         which: int) -> None:
    """got (from tpu) vs the float64 result: its error may be a small multiple
    of PyTorch's own float32 error on the CPU (plus a few ulps of the
    result's magnitude, for results the CPU computes exactly by luck)."""
    exact = reference(x, w, dy, torch.float64)[which]
    cpu32 = reference(x, w, dy, torch.float32)[which]
    cpu_err = (cpu32.double() - exact).abs().max().item()
    ulp = torch.finfo(torch.float32).eps * exact.abs().max().item()
    err = (got.cpu().double() - exact).abs().max().item()
    assert err <= 4 * cpu_err + 8 * ulp, (err, cpu_err, ulp)


def test_signature_parsing(rms: tpuc.kernel.Kernel) -> None:
    assert [t.shape for t in rms.inputs] == [(N, D), (D,)]
    assert [t.dtype for t in rms.inputs] == [torch.float32] * 2
    assert [t.shape for t in rms.outputs] == [(N, D)]
    assert rms.backward is not None and [t.shape for t in rms.backward.outputs] == [(N, D), (D,)]


def test_values_and_gradients_eager(rms: tpuc.kernel.Kernel) -> None:
    x, w, dy = inputs()
    xt = x.to("tpu").requires_grad_()
    wt = w.to("tpu").requires_grad_()
    y = rms(xt, wt)
    assert y.device.type == "tpu" and y.shape == (N, D)
    y.backward(dy.to("tpu"))
    assert_close_derived(y.detach(), x, w, dy, 0)
    assert_close_derived(xt.grad, x, w, dy, 1)
    assert_close_derived(wt.grad, x, w, dy, 2)


def test_noncontiguous_input_and_view(rms: tpuc.kernel.Kernel) -> None:
    """A transposed input and a slice of a bigger storage are passed as
    their values (a dense copy), not as the storage's bytes."""
    x, w, dy = inputs()
    big = torch.randn(2 * D, N)
    xt = big.to("tpu")[:D].t()  # [N, D], strided, offset 0
    wt = torch.cat([torch.zeros(3), w]).to("tpu")[3:]  # offset 3
    got = rms(xt, wt)
    assert_close_derived(got, big[:D].t().contiguous(), w, dy, 0)


def test_fused_mode(rms: tpuc.kernel.Kernel) -> None:
    """Pending ops run before the kernel; ops after it use its result."""
    x, w, dy = inputs()
    with torch.tpu.eager_mode("fused"):
        xt = x.to("tpu") * 2  # pending
        y = rms(xt, w.to("tpu")) + 1  # after the kernel: pending again
        out = y.cpu()
    assert_close_derived(out - 1, x * 2, w, dy, 0)


def test_torch_compile(rms: tpuc.kernel.Kernel) -> None:
    x, w, dy = inputs()
    xt = x.to("tpu").requires_grad_()
    wt = w.to("tpu").requires_grad_()

    @torch.compile(backend="tpu", fullgraph=True)
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return rms(a * 1.0, b) * 1.0

    y = f(xt, wt)
    y.backward(dy.to("tpu"))
    assert_close_derived(y.detach(), x, w, dy, 0)
    assert_close_derived(xt.grad, x, w, dy, 1)
    assert_close_derived(wt.grad, x, w, dy, 2)


def test_shape_errors_are_clear(rms: tpuc.kernel.Kernel) -> None:
    with pytest.raises(ValueError, match=r"input 0 is float32\[4, 128\], the kernel was built for float32\[16, 128\]"):
        rms(torch.zeros(4, D, device="tpu"), torch.zeros(D, device="tpu"))
    with pytest.raises(RuntimeError, match="runs on tpu tensors"):
        rms(torch.zeros(N, D), torch.zeros(D))
    with pytest.raises(ValueError, match="no `func.func public @main"):
        tpuc.kernel.from_stablehlo("module {}", name="nothing")
    with pytest.raises(ValueError, match="dynamic shape"):
        tpuc.kernel.from_stablehlo(
            "func.func public @main(%a: tensor<?xf32>) -> tensor<?xf32> { return %a : tensor<?xf32> }",
            name="dyn")


def test_compile_error_names_the_kernel() -> None:
    bad = "module { func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> { %b = stablehlo.bogus %a : tensor<4xf32> return %b : tensor<4xf32> } }"
    k = tpuc.kernel.from_stablehlo(bad, name="test_bogus")
    with pytest.raises(RuntimeError, match="compiling the kernel"):
        k(torch.zeros(4, device="tpu"))
    torch.ones(2, device="tpu").sum().item()  # the device is still usable


def test_python_backward_function() -> None:
    """A backward written in PyTorch instead of StableHLO."""
    text = ("func.func public @main(%a: tensor<8xf32>) -> tensor<8xf32> {\n"
            "  %b = stablehlo.multiply %a, %a : tensor<8xf32>\n  return %b : tensor<8xf32>\n}")
    sq = tpuc.kernel.from_stablehlo(text, name="test_square",
                                    backward=lambda xs, ys, gs: [2 * xs[0] * gs[0]])
    a = torch.arange(8.0)
    at = a.to("tpu").requires_grad_()
    sq(at).sum().backward()
    assert torch.equal(at.grad.cpu(), 2 * a)  # exact: small integers


jax_missing = importlib.util.find_spec("jax") is None


@pytest.mark.skipif(jax_missing, reason="JAX is not installed (optional: pip install jax)")
def test_from_jax_rmsnorm() -> None:
    import jax
    import jax.numpy as jnp

    def rmsnorm(x, w):
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS) * w

    x, w, dy = inputs()
    k = tpuc.kernel.from_jax(rmsnorm, x, w, name="test_jax_rmsnorm")
    xt = x.to("tpu").requires_grad_()
    wt = w.to("tpu").requires_grad_()
    y = k(xt, wt)
    y.backward(dy.to("tpu"))
    assert_close_derived(y.detach(), x, w, dy, 0)
    assert_close_derived(xt.grad, x, w, dy, 1)
    assert_close_derived(wt.grad, x, w, dy, 2)


@pytest.mark.skipif(jax_missing, reason="JAX is not installed (optional: pip install jax)")
def test_from_jax_pallas_interpret() -> None:
    """A Pallas kernel (interpret mode: plain HLO on the CPU plugin)."""
    import jax
    from jax.experimental import pallas as pl

    def add_scaled_kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0 + y_ref[...]

    def f(x, y):
        return pl.pallas_call(add_scaled_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              interpret=True)(x, y)

    a, b = torch.randn(8, 128), torch.randn(8, 128)
    k = tpuc.kernel.from_jax(f, a, b, name="test_pallas_add", backward=False)
    got = k(a.to("tpu"), b.to("tpu")).cpu()
    assert torch.equal(got, a * 2.0 + b)  # one multiply by 2 (exact) and one add: same rounding
