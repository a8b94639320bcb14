"""Example kernels for tpuc.kernel, written as StableHLO text (no JAX
needed): RMSNorm forward and backward for a given shape. Used by the tests
(tests/test_kernel.py) and docs/tuning.md.

    fwd, bwd = rmsnorm_stablehlo(n=64, d=256)
    rms = tpuc.kernel.from_stablehlo(fwd, name="rmsnorm_64x256", backward=bwd)
    y = rms(x, w)          # x: float32[64, 256], w: float32[256]
"""
from __future__ import annotations


def rmsnorm_stablehlo(n: int, d: int, eps: float = 1e-6) -> tuple[str, str]:
    """(forward, backward) modules of y = x * rsqrt(mean(x^2, -1) + eps) * w
    over x: f32[n, d], w: f32[d]. The backward takes (x, w, dy) and returns
    (dx, dw)."""
    X, V, W, S = f"tensor<{n}x{d}xf32>", f"tensor<{n}xf32>", f"tensor<{d}xf32>", "tensor<f32>"

    def rstd() -> str:  # %r: rsqrt(mean(x*x) + eps), per row
        return f"""
    %sq = stablehlo.multiply %x, %x : {X}
    %zero = stablehlo.constant dense<0.0> : {S}
    %ss = stablehlo.reduce(%sq init: %zero) applies stablehlo.add across dimensions = [1] : ({X}, {S}) -> {V}
    %dn = stablehlo.constant dense<{float(d):.1f}> : {V}
    %ms = stablehlo.divide %ss, %dn : {V}
    %ep = stablehlo.constant dense<{eps:.9e}> : {V}
    %me = stablehlo.add %ms, %ep : {V}
    %r = stablehlo.rsqrt %me : {V}
    %rb = stablehlo.broadcast_in_dim %r, dims = [0] : ({V}) -> {X}
    %wb = stablehlo.broadcast_in_dim %w, dims = [1] : ({W}) -> {X}"""

    fwd = f"""module @rmsnorm {{
  func.func public @main(%x: {X}, %w: {W}) -> {X} {{{rstd()}
    %xr = stablehlo.multiply %x, %rb : {X}
    %y = stablehlo.multiply %xr, %wb : {X}
    return %y : {X}
  }}
}}
"""
    bwd = f"""module @rmsnorm_backward {{
  func.func public @main(%x: {X}, %w: {W}, %g: {X}) -> ({X}, {W}) {{{rstd()}
    %gw = stablehlo.multiply %g, %wb : {X}
    %gwx = stablehlo.multiply %gw, %x : {X}
    %s = stablehlo.reduce(%gwx init: %zero) applies stablehlo.add across dimensions = [1] : ({X}, {S}) -> {V}
    %r2 = stablehlo.multiply %r, %r : {V}
    %r3 = stablehlo.multiply %r2, %r : {V}
    %c0 = stablehlo.multiply %r3, %s : {V}
    %c = stablehlo.divide %c0, %dn : {V}
    %cb = stablehlo.broadcast_in_dim %c, dims = [0] : ({V}) -> {X}
    %t1 = stablehlo.multiply %gw, %rb : {X}
    %t2 = stablehlo.multiply %x, %cb : {X}
    %dx = stablehlo.subtract %t1, %t2 : {X}
    %gx = stablehlo.multiply %g, %x : {X}
    %gxr = stablehlo.multiply %gx, %rb : {X}
    %dw = stablehlo.reduce(%gxr init: %zero) applies stablehlo.add across dimensions = [0] : ({X}, {S}) -> {W}
    return %dx, %dw : {X}, {W}
  }}
}}
"""
    return fwd, bwd
