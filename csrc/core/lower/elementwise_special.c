/* elementwise_special.c — the less common elementwise ops that still reach
 * the device: special functions (lgamma, digamma, sinc, logit), angle
 * conversions, signbit, isposinf/isneginf, fmax/fmin, heaviside, logaddexp2,
 * ldexp, bit shifts, rsub, complex numbers (conj_physical, angle, complex,
 * polar), and the shrink/celu/log-sigmoid activations with their backwards.
 * Formulas follow PyTorch's CPU kernels; the elementwise table in
 * elementwise.c lists these functions. */
#include <math.h>

#include "elementwise.h"

#define PI 3.14159265358979323846
#define LN2 0.69314718055994530942

#include "ew_shorthand.h"

/* ---- unary ---- */

static tv u_sinc(ir_graph *g, tv x) { /* sin(pi x) / (pi x), 1 at 0 */
  tv px = MUL(K(PI), x);
  return SEL(CMP(IR_EQ, x, K(0)), K(1), DIV(U(IR_SIN, px), px));
}
static tv u_deg2rad(ir_graph *g, tv x) { return MUL(x, K(PI / 180.0)); }
static tv u_rad2deg(ir_graph *g, tv x) { return MUL(x, K(180.0 / PI)); }
static tv u_signbit(ir_graph *g, tv x) { return ew_signbit(g, x); }
static tv is_inf_signed(ir_graph *g, tv x, double inf) {
  if (!ir_is_float(ir_type_of(g, x).dtype)) return ir_convert(g, K(0), TPUC_PRED);
  return CMP(IR_EQ, x, K(inf));
}
static tv u_isposinf(ir_graph *g, tv x) { return is_inf_signed(g, x, INFINITY); }
static tv u_isneginf(ir_graph *g, tv x) { return is_inf_signed(g, x, -INFINITY); }

/* lgamma in float32 (and float16/bfloat16, computed in float32) for 0 < x < 8. XLA's
 * (a Lanczos sum) cancels where lgamma is small: relative errors up to 5e-2 near its zeros
 * at 1 and 2 (lgamma(1) was 4.8e-7) and 3.5e-5 on (2, 8), against the CPU's 7e-8. Here x
 * moves to 2 + z, |z| <= 1/2, by lgamma(x) = lgamma(x + 1) - log(x) (x < 1.5: one or two
 * steps up) or lgamma(x) = lgamma(x - 1) + log(x - 1) (x >= 2.5: up to six steps down; the
 * logs as one log of the product, whose factors x - j are exact), and lgamma(2 + z) is its
 * Taylor series (1 - gamma) z + sum_{k>=2} (-1)^k (zeta(k) - 1) z^k / k: its terms fall by
 * 4x or more, so 14 of them reach float32's precision. z is exact in every branch (x - 1,
 * x - 2 and x - 2 - k are representable), and near x = 1 the step's log is log1p(z).
 * Elsewhere (x <= 0, x >= 8, NaN, float64) XLA's lgamma. */
enum { LGAMMA_TERMS = 14 };

static double zeta_minus_one(int k) { /* sum_{m>=2} m^-k: 63 terms and Euler-Maclaurin's tail */
  double s = 0, n = 64;
  for (int m = 2; m < 64; m++) s += pow(m, -k);
  return s + pow(n, 1 - k) / (k - 1) + 0.5 * pow(n, -k) + k * pow(n, -k - 1) / 12 -
         k * (k + 1.0) * (k + 2.0) * pow(n, -k - 3) / 720;
}

static tv lgamma_f32(ir_graph *g, tv x) {
  double c[LGAMMA_TERMS + 1];
  c[1] = 1 - 0.57721566490153286061; /* 1 - Euler's gamma */
  for (int k = 2; k <= LGAMMA_TERMS; k++) c[k] = (k % 2 ? -1 : 1) * zeta_minus_one(k) / k;
  tv up2 = CMP(IR_LT, x, K(0.5)), up1 = CMP(IR_LT, x, K(1.5)), down = CMP(IR_GE, x, K(2.5));
  tv steps = U(IR_FLOOR, SUB(x, K(1.5))); /* 1..6 on [2.5, 8) */
  tv z = SEL(up2, x, SEL(up1, SUB(x, K(1)), SUB(SUB(x, K(2)), SEL(down, steps, K(0)))));
  tv series = K(c[LGAMMA_TERMS]);
  for (int k = LGAMMA_TERMS - 1; k >= 1; k--) series = ADD(MUL(series, z), K(c[k]));
  series = MUL(series, z);
  tv prod = K(1); /* (x - 1)(x - 2)...(x - steps) */
  for (int j = 1; j <= 6; j++) prod = MUL(prod, SEL(CMP(IR_LE, K(j), steps), SUB(x, K(j)), K(1)));
  tv shift = SEL(up2, ir_unary(g, IR_NEG, ADD(U(IR_LOG, x), U(IR_LOG1P, x))),
                 SEL(up1, ir_unary(g, IR_NEG, U(IR_LOG1P, z)), SEL(down, U(IR_LOG, prod), K(0))));
  tv near = ir_binary(g, IR_AND, CMP(IR_GT, x, K(0)), CMP(IR_LT, x, K(8)));
  return SEL(near, ADD(series, shift), U(IR_LGAMMA, x));
}

static tv u_lgamma(ir_graph *g, tv x) {
  if (ir_type_of(g, x).dtype != TPUC_F32) return U(IR_LGAMMA, x);
  return lgamma_f32(g, x);
}
tpuc_status *ew_lgamma(tpuc_lower_ctx *cx) { return ew_unary(cx, EW_FLOAT, IR_UNARY_COUNT, u_lgamma); }
/* PyTorch's digamma(+0) = -inf and digamma(-0) = +inf; XLA's gives NaN at 0 */
static tv u_digamma(ir_graph *g, tv x) {
  tv inf = SEL(ew_signbit(g, x), K(INFINITY), K(-INFINITY));
  return SEL(CMP(IR_EQ, x, K(0)), inf, U(IR_DIGAMMA, x));
}
tpuc_status *ew_digamma(tpuc_lower_ctx *cx) { return ew_unary(cx, EW_FLOAT, IR_UNARY_COUNT, u_digamma); }
/* erfinv: XLA's float32 approximation is off by up to ~1.5e-5 near +-1
 * (PyTorch's CPU: a few ulp), and the gradient, sqrt(pi)/2 exp(erfinv^2),
 * amplifies that. For |x| > 0.5 one Newton step on erfc(y) = 1 - |x| (1 - |x|
 * is exact there, erfc keeps relative accuracy in the tail, where erf would
 * round to 1) brings it to float32 accuracy. float64 keeps XLA's value. */
static tv u_erfinv(ir_graph *g, tv x) {
  tv y = U(IR_ERF_INV, x);
  if (ir_type_of(g, x).dtype == TPUC_F64) return y;
  tv a = U(IR_ABS, x), ya = U(IR_ABS, y);
  tv r = SUB(U(IR_ERFC, ya), SUB(K(1), a));
  tv slope = MUL(K(2.0 / sqrt(PI)), U(IR_EXP, U(IR_NEG, MUL(ya, ya))));
  tv refined = ADD(ya, DIV(r, slope));
  tv use = AND(CMP(IR_GT, a, K(0.5)), CMP(IR_LT, a, K(1)));
  refined = SEL(ew_signbit(g, x), U(IR_NEG, refined), refined);
  return SEL(use, refined, y);
}
tpuc_status *ew_erfinv(tpuc_lower_ctx *cx) { return ew_unary(cx, EW_FLOAT, IR_UNARY_COUNT, u_erfinv); }
tpuc_status *ew_sinc(tpuc_lower_ctx *cx) { return ew_unary(cx, EW_FLOAT, IR_UNARY_COUNT, u_sinc); }
tpuc_status *ew_deg2rad(tpuc_lower_ctx *cx) {
  return ew_unary(cx, EW_FLOAT, IR_UNARY_COUNT, u_deg2rad);
}
tpuc_status *ew_rad2deg(tpuc_lower_ctx *cx) {
  return ew_unary(cx, EW_FLOAT, IR_UNARY_COUNT, u_rad2deg);
}
tpuc_status *ew_signbit_op(tpuc_lower_ctx *cx) {
  return ew_unary(cx, EW_EXACT, IR_UNARY_COUNT, u_signbit);
}

tpuc_status *ew_isposinf(tpuc_lower_ctx *cx) {
  return ew_unary(cx, EW_EXACT, IR_UNARY_COUNT, u_isposinf);
}
tpuc_status *ew_isneginf(tpuc_lower_ctx *cx) {
  return ew_unary(cx, EW_EXACT, IR_UNARY_COUNT, u_isneginf);
}

/* ---- complex numbers ---- */

static tv u_conj(ir_graph *g, tv x) {
  if (!ir_is_complex(ir_type_of(g, x).dtype)) return x;
  return ir_binary(g, IR_COMPLEX, U(IR_REAL, x), U(IR_NEG, U(IR_IMAG, x)));
}

static tv u_angle(ir_graph *g, tv x) { /* real: pi below 0, else 0; NaN stays */
  if (ir_is_complex(ir_type_of(g, x).dtype))
    return ir_binary(g, IR_ATAN2, U(IR_IMAG, x), U(IR_REAL, x));
  return SEL(ew_isnan(g, x), x, SEL(CMP(IR_LT, x, K(0)), K(PI), K(0)));
}

tpuc_status *ew_conj_physical(tpuc_lower_ctx *cx) {
  return ew_unary(cx, EW_EXACT | EW_COMPLEX, IR_UNARY_COUNT, u_conj);
}
tpuc_status *ew_angle(tpuc_lower_ctx *cx) {
  return ew_unary(cx, EW_FLOAT | EW_COMPLEX, IR_UNARY_COUNT, u_angle);
}

/* complex(real, imag) and polar(abs, angle): float operands of one dtype */
static tpuc_status *make_complex(tpuc_lower_ctx *cx, bool polar) {
  tpuc_dtype o = cx->out_types[0].dtype;
  if (!ir_is_complex(o)) return lx_unimplemented(cx, "output dtype");
  ir_graph *g = cx->g;
  ir_type t = ew_out_as(cx, o == TPUC_C64 ? TPUC_F32 : TPUC_F64);
  tv a = ew_operand(cx, 0, t), b = ew_operand(cx, 1, t);
  if (polar) {
    tv re = MUL(a, U(IR_COS, b));
    b = MUL(a, U(IR_SIN, b));
    a = re;
  }
  return ew_finish(cx, ir_binary(g, IR_COMPLEX, a, b));
}
tpuc_status *ew_complex(tpuc_lower_ctx *cx) { return make_complex(cx, false); }
tpuc_status *ew_polar(tpuc_lower_ctx *cx) { return make_complex(cx, true); }

#define SELF_OR_FAIL(flags)                                     \
  ir_graph *g = cx->g;                                          \
  tv x = ew_self_in(cx, (flags));                               \
  if (x == IR_NONE) return lx_unimplemented(cx, "input dtype");

tpuc_status *ew_logit(tpuc_lower_ctx *cx) { /* (self, eps?) */
  SELF_OR_FAIL(EW_FLOAT)
  if (!lx_is_none(cx, 1)) { /* clamp into [eps, 1 - eps]; NaN stays */
    tv lo = ew_scalar_like(cx, 1, x, 0.0), hi = SUB(K(1), lo);
    x = SEL(CMP(IR_LT, x, lo), lo, SEL(CMP(IR_GT, x, hi), hi, x));
  }
  return ew_finish(cx, U(IR_LOG, DIV(x, SUB(K(1), x))));
}

tpuc_status *ew_celu(tpuc_lower_ctx *cx) { /* (self, alpha=1): elu with input_scale 1/alpha */
  SELF_OR_FAIL(0)
  tv alpha = ew_scalar_like(cx, 1, x, 1.0);
  tv neg = MUL(U(IR_EXPM1, DIV(x, alpha)), alpha);
  return ew_finish(cx, SEL(CMP(IR_LE, x, K(0)), neg, x));
}

/* |x| <= lambd (NaN: false) */
static tv within(tpuc_lower_ctx *cx, ir_graph *g, tv x) {
  tv l = ew_scalar_like(cx, 2, x, 0.5);
  return AND(CMP(IR_GE, x, ir_unary(g, IR_NEG, l)), CMP(IR_LE, x, l));
}

tpuc_status *ew_softshrink(tpuc_lower_ctx *cx) { /* (self, lambd=0.5) */
  SELF_OR_FAIL(0)
  tv l = ew_scalar_like(cx, 1, x, 0.5);
  tv r = SEL(CMP(IR_GT, x, l), SUB(x, l), SEL(CMP(IR_LT, x, U(IR_NEG, l)), ADD(x, l), K(0)));
  return ew_finish(cx, SEL(ew_isnan(g, x), x, r));
}

tpuc_status *ew_hardshrink(tpuc_lower_ctx *cx) { /* (self, lambd=0.5) */
  SELF_OR_FAIL(0)
  tv l = ew_scalar_like(cx, 1, x, 0.5);
  tv in = AND(CMP(IR_GE, x, U(IR_NEG, l)), CMP(IR_LE, x, l));
  return ew_finish(cx, SEL(in, K(0), x));
}

/* (self) -> (output, buffer): output = min(x, 0) - log1p(exp(-|x|)), buffer
 * = exp(-|x|), as PyTorch's CPU kernel */
tpuc_status *ew_log_sigmoid_forward(tpuc_lower_ctx *cx) {
  SELF_OR_FAIL(EW_FLOAT)
  tv z = U(IR_EXP, U(IR_NEG, U(IR_ABS, x)));
  tv mn = SEL(CMP(IR_LT, x, K(0)), x, K(0));
  ew_finish(cx, SUB(mn, U(IR_LOG1P, z)));
  if (cx->noutputs > 1) cx->results[1] = lx_coerce(g, z, cx->out_types[1]);
  return NULL;
}

/* ---- backward formulas: (grad_output, self, ...) ---- */

#define GRAD_ARGS                                                        \
  ir_graph *g = cx->g;                                                   \
  ir_type t = ew_out_as(cx, lx_compute_dtype(cx->out_types[0].dtype));   \
  if (!ir_is_float(t.dtype)) return lx_unimplemented(cx, "dtype");       \
  tv gr = ew_operand(cx, 0, t), x = ew_operand(cx, 1, t);

tpuc_status *ew_logit_backward(tpuc_lower_ctx *cx) { /* (grad, self, eps?) */
  GRAD_ARGS
  tv r = DIV(gr, MUL(x, SUB(K(1), x)));
  if (lx_is_none(cx, 2)) { /* outside [0, 1]: NaN */
    tv out = OR(CMP(IR_LT, x, K(0)), CMP(IR_GT, x, K(1)));
    return ew_finish(cx, SEL(out, K(NAN), r));
  }
  tv lo = ew_scalar_like(cx, 2, x, 0.0), hi = SUB(K(1), lo);
  tv out = OR(CMP(IR_LT, x, lo), CMP(IR_GT, x, hi));
  return ew_finish(cx, SEL(out, K(0), r));
}

tpuc_status *ew_log_sigmoid_backward(tpuc_lower_ctx *cx) { /* (grad, self, buffer) */
  GRAD_ARGS
  tv z = ew_operand(cx, 2, t);
  tv neg = CMP(IR_LT, x, K(0));
  tv max_deriv = SEL(neg, K(1), K(0)), sign = SEL(neg, K(1), K(-1));
  return ew_finish(cx, MUL(SUB(max_deriv, MUL(sign, DIV(z, ADD(K(1), z)))), gr));
}

tpuc_status *ew_shrink_backward(tpuc_lower_ctx *cx) { /* (grad, self, lambd): soft and hard */
  GRAD_ARGS
  return ew_finish(cx, SEL(within(cx, g, x), K(0), gr));
}

/* ---- binary ---- */

/* maximum/minimum ignoring NaN: the other operand when one is NaN */
static tv fminmax(ir_graph *g, ir_binary_op op, tv a, tv b) {
  tv r = ir_binary(g, op, a, b);
  if (!ir_is_float(ir_type_of(g, a).dtype)) return r;
  r = SEL(ew_isnan(g, a), b, r);
  return SEL(ew_isnan(g, b), a, r);
}
static tv b_fmax(ir_graph *g, tv a, tv b) { return fminmax(g, IR_MAX, a, b); }
static tv b_fmin(ir_graph *g, tv a, tv b) { return fminmax(g, IR_MIN, a, b); }

static tv b_heaviside(ir_graph *g, tv x, tv values) {
  tv pos = ir_convert(g, CMP(IR_GT, x, K(0)), ir_type_of(g, x).dtype);
  return SEL(CMP(IR_EQ, x, K(0)), values, pos);
}

static tv b_logaddexp2(ir_graph *g, tv a, tv b) {
  tv x = a;
  tv m = ew_max(g, a, b);
  tv d = U(IR_NEG, U(IR_ABS, SUB(a, b)));
  tv r = ADD(m, DIV(U(IR_LOG1P, ir_binary(g, IR_POW, K(2), d)), K(LN2)));
  return SEL(AND(ew_isinf(g, a), CMP(IR_EQ, a, b)), a, r);
}

static tv b_ldexp(ir_graph *g, tv x, tv e) { return MUL(x, ir_binary(g, IR_POW, K(2), e)); }

static tv b_shl(ir_graph *g, tv a, tv b) { return ir_binary(g, IR_SHL, a, b); }
static tv b_shr(ir_graph *g, tv a, tv b) {
  bool u = ir_is_unsigned(ir_type_of(g, a).dtype);
  return ir_binary(g, u ? IR_SHR_LOGICAL : IR_SHR_ARITH, a, b);
}

tpuc_status *ew_fmax(tpuc_lower_ctx *cx) { return ew_binary(cx, 0, 1, EW_EXACT, b_fmax); }
tpuc_status *ew_fmin(tpuc_lower_ctx *cx) { return ew_binary(cx, 0, 1, EW_EXACT, b_fmin); }
tpuc_status *ew_heaviside(tpuc_lower_ctx *cx) { return ew_binary(cx, 0, 1, EW_EXACT, b_heaviside); }
tpuc_status *ew_logaddexp2(tpuc_lower_ctx *cx) { return ew_binary(cx, 0, 1, EW_FLOAT, b_logaddexp2); }
tpuc_status *ew_ldexp(tpuc_lower_ctx *cx) { return ew_binary(cx, 0, 1, EW_FLOAT, b_ldexp); }
tpuc_status *ew_shift_left(tpuc_lower_ctx *cx) {
  if (ew_arg_dtype(cx, 0) == TPUC_PRED) return lx_unimplemented(cx, "bool operands");
  return ew_binary(cx, 0, 1, EW_EXACT | EW_INTEGER, b_shl);
}
tpuc_status *ew_shift_right(tpuc_lower_ctx *cx) {
  if (ew_arg_dtype(cx, 0) == TPUC_PRED) return lx_unimplemented(cx, "bool operands");
  return ew_binary(cx, 0, 1, EW_EXACT | EW_INTEGER, b_shr);
}

tpuc_status *ew_rsub(tpuc_lower_ctx *cx) { /* (self, other, alpha): other - alpha * self */
  int idx[2] = {0, 1};
  tpuc_dtype d = ew_compute_dtype(cx, idx, 2, EW_COMPLEX);
  if (d == EW_UNDEFINED) return lx_unimplemented(cx, "operand dtypes");
  ir_type t = ew_out_as(cx, d);
  ir_graph *g = cx->g;
  tv s = ew_operand(cx, 0, t);
  if (!lx_is_none(cx, 2)) s = MUL(s, ew_operand(cx, 2, t));
  return ew_finish(cx, SUB(ew_operand(cx, 1, t), s));
}
