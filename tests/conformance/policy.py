"""What the comparison allows, entry by entry, and why.

TOLERANCES: per-(op, dtype) tolerances that replace PyTorch's defaults (assert_close's
per-dtype rtol/atol); each states the reason found by looking at the difference.
NONDETERMINISTIC: entries whose values cannot be compared with the CPU (random draws,
uninitialized memory); they are checked for shape and dtype only. NONDETERMINISTIC_SAMPLES:
entries random only for some samples (OpInfo seeds them, so two CPU runs agree, but the
device's generator draws other numbers); samples of any entry whose two CPU runs disagree
are treated the same way."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    reason: str
    checks: tuple[str, ...] = ("forward", "inplace", "out", "grad")


# Default rtol per dtype (assert_close's); the overrides below only widen atol.
_RTOL = {"bfloat16": 1.6e-2, "float16": 1e-3, "float32": 1.3e-6}


def _ulp(dtype: str, atol: float, why: str, checks: tuple[str, ...] = ("forward", "inplace", "out", "grad")) -> Tolerance:
    return Tolerance(atol, _RTOL[dtype], why, checks)


_R16 = "rounding of intermediates in the 16-bit type: "

# Each number is what tests/conformance/diagnose.py measured on the worst sample: the
# largest |device - CPU|, and each side's largest error against the float64 result of the
# same inputs. Every override here is at most one unit in the last place of the values
# involved, and the device is no further from float64 than the CPU unless stated.
# The CPU's float32 trigamma (polygamma n=1, which every polygamma entry's samples also
# take) uses the reflection formula with sin(pi x) in float32, which loses up to 0.7% near
# negative integers; tpu's (lower/special.c: recurrence to x + 16, XLA's zeta there) is
# within 4e-7. Measured on 20000 uniform points in [-9, 9]: largest relative error vs
# float64 CPU 7.1e-3, tpu 3.9e-7; the sweep's worst sample differs by 2.0e-5 relative.
_POLYGAMMA_F32 = Tolerance(1e-5, 5e-5, "the CPU's float32 trigamma is the inaccurate side near poles: rel. error vs f64 CPU 7.1e-3, tpu 3.9e-7 (policy.py, _POLYGAMMA_F32)")

TOLERANCES: dict[tuple[str, str], Tolerance] = {
    ("addbmm", "bfloat16"): _ulp("bfloat16", 1.0, _R16 + "|diff| 1.0 (1 ulp) at 128.2 and -171.7; error vs f64 tpu 0.87, CPU 0.93 (tpu <= CPU on every sample)"),
    ("addbmm", "float16"): _ulp("float16", 0.125, _R16 + "|diff| 0.125 (1 ulp) at -171.8; error vs f64 tpu 0.078, CPU 0.080"),
    ("addbmm", "float32"): _ulp("float32", 5e-5, "float32 accumulation order of the 5 batched products: |diff| 3.1e-5 at 79.9; error vs f64 5.4e-5 on both sides"),
    ("addr", "bfloat16"): _ulp("bfloat16", 0.125, _R16 + "CPU rounds beta*input and alpha*outer separately: |diff| 0.125 (1 ulp) at -10.06; error vs f64 tpu 0.064, CPU 0.064"),
    ("special.i0e", "float16"): _ulp("float16", 4.9e-4, "the CPU evaluates i0e's Chebyshev series in float16 arithmetic, tpu in float32 rounded once (lower/special.c): |diff| 4.9e-4 (2 ulp) at 0.36; on 943k uniform points in [-9, 9] the largest relative error vs f64 is tpu 4.8e-4 (under half an ulp), CPU 1.35e-3", ("forward", "inplace", "out")),
    ("digamma", "float32"): Tolerance(1e-5, 5e-5, "grad only: digamma's gradient is trigamma, whose CPU float32 kernel is the inaccurate side near the negative poles: on 200k uniform points in [-9, 9] its largest relative error vs f64 is 4.0e-2 (at -7.99999), tpu's 6.0e-8 (float64 rounded once); the sample differs by 2.0e-5 relative at 3 of 20 elements (as _POLYGAMMA_F32)", ("grad",)),
    ("polygamma.polygamma_n_0", "float32"): _POLYGAMMA_F32,
    ("polygamma.polygamma_n_1", "float32"): _POLYGAMMA_F32,
    ("polygamma.polygamma_n_2", "float32"): _POLYGAMMA_F32,
    ("polygamma.polygamma_n_3", "float32"): _POLYGAMMA_F32,
    ("polygamma.polygamma_n_4", "float32"): _POLYGAMMA_F32,
    ("special.polygamma.special_polygamma_n_0", "float32"): _POLYGAMMA_F32,
    ("addr", "float16"): _ulp("float16", 0.016, _R16 + "|diff| 0.0117 at -5.80; error vs f64 tpu 0.0048, CPU 0.0076"),
    ("nn.functional.linear_cross_entropy.chunked_none", "bfloat16"): _ulp("bfloat16", 0.0625, _R16 + "|diff| 0.0625 (1 ulp) at 13.86; error vs f64 tpu 0.043, CPU 0.019 (both under 1 ulp)"),
    ("nn.functional.linear_cross_entropy.chunked_none", "float16"): _ulp("float16", 0.0079, _R16 + "|diff| 0.0078 (1 ulp) at 13.37; error vs f64 tpu 0.0062, CPU 0.0033 (both under 1 ulp)"),
    ("native_group_norm", "bfloat16"): _ulp("bfloat16", 0.125, _R16 + "eps=-0.5 sample (var+eps small): |diff| 0.125 (1 ulp) at 16.5; error vs f64 tpu 0.106, CPU 0.029 (both under 1 ulp)"),
    ("native_group_norm", "float16"): _ulp("float16", 0.0157, _R16 + "eps=-0.5 sample: |diff| 0.0156 (1 ulp) at 16.5; error vs f64 tpu 0.0143, CPU 0.0033 (both under 1 ulp)"),
    ("nn.functional.group_norm", "bfloat16"): _ulp("bfloat16", 0.125, _R16 + "same kernel and sample as native_group_norm: 1 ulp at 16.5"),
    ("nn.functional.group_norm", "float16"): _ulp("float16", 0.0157, _R16 + "same kernel and sample as native_group_norm: 1 ulp at 16.5"),
    ("nn.functional.batch_norm", "bfloat16"): _ulp("bfloat16", 0.125, _R16 + "|diff| 0.125 (1 ulp) at 17.6; error vs f64 tpu 0.062, CPU 0.075"),
    ("nn.functional.batch_norm", "float16"): _ulp("float16", 0.0157, _R16 + "|diff| 0.0156 (1 ulp) at -19.7; error vs f64 tpu 0.0065, CPU 0.0091"),
    ("nn.functional.instance_norm", "bfloat16"): _ulp("bfloat16", 0.0625, _R16 + "|diff| 0.0625 (1 ulp) at 8.04; error vs f64 0.060 on both sides"),
    ("nn.functional.instance_norm", "float16"): _ulp("float16", 0.0079, _R16 + "|diff| 0.0078 (1 ulp) at 8.67; error vs f64 0.0058 on both sides"),
    ("nn.functional.conv_transpose1d", "float16"): _ulp("float16", 0.0313, _R16 + "|diff| 0.031 (1 ulp) at 38.95; error vs f64 0.030 on both sides"),
    ("nn.functional.conv_transpose2d", "bfloat16"): _ulp("bfloat16", 0.5, _R16 + "|diff| 0.5 (1 ulp) at 92.1; error vs f64 tpu 0.25, CPU 0.56"),
    ("nn.functional.conv_transpose2d", "float16"): _ulp("float16", 0.25, _R16 + "the CPU is the less accurate side: |diff| 0.25 (2 ulp) at -202.2; error vs f64 tpu 0.060, CPU 0.19"),
    ("nn.functional.conv_transpose3d", "bfloat16"): _ulp("bfloat16", 1.0, _R16 + "the CPU is the less accurate side: |diff| 1 (1 ulp) at -138.25; error vs f64 tpu 0.39, CPU 0.75"),
    ("nn.functional.conv_transpose3d", "float16"): _ulp("float16", 0.25, _R16 + "the CPU is the less accurate side: |diff| 0.19 (3 ulp) at 117.2; error vs f64 tpu 0.062, CPU 0.16"),
    ("nn.functional.conv_transpose3d", "float32"): _ulp("float32", 1e-4, "grad only: the CPU's float32 weight gradient (dilation 4, 40 terms a sum) is the less accurate side: |diff| 8.4e-5 at 69.19; error vs f64 tpu 1.3e-5, CPU 7.4e-5", ("grad",)),
    ("nn.functional.layer_norm", "bfloat16"): _ulp("bfloat16", 0.0625, _R16 + "eps=-0.5 sample: |diff| 0.0625 (1 ulp) at 9.17; error vs f64 0.060 on both sides"),
    ("fft.hfft2", "float32"): _ulp("float32", 5e-5, "float32 rounding of a 3-dim transform of 360 points: absolute errors scale with the largest output (176.6), not each element's own value (the flagged one is 1.3); max |diff| 3.05e-5; error vs f64 tpu 2.31e-5, CPU 2.17e-5", ("forward", "inplace", "out")),
    ("nn.functional.layer_norm", "float32"): _ulp("float32", 3e-5, "normalized_shape (1,): x - mean is exactly 0 and tpu's weight gradient is the exact 0; the CPU kernel leaves a rounding residue of -2.4e-5", ("grad",)),
    ("log_softmax", "bfloat16"): _ulp("bfloat16", 0.125, _R16 + "|diff| 0.125 (1 ulp) at -17.8; error vs f64 tpu 0.061, CPU 0.064"),
    ("log_softmax", "float16"): _ulp("float16", 0.0079, _R16 + "|diff| 0.0078 (1 ulp) at -9.39; error vs f64 0.0059 on both sides"),
    ("masked.log_softmax", "bfloat16"): _ulp("bfloat16", 0.125, _R16 + "log_softmax's kernel: 1 ulp; error vs f64 0.019 on both sides"),
    ("masked.log_softmax", "float16"): _ulp("float16", 0.0079, _R16 + "log_softmax's kernel: 1 ulp; error vs f64 0.0032 on both sides"),
    ("logit", "bfloat16"): _ulp("bfloat16", 0.0157, _R16 + "|diff| 0.0156 (1 ulp) at -2.30; error vs f64 0.0142 on both sides"),
    ("logit", "float16"): _ulp("float16", 0.002, _R16 + "|diff| 0.00195 (1 ulp) at -2.66; error vs f64 tpu 0.00088, CPU 0.00115"),
    ("nn.functional.mse_loss", "float16"): _ulp("float16", 0.0313, _R16 + "|diff| 0.031 at 24.2 (CPU rounds the difference before squaring); error vs f64 tpu 0.0079, CPU 0.027"),
    ("special.ndtr", "float16"): _ulp("float16", 0.0005, _R16 + "|diff| 0.00049 (1 ulp) at 0.78; error vs f64 0.00045 on both sides"),
    ("nn.functional.interpolate.linear", "bfloat16"): _ulp("bfloat16", 0.0313, _R16 + "the CPU is the less accurate side: |diff| 0.031 (1 ulp) at -4.46; error vs f64 tpu 0.0094, CPU 0.027"),
    ("nn.functional.interpolate.linear", "float16"): _ulp("float16", 0.004, _R16 + "the CPU is the less accurate side: |diff| 0.0039 (1 ulp) at -5.73; error vs f64 tpu 0.0016, CPU 0.0035"),
    ("nn.functional.interpolate.trilinear", "bfloat16"): _ulp("bfloat16", 0.0313, _R16 + "the CPU is the less accurate side: |diff| 0.031 (1 ulp) at -4.84; error vs f64 tpu 0.025, CPU 0.036"),
    ("nn.functional.interpolate.trilinear", "float16"): _ulp("float16", 0.0079, _R16 + "the CPU is the less accurate side: |diff| 0.0078 (1 ulp) at 8.12; error vs f64 tpu 0.0039, CPU 0.0050"),
    ("nn.functional.upsample_bilinear", "bfloat16"): _ulp("bfloat16", 0.0625, _R16 + "the CPU is the less accurate side: |diff| 0.0625 (1 ulp) at -8.04; error vs f64 tpu 0.031, CPU 0.068"),
    ("nn.functional.upsample_bilinear", "float16"): _ulp("float16", 0.0079, _R16 + "the CPU is the less accurate side: |diff| 0.0078 (1 ulp) at 8.03; error vs f64 tpu 0.0041, CPU 0.0087"),
    ("nn.functional.scaled_dot_product_attention", "float32"): _ulp("float32", 2e-5, "CPU's math attention backward is the less accurate side: |diff| 1.2e-5 at 0.004; error vs f64 tpu 1.3e-6, CPU 1.2e-5", ("grad",)),
    # Gradients through an eigen/singular decomposition (lower/linalg_qr.c, linalg_eig.c) amplify
    # rounding by 1 / (gap between eigenvalues); measured with the sample's output_process_fn_grad,
    # float32 on each side against the float64 CPU gradient of the same inputs, worst sample:
    ("linalg.eigh", "float32"): _ulp("float32", 4e-5, "Jacobi vs LAPACK rounding through 1/(l_i - l_j): |diff| 3.5e-5 on [2, 5, 5]; error vs f64 tpu 2.3e-6, CPU 3.7e-5", ("grad",)),
    ("linalg.pinv.hermitian", "float32"): _ulp("float32", 1.3e-4, "eigh-based pinv gradient: |diff| 1.2e-4 at |values| up to 67 on [2, 5, 5]; error vs f64 tpu 4.0e-5, CPU 8.5e-5", ("grad",)),
    ("linalg.cond", "float32"): _ulp("float32", 7e-5, "SVD-based cond gradient: |diff| 6.1e-5 at 18.34; error vs f64 tpu 9.4e-6, CPU 6.5e-5", ("grad",)),
    ("linalg.lstsq", "float32"): _ulp("float32", 4e-5, "gradient through pinv (the SVD): |diff| 3.8e-5 at |values| up to 45 (8e-7 relative); error vs f64 tpu 3.6e-5, CPU 2.0e-5: the device is the less accurate side here, by 1.8x", ("grad",)),
    ("linalg.lstsq.grad_oriented", "float32"): _ulp("float32", 4e-5, "as linalg.lstsq: |diff| 3.8e-5 at |values| up to 45; error vs f64 tpu 3.6e-5, CPU 2.0e-5 (device 1.8x less accurate)", ("grad",)),
    # grid_sample (lower/nn_grid.c): float32 pixel coordinates of a 456-wide input carry an ulp of 3e-5..6e-5.
    ("nn.functional.grid_sample", "float32"): _ulp("float32", 0.01, "bilinear reflection sample: the pixel coordinate (up to ~520) differs by 1 ulp (6.1e-5) because the CPU's build contracts (g + 1) * W/2 - 0.5 into an FMA in its reflection kernel (not in the zeros/border ones) and XLA does not there; neighbouring values differ by up to 255, so results by up to |diff| 0.0078 at 114.03; error vs f64 tpu 0.00923, CPU 0.00923"),
    ("grid_sampler_3d", "float32"): _ulp("float32", 1.2e-4, "grid gradient, float32 sums over 21 channels x 8 corners in another order: |diff| 1.14e-4 at 64.77; error vs f64 tpu 1.55e-4, CPU 1.55e-4", ("grad",)),
    # matrix_exp (python/tpuc/matrix_exp.py): another polynomial than the CPU's (Taylor of degree 19
    # against its optimised degree-18 one), the same 4 squarings for these samples' norms (~28)
    ("matrix_exp", "float32"): _ulp("float32", 0.13, "another scaling-and-squaring polynomial than the CPU's, entries up to 9.3e4 (forward) and 2.2e5 (grad): |diff| 0.090 forward, 0.125 grad (about 1e-6 and 6e-7 of the largest entry: scaling and squaring bounds the error relative to the norm, not per entry); error vs f64 forward tpu 0.039, CPU 0.050 ([5, 5, 5]) and tpu 0.018, CPU 0.0054 ([5, 5]); grad tpu 0.105, CPU 0.063 ([5, 5, 5]): up to 3.4x the CPU's error, 5 to 7 ulps of the largest entry"),
    # ctc_loss (lower/nn_ctc.c): the same log-space recursion over 50 frames, the per-class sums
    # of alpha * beta as one matmul; the gradient's posterior exp(lcab + nll - lp) cancels
    # log-likelihoods near 100 in float32 on both sides
    ("nn.functional.ctc_loss", "float32"): _ulp("float32", 5e-5, "gradient of a 50-frame CTC loss (log-likelihoods ~100): |diff| 2.43e-5 at -0.753; error vs f64 tpu 7.57e-5, CPU 7.57e-5", ("grad",)),
    ("linalg.householder_product", "float32"): _ulp("float32", 5e-4, "reflectors with random (non-unitary) tau: |diff| 4.9e-4 at 3.66; error vs f64 tpu 4.1e-4, CPU 6.2e-4", ("grad",)),
}


def tolerance(key: str, dtype: str, check: str) -> dict[str, float]:
    """assert_close keyword arguments for this (op, dtype, check): {} means the defaults."""
    t = TOLERANCES.get((key, dtype))
    if t is None or check not in t.checks:
        return {}
    return {"atol": t.atol, "rtol": t.rtol}


_RANDOM = "random op: outputs not comparable with the CPU's draws"
_EMPTY = "uninitialized memory: values not comparable"

NONDETERMINISTIC: dict[str, str] = {
    "bernoulli": _RANDOM,
    "cauchy": _RANDOM,
    "exponential": _RANDOM,
    "geometric": _RANDOM,
    "log_normal": _RANDOM,
    "multinomial": _RANDOM,
    "normal": _RANDOM,
    "normal.in_place": _RANDOM,
    "normal.number_mean": _RANDOM,
    "uniform": _RANDOM,
    "rand_like": _RANDOM,
    "randn_like": _RANDOM,
    "randint_like": _RANDOM,
    "randint": _RANDOM,
    "randn": _RANDOM,
    "nn.functional.dropout": _RANDOM,
    "nn.functional.dropout2d": _RANDOM,
    "nn.functional.dropout3d": _RANDOM,
    "nn.functional.alpha_dropout": _RANDOM,
    "nn.functional.feature_alpha_dropout.with_train": _RANDOM,
    "nn.functional.rrelu": _RANDOM,
    "nn.functional.fractional_max_pool2d": _RANDOM,
    "nn.functional.fractional_max_pool3d": _RANDOM,
    "svd_lowrank": _RANDOM,
    "pca_lowrank": _RANDOM,
    "empty": _EMPTY,
    "empty_like": _EMPTY,
    "empty_strided": _EMPTY,
    "empty_permuted": _EMPTY,
    "new_empty": _EMPTY,
    "new_empty_strided": _EMPTY,
}


# The random entries are compared with the CPU by distribution (distribution.py): many draws
# on each side, a two-sample KS test. These draw values that depend on each other within one
# call (a channel's mask, a pooling region's offsets, a random projection, draws without
# replacement), so each call counts as one draw there, not each value.
RANDOM = _RANDOM
DEPENDENT_DRAWS: dict[str, str] = {
    "multinomial": "draws without replacement exclude each other",
    "nn.functional.dropout2d": "one mask value per channel",
    "nn.functional.dropout3d": "one mask value per channel",
    "nn.functional.feature_alpha_dropout.with_train": "one mask value per channel",
    "nn.functional.fractional_max_pool2d": "one random offset per plane",
    "nn.functional.fractional_max_pool3d": "one random offset per plane",
    "svd_lowrank": "one random projection per call",
    "pca_lowrank": "one random projection per call",
}


def _dropout_p(sample: Any) -> float:
    p = sample.kwargs.get("dropout_p", 0.0)
    return float(p) if isinstance(p, (int, float)) else 0.0


def _mha_dropout(sample: Any) -> bool:
    # multi_head_attention_forward(query, key, value, embed_dim, num_heads, in_proj_weight,
    # in_proj_bias, bias_k, bias_v, add_zero_attn, dropout_p, ...): args[9] is dropout_p
    p = sample.args[9] if len(sample.args) > 9 else sample.kwargs.get("dropout_p", 0.0)
    return sample.kwargs.get("training", True) and isinstance(p, (int, float)) and p > 0


NONDETERMINISTIC_SAMPLES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "nn.functional.scaled_dot_product_attention": (
        "dropout_p > 0: random dropout mask", lambda s: _dropout_p(s) > 0),
    "nn.functional.multi_head_attention_forward": (
        "training with dropout_p > 0: random dropout mask", _mha_dropout),
}


def sample_is_random(key: str, sample: Any) -> bool:
    entry = NONDETERMINISTIC_SAMPLES.get(key)
    return entry is not None and entry[1](sample)


# Entries whose tensor arguments after the input must stay on the CPU (their API says so);
# only the input moves to the device.
CPU_ARGS: dict[str, str] = {
    "tensor_split": "tensor_indices_or_sections must be a CPU tensor (PyTorch's API)",
}

# Entries whose outputs are unique only up to a choice (the signs of eigenvectors and of
# singular vectors; LAPACK normalises none): their forward and out= results are compared
# after the sample's output_process_fn_grad (|V|, |U|, U @ Vh, ...), on both sides, as
# PyTorch's own CPU-vs-device test does (test_ops.py, test_compare_cpu). Gradients already
# go through it.
CANONICAL_OUTPUTS: dict[str, str] = {
    "linalg.eigh": "eigenvectors' signs are arbitrary: compared as |V|",
    "linalg.svd": "singular vectors' signs are arbitrary: compared as |U|, |Vh| or U @ Vh",
    "svd": "singular vectors' signs are arbitrary: compared as |U|, |V| or U @ V^H",
}
