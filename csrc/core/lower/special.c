/* special.c — special functions with no StableHLO op of their own, built from
 * elementary ones: the modified Bessel functions i0, i0e, i1, i1e (and
 * torch.special's modified_bessel_i0/i1, the same functions), polygamma and
 * mvlgamma, and the bit-level float ops nextafter and frexp, plus the integer
 * gcd and lcm. Their backwards are composite in PyTorch (i1, i0e, polygamma
 * n+1, digamma, frexp's exponent), so these forwards carry them.
 *
 * Bessel functions: for |x| < T the power series
 *   I_nu(x) = (x/2)^nu sum_k t^k / (k! (k+nu)!),  t = x^2 / 4
 * evaluated nested, 1 + t/(1(1+nu)) (1 + t/(2(2+nu)) (1 + ...)), so no
 * coefficient underflows and every term is positive (no cancellation); for
 * |x| >= T Hankel's asymptotic expansion
 *   I_nu(x) e^-x ~ (2 pi x)^-1/2 sum_k prod_{j<=k} ((2j-1)^2 - 4 nu^2) / (8 j x)
 * whose error is about e^-2x. float64: T = 18, 40 series and 25 asymptotic
 * terms; float32: T = 10, 25 and 12 terms. Measured against mpmath at 50-digit
 * precision over [0.01, 300] the relative error is below 1.2e-15 (float64
 * arithmetic) and 6e-9 (truncation, float32 set), within a few ulp of each.
 * float16/bfloat16 and integer inputs compute in float32, as PyTorch's CPU.
 *
 * polygamma(n, x) is chlo.polygamma (n >= 1) and digamma (n = 0); mvlgamma is
 * a sum of lgamma. nextafter and frexp read and write the
 * IEEE bits (bitcast), so they are exact for every float dtype, subnormals
 * included. gcd is Euclid's algorithm unrolled to the longest chain its dtype
 * allows (consecutive Fibonacci numbers: 92 steps for int64), lcm |a/g*b|.
 *
 * Platforms: everything here is plain StableHLO except chlo.polygamma, which
 * the XLA CPU plugin and XLA's TPU compiler both expand (chlo legalization,
 * a Hurwitz zeta series). A TPU has no float64: the float64 paths are for the
 * CPU plugin (a TPU compiler's handling of f64 is its own, untested here). */
#include <math.h>

#include "elementwise.h"

#define PI 3.14159265358979323846

#include "ew_shorthand.h"

/* ---- modified Bessel functions of order 0 and 1 ---- */

typedef struct {
  double t;        /* series below, asymptotic at and above */
  int nseries, nasym;
} bessel_plan;

static bessel_plan plan_for(tpuc_dtype d) {
  if (d == TPUC_F64) return (bessel_plan){18.0, 40, 25};
  return (bessel_plan){10.0, 25, 12};
}

/* I_nu(a) for a >= 0 below the threshold (series). */
static tv bessel_series(ir_graph *g, tv x, int nu, int n) {
  tv t = MUL(MUL(x, x), K(0.25));
  tv r = K(1);
  for (int k = n; k >= 1; k--) r = ADD(K(1), MUL(t, MUL(K(1.0 / ((double)k * (k + nu))), r)));
  return nu ? MUL(r, MUL(x, K(0.5))) : r;
}

/* I_nu(a) e^-a for a > 0 (asymptotic expansion). */
static tv bessel_asym(ir_graph *g, tv x, int nu, int n) {
  tv y = DIV(K(1), x);
  tv r = K(1);
  for (int k = n; k >= 1; k--) {
    double b = ((double)(2 * k - 1) * (2 * k - 1) - 4.0 * nu * nu) / (8.0 * k);
    r = ADD(K(1), MUL(MUL(K(b), y), r));
  }
  return DIV(r, U(IR_SQRT, MUL(K(2 * PI), x)));
}

/* I_nu(x) (scaled: times e^-|x|), nu 0 or 1. */
static tv bessel_i(ir_graph *g, tv x, int nu, bool scaled) {
  bessel_plan p = plan_for(ir_type_of(g, x).dtype);
  tv a = U(IR_ABS, x);
  tv small = CMP(IR_LT, a, K(p.t));
  tv s = bessel_series(g, a, nu, p.nseries), as = bessel_asym(g, a, nu, p.nasym);
  tv r;
  if (scaled) {
    r = SEL(small, MUL(s, U(IR_EXP, U(IR_NEG, a))), as);
  } else { /* e^a overflows where I_nu does, as in PyTorch's kernel */
    r = SEL(small, s, MUL(U(IR_EXP, a), as));
    r = SEL(CMP(IR_EQ, a, K(INFINITY)), a, r);
  }
  if (nu == 1) r = SEL(ew_signbit(g, x), U(IR_NEG, r), r);
  return r;
}

static tv u_i0(ir_graph *g, tv x) { return bessel_i(g, x, 0, false); }
static tv u_i0e(ir_graph *g, tv x) { return bessel_i(g, x, 0, true); }
static tv u_i1(ir_graph *g, tv x) { return bessel_i(g, x, 1, false); }
static tv u_i1e(ir_graph *g, tv x) { return bessel_i(g, x, 1, true); }

static tpuc_status *sp_i0(tpuc_lower_ctx *cx) { return ew_unary(cx, EW_FLOAT, IR_UNARY_COUNT, u_i0); }
static tpuc_status *sp_i0e(tpuc_lower_ctx *cx) { return ew_unary(cx, EW_FLOAT, IR_UNARY_COUNT, u_i0e); }
static tpuc_status *sp_i1(tpuc_lower_ctx *cx) { return ew_unary(cx, EW_FLOAT, IR_UNARY_COUNT, u_i1); }
static tpuc_status *sp_i1e(tpuc_lower_ctx *cx) { return ew_unary(cx, EW_FLOAT, IR_UNARY_COUNT, u_i1e); }

/* ---- polygamma, mvlgamma ---- */

/* Arg `i` (a tensor) in the float dtype it computes in, at the output's shape. */
static tv float_operand(tpuc_lower_ctx *cx, int i) {
  int idx[1] = {i};
  tpuc_dtype d = ew_compute_dtype(cx, idx, 1, EW_FLOAT);
  if (d == EW_UNDEFINED) return IR_NONE;
  return ew_operand(cx, i, ew_out_as(cx, d));
}

/* psi_n(x) for x < -15, where the shift below would need more than M terms
 * (it gave inf, nan or 2.9e37 for trigamma(-26.05) = 403.28): the reflection
 *   psi_n(1 - x) + (-1)^(n+1) psi_n(x) = (-1)^n pi d^n/dx^n cot(pi x),
 * with d^n/dx^n cot(pi x) = pi^n P_n(cot(pi x)), P_0(c) = c and
 * P_{k+1}(c) = -(1 + c^2) P_k'(c) (coefficients made here, n known when
 * lowering). cot has period 1, so it is taken of f = x - round(x), exact in
 * float64. At the poles (integers) the CPU's value: +inf for odd n, -inf for
 * even n. x is float64. */
enum { REFLECT_MAX_N = 24 };

static tv polygamma_reflected(ir_graph *g, int64_t n, tv x) {
  double p[REFLECT_MAX_N + 2] = {0}, q[REFLECT_MAX_N + 2];
  p[1] = 1; /* P_0(c) = c */
  for (int64_t k = 0; k < n; k++) { /* q = -(1 + c^2) p' */
    for (int i = 0; i <= REFLECT_MAX_N + 1; i++) q[i] = 0;
    for (int i = 1; i <= k + 1; i++) {
      double d = (double)i * p[i]; /* coefficient of c^(i-1) in p' */
      q[i - 1] -= d;
      q[i + 1] -= d;
    }
    for (int i = 0; i <= REFLECT_MAX_N + 1; i++) p[i] = q[i];
  }
  tv frac = SUB(x, U(IR_ROUND_EVEN, x));
  /* cos(pi f) as sin(pi (1/2 - |f|)): exactly 0 at half-integers, where cos(pi/2)'s
   * 6e-17 times P_n's coefficients left 3e-13 in psi_4(-1e6 - 0.5) = -6e-24 */
  tv cos_pf = U(IR_SIN, MUL(K(PI), SUB(K(0.5), U(IR_ABS, frac))));
  tv c = DIV(cos_pf, U(IR_SIN, MUL(K(PI), frac)));
  tv poly = K(p[n + 1]);
  for (int64_t i = n; i >= 0; i--) poly = ADD(MUL(poly, c), K(p[i]));
  double pi_pow = PI;
  for (int64_t i = 0; i < n; i++) pi_pow *= PI;
  tv cot_term = MUL(K(n % 2 ? -pi_pow : pi_pow), poly); /* (-1)^n pi^(n+1) P_n */
  tv other = ir_binary(g, IR_POLYGAMMA, K((double)n), SUB(K(1), x));
  tv r = SUB(cot_term, other);
  if (n % 2 == 0) r = ir_unary(g, IR_NEG, r); /* times (-1)^(n+1) */
  tv pole = K(n % 2 ? INFINITY : -INFINITY);
  return SEL(CMP(IR_EQ, frac, K(0)), pole, r);
}

/* (n, self) for polygamma/polygamma.out; (self, n) for the method polygamma_ */
static tpuc_status *polygamma_at(tpuc_lower_ctx *cx, int n_arg, int self_arg) {
  ir_graph *g = cx->g;
  int64_t n = lx_int(cx, n_arg, -1);
  if (n < 0) return lx_unimplemented(cx, "polygamma: n < 0");
  tv x = float_operand(cx, self_arg);
  if (x == IR_NONE) return lx_unimplemented(cx, "input dtype");
  if (n == 0) { /* digamma, with PyTorch's signed infinities at +-0 */
    tv inf = SEL(ew_signbit(g, x), K(INFINITY), K(-INFINITY));
    return ew_finish(cx, SEL(CMP(IR_EQ, x, K(0)), inf, U(IR_DIGAMMA, x)));
  }
  /* float32 computes in float64 and rounds once: near the poles the shifted
   * sum below cancels, and in float32 it was 2e-5 off the CPU (digamma's
   * float32 gradient, trigamma) */
  tpuc_dtype xd = ir_type_of(g, x).dtype;
  if (xd != TPUC_F64) x = ir_convert(g, x, TPUC_F64);
  /* XLA's polygamma is Hurwitz zeta, defined for x > 0 only (NaN below);
   * PyTorch's sums from x itself, so it is defined for every x but the poles.
   * The recurrence psi_n(x) = psi_n(x + M) + (-1)^(n+1) n! sum_{j<M} (x+j)^-(n+1)
   * carries x > -M to where XLA's is defined (OpInfo's samples: |x| < 10);
   * at the poles (x = 0, -1, ..) its term is the CPU's infinity. */
  enum { M = 16 };
  double fact = 1;
  for (int64_t i = 2; i <= n; i++) fact *= (double)i;
  tv sum = K(0), e = K((double)-(n + 1));
  for (int j = 0; j < M; j++) sum = ADD(sum, ir_binary(g, IR_POW, ADD(x, K(j)), e));
  tv shifted = ir_binary(g, IR_POLYGAMMA, K((double)n), ADD(x, K(M)));
  tv r = ADD(shifted, MUL(K(n % 2 ? fact : -fact), sum));
  r = SEL(CMP(IR_LT, x, K(M)), r, ir_binary(g, IR_POLYGAMMA, K((double)n), x));
  if (n <= REFLECT_MAX_N) r = SEL(CMP(IR_LT, x, K(1 - M)), polygamma_reflected(g, n, x), r);
  return ew_finish(cx, ir_convert(g, r, xd));
}
static tpuc_status *sp_polygamma(tpuc_lower_ctx *cx) { return polygamma_at(cx, 0, 1); }
static tpuc_status *sp_polygamma_(tpuc_lower_ctx *cx) { return polygamma_at(cx, 1, 0); }

/* (self, p): sum_{i<p} lgamma(x - i/2) + p(p-1)/4 log(pi). PyTorch 2.13's CPU
 * kernel no longer checks x > (p-1)/2 (outside it lgamma's poles give inf), so
 * neither does this. */
static tpuc_status *sp_mvlgamma(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  int64_t p = lx_int(cx, 1, 0);
  if (p < 1) return lx_unimplemented(cx, "mvlgamma: p < 1");
  if (p > 64) return lx_unimplemented(cx, "mvlgamma: p > 64 (unrolled sum)");
  tv x = float_operand(cx, 0);
  if (x == IR_NONE) return lx_unimplemented(cx, "input dtype");
  tv r = K((double)p * (double)(p - 1) / 4.0 * log(PI));
  for (int64_t i = 0; i < p; i++) r = ADD(r, U(IR_LGAMMA, SUB(x, K((double)i / 2.0))));
  return ew_finish(cx, r);
}

/* ---- IEEE bit operations ---- */

/* The signed integer type of a float's width, and its bit layout. */
typedef struct {
  tpuc_dtype bits;
  int mant;      /* explicit mantissa bits */
  int64_t bias;  /* exponent bias */
  int64_t emask; /* exponent field, unshifted (all ones) */
} float_layout;

static bool layout_of(tpuc_dtype d, float_layout *l) {
  switch (d) {
    case TPUC_F64: *l = (float_layout){TPUC_S64, 52, 1023, 0x7ff}; return true;
    case TPUC_F32: *l = (float_layout){TPUC_S32, 23, 127, 0xff}; return true;
    case TPUC_F16: *l = (float_layout){TPUC_S16, 10, 15, 0x1f}; return true;
    case TPUC_BF16: *l = (float_layout){TPUC_S16, 7, 127, 0xff}; return true;
    default: return false;
  }
}

static tv bits_of(ir_graph *g, tv x, tpuc_dtype bd) {
  return ir_bitcast(g, x, ir_with_dtype(ir_type_of(g, x), bd));
}
static tv int_like(ir_graph *g, tv b, int64_t v) { return ir_splat_i64(g, ir_type_of(g, b), v); }

/* The XLA CPU plugin runs with subnormals flushed (denormals-are-zero): a float
 * comparison or product sees a subnormal as 0. So these two decide everything
 * on the integer bits, where subnormals are ordinary values. */

/* The sign bit of the layout's integer (its lowest value). */
static int64_t sign_bit(const float_layout *l) {
  return INT64_MIN >> (64 - 8 * (int)tpuc_dtype_size(l->bits));
}
/* The bits without the sign: |x|'s bits. */
static tv magnitude(ir_graph *g, tv b, const float_layout *l) {
  return ir_binary(g, IR_AND, b, int_like(g, b, ~sign_bit(l)));
}
/* The sign-magnitude bits b as an integer ordered like the floats (+-0: 0). */
static tv ordered(ir_graph *g, tv b, const float_layout *l) {
  tv zero = int_like(g, b, 0), mag = magnitude(g, b, l);
  return ir_select(g, ir_compare(g, IR_LT, b, zero), ir_binary(g, IR_SUB, zero, mag), mag);
}
static tv is_nan_bits(ir_graph *g, tv b, const float_layout *l) {
  return ir_compare(g, IR_GT, magnitude(g, b, l), int_like(g, b, l->emask << l->mant));
}

/* nextafter(x, y): the float after x towards y, bit-exact in x's dtype. */
static tpuc_status *sp_nextafter(tpuc_lower_ctx *cx) {
  int idx[2] = {0, 1};
  tpuc_dtype d = ew_compute_dtype(cx, idx, 2, EW_EXACT);
  float_layout l;
  if (d == EW_UNDEFINED || !layout_of(d, &l)) return lx_unimplemented(cx, "operand dtypes");
  ir_graph *g = cx->g;
  ir_type t = ew_out_as(cx, d);
  tv x = ew_operand(cx, 0, t), y = ew_operand(cx, 1, t);
  tv b = bits_of(g, x, l.bits), by = bits_of(g, y, l.bits);
  tv kx = ordered(g, b, &l), ky = ordered(g, by, &l), zero = int_like(g, b, 0);
  /* away from zero when moving outwards: x > 0 and y > x, or x < 0 and y < x */
  tv up = ir_compare(g, IR_EQ, CMP(IR_LT, kx, ky), CMP(IR_GT, kx, zero));
  tv nb = SEL(up, ADD(b, int_like(g, b, 1)), SUB(b, int_like(g, b, 1)));
  /* from zero: the smallest subnormal with y's sign */
  tv tiny = SEL(CMP(IR_LT, ky, zero), int_like(g, b, sign_bit(&l) | 1), int_like(g, b, 1));
  nb = SEL(CMP(IR_EQ, kx, zero), tiny, nb);
  nb = SEL(CMP(IR_EQ, kx, ky), by, nb);
  tv r = ir_bitcast(g, nb, t);
  r = SEL(ir_binary(g, IR_OR, is_nan_bits(g, b, &l), is_nan_bits(g, by, &l)), ADD(x, y), r);
  return ew_finish(cx, r);
}

/* frexp(self) -> (mantissa, exponent int32): x = m 2^e, 0.5 <= |m| < 1;
 * 0, inf and NaN give (x, 0), as the C library PyTorch calls. A subnormal's
 * mantissa field, converted to a float (exact: it has fewer bits than the
 * dtype's mantissa), is a normal number whose exponent is shifted back. */
static tpuc_status *sp_frexp(tpuc_lower_ctx *cx) {
  tpuc_dtype d = ew_arg_dtype(cx, 0);
  float_layout l;
  if (cx->noutputs < 2 || !layout_of(d, &l)) return lx_unimplemented(cx, "input dtype");
  ir_graph *g = cx->g;
  tv x = ew_operand(cx, 0, ew_out_as(cx, d));
  ir_type t = ir_type_of(g, x);
  tv b = bits_of(g, x, l.bits);
  tv m = int_like(g, b, l.mant), zero = int_like(g, b, 0);
  tv field = ir_binary(g, IR_AND, ir_binary(g, IR_SHR_ARITH, b, m), int_like(g, b, l.emask));
  tv frac = ir_binary(g, IR_AND, b, int_like(g, b, ((int64_t)1 << l.mant) - 1));
  tv sub = ir_binary(g, IR_AND, CMP(IR_EQ, field, zero), CMP(IR_NE, frac, zero));
  /* subnormal: frac as a (normal) float, its bits and exponent field */
  tv fb = bits_of(g, ir_convert(g, frac, t.dtype), l.bits);
  tv ffield = ir_binary(g, IR_AND, ir_binary(g, IR_SHR_ARITH, fb, m), int_like(g, b, l.emask));
  tv e = SEL(sub, SUB(ffield, int_like(g, b, l.bias - 1 + l.bias - 1 + l.mant)), SUB(field, int_like(g, b, l.bias - 1)));
  tv src = SEL(sub, ir_binary(g, IR_OR, fb, ir_binary(g, IR_AND, b, int_like(g, b, sign_bit(&l)))), b);
  /* keep sign and mantissa, exponent field bias - 1 (the binade [0.5, 1)) */
  int64_t keep = ~(l.emask << l.mant);
  tv mb = ir_binary(g, IR_OR, ir_binary(g, IR_AND, src, int_like(g, b, keep)),
                    int_like(g, b, (l.bias - 1) << l.mant));
  tv mant = ir_bitcast(g, mb, t);
  /* zero: field and fraction 0 (not |bits| == 0, which LLVM turns into a float
   * compare with 0 that the flushed subnormals then pass) */
  tv is_zero = ir_binary(g, IR_AND, CMP(IR_EQ, field, zero), CMP(IR_EQ, frac, zero));
  tv plain = ir_binary(g, IR_OR, is_zero, CMP(IR_EQ, field, int_like(g, b, l.emask)));
  mant = SEL(plain, x, mant);
  e = SEL(plain, zero, e);
  cx->results[0] = lx_coerce(g, mant, cx->out_types[0]);
  cx->results[1] = lx_coerce(g, ir_convert(g, e, TPUC_S32), cx->out_types[1]);
  return NULL;
}

/* ---- gcd, lcm ---- */

/* Euclid's steps for the longest chain in dtype d (consecutive Fibonacci
 * numbers below its maximum), plus one. */
static int euclid_steps(tpuc_dtype d) {
  int bits = (int)tpuc_dtype_size(d) * 8;
  return bits >= 64 ? 93 : bits >= 32 ? 47 : bits >= 16 ? 24 : 13;
}

/* gcd(|a|, |b|) as PyTorch's calc_gcd: while a != 0: (a, b) = (b % a, a). */
static tv int_abs(ir_graph *g, tv a) {
  return ir_is_unsigned(ir_type_of(g, a).dtype) ? a : U(IR_ABS, a);
}
static tv gcd_of(ir_graph *g, tv a, tv b) {
  a = int_abs(g, a);
  b = int_abs(g, b);
  tv zero = int_like(g, a, 0), one = int_like(g, a, 1);
  for (int i = euclid_steps(ir_type_of(g, a).dtype); i > 0; i--) {
    tv nz = CMP(IR_NE, a, zero);
    tv r = ir_binary(g, IR_REM, b, SEL(nz, a, one));
    tv na = SEL(nz, r, a);
    b = SEL(nz, a, b);
    a = na;
  }
  return b;
}

static tv b_gcd(ir_graph *g, tv a, tv b) { return gcd_of(g, a, b); }
static tv b_lcm(ir_graph *g, tv a, tv b) {
  tv gc = gcd_of(g, a, b);
  tv zero = int_like(g, a, 0);
  tv z = CMP(IR_EQ, gc, zero);
  /* C++ promotes 8- and 16-bit integers to int: the product and its abs are
   * taken there and truncated once, as PyTorch's kernel */
  tpuc_dtype d = ir_type_of(g, a).dtype;
  tpuc_dtype wd = tpuc_dtype_size(d) < 4 ? TPUC_S32 : d;
  tv q = ir_convert(g, DIV(a, SEL(z, int_like(g, a, 1), gc)), wd);
  tv l = ir_convert(g, int_abs(g, MUL(q, ir_convert(g, b, wd))), d);
  return SEL(z, zero, l);
}

static bool int_operands(tpuc_lower_ctx *cx) {
  tpuc_dtype a = ew_arg_dtype(cx, 0), b = ew_arg_dtype(cx, 1);
  return a != TPUC_PRED && b != TPUC_PRED && ir_is_int(a) && ir_is_int(b);
}
static tpuc_status *sp_gcd(tpuc_lower_ctx *cx) {
  if (!int_operands(cx)) return lx_unimplemented(cx, "gcd: integer operands");
  return ew_binary(cx, 0, 1, EW_EXACT | EW_INTEGER, b_gcd);
}
static tpuc_status *sp_lcm(tpuc_lower_ctx *cx) {
  if (!int_operands(cx)) return lx_unimplemented(cx, "lcm: integer operands");
  return ew_binary(cx, 0, 1, EW_EXACT | EW_INTEGER, b_lcm);
}

/* ---- the table ---- */

#define E(name, fn) {"aten::" name, fn, 0}
#define E3(base, fn) E(base, fn), E(base "_", fn), E(base ".out", fn)

extern const tpuc_lowering tpuc_lowerings_special[];
const tpuc_lowering tpuc_lowerings_special[] = {
    E3("i0", sp_i0),
    E("special_i0e", sp_i0e),
    E("special_i0e.out", sp_i0e),
    E("special_i1", sp_i1),
    E("special_i1.out", sp_i1),
    E("special_i1e", sp_i1e),
    E("special_i1e.out", sp_i1e),
    E("special_modified_bessel_i0", sp_i0),
    E("special_modified_bessel_i0.out", sp_i0),
    E("special_modified_bessel_i1", sp_i1),
    E("special_modified_bessel_i1.out", sp_i1),
    E("polygamma", sp_polygamma),
    E("polygamma.out", sp_polygamma),
    E("polygamma_", sp_polygamma_),
    E3("mvlgamma", sp_mvlgamma),
    E3("nextafter", sp_nextafter),
    E("frexp.Tensor", sp_frexp),
    E("frexp.Tensor_out", sp_frexp),
    E3("gcd", sp_gcd),
    E3("lcm", sp_lcm),
    {NULL, NULL, 0},
};
