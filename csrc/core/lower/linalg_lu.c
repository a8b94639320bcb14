/* linalg_lu.c — LU with partial pivoting and what PyTorch builds on it:
 * linalg_lu_factor_ex, linalg_lu, lu_unpack, linalg_lu_solve, _linalg_solve_ex,
 * linalg_inv_ex, _linalg_det and _linalg_slogdet (functional and out= forms).
 *
 * StableHLO has no LU op, so the factorization is written out as column
 * steps (lo_run_steps, linalg_steps.c): each step a fixed handful of
 * whole-matrix elementwise ops (pivot search as an argmax over the rows at or
 * below the step, the row swap as two selects, the rank-1 update of the
 * trailing block under a mask), batched over the leading dims. The step index
 * j is a rank-0 value used through compares and as a dynamic_slice /
 * dynamic_update_slice start (column j, row j, the pivot); the per-matrix
 * pivot row is a value used only through compares and masked sums. Up to
 * LU_UNROLL_MAX columns the steps are unrolled (j a constant), above they run
 * in one stablehlo.while (ir_loop): the program size no longer grows with the
 * columns, so there is no size cap (a 512 x 512 float32 solve compiles in
 * ~2 s on the XLA CPU plugin; the unrolled form took 66 s at n = 64, hence its
 * old cap of 32 columns). Each step still works on the whole matrix, O(n^3)
 * elementwise work per factorization (LAPACK's blocked getrf is far faster on
 * a CPU: docs/performance.md). Everything emitted is plain elementwise /
 * reduce / dynamic_slice / while / triangular_solve HLO: the XLA CPU plugin
 * and a TPU compiler both compile it (f32/complex64 on a TPU; no LAPACK custom
 * call is emitted; only the CPU plugin was run).
 *
 * Semantics follow LAPACK's getrf as PyTorch's CPU calls it: the pivot of
 * column k is the first row (from k down) of largest magnitude (|re| + |im|
 * for complex, as izamax), pivots are 1-based int32, info is the first
 * 1-based column whose pivot is exactly zero (0: none) and the factorization
 * goes on past it (a zero column is not scaled; the result stays finite).
 * Nothing raises inside the program: the _ex ops return info and PyTorch's
 * own wrappers raise from it.
 *
 * PyTorch's _linalg_det and _linalg_slogdet (2.13) factor A^T instead of A
 * when A is contiguous and real (a layout shortcut), and their backward
 * formulas read the returned LU/pivots assuming so; we do the same, deciding
 * from the input's strides (_linalg_solve_ex factors A itself). Solves are two stablehlo.triangular_solve
 * (unit lower L, upper U) plus a row or column permutation by gather. */
#include "lower_ops.h"

/* Up to this many columns the steps are unrolled (a constant column index in
 * each), above it they run in one stablehlo.while (lo_run_steps). Measured
 * (XLA CPU plugin, this 2-core machine under load, a batch of 64 solves with n
 * right-hand sides, first call / median later call): n = 4 unrolled 1.1 s /
 * 0.23 ms, loop 0.7 s / 0.24 ms; n = 8 3.0 s / 0.64 ms vs 1.4 s / 0.45 ms;
 * n = 16 8.9 s / 1.15 ms vs 3.3 s / 1.2 ms; n = 32 7.7 s / 16 ms vs 1.1 s /
 * 20 ms. The loop is as fast from 8 on and compiles faster; the unrolled form
 * stays for the tiny matrices (OpInfo's samples) so that both remain tested. */
#define LU_UNROLL_MAX 4

static bool lu_dtype(tpuc_dtype d) {
  return d == TPUC_F32 || d == TPUC_F64 || d == TPUC_C64 || d == TPUC_C128;
}

/* x[..., r0:r1, c0:c1] of a [..., R, C] value. */
static tv mslice(ir_graph *g, tv x, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  ir_type t = ir_type_of(g, x);
  int64_t st[TPUC_MAX_DIMS], lim[TPUC_MAX_DIMS], str[TPUC_MAX_DIMS];
  for (int i = 0; i < t.ndim; i++) st[i] = 0, lim[i] = t.dims[i], str[i] = 1;
  st[t.ndim - 2] = r0, lim[t.ndim - 2] = r1;
  st[t.ndim - 1] = c0, lim[t.ndim - 1] = c1;
  return ir_slice(g, x, st, lim, str);
}

/* s32 iota of type t's shape along dim. */
static tv iota32(ir_graph *g, ir_type t, int dim) { return ir_iota(g, ir_with_dtype(t, TPUC_S32), dim); }

static tv c32(ir_graph *g, ir_type t, double v) { return ir_splat(g, ir_with_dtype(t, TPUC_S32), v); }

/* |x| as LAPACK's i?amax measures it: |x| for real, |re| + |im| for complex. */
static tv pivot_mag(ir_graph *g, tv x) {
  if (!ir_is_complex(lo_dtype(g, x))) return ir_unary(g, IR_ABS, x);
  return ir_binary(g, IR_ADD, ir_unary(g, IR_ABS, ir_unary(g, IR_REAL, x)),
                   ir_unary(g, IR_ABS, ir_unary(g, IR_IMAG, x)));
}

/* The sum over the rows of x [..., M, C] where `pick` [..., M, 1] holds (one
 * row): that row, [..., 1, C]. Exact: the other rows add zeros. */
static tv pick_row(ir_graph *g, tv x, tv pick) {
  ir_type t = ir_type_of(g, x);
  tv z = ir_splat(g, t, 0.0);
  int64_t d = t.ndim - 2;
  return lo_pick_sum(g, lo_where(g, pick, x, z), &d, 1, true);
}

typedef struct {
  tv lu;   /* [..., M, N], x's dtype */
  tv piv;  /* s32 [..., K], 1-based (LAPACK's ipiv) */
  tv perm; /* s32 [..., M]: row i of L U is row perm[i] of A */
  tv info; /* s32 [...] */
} lu_parts;

static tv jb(ir_graph *g, tv j, ir_type t) { return lo_s32_like(g, j, t); }

static tv dslice(ir_graph *g, tv x, tv r, tv c, int64_t h, int64_t w) {
  return lo_mat_dslice(g, x, r, c, h, w);
}

/* The state of the factorization between column steps: the matrix
 * [..., M, N], perm s32 [..., M, 1], info s32 [..., 1, 1], pivots s32 [..., 1, K]. */
enum { S_A, S_PERM, S_INFO, S_PIV, S_COUNT };

/* Column step j (a rank-0 s32 value: a constant when unrolled, the counter in
 * the loop) of the factorization (see the top). */
static void lu_step(ir_graph *g, tv *s, tv j) {
  tv a = s[S_A], perm = s[S_PERM], info = s[S_INFO];
  ir_type t = ir_type_of(g, a);
  int r = t.ndim;
  int64_t m = t.dims[r - 2], n = t.dims[r - 1];
  ir_type ct = t; /* [..., M, 1] */
  ct.dims[r - 1] = 1;
  ir_type bt = t; /* [..., 1, 1] */
  bt.dims[r - 2] = bt.dims[r - 1] = 1;
  tv rows = iota32(g, ct, r - 2), rows_mn = iota32(g, t, r - 2), cols_mn = iota32(g, t, r - 1);
  tv z = ir_s32(g, 0), j_c = jb(g, j, ct), j_t = jb(g, j, t);
  /* the pivot: first row >= j of largest magnitude */
  tv mag = pivot_mag(g, dslice(g, a, z, j, m, 1));
  ir_type mt = ir_type_of(g, mag);
  mag = ir_select(g, ir_compare(g, IR_GE, rows, j_c), mag, ir_splat(g, mt, -1.0));
  tv mx, p;
  ir_argreduce(g, mag, r - 2, true, TPUC_S32, &mx, &p);
  p = ir_reshape(g, p, bt.ndim, bt.dims);
  s[S_PIV] = lo_mat_dput(g, s[S_PIV], ir_binary(g, IR_ADD, p, c32(g, bt, 1.0)), ir_s32(g, 0), j);
  /* swap rows j and p (exact: selects). Row p is gathered (O(N)) and the new
   * column j, pivot and row j are built from rows j and p, not sliced out of the
   * swapped matrix, so the swap and the update below are one elementwise pass. */
  tv is_p = lo_cmp(g, IR_EQ, rows, p), is_j = ir_compare(g, IR_EQ, rows, j_c);
  ir_type rt = t; /* [..., 1, N] */
  rt.dims[r - 2] = 1;
  tv row_j = dslice(g, a, j, z, 1, n);
  tv row_p = lo_take_along(g, a, r - 2, lx_broadcast_to(g, ir_convert(g, p, TPUC_S64), r, rt.dims));
  tv piv = dslice(g, row_p, z, j, 1, 1), a_jj = dslice(g, row_j, z, j, 1, 1);
  tv col = lo_where(g, is_j, piv, lo_where(g, is_p, a_jj, dslice(g, a, z, j, m, 1)));
  a = lo_where(g, is_j, row_p, lo_where(g, is_p, row_j, a));
  tv perm_j = dslice(g, perm, j, z, 1, 1), perm_p = pick_row(g, perm, is_p);
  s[S_PERM] = lo_where(g, is_j, perm_p, lo_where(g, is_p, perm_j, perm));
  /* info: the first exactly zero pivot */
  tv zero = ir_compare(g, IR_EQ, piv, ir_splat(g, ir_type_of(g, piv), 0.0));
  tv first = ir_binary(g, IR_AND, zero, ir_compare(g, IR_EQ, info, c32(g, bt, 0.0)));
  s[S_INFO] = ir_select(g, first, ir_binary(g, IR_ADD, jb(g, j, bt), c32(g, bt, 1.0)), info);
  /* multipliers l = a[j+1:, j] / pivot (0 for a zero pivot: the column is zero) */
  tv safe = ir_select(g, zero, ir_splat(g, ir_type_of(g, piv), 1.0), piv);
  tv below = ir_compare(g, IR_GT, rows, j_c);
  tv l = lo_bin(g, IR_DIV, col, safe);
  l = ir_select(g, below, l, ir_splat(g, ir_type_of(g, l), 0.0));
  /* trailing update a[j+1:, j+1:] -= l u (u: the new row j), then column j below the pivot = l */
  tv u = row_p;
  tv upd = ir_binary(g, IR_SUB, a, lo_bin(g, IR_MUL, lx_broadcast_to(g, l, r, t.dims), u));
  tv trail = ir_binary(g, IR_AND, ir_compare(g, IR_GT, rows_mn, j_t),
                       ir_compare(g, IR_GT, cols_mn, j_t));
  tv colj = ir_binary(g, IR_AND, ir_compare(g, IR_GT, rows_mn, j_t),
                      ir_compare(g, IR_EQ, cols_mn, j_t));
  s[S_A] = ir_select(g, trail, upd, ir_select(g, colj, lx_broadcast_to(g, l, r, t.dims), a));
}

/* The LU factorization of a [..., M, N] with partial pivoting (see the top). */
static void lu_factor(ir_graph *g, tv a, lu_parts *o) {
  ir_type t = ir_type_of(g, a);
  int r = t.ndim, nb = r - 2;
  int64_t m = t.dims[r - 2], n = t.dims[r - 1], k = m < n ? m : n;
  ir_type ct = t; /* [..., M, 1] */
  ct.dims[r - 1] = 1;
  ir_type bt = t; /* [..., 1, 1] */
  bt.dims[r - 2] = bt.dims[r - 1] = 1;
  ir_type pt = bt; /* [..., 1, K] */
  pt.dims[r - 1] = k;
  if (ir_numel(&t) == 0) k = 0; /* nothing to factor: identity perm, info 0 */
  tv s[S_COUNT] = {a, iota32(g, ct, r - 2), c32(g, bt, 0.0), c32(g, pt, 0.0)};
  lo_run_steps(g, s, S_COUNT, k, LU_UNROLL_MAX, lu_step);
  int64_t bd[TPUC_MAX_DIMS];
  for (int i = 0; i < nb; i++) bd[i] = t.dims[i];
  o->lu = s[S_A];
  bd[nb] = m < n ? m : n;
  o->piv = ir_reshape(g, s[S_PIV], nb + 1, bd);
  bd[nb] = m;
  o->perm = ir_reshape(g, s[S_PERM], nb + 1, bd);
  o->info = ir_reshape(g, s[S_INFO], nb, bd);
}

/* Replays swap j of 1-based pivots st[1] [..., 1, K] on perm st[0] [..., M, 1]. */
static void swap_step(ir_graph *g, tv *st, tv j) {
  tv perm = st[0];
  ir_type ct = ir_type_of(g, perm);
  int r = ct.ndim;
  ir_type one = ct;
  one.dims[r - 2] = 1;
  tv z = ir_s32(g, 0);
  tv p = ir_binary(g, IR_SUB, dslice(g, st[1], z, j, 1, 1), c32(g, one, 1.0));
  tv rows = iota32(g, ct, r - 2);
  tv is_p = lo_cmp(g, IR_EQ, rows, p), is_j = ir_compare(g, IR_EQ, rows, jb(g, j, ct));
  tv perm_j = dslice(g, perm, j, z, 1, 1), perm_p = pick_row(g, perm, is_p);
  st[0] = lo_where(g, is_j, perm_p, lo_where(g, is_p, perm_j, perm));
}

/* perm [..., M] from 1-based LAPACK pivots [..., K] (the swaps replayed). */
static tv perm_of_pivots(ir_graph *g, tv piv, int64_t m) {
  ir_type pt = ir_type_of(g, piv);
  int r = pt.ndim;
  int64_t k = pt.dims[r - 1];
  ir_type ct = pt; /* [..., M, 1] */
  ct.ndim = r + 1;
  ct.dims[r - 1] = m, ct.dims[r] = 1;
  ir_type p2 = pt; /* [..., 1, K] */
  p2.ndim = r + 1;
  p2.dims[r - 1] = 1, p2.dims[r] = k;
  tv st[2] = {iota32(g, ct, r - 1), ir_reshape(g, ir_convert(g, piv, TPUC_S32), p2.ndim, p2.dims)};
  lo_run_steps(g, st, 2, k, LU_UNROLL_MAX, swap_step);
  return ir_reshape(g, st[0], r, ct.dims);
}

/* The inverse permutation: inv[perm[i]] = i. */
static tv perm_inverse(ir_graph *g, tv perm) {
  ir_type t = ir_type_of(g, perm);
  int r = t.ndim;
  ir_type sq = t; /* [..., M, M]: (i, c) holds perm[i] == c */
  sq.ndim = r + 1;
  sq.dims[r] = t.dims[r - 1];
  sq.dtype = TPUC_S32;
  tv hit = lo_cmp(g, IR_EQ, lo_unsqueeze(g, perm, r), iota32(g, sq, r));
  tv i = iota32(g, sq, r - 1);
  int64_t d = r - 1;
  return lo_pick_sum(g, ir_select(g, hit, i, c32(g, sq, 0.0)), &d, 1, false);
}

/* x [..., R, C] with rows (dim -2, or columns: dim -1) taken in order idx [..., R or C]. */
static tv take_lines(ir_graph *g, tv x, tv idx, bool rows) {
  ir_type t = ir_type_of(g, x);
  int r = t.ndim;
  tv i = lo_unsqueeze(g, ir_convert(g, idx, TPUC_S64), rows ? r - 1 : r - 2);
  return lo_take_along(g, x, rows ? r - 2 : r - 1, lx_broadcast_to(g, i, r, t.dims));
}

/* x [..., R, C] broadcast to batch dims `bd` (nb of them). */
static tv to_batch(ir_graph *g, tv x, const int64_t *bd, int nb, int keep) {
  ir_type t = ir_type_of(g, x);
  int64_t dims[TPUC_MAX_DIMS];
  for (int i = 0; i < nb; i++) dims[i] = bd[i];
  for (int i = 0; i < keep; i++) dims[nb + i] = t.dims[t.ndim - keep + i];
  return lx_broadcast_to(g, x, nb + keep, dims);
}

/* X with op(A) X = B (left) or X op(A) = B, A = P L U given as lu/perm, op
 * the identity or the adjoint; lu [.., N, N] and perm [.., N] already of
 * b's batch dims. */
static tv lu_solve(ir_graph *g, tv lu, tv perm, tv b, bool left, bool adjoint) {
  ir_transpose_kind tk = adjoint ? IR_TRANSPOSE_ADJOINT : IR_TRANSPOSE_NO;
  if (left && !adjoint) { /* L U X = P^T B */
    tv y = ir_triangular_solve(g, lu, take_lines(g, b, perm, true), true, true, true, tk);
    return ir_triangular_solve(g, lu, y, true, false, false, tk);
  }
  if (left) { /* U^H L^H P^T X = B */
    tv y = ir_triangular_solve(g, lu, b, true, false, false, tk);
    y = ir_triangular_solve(g, lu, y, true, true, true, tk);
    return take_lines(g, y, perm_inverse(g, perm), true);
  }
  if (!adjoint) { /* (X P) L U = B */
    tv y = ir_triangular_solve(g, lu, b, false, false, false, tk);
    y = ir_triangular_solve(g, lu, y, false, true, true, tk);
    return take_lines(g, y, perm_inverse(g, perm), false);
  }
  /* X U^H L^H = B P */
  tv y = ir_triangular_solve(g, lu, take_lines(g, b, perm, false), false, true, true, tk);
  return ir_triangular_solve(g, lu, y, false, false, false, tk);
}

/* Whether tensor arg i is contiguous (row-major; size-1 dims ignored), as
 * PyTorch's is_contiguous() for the layouts these ops meet. */
static bool contiguous(const tpuc_lower_ctx *cx, int i) {
  const tpuc_tensor *d = lx_tensor_desc(cx, i);
  int64_t want = 1;
  for (int k = d->ndim - 1; k >= 0; k--) {
    if (d->sizes[k] != 1 && d->strides[k] != want) return false;
    want *= d->sizes[k];
  }
  return true;
}

/* The matrix transpose (not conjugated) of the last two dims. */
static tv mT(ir_graph *g, tv x) {
  ir_type t = ir_type_of(g, x);
  int64_t perm[TPUC_MAX_DIMS];
  for (int i = 0; i < t.ndim; i++) perm[i] = i;
  perm[t.ndim - 2] = t.ndim - 1, perm[t.ndim - 1] = t.ndim - 2;
  return ir_transpose(g, x, perm);
}

/* Checks shared by every op here: float/complex, factorable size, not empty. */
static tpuc_status *usable(const tpuc_lower_ctx *cx, tv a) {
  ir_type t = ir_type_of(cx->g, a);
  if (!lu_dtype(t.dtype)) return lx_unimplemented(cx, "LU: f32/f64/complex only");
  if (t.ndim < 2) return lx_unimplemented(cx, "LU: not a matrix");
  return NULL;
}

/* Factors A (A^T when `trans`) of arg 0. */
static tpuc_status *factor_arg0(tpuc_lower_ctx *cx, bool trans, lu_parts *o) {
  tv a = lx_tensor(cx, 0);
  tpuc_status *st = usable(cx, a);
  if (st) return st;
  lu_factor(cx->g, trans ? mT(cx->g, a) : a, o);
  return NULL;
}

/* PyTorch's use_A_T: A contiguous and real. */
static bool use_a_t(const tpuc_lower_ctx *cx) {
  return contiguous(cx, 0) && !ir_is_complex(lx_tensor_desc(cx, 0)->dtype);
}

/* Zeros for every empty output (an empty batch, 0 x 0 or N x 0 matrices). */
static void zero_empty(tpuc_lower_ctx *cx) {
  for (int i = 0; i < cx->noutputs; i++)
    if (ir_numel(&cx->out_types[i]) == 0) cx->results[i] = ir_splat(cx->g, cx->out_types[i], 0.0);
}

/* linalg_lu_factor_ex(A, *, pivot=True, check_errors=False) -> (LU, pivots, info). */
static tpuc_status *l_lu_factor_ex(tpuc_lower_ctx *cx) {
  if (!lx_bool(cx, 1, true)) return lx_unimplemented(cx, "LU without pivoting");
  lu_parts f;
  tpuc_status *st = factor_arg0(cx, false, &f);
  if (st) return st;
  cx->results[0] = f.lu;
  cx->results[1] = lo_out(cx->g, f.piv, lx_out(cx, 1));
  cx->results[2] = lo_out(cx->g, f.info, lx_out(cx, 2));
  zero_empty(cx);
  return NULL;
}

/* P [..., M, M] with P[perm[c], c] = 1, so that A = P L U. */
static tv perm_matrix(ir_graph *g, tv perm, ir_type pt) {
  int r = pt.ndim;
  tv p = lo_unsqueeze(g, perm, r - 2); /* [..., 1, M] */
  return ir_convert(g, lo_cmp(g, IR_EQ, iota32(g, ir_with_dtype(pt, TPUC_S32), r - 2), p), pt.dtype);
}

/* L (unit lower, [..., M, K]) and U (upper, [..., K, N]) out of a packed LU. */
static void unpack_lu(ir_graph *g, tv lu, tv *l, tv *u) {
  ir_type t = ir_type_of(g, lu);
  int r = t.ndim;
  int64_t m = t.dims[r - 2], n = t.dims[r - 1], k = m < n ? m : n;
  tv lp = mslice(g, lu, 0, m, 0, k), up = mslice(g, lu, 0, k, 0, n);
  ir_type lt = ir_type_of(g, lp), ut = ir_type_of(g, up);
  tv lr = iota32(g, lt, r - 2), lc = iota32(g, lt, r - 1);
  tv one = ir_splat(g, lt, 1.0), zl = ir_splat(g, lt, 0.0);
  *l = ir_select(g, ir_compare(g, IR_GT, lr, lc), lp,
                 ir_select(g, ir_compare(g, IR_EQ, lr, lc), one, zl));
  *u = ir_select(g, ir_compare(g, IR_LE, iota32(g, ut, r - 2), iota32(g, ut, r - 1)), up,
                 ir_splat(g, ut, 0.0));
}

/* linalg_lu(A, *, pivot=True) -> (P, L, U). */
static tpuc_status *l_lu(tpuc_lower_ctx *cx) {
  if (!lx_bool(cx, 1, true)) return lx_unimplemented(cx, "LU without pivoting");
  lu_parts f;
  tpuc_status *st = factor_arg0(cx, false, &f);
  if (st) return st;
  cx->results[0] = perm_matrix(cx->g, f.perm, lx_out(cx, 0));
  unpack_lu(cx->g, f.lu, &cx->results[1], &cx->results[2]);
  zero_empty(cx);
  return NULL;
}

/* lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True) -> (P, L, U);
 * an output not asked for is empty. */
static tpuc_status *l_lu_unpack(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv lu = lx_tensor(cx, 0);
  ir_type t = ir_type_of(g, lu);
  tpuc_status *st = usable(cx, lu);
  if (st) return st;
  ir_type pt = lx_out(cx, 0);
  if (ir_numel(&pt) == 0) cx->results[0] = ir_splat(g, pt, 0.0);
  else cx->results[0] = perm_matrix(g, perm_of_pivots(g, lx_tensor(cx, 1), t.dims[t.ndim - 2]), pt);
  ir_type lt = lx_out(cx, 1), ut = lx_out(cx, 2);
  if (ir_numel(&lt) == 0 || ir_numel(&ut) == 0) {
    cx->results[1] = ir_splat(g, lt, 0.0);
    cx->results[2] = ir_splat(g, ut, 0.0);
  } else {
    unpack_lu(g, lu, &cx->results[1], &cx->results[2]);
  }
  return NULL;
}

/* The batch dims of out type `ot` (a [..., R, C] result). */
static int batch_of(ir_type ot, int64_t *bd) {
  for (int i = 0; i < ot.ndim - 2; i++) bd[i] = ot.dims[i];
  return ot.ndim - 2;
}

/* Solves with factors of A (lu, perm) for b, all broadcast to ot's batch. */
static tv solve_batched(ir_graph *g, tv lu, tv perm, tv b, ir_type ot, bool left, bool adjoint) {
  int64_t bd[TPUC_MAX_DIMS];
  int nb = batch_of(ot, bd);
  lu = to_batch(g, lu, bd, nb, 2);
  perm = to_batch(g, perm, bd, nb, 1);
  b = to_batch(g, ir_convert(g, b, ot.dtype), bd, nb, 2);
  return lu_solve(g, lu, perm, b, left, adjoint);
}

/* linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False) -> X. */
static tpuc_status *l_lu_solve(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv lu = lx_tensor(cx, 0);
  tpuc_status *st = usable(cx, lu);
  if (st) return st;
  ir_type ot = lx_out(cx, 0);
  if (ir_numel(&ot) == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  ir_type t = ir_type_of(g, lu);
  tv perm = perm_of_pivots(g, lx_tensor(cx, 1), t.dims[t.ndim - 2]);
  cx->results[0] = solve_batched(g, lu, perm, lx_tensor(cx, 2), ot, lx_bool(cx, 3, true),
                                 lx_bool(cx, 4, false));
  return NULL;
}

/* The solve of A X = B (or X A = B) and the factors of A (arg 0); `b` is a
 * matrix of ot's shape. */
static tpuc_status *solve_with_factors(tpuc_lower_ctx *cx, tv b, ir_type ot, bool left,
                                       lu_parts *f, tv *x) {
  tpuc_status *st = factor_arg0(cx, false, f);
  if (st) return st;
  if (ir_numel(&ot) == 0) *x = ir_splat(cx->g, ot, 0.0); /* empty batch, 0 x 0 or no columns */
  else *x = solve_batched(cx->g, f->lu, f->perm, b, ot, left, false);
  return NULL;
}

/* _linalg_solve_ex(A, B, *, left=True, check_errors=False) -> (result, LU, pivots, info).
 * B is a vector batch when result has one dim less than A (PyTorch's
 * linalg_solve_is_vector_rhs). */
static tpuc_status *l_solve_ex(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0), at = ir_type_of(g, lx_tensor(cx, 0));
  bool left = lx_bool(cx, 2, true), vec = ot.ndim == at.ndim - 1;
  tv b = lx_tensor(cx, 1);
  ir_type mt = ot;
  if (vec) {
    b = lo_unsqueeze(g, b, left ? lo_rank(g, b) : lo_rank(g, b) - 1);
    mt = ir_type_of(g, lo_unsqueeze(g, ir_splat(g, ot, 0.0), left ? ot.ndim : ot.ndim - 1));
  }
  lu_parts f;
  tv x;
  tpuc_status *st = solve_with_factors(cx, b, mt, left, &f, &x);
  if (st) return st;
  cx->results[0] = vec ? ir_reshape(g, x, ot.ndim, ot.dims) : x;
  cx->results[1] = f.lu;
  cx->results[2] = lo_out(g, f.piv, lx_out(cx, 2));
  cx->results[3] = lo_out(g, f.info, lx_out(cx, 3));
  return NULL;
}

/* linalg_inv_ex(A, *, check_errors=False) -> (inverse, info): A X = I. */
static tpuc_status *l_inv_ex(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv eye = ir_convert(g, ir_compare(g, IR_EQ, iota32(g, ot, ot.ndim - 2), iota32(g, ot, ot.ndim - 1)),
                      ot.dtype);
  lu_parts f;
  tv x;
  tpuc_status *st = solve_with_factors(cx, eye, ot, true, &f, &x);
  if (st) return st;
  cx->results[0] = x;
  cx->results[1] = lo_out(g, f.info, lx_out(cx, 1));
  return NULL;
}

/* The diagonal of lu [..., N, N] as [..., N]. */
static tv diag_of(ir_graph *g, tv lu) {
  ir_type t = ir_type_of(g, lu);
  tv eye = ir_compare(g, IR_EQ, iota32(g, t, t.ndim - 2), iota32(g, t, t.ndim - 1));
  int64_t d = t.ndim - 1;
  return lo_pick_sum(g, ir_select(g, eye, lu, ir_splat(g, t, 0.0)), &d, 1, false);
}

/* (-1)^(number of row swaps), [...] of dtype d. */
static tv perm_sign(ir_graph *g, tv piv, tpuc_dtype d) {
  ir_type t = ir_type_of(g, piv);
  tv swapped = ir_compare(g, IR_NE, piv, ir_binary(g, IR_ADD, iota32(g, t, t.ndim - 1), c32(g, t, 1.0)));
  int64_t last = t.ndim - 1;
  tv n = lo_sum(g, ir_convert(g, swapped, TPUC_S32), &last, 1, false);
  ir_type nt = ir_type_of(g, n), ot = ir_with_dtype(nt, d);
  tv odd = ir_compare(g, IR_EQ, ir_binary(g, IR_AND, n, c32(g, nt, 1.0)), c32(g, nt, 1.0));
  return ir_select(g, odd, ir_splat(g, ot, -1.0), ir_splat(g, ot, 1.0));
}

/* _linalg_det(A) -> (result, LU, pivots): prod(diag U) * sign(P). */
static tpuc_status *l_det(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  lu_parts f;
  tpuc_status *st = factor_arg0(cx, use_a_t(cx), &f);
  if (st) return st;
  ir_type ot = lx_out(cx, 0);
  tv d = diag_of(g, f.lu);
  int64_t last = lo_rank(g, d) - 1;
  tv p = lo_reduce(g, d, IR_RED_PROD, &last, 1, false);
  cx->results[0] = lo_out(g, ir_binary(g, IR_MUL, p, perm_sign(g, f.piv, ot.dtype)), ot);
  cx->results[1] = f.lu;
  cx->results[2] = lo_out(g, f.piv, lx_out(cx, 2));
  return NULL;
}

/* _linalg_slogdet(A) -> (sign, logabsdet, LU, pivots): sign(P) prod(sgn(diag U)),
 * sum(log|diag U|); a zero pivot gives sign 0 and logabsdet -inf, as the CPU. */
static tpuc_status *l_slogdet(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  lu_parts f;
  tpuc_status *st = factor_arg0(cx, use_a_t(cx), &f);
  if (st) return st;
  ir_type st_t = lx_out(cx, 0), lt = lx_out(cx, 1);
  tv d = diag_of(g, f.lu);
  ir_type dt = ir_type_of(g, d);
  tv mag = ir_unary(g, IR_ABS, d); /* real for complex d */
  ir_type mt = ir_type_of(g, mag);
  int64_t last = dt.ndim - 1;
  tv sg;
  if (ir_is_complex(dt.dtype)) {
    tv z = ir_compare(g, IR_EQ, mag, ir_splat(g, mt, 0.0));
    tv safe = ir_convert(g, ir_select(g, z, ir_splat(g, mt, 1.0), mag), dt.dtype);
    sg = ir_select(g, lx_broadcast_to(g, z, dt.ndim, dt.dims), ir_splat(g, dt, 0.0),
                   ir_binary(g, IR_DIV, d, safe));
  } else {
    sg = ir_unary(g, IR_SIGN, d);
  }
  tv s = lo_reduce(g, sg, IR_RED_PROD, &last, 1, false);
  cx->results[0] = lo_out(g, ir_binary(g, IR_MUL, s, perm_sign(g, f.piv, dt.dtype)), st_t);
  cx->results[1] = lo_out(g, lo_sum(g, ir_unary(g, IR_LOG, mag), &last, 1, false), lt);
  cx->results[2] = f.lu;
  cx->results[3] = lo_out(g, f.piv, lx_out(cx, 3));
  return NULL;
}

const tpuc_lowering tpuc_lowerings_linalg_lu[] = {
    {"aten::linalg_lu_factor_ex", l_lu_factor_ex},
    {"aten::linalg_lu_factor_ex.out", l_lu_factor_ex},
    {"aten::linalg_lu", l_lu},
    {"aten::linalg_lu.out", l_lu},
    {"aten::lu_unpack", l_lu_unpack},
    {"aten::lu_unpack.out", l_lu_unpack},
    {"aten::linalg_lu_solve", l_lu_solve},
    {"aten::linalg_lu_solve.out", l_lu_solve},
    {"aten::_linalg_solve_ex", l_solve_ex},
    {"aten::_linalg_solve_ex.result", l_solve_ex},
    {"aten::linalg_inv_ex", l_inv_ex},
    {"aten::linalg_inv_ex.inverse", l_inv_ex},
    {"aten::_linalg_det", l_det},
    {"aten::_linalg_det.result", l_det},
    {"aten::_linalg_slogdet", l_slogdet},
    {"aten::_linalg_slogdet.sign", l_slogdet},
    {NULL, NULL},
};
