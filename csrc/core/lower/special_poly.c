/* special_poly.c — torch.special's orthogonal polynomials of a tensor degree
 * n: chebyshev_polynomial_t/u/v/w, their shifted forms (argument 2x - 1),
 * hermite_polynomial_h/he, laguerre_polynomial_l and legendre_polynomial_p.
 *
 * Semantics follow PyTorch's CPU kernels (ATen/native/Math.h): n is cast to
 * the float compute dtype and then truncated to an integer (a NaN, an
 * infinity or a value beyond int64 becomes a negative degree, as the x86
 * conversion gives; hermite_h says so explicitly), a negative degree gives 0,
 * the endpoints (x = +-1, or 0 and 1 shifted) have their closed values,
 * Chebyshev for |y| < 1 above a small degree is trigonometric (cos(n acos y),
 * ...), and everything else is the three-term recurrence from degree 0.
 *
 * The IR has no loop, so the recurrence is unrolled to a bound: the degree-k
 * value is kept where n == k. The Hermite kernels return NaN above their own
 * limit (128 float32, 512 float64). Every family unrolls to 128 steps (the
 * float32 Hermite limit, so float32 Hermite is exact for every n; 512 float64
 * steps took the XLA CPU compiler over a minute per op), and an element that
 * needs the recurrence above that bound (|y| > 1 Chebyshev, Laguerre and
 * Legendre off their closed cases, float64 Hermite up to 512) fails a
 * run-time check ("degree above the unrolled bound") at the next
 * synchronisation instead of returning a wrong value. */
#include <math.h>

#include "../base/base.h" /* tpuc_status_make */
#include "elementwise.h"

#include "ew_shorthand.h"

typedef enum { CHEB_T, CHEB_U, CHEB_V, CHEB_W } cheb_kind;
typedef enum { POLY_HERMITE_H, POLY_HERMITE_HE, POLY_LAGUERRE, POLY_LEGENDRE } poly_kind;

/* the bound of the unrolled recurrence, per compute dtype */
enum { BOUND = 128 };
static int poly_bound(ir_graph *g, tv x) {
  (void)g;
  (void)x;
  return BOUND;
}
/* the Hermite kernels' own limit: NaN above it */
static int hermite_limit(ir_graph *g, tv x) { return ir_type_of(g, x).dtype == TPUC_F64 ? 512 : 128; }

/* truncated degree (float), and whether the int64 conversion is a valid
 * non-negative integer: 0 <= trunc(n) < 2^63 (NaN and inf fail) */
typedef struct {
  tv nf;   /* trunc(n) */
  tv neg;  /* pred: the kernel's n < 0 */
  tv even; /* pred: n % 2 == 0 */
} degree;

static degree degree_of(ir_graph *g, tv x, tv n) {
  degree d;
  d.nf = ew_trunc(g, n);
  tv ok = AND(CMP(IR_GE, d.nf, K(0)), CMP(IR_LT, d.nf, K(9223372036854775808.0)));
  d.neg = U(IR_NOT, ok);
  tv half = U(IR_FLOOR, MUL(d.nf, K(0.5)));
  d.even = CMP(IR_EQ, ADD(half, half), d.nf);
  return d;
}

static tv signed_by(ir_graph *g, tv x, tv even, tv v) {
  (void)x;
  return SEL(even, v, U(IR_NEG, v));
}

/* Adds the run-time check that no element needs the recurrence above the bound. */
static bool check_bound(tpuc_lower_ctx *cx, tv need, const char *what) {
  ir_graph *g = cx->g;
  ir_type t = ir_type_of(g, need);
  int64_t dims[8];
  for (int i = 0; i < t.ndim; i++) dims[i] = i;
  tv init = ir_convert(g, ir_splat_i64(g, ir_make_type(TPUC_S64, 0, NULL), 0), TPUC_PRED);
  tv any = t.ndim ? ir_reduce(g, need, init, IR_RED_OR, dims, t.ndim) : need;
  tv failed = ir_convert(g, any, TPUC_S64);
  return lx_add_check(cx, failed, IR_NONE, TPUC_CHECK_ASSERT, 0, 0, what);
}

/* ---- Chebyshev T, U, V, W, plain and shifted ---- */

typedef struct {
  cheb_kind kind;
  bool shifted;
  int trig_above; /* the kernel's trigonometric branch: n > this and |y| < 1 */
} cheb_spec;

static tv cheb_build(tpuc_lower_ctx *cx, const cheb_spec *s, tv x, tv n, tv *need_check) {
  ir_graph *g = cx->g;
  int bound = poly_bound(g, x);
  degree d = degree_of(g, x, n);
  tv y = s->shifted ? SUB(ADD(x, x), K(1)) : x;
  tv m = ADD(y, y);
  tv q0 = s->kind == CHEB_T ? y : s->kind == CHEB_U ? m : s->kind == CHEB_V ? SUB(m, K(1)) : ADD(m, K(1));
  /* recurrence: p_{k} = m p_{k-1} - p_{k-2}, p_0 = 1, p_1 = q0 */
  tv p = K(1), q = q0, rec = q0;
  for (int k = 2; k <= bound; k++) {
    tv r = SUB(MUL(m, q), p);
    p = q;
    q = r;
    rec = SEL(CMP(IR_EQ, d.nf, K(k)), r, rec);
  }
  tv res = SEL(CMP(IR_EQ, d.nf, K(0)), K(1), rec);
  /* the trigonometric branch */
  tv th = U(IR_ACOS, y);
  tv n1 = ADD(d.nf, K(1)), two_n1 = ADD(ADD(d.nf, d.nf), K(1)), nh = ADD(d.nf, K(0.5));
  tv trig;
  switch (s->kind) {
    case CHEB_T: trig = U(IR_COS, MUL(d.nf, th)); break;
    case CHEB_U: {
      tv st = U(IR_SIN, th);
      tv alt = DIV(MUL(n1, U(IR_COS, MUL(n1, th))), y);
      trig = SEL(CMP(IR_NE, st, K(0)), DIV(U(IR_SIN, MUL(n1, th)), st), alt);
      break;
    }
    case CHEB_V: {
      tv h = MUL(th, K(0.5));
      tv v = DIV(U(IR_COS, MUL(nh, th)), U(IR_COS, h));
      trig = SEL(CMP(IR_NE, U(IR_SIN, h), K(1)), v, signed_by(g, x, d.even, two_n1));
      break;
    }
    default: {
      tv h = MUL(th, K(0.5));
      tv v = DIV(U(IR_SIN, MUL(nh, th)), U(IR_SIN, h));
      tv alt = signed_by(g, x, d.even, K(1));
      if (!s->shifted) alt = SEL(CMP(IR_GT, x, K(0)), two_n1, alt);
      trig = SEL(CMP(IR_NE, U(IR_COS, h), K(1)), v, alt);
      break;
    }
  }
  tv inside = CMP(IR_LT, U(IR_ABS, y), K(1));
  tv use_trig = AND(inside, CMP(IR_GT, d.nf, K(s->trig_above)));
  res = SEL(use_trig, trig, res);
  /* endpoints y = 1 and y = -1 */
  tv at_hi, at_lo;
  switch (s->kind) {
    case CHEB_T: at_hi = K(1); at_lo = signed_by(g, x, d.even, K(1)); break;
    case CHEB_U: at_hi = n1; at_lo = signed_by(g, x, d.even, n1); break;
    case CHEB_V: at_hi = K(1); at_lo = signed_by(g, x, d.even, two_n1); break;
    default: at_hi = two_n1; at_lo = signed_by(g, x, d.even, K(1)); break;
  }
  tv is_hi = CMP(IR_EQ, y, K(1)), is_lo = CMP(IR_EQ, y, K(-1));
  res = SEL(is_lo, at_lo, SEL(is_hi, at_hi, res));
  res = SEL(d.neg, K(0), res);
  /* the recurrence above the bound: |y| > 1 (NaN y is NaN at any degree >= 1) */
  tv beyond = CMP(IR_GT, d.nf, K(bound));
  tv needed = AND(AND(beyond, U(IR_NOT, d.neg)), CMP(IR_GT, U(IR_ABS, y), K(1)));
  *need_check = needed;
  return SEL(AND(beyond, ew_isnan(g, y)), y, res);
}

/* ---- Hermite, Laguerre, Legendre ---- */

static tv poly_build(ir_graph *g, poly_kind kind, tv x, tv n, tv *need_check) {
  int bound = poly_bound(g, x);
  degree d = degree_of(g, x, n);
  tv q0, p = K(1), q, rec;
  switch (kind) {
    case POLY_HERMITE_H: q0 = ADD(x, x); break;
    case POLY_HERMITE_HE: q0 = x; break;
    case POLY_LAGUERRE: q0 = SUB(K(1), x); break;
    default: q0 = x; break;
  }
  q = rec = q0;
  tv x2 = ADD(x, x), omx = SUB(K(1), x);
  /* step k computes degree k + 1 from degrees k and k - 1 */
  for (int k = 1; k < bound; k++) {
    tv r;
    switch (kind) {
      case POLY_HERMITE_H: r = SUB(MUL(x2, q), MUL(K(2.0 * k), p)); break;
      case POLY_HERMITE_HE: r = SUB(MUL(x, q), MUL(K(k), p)); break;
      case POLY_LAGUERRE:
        r = DIV(SUB(MUL(ADD(K(2.0 * k), omx), q), MUL(K(k), p)), K(k + 1.0));
        break;
      default: r = DIV(SUB(MUL(MUL(K(2.0 * k + 1), x), q), MUL(K(k), p)), K(k + 1.0)); break;
    }
    p = q;
    q = r;
    rec = SEL(CMP(IR_EQ, d.nf, K(k + 1.0)), r, rec);
  }
  tv res = SEL(CMP(IR_EQ, d.nf, K(0)), K(1), rec);
  tv beyond = AND(CMP(IR_GT, d.nf, K(bound)), U(IR_NOT, d.neg));
  tv needed;
  if (kind == POLY_HERMITE_H || kind == POLY_HERMITE_HE) { /* the kernel's limit */
    int limit = hermite_limit(g, x);
    tv over = AND(CMP(IR_GT, d.nf, K(limit)), U(IR_NOT, d.neg));
    res = SEL(over, K(NAN), res);
    needed = limit > bound ? AND(beyond, U(IR_NOT, over)) : IR_NONE;
  } else if (kind == POLY_LAGUERRE) {
    res = SEL(AND(beyond, ew_isnan(g, x)), x, res);
    res = SEL(CMP(IR_EQ, x, K(0)), K(1), res);
    needed = AND(beyond, AND(CMP(IR_NE, x, K(0)), U(IR_NOT, ew_isnan(g, x))));
  } else {
    res = SEL(AND(beyond, ew_isnan(g, x)), x, res);
    tv edge = CMP(IR_EQ, U(IR_ABS, x), K(1));
    tv at = signed_by(g, x, OR(CMP(IR_GT, x, K(0)), d.even), K(1));
    res = SEL(edge, at, res);
    needed = AND(beyond, AND(U(IR_NOT, edge), U(IR_NOT, ew_isnan(g, x))));
  }
  *need_check = needed;
  return SEL(d.neg, K(0), res);
}

/* ---- the lowerings: (x, n[, out]) ---- */

static tpuc_status *poly_lower(tpuc_lower_ctx *cx, const cheb_spec *cs, poly_kind pk, const char *name) {
  int idx[2] = {0, 1};
  tpuc_dtype dt = ew_compute_dtype(cx, idx, 2, EW_FLOAT);
  if (dt == EW_UNDEFINED || (dt != TPUC_F32 && dt != TPUC_F64))
    return lx_unimplemented(cx, "operand dtypes (the CPU computes float32 and float64)");
  bool hermite = cs == NULL && (pk == POLY_HERMITE_H || pk == POLY_HERMITE_HE);
  bool needs_check = !hermite || dt == TPUC_F64;
  if (needs_check && !cx->checks)
    return lx_unimplemented(cx, "degree bound check (no run-time checks here)");
  ir_graph *g = cx->g;
  ir_type t = ew_out_as(cx, dt);
  tv x = ew_operand(cx, 0, t), n = ew_operand(cx, 1, t), need = IR_NONE;
  tv r = cs ? cheb_build(cx, cs, x, n, &need) : poly_build(g, pk, x, n, &need);
  if (need != IR_NONE && !check_bound(cx, need, name))
    return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  return ew_finish(cx, r);
}

#define CHEB(fn, kind, shifted, above, msg)                        \
  static tpuc_status *fn(tpuc_lower_ctx *cx) {                    \
    static const cheb_spec s = {kind, shifted, above};            \
    return poly_lower(cx, &s, POLY_HERMITE_H, msg);               \
  }
#define BOUND_MSG(op) op ": degree n above the natively unrolled bound (128); run it on the CPU"
CHEB(sp_cheb_t, CHEB_T, false, 6, BOUND_MSG("special.chebyshev_polynomial_t"))
CHEB(sp_cheb_u, CHEB_U, false, 8, BOUND_MSG("special.chebyshev_polynomial_u"))
CHEB(sp_cheb_v, CHEB_V, false, 8, BOUND_MSG("special.chebyshev_polynomial_v"))
CHEB(sp_cheb_w, CHEB_W, false, 8, BOUND_MSG("special.chebyshev_polynomial_w"))
CHEB(sp_scheb_t, CHEB_T, true, 6, BOUND_MSG("special.shifted_chebyshev_polynomial_t"))
CHEB(sp_scheb_u, CHEB_U, true, 6, BOUND_MSG("special.shifted_chebyshev_polynomial_u"))
CHEB(sp_scheb_v, CHEB_V, true, 6, BOUND_MSG("special.shifted_chebyshev_polynomial_v"))
CHEB(sp_scheb_w, CHEB_W, true, 4, BOUND_MSG("special.shifted_chebyshev_polynomial_w"))

static tpuc_status *sp_hermite_h(tpuc_lower_ctx *cx) {
  return poly_lower(cx, NULL, POLY_HERMITE_H, BOUND_MSG("special.hermite_polynomial_h"));
}
static tpuc_status *sp_hermite_he(tpuc_lower_ctx *cx) {
  return poly_lower(cx, NULL, POLY_HERMITE_HE, BOUND_MSG("special.hermite_polynomial_he"));
}
static tpuc_status *sp_laguerre(tpuc_lower_ctx *cx) {
  return poly_lower(cx, NULL, POLY_LAGUERRE, BOUND_MSG("special.laguerre_polynomial_l"));
}
static tpuc_status *sp_legendre(tpuc_lower_ctx *cx) {
  return poly_lower(cx, NULL, POLY_LEGENDRE, BOUND_MSG("special.legendre_polynomial_p"));
}

/* ---- the table: the Tensor-Tensor forms; the Scalar forms wrap a tensor ---- */

#define E(name, fn) {"aten::special_" name, fn, 0}
#define E2(base, fn) E(base, fn), E(base ".out", fn)

extern const tpuc_lowering tpuc_lowerings_special_poly[];
const tpuc_lowering tpuc_lowerings_special_poly[] = {
    E2("chebyshev_polynomial_t", sp_cheb_t),
    E2("chebyshev_polynomial_u", sp_cheb_u),
    E2("chebyshev_polynomial_v", sp_cheb_v),
    E2("chebyshev_polynomial_w", sp_cheb_w),
    E2("shifted_chebyshev_polynomial_t", sp_scheb_t),
    E2("shifted_chebyshev_polynomial_u", sp_scheb_u),
    E2("shifted_chebyshev_polynomial_v", sp_scheb_v),
    E2("shifted_chebyshev_polynomial_w", sp_scheb_w),
    E2("hermite_polynomial_h", sp_hermite_h),
    E2("hermite_polynomial_he", sp_hermite_he),
    E2("laguerre_polynomial_l", sp_laguerre),
    E2("legendre_polynomial_p", sp_legendre),
    {NULL, NULL, 0},
};
