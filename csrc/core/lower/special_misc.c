/* special_misc.c — torch.special functions built from elementary ones:
 * entr, xlog1py, spherical_bessel_j0, erfcx, log_ndtr, ndtri and zeta. Semantics
 * (branches, NaN and infinities) follow PyTorch's CPU kernels; the
 * approximations are our own, written from the formulas below. Their
 * gradients are composite in PyTorch (formulas of other ops), so only the
 * forwards are here.
 *
 * erfcx(x) = exp(x^2) erfc(x): for 0 <= x < 3 exactly that, with x^2 split
 * into hi + lo (Veltkamp) so exp(x^2) = exp(hi)(1 + lo) carries no rounding of
 * the square; for x >= 3 the continued fraction
 *   erfcx(x) = 1 / (sqrt(pi) (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...)))))
 * 36 levels deep (below 1e-15 relative from x = 3 on, measured against
 * PyTorch's float64); x < 0 is 2 exp(x^2) - erfcx(-x), +inf below -26.7 as
 * the CPU. log_ndtr is PyTorch's formula on top of it. ndtri: for
 * exp(-2) <= min(p, 1 - p) it is sqrt(2) erfinv(2p - 1) (2p - 1 exact there);
 * in the tails 4 Newton steps on log Phi(z) = log q, whose slope
 * phi/Phi = 1 / (sqrt(pi/2) erfcx(-z/sqrt2)) is free of under- and
 * overflow, from the asymptotic start z0 = -sqrt(-2 log q - log(-2 log q) -
 * log(2 pi)) (or the erfinv one where that is nearer).
 *
 * Precision: erfcx, log_ndtr and ndtri compute in float64 for float32 inputs
 * too (the square and the tails need it), which the XLA CPU plugin has; a TPU
 * has no float64, so on one these would need float32 forms (not done). */
#include <math.h>

#include "elementwise.h"

#define PI 3.14159265358979323846
#define SQRT2 1.41421356237309504880
#define SQRT1_2 0.70710678118654752440

#include "ew_shorthand.h"

/* ---- entr, xlog1py, spherical_bessel_j0 ---- */

static tv u_entr(ir_graph *g, tv x) { /* -x log x; 0 at 0; -inf below; NaN stays */
  tv r = SEL(CMP(IR_GT, x, K(0)), U(IR_NEG, MUL(x, U(IR_LOG, x))),
             SEL(CMP(IR_EQ, x, K(0)), K(0), K(-INFINITY)));
  return SEL(ew_isnan(g, x), x, r);
}
static tpuc_status *sp_entr(tpuc_lower_ctx *cx) { return ew_unary(cx, EW_FLOAT, IR_UNARY_COUNT, u_entr); }

/* log1p; XLA's float64 log1p is off by ~100 ulp on [-0.5, -0.25], where
 * log(1 + y) (1 + y rounded by at most 2^-54) is within 2 ulp */
static tv log1p_acc(ir_graph *g, tv y) {
  tv x = y; /* for K() */
  tv mid = AND(CMP(IR_GE, y, K(-0.5)), CMP(IR_LE, y, K(-0.25)));
  return SEL(mid, U(IR_LOG, ADD(K(1), y)), U(IR_LOG1P, y));
}

static tv b_xlog1py(ir_graph *g, tv x, tv y) { /* NaN y: NaN; x == 0: 0; x log1p(y) */
  tv r = SEL(CMP(IR_EQ, x, K(0)), K(0), MUL(x, log1p_acc(g, y)));
  return SEL(ew_isnan(g, y), y, r);
}
static tpuc_status *sp_xlog1py(tpuc_lower_ctx *cx) { return ew_binary(cx, 0, 1, EW_FLOAT, b_xlog1py); }

static tv u_sph_j0(ir_graph *g, tv x) {
  /* the kernel's series below 0.5: 1 - x^2/3! + x^4/5! - ... (to x^12/13!) */
  static const double c[] = {-1.0 / 6.0, 1.0 / 120.0, -1.0 / 5040.0, 1.0 / 362880.0,
                             -1.0 / 39916800.0, 1.0 / 6227020800.0};
  tv x2 = MUL(x, x);
  tv s = K(c[5]);
  for (int i = 4; i >= 0; i--) s = ADD(K(c[i]), MUL(x2, s));
  s = ADD(K(1), MUL(x2, s));
  tv r = SEL(CMP(IR_LT, U(IR_ABS, x), K(0.5)), s, DIV(U(IR_SIN, x), x));
  return SEL(ew_isinf(g, x), K(0), r);
}
static tpuc_status *sp_sph_j0(tpuc_lower_ctx *cx) {
  return ew_unary(cx, EW_FLOAT, IR_UNARY_COUNT, u_sph_j0);
}

/* ---- erfcx, log_ndtr, ndtri (float64 inside) ---- */

/* exp(a^2) without the rounding of a^2: a^2 = hi + lo exactly */
static tv exp_sq(ir_graph *g, tv x) {
  tv hi = MUL(x, x);
  tv c = MUL(K(134217729.0), x);
  tv xh = SUB(c, SUB(c, x)), xl = SUB(x, xh);
  tv lo = ADD(ADD(SUB(MUL(xh, xh), hi), MUL(K(2), MUL(xh, xl))), MUL(xl, xl));
  return MUL(U(IR_EXP, hi), ADD(K(1), lo));
}

/* erfcx(a) for a >= 0 (and +inf) */
static tv erfcx_pos(ir_graph *g, tv x) {
  tv f = x;
  for (int k = 36; k >= 1; k--) f = ADD(x, DIV(K(k * 0.5), f));
  tv cf = DIV(K(1), MUL(K(sqrt(PI)), f));
  tv a = ew_min(g, x, K(3)); /* keeps exp(a^2) finite where the fraction is used */
  tv direct = MUL(exp_sq(g, a), U(IR_ERFC, a));
  return SEL(CMP(IR_LT, x, K(3)), direct, cf);
}

/* erfcx in float64; `f32`: the input was float32, where the CPU's kernel
 * computes 2 exp(x*x) below 0 with x*x rounded to float32 (off the true value
 * by up to x^2/2 float32 ulp; OpInfo compares against that), so that square is
 * rounded the same way here */
static tv erfcx_at(ir_graph *g, tv x, bool f32) {
  tv pos = erfcx_pos(g, U(IR_ABS, x));
  tv e2 = exp_sq(g, x);
  if (f32) e2 = U(IR_EXP, ir_convert(g, ir_convert(g, MUL(x, x), TPUC_F32), TPUC_F64));
  tv neg = SUB(MUL(K(2), e2), pos);
  neg = SEL(CMP(IR_LT, x, K(-26.7)), K(INFINITY), neg);
  return SEL(CMP(IR_GE, x, K(0)), pos, neg); /* NaN: the negative branch, NaN */
}
static tv erfcx64(ir_graph *g, tv x) { return erfcx_at(g, x, false); }
static tv erfcx32(ir_graph *g, tv x) { return erfcx_at(g, x, true); }

/* log Phi(x), PyTorch's formula: log(erfcx(-t)/2) - t^2 below x = -1, else
 * log1p(-erfc(t)/2), t = x/sqrt2. Two repairs of XLA's float64 elementary
 * functions: its log1p is off by ~100 ulp near -0.4, where log(1 + u) is
 * within 2 ulp; its erfc loses ~t^2/4 ulp in the tail (the rounding of
 * exp(-t^2)), where erfcx(t) exp(-t^2) with the square split is exact to a
 * few ulp. */
static tv log_ndtr64(ir_graph *g, tv x) {
  tv t = MUL(x, K(SQRT1_2));
  tv lo = SUB(U(IR_LOG, MUL(erfcx64(g, U(IR_NEG, t)), K(0.5))), MUL(t, t));
  tv tb = ew_min(g, ew_max(g, t, K(3)), K(40)); /* erfc(40) underflows to 0 */
  tv tail = DIV(erfcx_pos(g, tb), exp_sq(g, tb));
  tv erfc = SEL(CMP(IR_LT, t, K(3)), U(IR_ERFC, t), tail);
  tv u = MUL(erfc, K(-0.5));
  tv hi = log1p_acc(g, u);
  return SEL(CMP(IR_LT, x, K(-1)), lo, hi);
}

/* log_ndtr for float32 input (x float64 holding a float32): the CPU's
 * float32 steps below -1 — t = x/sqrt2, log(erfcx(-t)/2) - t*t, each rounded
 * to float32 — around an erfcx rounded once; its gradient, exp(-(result +
 * x^2/2)), cancels, so the rounding of those steps shows there */
static tv log_ndtr32(ir_graph *g, tv x) {
  tv x32 = ir_convert(g, x, TPUC_F32);
  tv t = MUL(x32, ew_splat(g, x32, SQRT1_2));
  tv e = ir_convert(g, erfcx64(g, ir_convert(g, U(IR_NEG, t), TPUC_F64)), TPUC_F32);
  tv lo = SUB(U(IR_LOG, MUL(e, ew_splat(g, x32, 0.5))), MUL(t, t));
  return SEL(CMP(IR_LT, x, K(-1)), ir_convert(g, lo, TPUC_F64), log_ndtr64(g, x));
}

static tv ndtri64(ir_graph *g, tv p) {
  tv x = p; /* for K() */
  tv q = ew_min(g, p, SUB(K(1), p));
  tv central = MUL(K(SQRT2), U(IR_ERF_INV, SUB(ADD(p, p), K(1))));
  /* tails: solve log Phi(z) = log q for z <= 0 */
  tv qs = ew_max(g, q, K(1e-300)); /* keeps the start finite where q is 0 */
  tv lq = U(IR_LOG, qs);
  tv m2 = MUL(K(-2), lq);
  tv z = U(IR_NEG, U(IR_SQRT, SUB(SUB(m2, U(IR_LOG, m2)), K(log(2 * PI)))));
  tv zi = MUL(K(SQRT2), U(IR_ERF_INV, SUB(ADD(qs, qs), K(1))));
  z = SEL(CMP(IR_GT, qs, K(1e-3)), zi, z);
  for (int i = 0; i < 4; i++) {
    tv ratio = MUL(K(sqrt(PI / 2)), erfcx64(g, MUL(z, K(-SQRT1_2)))); /* Phi/phi */
    z = SUB(z, MUL(SUB(log_ndtr64(g, z), lq), ratio));
  }
  tv tail = SEL(CMP(IR_LT, p, K(0.5)), z, U(IR_NEG, z));
  tv r = SEL(CMP(IR_LT, q, K(exp(-2.0))), tail, central);
  r = SEL(CMP(IR_EQ, p, K(0)), K(-INFINITY), SEL(CMP(IR_EQ, p, K(1)), K(INFINITY), r));
  tv out = OR(CMP(IR_LT, p, K(0)), CMP(IR_GT, p, K(1)));
  return SEL(OR(out, ew_isnan(g, p)), K(NAN), r);
}

/* computes in float64 and returns in the input's float dtype */
static tpuc_status *unary64(tpuc_lower_ctx *cx, tv (*fn)(ir_graph *, tv), tv (*fn32)(ir_graph *, tv)) {
  tpuc_dtype d = ew_arg_dtype(cx, 0);
  if (d == TPUC_F16 || d == TPUC_BF16 || ir_is_complex(d))
    return lx_unimplemented(cx, "input dtype (the CPU has float32 and float64 kernels)");
  int idx[1] = {0};
  tpuc_dtype c = ew_compute_dtype(cx, idx, 1, EW_FLOAT);
  if (c != TPUC_F32 && c != TPUC_F64) return lx_unimplemented(cx, "input dtype");
  ir_graph *g = cx->g;
  tv x = ew_operand(cx, 0, ew_out_as(cx, c));
  tv r = (c == TPUC_F32 && fn32 ? fn32 : fn)(g, ir_convert(g, x, TPUC_F64));
  return ew_finish(cx, ir_convert(g, r, c));
}
static tpuc_status *sp_erfcx(tpuc_lower_ctx *cx) { return unary64(cx, erfcx64, erfcx32); }
static tpuc_status *sp_log_ndtr(tpuc_lower_ctx *cx) { return unary64(cx, log_ndtr64, log_ndtr32); }
static tpuc_status *sp_ndtri(tpuc_lower_ctx *cx) { return unary64(cx, ndtri64, NULL); }

/* ---- zeta(x, q): Hurwitz zeta ---- */

/* chlo.zeta for q > 0. PyTorch's kernel (Cephes) also sums from a negative
 * non-integer q when x is an integer; there zeta(x, q) = sum_{j<M} (q + j)^-x
 * + zeta(x, q + M) carries q > -M to chlo.zeta's domain (M = 32; below,
 * NaN). Its edge values: x == 1 inf, x < 1 NaN, q <= 0 an integer: inf,
 * q <= 0 and x not an integer: NaN. */
static tv b_zeta(ir_graph *g, tv x, tv q) {
  enum { M = 32 };
  tv direct = ir_binary(g, IR_ZETA, x, q);
  tv sum = K(0), e = U(IR_NEG, x);
  for (int j = 0; j < M; j++) sum = ADD(sum, ir_binary(g, IR_POW, ADD(q, K(j)), e));
  tv shifted = ADD(sum, ir_binary(g, IR_ZETA, x, ADD(q, K(M))));
  tv qle0 = CMP(IR_LE, q, K(0));
  tv r = SEL(qle0, shifted, direct);
  tv nan_case = AND(qle0, CMP(IR_NE, x, U(IR_FLOOR, x)));
  r = SEL(nan_case, K(NAN), r);
  r = SEL(AND(qle0, CMP(IR_EQ, q, U(IR_FLOOR, q))), K(INFINITY), r);
  r = SEL(CMP(IR_LT, x, K(1)), K(NAN), r);
  r = SEL(CMP(IR_EQ, x, K(1)), K(INFINITY), r);
  return SEL(OR(ew_isnan(g, x), ew_isnan(g, q)), K(NAN), r);
}
static tpuc_status *sp_zeta(tpuc_lower_ctx *cx) {
  int idx[2] = {0, 1};
  tpuc_dtype d = ew_compute_dtype(cx, idx, 2, EW_FLOAT);
  if (d != TPUC_F32 && d != TPUC_F64)
    return lx_unimplemented(cx, "operand dtypes (the CPU has float32 and float64 kernels)");
  return ew_binary(cx, 0, 1, EW_FLOAT, b_zeta);
}

#define E(name, fn) {"aten::special_" name, fn, 0}
#define E2(base, fn) E(base, fn), E(base ".out", fn)

extern const tpuc_lowering tpuc_lowerings_special_misc[];
const tpuc_lowering tpuc_lowerings_special_misc[] = {
    E2("entr", sp_entr),
    E2("xlog1py", sp_xlog1py),
    E("xlog1py.self_scalar", sp_xlog1py),
    E("xlog1py.other_scalar", sp_xlog1py),
    E("xlog1py.self_scalar_out", sp_xlog1py),
    E("xlog1py.other_scalar_out", sp_xlog1py),
    E2("spherical_bessel_j0", sp_sph_j0),
    E2("erfcx", sp_erfcx),
    E2("log_ndtr", sp_log_ndtr),
    E2("ndtri", sp_ndtri),
    E2("zeta", sp_zeta),
    E("zeta.self_scalar", sp_zeta),
    E("zeta.other_scalar", sp_zeta),
    E("zeta.self_scalar_out", sp_zeta),
    E("zeta.other_scalar_out", sp_zeta),
    {NULL, NULL, 0},
};
