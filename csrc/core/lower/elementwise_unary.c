/* elementwise_unary.c — lowerings of PyTorch's unary elementwise ops (math
 * functions, rounding, predicates such as isnan), clamp, and the activations
 * with their backward formulas (relu, gelu, silu, elu, softplus, ...).
 *
 * Simple ops are one line each in a table of {primitive or builder, flags};
 * ops with extra arguments read them by schema position. Formulas follow
 * PyTorch's CPU kernels (same branches and evaluation order) so results
 * match within the default test tolerances; float16/bfloat16 compute in
 * float32. The elementwise table in elementwise.c lists these functions. */
#include <math.h>
#include <string.h>

#include "elementwise.h"

#define LN2 0.69314718055994530942
#define LN10 2.30258509299404568402
#define SQRT1_2 0.70710678118654752440

tv ew_self_in(tpuc_lower_ctx *cx, unsigned flags) {
  tpuc_dtype d = lx_tensor_desc(cx, 0)->dtype;
  bool integral = !ir_is_float(d) && !ir_is_complex(d);
  if (ir_is_complex(d) && !(flags & EW_COMPLEX)) return IR_NONE;
  if ((flags & EW_INTEGER) && !integral) return IR_NONE;
  if (integral && (flags & EW_FLOAT)) d = ew_float_of(cx, d);
  if (!(flags & EW_EXACT)) d = lx_compute_dtype(d);
  return lx_convert(cx->g, lx_tensor(cx, 0), d);
}

tpuc_status *ew_unary(tpuc_lower_ctx *cx, unsigned flags, ir_unary_op op, ew_build1 fn) {
  tpuc_dtype d = lx_tensor_desc(cx, 0)->dtype;
  if ((flags & EW_INT_ID) && !ir_is_float(d) && !ir_is_complex(d))
    return ew_finish(cx, lx_tensor(cx, 0));
  tv x = ew_self_in(cx, flags);
  if (x == IR_NONE) return lx_unimplemented(cx, "input dtype");
  return ew_finish(cx, fn ? fn(cx->g, x) : ir_unary(cx->g, op, x));
}

tv ew_scalar_like(tpuc_lower_ctx *cx, int i, tv x, double dflt) {
  if (lx_is_none(cx, i)) return ew_splat(cx->g, x, dflt);
  return ew_operand(cx, i, ir_type_of(cx->g, x));
}

#include "ew_shorthand.h"

/* ---- builders of the simple ops ---- */

static tv u_sign(ir_graph *g, tv x) { /* (0 < x) - (x < 0): 0 for NaN, as PyTorch */
  tpuc_dtype d = ir_type_of(g, x).dtype;
  if (d == TPUC_PRED) return x;
  tv pos = ir_convert(g, CMP(IR_LT, K(0), x), d);
  return SUB(pos, ir_convert(g, CMP(IR_LT, x, K(0)), d));
}

static tv u_sgn(ir_graph *g, tv x) {
  if (!ir_is_complex(ir_type_of(g, x).dtype)) return u_sign(g, x);
  tv a = ir_convert(g, U(IR_ABS, x), ir_type_of(g, x).dtype);
  return SEL(CMP(IR_EQ, a, K(0)), K(0), DIV(x, a));
}

static tv u_exp2(ir_graph *g, tv x) { return ir_binary(g, IR_POW, K(2.0), x); }
static tv u_log2(ir_graph *g, tv x) { return DIV(U(IR_LOG, x), K(LN2)); }
static tv u_log10(ir_graph *g, tv x) { return DIV(U(IR_LOG, x), K(LN10)); }
static tv u_reciprocal(ir_graph *g, tv x) { return DIV(K(1.0), x); }
static tv u_trunc(ir_graph *g, tv x) { return ew_trunc(g, x); }
static tv u_frac(ir_graph *g, tv x) { return SUB(x, ew_trunc(g, x)); }
static tv u_logical_not(ir_graph *g, tv x) { return CMP(IR_EQ, x, K(0)); }
static tv u_isnan(ir_graph *g, tv x) { return ew_isnan(g, x); }
static tv u_relu(ir_graph *g, tv x) { return ew_max(g, x, K(0)); }

static tv u_isinf(ir_graph *g, tv x) { return ew_isinf(g, x); }

static tv u_isfinite(ir_graph *g, tv x) {
  if (!ir_is_float(ir_type_of(g, x).dtype)) return ir_convert(g, K(1), TPUC_PRED);
  return U(IR_IS_FINITE, x);
}

/* min(max(x + 3, 0), 6) / 6 */
static tv hard_sigmoid(ir_graph *g, tv x) {
  return DIV(ew_min(g, ew_max(g, ADD(x, K(3)), K(0)), K(6)), K(6));
}
static tv u_hardsigmoid(ir_graph *g, tv x) { return hard_sigmoid(g, x); }
static tv u_hardswish(ir_graph *g, tv x) { return MUL(x, hard_sigmoid(g, x)); }
static tv u_mish(ir_graph *g, tv x) { return MUL(x, U(IR_TANH, U(IR_LOG1P, U(IR_EXP, x)))); }
static tv u_silu(ir_graph *g, tv x) { return MUL(x, U(IR_LOGISTIC, x)); }

#define UNARY(name, flags, op, fn) \
  tpuc_status *name(tpuc_lower_ctx *cx) { return ew_unary(cx, flags, op, fn); }
#define PRIM(name, flags, op) UNARY(name, flags, op, NULL)
/* sinh and cosh from exponentials of |x| that XLA may not rewrite (a barrier: without it the
 * forms below came out at 8 ulps, as XLA's own sinh and cosh on 1 < |x| < 9 are; they round
 * |x| - log 2 before the exponential, which magnifies that rounding by |x|: 24 ulps at
 * |x| = 39, 5 ulps for sinh near 0; the CPU: under one).
 *   |x| < 1:  cosh is XLA's (under an ulp); sinh = (m + m / (m + 1)) / 2, m = expm1(|x|).
 *   |x| <= B: (e +- 1/e) / 2, e = exp(|x|).
 *   |x| > B:  e^-|x| is below half an ulp of e^|x| (B = 9, float64 19), so e^|x| / 2 as
 *             (h / 2) h, h = exp(|x| / 2): exact halves, no overflow before cosh's own. */
static tv hyperbolic(ir_graph *g, tv x, bool is_sinh) {
  tv ax = U(IR_ABS, x);
  double big_from = ir_type_of(g, x).dtype == TPUC_F64 ? 19 : 9;
  tv h = ir_barrier(g, U(IR_EXP, MUL(ax, K(0.5))));
  tv big = MUL(MUL(h, K(0.5)), h);
  tv e = ir_barrier(g, U(IR_EXP, ax));
  tv half_e = MUL(e, K(0.5)), half_inv = DIV(K(0.5), e);
  tv mid = is_sinh ? SUB(half_e, half_inv) : ADD(half_e, half_inv);
  tv small;
  if (is_sinh) {
    tv m = ir_barrier(g, U(IR_EXPM1, ax));
    small = MUL(ADD(m, DIV(m, ADD(m, K(1)))), K(0.5));
  } else {
    small = U(IR_COSH, x);
  }
  tv r = SEL(CMP(IR_GT, ax, K(big_from)), big, SEL(CMP(IR_LT, ax, K(1)), small, mid));
  if (is_sinh) r = SEL(ew_signbit(g, x), ir_unary(g, IR_NEG, r), r);
  /* NaN stays NaN (every comparison above is false for it: `mid`, from exp(NaN)) */
  return r;
}
static tv u_cosh(ir_graph *g, tv x) { return hyperbolic(g, x, false); }
static tv u_sinh(ir_graph *g, tv x) { return hyperbolic(g, x, true); }

/* erf: XLA's erf stops up to 5 float32 ulps short of +-1 for |x| > ~2.5 (0.9999997 at 12,
 * where erf rounds to 1 from 3.92 on), so 1 + erf(x) left a residue where PyTorch's is 0
 * (special.ndtr and Normal.cdf are written that way: ndtr(-10) was 8.9e-8, not 7.6e-24).
 * Beyond |x| = 1 it is 1 - erfc(|x|) with the sign of x: XLA's erfc there is exp(-x^2)
 * times a rational function, accurate relative to itself, so the difference rounds right. */
static tv u_erf(ir_graph *g, tv x) {
  tv ax = U(IR_ABS, x);
  tv tail = SUB(K(1), U(IR_ERFC, ax));
  tail = SEL(ew_signbit(g, x), ir_unary(g, IR_NEG, tail), tail);
  return SEL(CMP(IR_GT, ax, K(1)), tail, U(IR_ERF, x));
}

#define BUILT(name, flags, fn) UNARY(name, flags, IR_UNARY_COUNT, fn)

PRIM(ew_neg, EW_EXACT | EW_COMPLEX, IR_NEG)
PRIM(ew_abs, EW_EXACT | EW_COMPLEX, IR_ABS)
BUILT(ew_sign, EW_EXACT, u_sign)
BUILT(ew_sgn, EW_EXACT | EW_COMPLEX, u_sgn)
PRIM(ew_exp, EW_FLOAT | EW_COMPLEX, IR_EXP)
BUILT(ew_exp2, EW_FLOAT, u_exp2)
PRIM(ew_expm1, EW_FLOAT, IR_EXPM1)
PRIM(ew_log, EW_FLOAT | EW_COMPLEX, IR_LOG)
BUILT(ew_log2, EW_FLOAT, u_log2)
BUILT(ew_log10, EW_FLOAT, u_log10)
PRIM(ew_log1p, EW_FLOAT, IR_LOG1P)
PRIM(ew_sqrt, EW_FLOAT | EW_COMPLEX, IR_SQRT)
PRIM(ew_rsqrt, EW_FLOAT, IR_RSQRT)
BUILT(ew_reciprocal, EW_FLOAT | EW_COMPLEX, u_reciprocal)
PRIM(ew_sin, EW_FLOAT | EW_COMPLEX, IR_SIN)
PRIM(ew_cos, EW_FLOAT | EW_COMPLEX, IR_COS)
PRIM(ew_tan, EW_FLOAT, IR_TAN)
PRIM(ew_asin, EW_FLOAT, IR_ASIN)
PRIM(ew_acos, EW_FLOAT, IR_ACOS)
PRIM(ew_atan, EW_FLOAT, IR_ATAN)
BUILT(ew_sinh, EW_FLOAT, u_sinh)
BUILT(ew_cosh, EW_FLOAT, u_cosh)
PRIM(ew_tanh, EW_FLOAT | EW_COMPLEX, IR_TANH)
PRIM(ew_asinh, EW_FLOAT, IR_ASINH)
PRIM(ew_acosh, EW_FLOAT, IR_ACOSH)
PRIM(ew_atanh, EW_FLOAT, IR_ATANH)
PRIM(ew_sigmoid, EW_FLOAT, IR_LOGISTIC)
BUILT(ew_erf, EW_FLOAT, u_erf)
PRIM(ew_erfc, EW_FLOAT, IR_ERFC)
PRIM(ew_floor, EW_INT_ID | EW_EXACT, IR_FLOOR)
PRIM(ew_ceil, EW_INT_ID | EW_EXACT, IR_CEIL)
PRIM(ew_round, EW_INT_ID | EW_EXACT, IR_ROUND_EVEN)
BUILT(ew_trunc_op, EW_INT_ID | EW_EXACT, u_trunc)
BUILT(ew_frac, 0, u_frac)
PRIM(ew_bitwise_not, EW_EXACT | EW_INTEGER, IR_NOT)
BUILT(ew_logical_not, EW_EXACT | EW_COMPLEX, u_logical_not)
BUILT(ew_isnan_op, EW_EXACT | EW_COMPLEX, u_isnan)
BUILT(ew_isinf_op, EW_EXACT, u_isinf)
BUILT(ew_isfinite, EW_EXACT, u_isfinite)
BUILT(ew_relu, EW_EXACT, u_relu)
BUILT(ew_hardsigmoid, EW_FLOAT, u_hardsigmoid)
BUILT(ew_hardswish, EW_FLOAT, u_hardswish)
BUILT(ew_mish, EW_FLOAT, u_mish)
BUILT(ew_silu, EW_FLOAT, u_silu)

/* ---- ops with arguments ---- */

#define SELF_OR_FAIL(flags)                                                  \
  ir_graph *g = cx->g;                                                       \
  tv x = ew_self_in(cx, (flags));                                               \
  if (x == IR_NONE) return lx_unimplemented(cx, "input dtype");

tpuc_status *ew_round_decimals(tpuc_lower_ctx *cx) { /* (self, *, decimals) */
  int64_t dec = lx_int(cx, 1, 0);
  if (!ir_is_float(lx_tensor_desc(cx, 0)->dtype)) return ew_round(cx);
  SELF_OR_FAIL(0)
  tv p = K(pow(10.0, (double)(dec < 0 ? -dec : dec)));
  if (dec < 0) return ew_finish(cx, MUL(U(IR_ROUND_EVEN, DIV(x, p)), p));
  return ew_finish(cx, DIV(U(IR_ROUND_EVEN, MUL(x, p)), p));
}

tpuc_status *ew_nan_to_num(tpuc_lower_ctx *cx) { /* (self, nan?, posinf?, neginf?) */
  tpuc_dtype d = lx_tensor_desc(cx, 0)->dtype;
  if (!ir_is_float(d)) return ew_finish(cx, lx_tensor(cx, 0));
  SELF_OR_FAIL(EW_EXACT) /* the replacements are the dtype's own extremes */
  double big = ew_finite_max(d);
  tv r = SEL(ew_isnan(g, x), ew_scalar_like(cx, 1, x, 0.0), x);
  r = SEL(CMP(IR_EQ, x, K(INFINITY)), ew_scalar_like(cx, 2, x, big), r);
  return ew_finish(cx, SEL(CMP(IR_EQ, x, K(-INFINITY)), ew_scalar_like(cx, 3, x, -big), r));
}

/* clamp(self, min?, max?): args lo_arg / hi_arg (-1: none), NaN-propagating. */
static tpuc_status *clamp(tpuc_lower_ctx *cx, int lo_arg, int hi_arg) {
  int idx[3] = {0, lo_arg < 0 ? hi_arg : lo_arg, hi_arg < 0 ? lo_arg : hi_arg};
  tpuc_dtype d = ew_result_type(cx, idx, 3);
  if (d == EW_UNDEFINED || ir_is_complex(d)) return lx_unimplemented(cx, "operand dtypes");
  ir_graph *g = cx->g;
  ir_type t = ew_out_as(cx, lx_compute_dtype(d));
  tv r = ew_operand(cx, 0, t);
  if (lo_arg >= 0 && !lx_is_none(cx, lo_arg)) r = ew_max(g, r, ew_operand(cx, lo_arg, t));
  if (hi_arg >= 0 && !lx_is_none(cx, hi_arg)) r = ew_min(g, r, ew_operand(cx, hi_arg, t));
  return ew_finish(cx, r);
}

tpuc_status *ew_clamp(tpuc_lower_ctx *cx) { return clamp(cx, 1, 2); }
tpuc_status *ew_clamp_min(tpuc_lower_ctx *cx) { return clamp(cx, 1, -1); }
tpuc_status *ew_clamp_max(tpuc_lower_ctx *cx) { return clamp(cx, -1, 1); }

tpuc_status *ew_hardtanh(tpuc_lower_ctx *cx) { /* (self, min_val=-1, max_val=1) */
  SELF_OR_FAIL(EW_EXACT)
  tv r = ew_min(g, ew_max(g, x, ew_scalar_like(cx, 1, x, -1.0)), ew_scalar_like(cx, 2, x, 1.0));
  return ew_finish(cx, r);
}

tpuc_status *ew_leaky_relu(tpuc_lower_ctx *cx) { /* (self, negative_slope=0.01) */
  SELF_OR_FAIL(0)
  tv neg = MUL(x, ew_scalar_like(cx, 1, x, 0.01));
  return ew_finish(cx, SEL(CMP(IR_GT, x, K(0)), x, neg));
}

tpuc_status *ew_elu(tpuc_lower_ctx *cx) { /* (self, alpha=1, scale=1, input_scale=1) */
  SELF_OR_FAIL(0)
  tv scale = ew_scalar_like(cx, 2, x, 1.0);
  tv negcoef = MUL(ew_scalar_like(cx, 1, x, 1.0), scale);
  tv neg = MUL(U(IR_EXPM1, MUL(x, ew_scalar_like(cx, 3, x, 1.0))), negcoef);
  return ew_finish(cx, SEL(CMP(IR_LE, x, K(0)), neg, MUL(x, scale)));
}

tpuc_status *ew_softplus(tpuc_lower_ctx *cx) { /* (self, beta=1, threshold=20) */
  SELF_OR_FAIL(0)
  tv beta = ew_scalar_like(cx, 1, x, 1.0);
  tv xb = MUL(x, beta);
  tv soft = DIV(U(IR_LOG1P, U(IR_EXP, xb)), beta);
  return ew_finish(cx, SEL(CMP(IR_GT, xb, ew_scalar_like(cx, 2, x, 20.0)), x, soft));
}

/* approximate="tanh" (true) or "none" (false); NULL string when unknown. */
static int gelu_mode(const tpuc_lower_ctx *cx, int i) {
  const tpuc_arg *a = lx_arg(cx, i);
  if (!a || a->kind != TPUC_ARG_STRING || !strcmp(a->s, "none")) return 0;
  return !strcmp(a->s, "tanh") ? 1 : -1;
}

#define GELU_BETA 0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_KAPPA 0.044715

/* The normal CDF Phi(x) as 0.5 erfc(-x / sqrt 2), and tanh's 0.5 (1 + tanh(u)) as
 * sigmoid(2u): PyTorch's formulas, 1 + erf(..) and 1 + tanh(..), cancel in the negative
 * tail, and XLA's erf and tanh stop short of -1 there, which left gelu(-10) = -8.9e-7 and
 * gelu(-1e10) = -894 (the CPU: -0). These forms keep relative accuracy in the tail and are
 * the same functions elsewhere. */
static tv gelu_cdf(tpuc_lower_ctx *cx, tv x) {
  ir_graph *g = cx->g;
  return MUL(K(0.5), U(IR_ERFC, MUL(x, K(-SQRT1_2))));
}

static tv gelu_tanh_inner(tpuc_lower_ctx *cx, tv x) { /* sqrt(2/pi) (x + 0.044715 x^3) */
  ir_graph *g = cx->g;
  return MUL(K(GELU_BETA), ADD(x, MUL(K(GELU_KAPPA), MUL(MUL(x, x), x))));
}

tpuc_status *ew_gelu(tpuc_lower_ctx *cx) { /* (self, *, approximate) */
  int mode = gelu_mode(cx, 1);
  if (mode < 0) return lx_unimplemented(cx, "gelu approximation");
  SELF_OR_FAIL(0)
  if (mode == 0) return ew_finish(cx, MUL(x, gelu_cdf(cx, x)));
  return ew_finish(cx, MUL(x, U(IR_LOGISTIC, MUL(K(2), gelu_tanh_inner(cx, x)))));
}

/* ---- backward formulas: (grad_output, x or y, ...) ---- */

/* Args 0 and 1 in the output's compute dtype. */
static ir_type grad_type(const tpuc_lower_ctx *cx) {
  return ew_out_as(cx, lx_compute_dtype(cx->out_types[0].dtype));
}

#define GRAD_ARGS                                                      \
  ir_graph *g = cx->g;                                                 \
  ir_type t = grad_type(cx);                                           \
  if (!ir_is_float(t.dtype)) return lx_unimplemented(cx, "dtype");     \
  tv gr = ew_operand(cx, 0, t), x = ew_operand(cx, 1, t);

tpuc_status *ew_gelu_backward(tpuc_lower_ctx *cx) { /* (grad, self, *, approximate) */
  int mode = gelu_mode(cx, 2);
  if (mode < 0) return lx_unimplemented(cx, "gelu approximation");
  GRAD_ARGS
  if (mode == 0) {
    tv pdf = MUL(U(IR_EXP, MUL(K(-0.5), MUL(x, x))), K(0.3989422804014327)); /* 1/sqrt(2 pi) */
    return ew_finish(cx, MUL(gr, ADD(gelu_cdf(cx, x), MUL(x, pdf))));
  }
  /* d/dx [x s(2u)] = s + 2 x s (1 - s) u', s = sigmoid(2u) = 0.5 (1 + tanh u); PyTorch's
   * 1 - tanh(u)^2 is 4 s (1 - s), with 1 - s = sigmoid(-2u): no cancellation in either tail */
  tv u2 = MUL(K(2), gelu_tanh_inner(cx, x));
  tv s2 = U(IR_LOGISTIC, u2), s2_neg = U(IR_LOGISTIC, ir_unary(g, IR_NEG, u2));
  tv inner_d = MUL(K(GELU_BETA), ADD(K(1), MUL(K(3 * GELU_KAPPA), MUL(x, x))));
  tv right_d = MUL(MUL(MUL(K(2), x), MUL(s2, s2_neg)), inner_d);
  return ew_finish(cx, MUL(gr, ADD(s2, right_d)));
}

tpuc_status *ew_silu_backward(tpuc_lower_ctx *cx) { /* (grad, self) */
  GRAD_ARGS
  tv s = U(IR_LOGISTIC, x);
  tv r = MUL(MUL(gr, s), ADD(K(1), MUL(x, SUB(K(1), s))));
  return ew_finish(cx, r);
}

tpuc_status *ew_sigmoid_backward(tpuc_lower_ctx *cx) { /* (grad, output) */
  GRAD_ARGS
  return ew_finish(cx, MUL(MUL(gr, SUB(K(1), x)), x));
}

tpuc_status *ew_tanh_backward(tpuc_lower_ctx *cx) { /* (grad, output) */
  GRAD_ARGS
  return ew_finish(cx, MUL(gr, SUB(K(1), MUL(x, x))));
}

tpuc_status *ew_leaky_relu_backward(tpuc_lower_ctx *cx) { /* (grad, self, slope, is_result) */
  GRAD_ARGS
  return ew_finish(cx, SEL(CMP(IR_GT, x, K(0)), gr, MUL(gr, ew_scalar_like(cx, 2, x, 0.01))));
}

tpuc_status *ew_hardtanh_backward(tpuc_lower_ctx *cx) { /* (grad, self, min_val, max_val) */
  GRAD_ARGS
  tv outside = ir_binary(g, IR_OR, CMP(IR_LE, x, ew_scalar_like(cx, 2, x, -1.0)),
                         CMP(IR_GE, x, ew_scalar_like(cx, 3, x, 1.0)));
  return ew_finish(cx, SEL(outside, K(0), gr));
}

/* (grad, alpha, scale, input_scale, is_result, self_or_result) */
tpuc_status *ew_elu_backward(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type t = grad_type(cx);
  if (!ir_is_float(t.dtype)) return lx_unimplemented(cx, "dtype");
  tv gr = ew_operand(cx, 0, t), x = ew_operand(cx, 5, t);
  tv scale = ew_scalar_like(cx, 2, x, 1.0), in_scale = ew_scalar_like(cx, 3, x, 1.0);
  tv negcoef = MUL(ew_scalar_like(cx, 1, x, 1.0), scale);
  tv neg = lx_bool(cx, 4, false) ? MUL(MUL(gr, in_scale), ADD(x, negcoef))
                                 : MUL(MUL(MUL(gr, in_scale), negcoef), U(IR_EXP, MUL(x, in_scale)));
  return ew_finish(cx, SEL(CMP(IR_LE, x, K(0)), neg, MUL(gr, scale)));
}

tpuc_status *ew_softplus_backward(tpuc_lower_ctx *cx) { /* (grad, self, beta, threshold) */
  GRAD_ARGS
  tv xb = MUL(x, ew_scalar_like(cx, 2, x, 1.0));
  tv z = U(IR_EXP, xb);
  tv soft = DIV(MUL(gr, z), ADD(z, K(1)));
  return ew_finish(cx, SEL(CMP(IR_GT, xb, ew_scalar_like(cx, 3, x, 20.0)), gr, soft));
}

tpuc_status *ew_hardsigmoid_backward(tpuc_lower_ctx *cx) { /* (grad, self) */
  GRAD_ARGS
  tv inside = ir_binary(g, IR_AND, CMP(IR_GT, x, K(-3)), CMP(IR_LT, x, K(3)));
  return ew_finish(cx, SEL(inside, DIV(gr, K(6)), K(0)));
}

tpuc_status *ew_hardswish_backward(tpuc_lower_ctx *cx) { /* (grad, self) */
  GRAD_ARGS
  tv mid = MUL(gr, ADD(DIV(x, K(3)), K(0.5)));
  tv r = SEL(CMP(IR_LE, x, K(3)), mid, gr);
  return ew_finish(cx, SEL(CMP(IR_LT, x, K(-3)), K(0), r));
}

tpuc_status *ew_threshold(tpuc_lower_ctx *cx) { /* (self, threshold, value) */
  ir_graph *g = cx->g;
  int idx[1] = {0};
  tpuc_dtype d = ew_result_type(cx, idx, 1);
  if (d == EW_UNDEFINED || ir_is_complex(d)) return lx_unimplemented(cx, "dtype");
  ir_type t = ew_out_as(cx, lx_compute_dtype(d));
  tv x = ew_operand(cx, 0, t);
  return ew_finish(cx, SEL(CMP(IR_LE, x, ew_operand(cx, 1, t)), ew_operand(cx, 2, t), x));
}

tpuc_status *ew_threshold_backward(tpuc_lower_ctx *cx) { /* (grad, self, threshold) */
  ir_graph *g = cx->g;
  int idx[2] = {0, 1};
  tpuc_dtype d = ew_result_type(cx, idx, 2);
  if (d == EW_UNDEFINED || ir_is_complex(d)) return lx_unimplemented(cx, "dtype");
  ir_type t = ew_out_as(cx, d);
  tv gr = ew_operand(cx, 0, t), x = ew_operand(cx, 1, t);
  tv th = ew_operand(cx, 2, t);
  return ew_finish(cx, SEL(CMP(IR_LE, x, th), K(0), gr));
}
