/* special_bessel.c — the modified Bessel functions of the second kind K0, K1
 * and their scaled forms e^x K0(x), e^x K1(x) (torch.special's
 * modified_bessel_k0/k1, scaled_modified_bessel_k0/k1), written from three
 * representations, each used where it converges fast:
 *
 *   x <= 1:  the series, t = x^2/4, H_k the harmonic numbers,
 *            K0 = -(log(x/2) + gamma) I0(x) + sum_{k>=1} t^k/(k!)^2 H_k,
 *            K1 = 1/x + log(x/2) I1(x)
 *                 - x/4 sum_{k>=0} (psi(k+1) + psi(k+2)) t^k/(k!(k+1)!),
 *            14 terms;
 *   1 < x <= 18: e^x K_nu(x) = int_0^inf exp(-x (cosh t - 1)) cosh(nu t) dt
 *            by the trapezoidal rule, step 0.12, 41 nodes (the integrand is
 *            below 1e-17 of the integral past t = 4.8 for x >= 1, and the
 *            rule converges geometrically in 1/step for this entire
 *            integrand);
 *   x > 18:  Hankel's expansion e^x K_nu(x) ~ sqrt(pi/2x) sum_k
 *            prod_{j<=k} (4 nu^2 - (2j-1)^2) / (8 j x), 25 terms (error about
 *            e^-2x).
 * Against PyTorch's float64 kernels over [1e-300, 500] the relative
 * difference is below 1.5e-15 (measured before writing this file, with the
 * same formulas in NumPy). Everything computes in float64, float32 inputs
 * too, which the XLA CPU plugin has (a TPU has not). Edges as the CPU: x = 0
 * gives inf (a subnormal x too: the plugin reads it as 0, the CPU does not), x < 0 and NaN give NaN, +inf gives 0.
 *
 * The Bessel functions of the first and second kind (bessel_j0/j1/y0/y1) are
 * not here: PyTorch's float64 kernels differ from the true values by up to
 * 4.6e-7 near x = 5 (their Cephes branch point), so an accurate lowering
 * fails the CPU comparison there; matching needs their coefficient tables. */
#include <math.h>

#include "elementwise.h"

#define PI 3.14159265358979323846
#define EULER_GAMMA 0.57721566490153286061

#include "ew_shorthand.h"

/* K_nu(x) for 0 < x <= 1 (unscaled) */
static tv k_series(ir_graph *g, tv x, int nu) {
  tv t = MUL(MUL(x, x), K(0.25));
  tv lg = U(IR_LOG, MUL(x, K(0.5)));
  tv term = K(1), i_sum = K(1), s = K(0);
  double h = 0;
  if (nu == 0) {
    for (int k = 1; k < 14; k++) {
      term = MUL(term, MUL(t, K(1.0 / ((double)k * k))));
      h += 1.0 / k;
      i_sum = ADD(i_sum, term);
      s = ADD(s, MUL(term, K(h)));
    }
    return ADD(MUL(U(IR_NEG, ADD(lg, K(EULER_GAMMA))), i_sum), s);
  }
  s = K(1 - 2 * EULER_GAMMA); /* k = 0: psi(1) + psi(2) */
  for (int k = 1; k < 14; k++) {
    term = MUL(term, MUL(t, K(1.0 / ((double)k * (k + 1)))));
    h += 1.0 / k;
    i_sum = ADD(i_sum, term);
    s = ADD(s, MUL(term, K(-2 * EULER_GAMMA + 2 * h + 1.0 / (k + 1))));
  }
  tv half = MUL(x, K(0.5));
  return SUB(ADD(DIV(K(1), x), MUL(MUL(i_sum, half), lg)), MUL(MUL(x, K(0.25)), s));
}

/* e^x K_nu(x) for x >= 1, by the trapezoidal rule */
static tv k_trapezoid(ir_graph *g, tv x, int nu) {
  const double h = 0.12;
  tv s = K(0.5);
  for (int j = 1; j <= 40; j++) {
    double t = j * h;
    tv e = U(IR_EXP, MUL(x, K(1 - cosh(t))));
    s = ADD(s, nu ? MUL(e, K(cosh(t))) : e);
  }
  return MUL(s, K(h));
}

/* e^x K_nu(x), x large (asymptotic) */
static tv k_asym(ir_graph *g, tv x, int nu) {
  tv y = DIV(K(1), x), r = K(1);
  for (int k = 25; k >= 1; k--) {
    double b = (4.0 * nu * nu - (double)(2 * k - 1) * (2 * k - 1)) / (8.0 * k);
    r = ADD(K(1), MUL(MUL(K(b), y), r));
  }
  return MUL(r, U(IR_SQRT, DIV(K(PI / 2), x)));
}

#define TINY 2.2250738585072014e-308 /* the smallest normal float64 */

static tv bessel_k(ir_graph *g, tv x, int nu, bool scaled) {
  tv xs = ew_min(g, ew_max(g, x, K(TINY)), K(1)); /* each branch's argument in its range */
  tv xm = ew_min(g, ew_max(g, x, K(1)), K(18)), xl = ew_max(g, x, K(18));
  tv ser = k_series(g, xs, nu), mid = k_trapezoid(g, xm, nu), big = k_asym(g, xl, nu);
  if (scaled) ser = MUL(ser, U(IR_EXP, xs));
  else {
    mid = MUL(mid, U(IR_EXP, U(IR_NEG, xm)));
    big = MUL(big, U(IR_EXP, U(IR_NEG, xl)));
  }
  tv r = SEL(CMP(IR_LE, x, K(1)), ser, SEL(CMP(IR_LE, x, K(18)), mid, big));
  /* 0 (and subnormals, which the XLA CPU plugin reads as 0) */
  r = SEL(CMP(IR_LT, x, K(TINY)), K(INFINITY), r);
  return SEL(OR(CMP(IR_LT, x, K(0)), ew_isnan(g, x)), K(NAN), r);
}

static tv k0(ir_graph *g, tv x) { return bessel_k(g, x, 0, false); }
static tv k1(ir_graph *g, tv x) { return bessel_k(g, x, 1, false); }
static tv k0e(ir_graph *g, tv x) { return bessel_k(g, x, 0, true); }
static tv k1e(ir_graph *g, tv x) { return bessel_k(g, x, 1, true); }

static tpuc_status *unary64(tpuc_lower_ctx *cx, tv (*fn)(ir_graph *, tv)) {
  int idx[1] = {0};
  tpuc_dtype c = ew_compute_dtype(cx, idx, 1, EW_FLOAT);
  if (c != TPUC_F32 && c != TPUC_F64)
    return lx_unimplemented(cx, "input dtype (the CPU has float32 and float64 kernels)");
  ir_graph *g = cx->g;
  tv x = ew_operand(cx, 0, ew_out_as(cx, c));
  return ew_finish(cx, ir_convert(g, fn(g, ir_convert(g, x, TPUC_F64)), c));
}
static tpuc_status *sp_k0(tpuc_lower_ctx *cx) { return unary64(cx, k0); }
static tpuc_status *sp_k1(tpuc_lower_ctx *cx) { return unary64(cx, k1); }
static tpuc_status *sp_k0e(tpuc_lower_ctx *cx) { return unary64(cx, k0e); }
static tpuc_status *sp_k1e(tpuc_lower_ctx *cx) { return unary64(cx, k1e); }

#define E(name, fn) {"aten::special_" name, fn, 0}
#define E2(base, fn) E(base, fn), E(base ".out", fn)

extern const tpuc_lowering tpuc_lowerings_special_bessel[];
const tpuc_lowering tpuc_lowerings_special_bessel[] = {
    E2("modified_bessel_k0", sp_k0),
    E2("modified_bessel_k1", sp_k1),
    E2("scaled_modified_bessel_k0", sp_k0e),
    E2("scaled_modified_bessel_k1", sp_k1e),
    {NULL, NULL, 0},
};
