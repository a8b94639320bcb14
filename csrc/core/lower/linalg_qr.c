/* linalg_qr.c — lowerings of the Householder QR family: geqrf,
 * linalg_householder_product (LAPACK's orgqr) and linalg_qr, all batched over
 * the leading dims, real f32/f64 only.
 *
 * StableHLO has no QR op, so the factorisation is written out as LAPACK's
 * unblocked algorithms (dgeqr2 with dlarfg's reflector, dorg2r), one step per
 * column, run by lo_run_steps (linalg_steps.c): unrolled up to QR_UNROLL_MAX
 * steps, above that in one stablehlo.while with the step index as the
 * dynamic_slice start of the column, so any size compiles to a program of the
 * same size (a 512 x 512 float32 linalg.qr compiles in about a second on the
 * XLA CPU plugin). Every step is dynamic slices, selects, elementwise ops and
 * reductions over the whole matrix (v^T A as a product and a row sum, exact
 * f32 on a TPU too, whose default f32 dot precision is lower): O(M N k) work,
 * ops that the XLA CPU plugin and a TPU compiler both compile, and no LAPACK
 * custom call (which exists only on the CPU). Only the CPU plugin was run; the
 * TPU claim is from the ops used.
 *
 * Conventions are LAPACK's exactly, because PyTorch's CPU results are LAPACK's
 * and are compared as they are (no sign normalisation): reflector
 * H = I - tau v v^T with v[0] = 1, beta = -sign(alpha) * ||(alpha, x)||,
 * tau = (beta - alpha) / beta, v = x * (1 / (alpha - beta)); tau = 0 (H = I)
 * when x is zero. geqrf returns R on and above the diagonal and the v's below
 * it; Q = H_0 H_1 ... H_{k-1} applied to the identity's first columns, built
 * in reverse order as dorg2r does. Differences from LAPACK: dnrm2/dlapy2 scale
 * against overflow, here the column is scaled by its largest magnitude first
 * (the same protection), and dlarfg's rescaling of a beta below the smallest
 * normal number is not done (such a column is then less accurate).
 *
 * geqrf itself has no Meta kernel in PyTorch 2.13: the glue supplies one
 * (csrc/torch/fallback.cpp), so its outputs can be sized. ormqr applies the
 * reflectors through the explicit Q (one product).
 *
 * Backward: PyTorch's linalg_qr_backward is matmuls, triangular solves and
 * triangle masks, householder_product_backward products and reflector
 * updates: all lowered (tests/test_ops_linalg_qr_native.py runs both with no
 * fallback). */
#include "lower_ops.h"

/* Up to this many reflector steps are unrolled (a constant step index in
 * each); above it they run in one stablehlo.while (lo_run_steps). Unrolled,
 * each step adds about thirty ops and the XLA CPU compile time grows with
 * them; the loop's program has a constant size. Measured (XLA CPU plugin, a
 * loaded 2-core machine, linalg.qr of a batch of 64 n x n, first call / median
 * later call): n = 4 unrolled 1.4 s / 0.20 ms, loop 0.3 s / 0.14 ms; n = 8
 * 4.1 s / 0.90 ms vs 0.3 s / 0.20 ms; n = 16 9.2 s / 4.2 ms vs 0.6 s / 0.5 ms;
 * n = 32 29 s / 28 ms vs 0.4 s / 12 ms. The unrolled form stays for the tiny
 * matrices (OpInfo's samples, the tests' 6 x 4) so that both remain tested. */
#define QR_UNROLL_MAX 4

static bool qr_dtype(tpuc_dtype d) { return d == TPUC_F32 || d == TPUC_F64; }

/* x[..., r0:r1, c0:c1]. */
static tv sub(ir_graph *g, tv x, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  ir_type t = ir_type_of(g, x);
  int64_t lo[TPUC_MAX_DIMS], hi[TPUC_MAX_DIMS], st[TPUC_MAX_DIMS];
  for (int i = 0; i < t.ndim; i++) {
    lo[i] = 0;
    hi[i] = t.dims[i];
    st[i] = 1;
  }
  lo[t.ndim - 2] = r0;
  hi[t.ndim - 2] = r1;
  lo[t.ndim - 1] = c0;
  hi[t.ndim - 1] = c1;
  return ir_slice(g, x, lo, hi, st);
}

/* The type t with its last two dims set to r x c. */
static ir_type mat_type(ir_type t, int64_t r, int64_t c) {
  t.dims[t.ndim - 2] = r;
  t.dims[t.ndim - 1] = c;
  return t;
}

/* s32 row (dim -2) or column (dim -1) index of type t compared with j (rank-0 s32). */
static tv index_cmp(ir_graph *g, ir_type t, bool rows, ir_cmp c, tv j) {
  ir_type it = ir_with_dtype(t, TPUC_S32);
  return ir_compare(g, c, ir_iota(g, it, t.ndim - (rows ? 2 : 1)), lo_s32_like(g, j, it));
}

/* x [..., R, C] broadcast to t's shape (R, C each 1 or t's). */
static tv bcast(ir_graph *g, tv x, ir_type t) { return lx_broadcast_to(g, x, t.ndim, t.dims); }

/* Sum over rows, kept as a size-1 dim: [..., M, C] -> [..., 1, C]. */
static tv sum_rows(ir_graph *g, tv x) {
  int64_t d = lo_rank(g, x) - 2;
  return lo_sum(g, x, &d, 1, true);
}

/* One dgeqr2 step on a [..., M, N] in LAPACK's layout: the reflector of column
 * j (rows >= j) applied to the columns right of j, column j replaced by beta
 * on the diagonal and v below it. Returns the new matrix; *tau_out [..., 1, 1]. */
static tv geqr2_step(ir_graph *g, tv a, tv j, tv *tau_out) {
  ir_type t = ir_type_of(g, a);
  int64_t m = t.dims[t.ndim - 2], n = t.dims[t.ndim - 1];
  ir_type ct = mat_type(t, m, 1), st = mat_type(t, 1, 1);
  tv zero_c = ir_splat(g, ct, 0.0), zero_s = ir_splat(g, st, 0.0), one_s = ir_splat(g, st, 1.0);
  tv c = lo_mat_dslice(g, a, ir_s32(g, 0), j, m, 1);
  tv below = index_cmp(g, ct, true, IR_GT, j), at = index_cmp(g, ct, true, IR_EQ, j);
  tv alpha = lo_mat_dslice(g, a, j, j, 1, 1);
  tv x = ir_select(g, below, c, zero_c);
  /* ||(alpha, x)|| and ||x|| scaled by the largest magnitude (no overflow) */
  int64_t rd = t.ndim - 2;
  tv xmax = lo_reduce(g, ir_unary(g, IR_ABS, x), IR_RED_MAX, &rd, 1, true);
  tv scale = ir_binary(g, IR_MAX, xmax, ir_unary(g, IR_ABS, alpha));
  tv safe = ir_select(g, ir_compare(g, IR_EQ, scale, zero_s), one_s, scale);
  tv xs = ir_binary(g, IR_DIV, x, bcast(g, safe, ct));
  tv xn2 = sum_rows(g, ir_binary(g, IR_MUL, xs, xs));
  tv as = ir_binary(g, IR_DIV, alpha, safe);
  tv h = ir_binary(g, IR_MUL, safe, ir_unary(g, IR_SQRT, ir_binary(g, IR_ADD, xn2, ir_binary(g, IR_MUL, as, as))));
  tv beta = ir_select(g, ir_compare(g, IR_GE, alpha, zero_s), ir_unary(g, IR_NEG, h), h);
  tv trivial = ir_compare(g, IR_EQ, xmax, zero_s); /* x == 0: H = I */
  beta = ir_select(g, trivial, alpha, beta);
  tv sbeta = ir_select(g, trivial, one_s, beta);
  tv tau = ir_select(g, trivial, zero_s, ir_binary(g, IR_DIV, ir_binary(g, IR_SUB, beta, alpha), sbeta));
  tv diff = ir_select(g, trivial, one_s, ir_binary(g, IR_SUB, alpha, beta));
  tv rcp = ir_binary(g, IR_DIV, one_s, diff);
  tv vx = ir_binary(g, IR_MUL, x, bcast(g, rcp, ct));
  tv v = ir_select(g, at, ir_splat(g, ct, 1.0), vx);
  /* columns right of j: A - tau v (v^T A) */
  ir_type rt = mat_type(t, 1, n);
  tv w = sum_rows(g, ir_binary(g, IR_MUL, bcast(g, v, t), a)); /* v^T A: [..., 1, N] */
  tv upd = ir_binary(g, IR_MUL, bcast(g, v, t), bcast(g, ir_binary(g, IR_MUL, bcast(g, tau, rt), w), t));
  tv right = index_cmp(g, t, false, IR_GT, j);
  a = ir_select(g, right, ir_binary(g, IR_SUB, a, upd), a);
  /* column j: rows above unchanged, beta on the diagonal, v below */
  tv col = ir_select(g, below, vx, ir_select(g, at, bcast(g, beta, ct), c));
  a = ir_select(g, index_cmp(g, t, false, IR_EQ, j), bcast(g, col, t), a);
  *tau_out = tau;
  return a;
}

/* Step j of dgeqr2 on st = {a, taus [..., 1, K]}. */
static void geqrf_step(ir_graph *g, tv *st, tv j) {
  tv tau;
  st[0] = geqr2_step(g, st[0], j, &tau);
  st[1] = lo_mat_dput(g, st[1], tau, ir_s32(g, 0), j);
}

/* Declared in lower_ops.h. */
tv lo_geqrf(ir_graph *g, tv a, tv *tau) {
  ir_type t = ir_type_of(g, a);
  int64_t m = t.dims[t.ndim - 2], n = t.dims[t.ndim - 1], k = m < n ? m : n;
  ir_type tt = t;
  tt.ndim = t.ndim - 1;
  tt.dims[tt.ndim - 1] = k;
  if (k == 0) {
    *tau = ir_splat(g, tt, 0.0);
    return a;
  }
  tv st[2] = {a, ir_splat(g, mat_type(t, 1, k), 0.0)};
  lo_run_steps(g, st, 2, k, QR_UNROLL_MAX, geqrf_step);
  *tau = ir_reshape(g, st[1], tt.ndim, tt.dims);
  return st[0];
}

/* Step c of dorg2r on st = {q [..., M, qcols], v [..., M, >= k], tau [..., 1, >= k],
 * k - 1 as a rank-0 s32}: H_i applied to q, i = k - 1 - c (the reflectors in reverse). */
static void orgqr_step(ir_graph *g, tv *st, tv c) {
  tv q = st[0], v = st[1];
  ir_type vt = ir_type_of(g, v), qt = ir_type_of(g, q);
  int64_t m = vt.dims[vt.ndim - 2];
  ir_type ct = mat_type(vt, m, 1);
  tv z = ir_s32(g, 0), i = ir_binary(g, IR_SUB, st[3], c);
  tv ti = lo_mat_dslice(g, st[2], z, i, 1, 1);
  tv col = lo_mat_dslice(g, v, z, i, m, 1);
  tv vi = ir_select(g, index_cmp(g, ct, true, IR_GT, i), col,
                    ir_convert(g, index_cmp(g, ct, true, IR_EQ, i), vt.dtype));
  tv w = sum_rows(g, ir_binary(g, IR_MUL, bcast(g, vi, qt), q)); /* v^T Q: [..., 1, qcols] */
  tv tw = ir_binary(g, IR_MUL, bcast(g, ti, ir_type_of(g, w)), w);
  tv upd = ir_binary(g, IR_MUL, bcast(g, vi, qt), bcast(g, tw, qt));
  /* columns left of i are identity columns H_i leaves alone */
  st[0] = ir_select(g, index_cmp(g, qt, false, IR_GE, i), ir_binary(g, IR_SUB, q, upd), q);
}

/* Declared in lower_ops.h. */
tv lo_householder_q(ir_graph *g, tv v, tv tau, int64_t k, int64_t qcols) {
  ir_type vt = ir_type_of(g, v);
  int64_t m = vt.dims[vt.ndim - 2];
  ir_type qt = mat_type(vt, m, qcols);
  tv q = ir_convert(g, ir_compare(g, IR_EQ, ir_iota(g, ir_with_dtype(qt, TPUC_S64), qt.ndim - 2),
                                  ir_iota(g, ir_with_dtype(qt, TPUC_S64), qt.ndim - 1)),
                    vt.dtype);
  ir_type taut = ir_type_of(g, tau);
  ir_type t2 = taut; /* [..., 1, K] */
  t2.ndim = taut.ndim + 1;
  t2.dims[t2.ndim - 2] = 1;
  t2.dims[t2.ndim - 1] = taut.dims[taut.ndim - 1];
  tv st[4] = {q, v, ir_reshape(g, tau, t2.ndim, t2.dims), ir_s32(g, k - 1)};
  lo_run_steps(g, st, 4, k, QR_UNROLL_MAX, orgqr_step);
  return st[0];
}

/* Zeros for every output when the batch is empty; true when done. */
static bool empty_batch(tpuc_lower_ctx *cx, ir_type in) {
  int64_t b = 1;
  for (int i = 0; i < in.ndim - 2; i++) b *= in.dims[i];
  if (b != 0) return false;
  for (int i = 0; i < cx->noutputs; i++) cx->results[i] = ir_splat(cx->g, cx->out_types[i], 0.0);
  return true;
}

/* The checks every lowering here makes on input a [..., M, N]. */
static tpuc_status *check_input(tpuc_lower_ctx *cx, ir_type in) {
  if (!qr_dtype(in.dtype)) return lx_unimplemented(cx, "QR: real f32/f64 only");
  if (in.ndim < 2) return lx_unimplemented(cx, "QR: a matrix or a batch of them");
  return NULL;
}

/* linalg_householder_product(input [..., M, N], tau [..., K]) -> [..., M, N]. */
static tpuc_status *l_householder_product(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv v = lx_tensor(cx, 0), tau = lx_tensor(cx, 1);
  ir_type vt = ir_type_of(g, v), tt = ir_type_of(g, tau);
  if (!qr_dtype(ot.dtype)) return lx_unimplemented(cx, "householder_product: real f32/f64 only");
  int64_t k = tt.dims[tt.ndim - 1];
  if (vt.ndim < 2) return lx_unimplemented(cx, "householder_product: not a matrix");
  if (ir_numel(&ot) == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  v = lx_coerce(g, v, ot);
  tau = ir_convert(g, tau, ot.dtype);
  cx->results[0] = lo_householder_q(g, v, tau, k, vt.dims[vt.ndim - 1]);
  return NULL;
}

/* linalg_qr(A, mode) -> (Q, R); the mode is read off the output shapes:
 * Q [..., M, M] (complete), [..., M, k] (reduced) or empty ("r"). */
static tpuc_status *l_linalg_qr(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv a = lx_tensor(cx, 0);
  ir_type in = ir_type_of(g, a);
  tpuc_status *st = check_input(cx, in);
  if (st) return st;
  if (cx->noutputs < 2) return lx_unimplemented(cx, "linalg_qr: two outputs expected");
  if (empty_batch(cx, in)) return NULL;
  int64_t m = in.dims[in.ndim - 2], n = in.dims[in.ndim - 1], k = m < n ? m : n;
  ir_type qt = lx_out(cx, 0), rt = lx_out(cx, 1);
  tv tau;
  tv f = lo_geqrf(g, a, &tau);
  int64_t rrows = rt.dims[rt.ndim - 2];
  tv r = sub(g, f, 0, rrows, 0, n);
  ir_type rft = ir_type_of(g, r);
  r = ir_select(g, ir_compare(g, IR_LE, ir_iota(g, ir_with_dtype(rft, TPUC_S64), rft.ndim - 2),
                              ir_iota(g, ir_with_dtype(rft, TPUC_S64), rft.ndim - 1)),
                r, ir_splat(g, rft, 0.0));
  cx->results[1] = lo_out(g, r, rt);
  if (ir_numel(&qt) == 0 || qt.ndim != in.ndim) {
    cx->results[0] = ir_splat(g, qt, 0.0); /* mode "r": Q is empty */
    return NULL;
  }
  cx->results[0] = lo_out(g, lo_householder_q(g, f, tau, k, qt.dims[qt.ndim - 1]), qt);
  return NULL;
}

/* geqrf(A) -> (the factorisation [..., M, N]: R on and above the diagonal,
 * the reflectors below it; tau [..., min(M, N)]), LAPACK's. PyTorch 2.13 has
 * no Meta kernel for it: the glue supplies one (csrc/torch/fallback.cpp). */
static tpuc_status *l_geqrf(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv a = lx_tensor(cx, 0);
  ir_type in = ir_type_of(g, a);
  tpuc_status *st = check_input(cx, in);
  if (st) return st;
  if (cx->noutputs < 2) return lx_unimplemented(cx, "geqrf: two outputs expected");
  if (empty_batch(cx, in) || ir_numel(&in) == 0) {
    for (int i = 0; i < 2; i++) cx->results[i] = ir_splat(g, lx_out(cx, i), 0.0);
    return NULL;
  }
  tv tau;
  tv f = lo_geqrf(g, a, &tau);
  cx->results[0] = lo_out(g, f, lx_out(cx, 0));
  cx->results[1] = lo_out(g, tau, lx_out(cx, 1));
  return NULL;
}

/* ormqr(A [..., mn, k], tau [..., t], C, left=True, transpose=False): Q C,
 * Q^T C, C Q or C Q^T with Q = H_0 ... H_{t-1} [..., mn, mn] built from A's
 * reflectors (as householder_product, all mn columns), then one product. */
static tpuc_status *l_ormqr(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv v = lx_tensor(cx, 0), tau = lx_tensor(cx, 1), c = lx_tensor(cx, 2);
  ir_type vt = ir_type_of(g, v), tt = ir_type_of(g, tau), cty = ir_type_of(g, c);
  bool left = lx_bool(cx, 3, true), trans = lx_bool(cx, 4, false);
  if (!qr_dtype(ot.dtype)) return lx_unimplemented(cx, "ormqr: real f32/f64 only");
  if (vt.ndim < 2 || cty.ndim != vt.ndim) return lx_unimplemented(cx, "ormqr: batch shapes");
  for (int d = 0; d < vt.ndim - 2; d++)
    if (vt.dims[d] != cty.dims[d]) return lx_unimplemented(cx, "ormqr: broadcast batch");
  if (ir_numel(&ot) == 0 || ir_numel(&vt) == 0) {
    cx->results[0] = ir_numel(&ot) == 0 ? ir_splat(g, ot, 0.0) : lo_out(g, c, ot);
    return NULL;
  }
  int64_t mn = vt.dims[vt.ndim - 2];
  v = ir_convert(g, v, ot.dtype);
  tv q = lo_householder_q(g, v, ir_convert(g, tau, ot.dtype), tt.dims[tt.ndim - 1], mn);
  c = ir_convert(g, c, ot.dtype);
  int nb = vt.ndim - 2;
  tv r = left ? lo_matmul(g, q, c, nb, trans, false) : lo_matmul(g, c, q, nb, false, trans);
  cx->results[0] = lo_out(g, r, ot);
  return NULL;
}

extern const tpuc_lowering tpuc_lowerings_linalg_qr[];
const tpuc_lowering tpuc_lowerings_linalg_qr[] = {
    {"aten::linalg_householder_product", l_householder_product},
    {"aten::linalg_householder_product.out", l_householder_product},
    {"aten::linalg_qr", l_linalg_qr},
    {"aten::linalg_qr.out", l_linalg_qr},
    {"aten::geqrf", l_geqrf},
    {"aten::geqrf.a", l_geqrf},
    {"aten::ormqr", l_ormqr},
    {"aten::ormqr.out", l_ormqr},
    {NULL, NULL},
};
