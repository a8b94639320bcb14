/* linalg_eig.c — the symmetric eigendecomposition (_linalg_eigh: eigh,
 * eigvalsh and what composes from them) as cyclic Jacobi iteration, batched
 * over the leading dims, real f32/f64 only.
 *
 * StableHLO has no eigensolver, and the sweeps are not (yet) written as an
 * ir_loop (stablehlo.while, ir/loop.c, as LU and QR are), so they are unrolled
 * statically: a sweep is n-1 rounds of the round-robin
 * (tournament) ordering, each round rotating n/2 disjoint pairs (p, q) at
 * once (Brent and Luk's parallel ordering), so one round is a handful of
 * whole-matrix elementwise ops and three gathers by a constant permutation.
 * An odd n is padded by a zero row and column, which every rotation leaves
 * alone (its a_pq is exactly 0, so c = 1, s = 0). The rotation is Golub and
 * Van Loan's sym.schur2: tau = (a_qq - a_pp) / (2 a_pq),
 * t = sign(tau) / (|tau| + sqrt(1 + tau^2)), c = 1 / sqrt(1 + t^2), s = t c,
 * A <- J^T A J, V <- V J. Eigenvalues come out ascending (a sort), the
 * eigenvectors' columns in the same order; the eigenvectors' signs are not
 * LAPACK's (none is normalised by either: both are valid).
 *
 * The sweep count is fixed, not a convergence test: cyclic Jacobi converges
 * quadratically once the off-diagonal part is small; measured (a float model of
 * exactly this ordering and rotation) on random, clustered (1e-6 spread),
 * nearly diagonal and graded (1e-8..1e8) symmetric matrices, 20 of each kind,
 * ||off(A)|| / ||A|| fell below n * eps within 5 sweeps (f32) and 7 (f64) at
 * n = 8, and within 9 / 11 up to n = 17 (the graded ones slowest). The
 * EIGH_SWEEPS_* counts (10 and 12) are the n = 17 figures plus a margin, so the
 * cap EIGH_MAX_N = 8 has more than enough; the cap is compile time (rounds =
 * sweeps * (n - 1), ~35 ops each: n = 8 compiled in 5-10 s on a loaded 2-core
 * machine). Larger matrices fall back to LAPACK.
 * Every op is elementwise, a reduction, a gather or a sort: the XLA CPU
 * plugin and a TPU compiler both compile them (no LAPACK custom call; only
 * the CPU plugin was run).
 *
 * The SVD (second half) runs the same rounds one-sided on the columns.
 *
 * Backward: PyTorch's linalg_eigh_backward and svd_backward are products,
 * difference matrices and divisions: all lowered (tests run them with no
 * fallback). */
#include "lower_ops.h"

#define EIGH_MAX_N 8
#define EIGH_SWEEPS_F32 10
#define EIGH_SWEEPS_F64 12

/* s64 iota compare: [..., n, n] pred of row `c` col. */
static tv rc_cmp(ir_graph *g, ir_type t, ir_cmp c) {
  ir_type it = ir_with_dtype(t, TPUC_S64);
  return ir_compare(g, c, ir_iota(g, it, t.ndim - 2), ir_iota(g, it, t.ndim - 1));
}

/* The full symmetric matrix from a's lower (or upper) triangle. */
static tv symmetrize(ir_graph *g, tv a, bool lower) {
  ir_type t = ir_type_of(g, a);
  int64_t perm[TPUC_MAX_DIMS];
  for (int i = 0; i < t.ndim; i++) perm[i] = i;
  perm[t.ndim - 2] = t.ndim - 1;
  perm[t.ndim - 1] = t.ndim - 2;
  return ir_select(g, rc_cmp(g, t, lower ? IR_GE : IR_LE), a, ir_transpose(g, a, perm));
}

/* x [..., k] as [..., k, 1] (col) or [..., 1, k] (row), broadcast to t. */
static tv spread(ir_graph *g, tv x, ir_type t, bool col) {
  ir_type xt = ir_type_of(g, x);
  int64_t dims[TPUC_MAX_DIMS];
  for (int i = 0; i < xt.ndim; i++) dims[i] = xt.dims[i];
  dims[xt.ndim] = xt.dims[xt.ndim - 1];
  dims[col ? xt.ndim : xt.ndim - 1] = 1;
  return lx_broadcast_to(g, ir_reshape(g, x, xt.ndim + 1, dims), t.ndim, t.dims);
}

/* A round's constant pairing: partner[r] and first[r] (r is its pair's p). */
typedef struct {
  tv pidx;     /* s64 [n] partner indices */
  tv is_first; /* pred of the vectors' type */
} round_consts;

static round_consts round_of(ir_graph *g, ir_type vt, const int64_t *partner,
                             const int64_t *first, int64_t n) {
  round_consts r;
  r.pidx = ir_const_i64s(g, partner, (int)n);
  ir_type it = ir_with_dtype(vt, TPUC_S64);
  tv f = ir_broadcast_in_dim(g, ir_const_i64s(g, first, (int)n), it, (int64_t[]){vt.ndim - 1});
  r.is_first = ir_compare(g, IR_EQ, f, ir_splat_i64(g, it, 1));
  return r;
}

/* The rotation of every pair from the 2x2 symmetric blocks [[a_pp, a_pq],
 * [a_pq, a_qq]], each given per index r [..., n] (d: a_rr; off: a_{r,
 * partner[r]}, only the p row's value used): c and the signed s (-s on p's
 * row, +s on q's) so that a new row r is c row_r + sv row_partner[r]. */
static void rotation(ir_graph *g, round_consts rc, tv d, tv off, tv *c_out, tv *sv_out) {
  ir_type vt = ir_type_of(g, d);
  int last = vt.ndim - 1;
  tv d_other = lo_take_dim(g, d, last, rc.pidx);
  tv apq = ir_select(g, rc.is_first, off, lo_take_dim(g, off, last, rc.pidx));
  tv app = ir_select(g, rc.is_first, d, d_other), aqq = ir_select(g, rc.is_first, d_other, d);
  tv vzero = ir_splat(g, vt, 0.0), vone = ir_splat(g, vt, 1.0);
  tv zero_pq = ir_compare(g, IR_EQ, apq, vzero);
  tv den = ir_binary(g, IR_MUL, ir_splat(g, vt, 2.0), ir_select(g, zero_pq, vone, apq));
  tv tau = ir_binary(g, IR_DIV, ir_binary(g, IR_SUB, aqq, app), den);
  tv root = ir_unary(g, IR_SQRT, ir_binary(g, IR_ADD, vone, ir_binary(g, IR_MUL, tau, tau)));
  tv sgn = ir_select(g, ir_compare(g, IR_GE, tau, vzero), vone, ir_splat(g, vt, -1.0));
  tv t = ir_binary(g, IR_DIV, sgn, ir_binary(g, IR_ADD, ir_unary(g, IR_ABS, tau), root));
  t = ir_select(g, zero_pq, vzero, t); /* a_pq = 0 (or tau overflowed): no rotation */
  tv c = ir_binary(g, IR_DIV, vone,
                   ir_unary(g, IR_SQRT, ir_binary(g, IR_ADD, vone, ir_binary(g, IR_MUL, t, t))));
  tv sn = ir_binary(g, IR_MUL, t, c);
  *c_out = c;
  *sv_out = ir_select(g, rc.is_first, ir_unary(g, IR_NEG, sn), sn);
}

/* x J: column r becomes c[r] x[:, r] + sv[r] x[:, partner[r]]. */
static tv rotate_cols(ir_graph *g, tv x, round_consts rc, tv c, tv sv) {
  ir_type t = ir_type_of(g, x);
  tv xp = lo_take_dim(g, x, t.ndim - 1, rc.pidx);
  return ir_binary(g, IR_ADD, ir_binary(g, IR_MUL, x, spread(g, c, t, false)),
                   ir_binary(g, IR_MUL, xp, spread(g, sv, t, false)));
}

/* The round-robin schedule (the circle method) over n (even) indices:
 * list holds the current order; pairs are (list[i], list[n-1-i]). */
static void schedule_pairs(const int64_t *list, int64_t n, int64_t *partner, int64_t *first) {
  for (int64_t i = 0; i < n / 2; i++) {
    int64_t p = list[i], q = list[n - 1 - i];
    partner[p] = q;
    partner[q] = p;
    first[p] = p < q;
    first[q] = q < p;
  }
}

/* The next round: the first index stays, the others rotate by one. */
static void schedule_next(int64_t *list, int64_t n) {
  int64_t lastp = list[n - 1];
  for (int64_t i = n - 1; i > 1; i--) list[i] = list[i - 1];
  if (n > 1) list[1] = lastp;
}

/* The diagonal of s [..., n, n] as [..., n]. */
static tv diag_of(ir_graph *g, tv s) {
  ir_type t = ir_type_of(g, s);
  int64_t ld = t.ndim - 1;
  return lo_pick_sum(g, ir_select(g, rc_cmp(g, t, IR_EQ), s, ir_splat(g, t, 0.0)), &ld, 1, false);
}

/* One two-sided round on s and v ([..., n, n]): s <- J^T s J, v <- v J. */
static void jacobi_round(ir_graph *g, tv *s, tv *v, const int64_t *partner, const int64_t *first,
                         int64_t n) {
  ir_type t = ir_type_of(g, *s);
  int last = t.ndim - 1;
  int64_t ld = last;
  tv d = diag_of(g, *s);
  round_consts rc = round_of(g, ir_type_of(g, d), partner, first, n);
  /* a_{r, partner[r]}: the entry whose column is the row's partner */
  ir_type it = ir_with_dtype(t, TPUC_S64);
  tv pcol = ir_broadcast_in_dim(g, rc.pidx, it, (int64_t[]){t.ndim - 2});
  tv at_partner = ir_compare(g, IR_EQ, ir_iota(g, it, last), pcol);
  tv off = lo_pick_sum(g, ir_select(g, at_partner, *s, ir_splat(g, t, 0.0)), &ld, 1, false);
  tv c, sv;
  rotation(g, rc, d, off, &c, &sv);
  tv s1 = ir_binary(g, IR_ADD, ir_binary(g, IR_MUL, spread(g, c, t, true), *s),
                    ir_binary(g, IR_MUL, spread(g, sv, t, true), lo_take_dim(g, *s, last - 1, rc.pidx)));
  *s = rotate_cols(g, s1, rc, c, sv);
  *v = rotate_cols(g, *v, rc, c, sv);
}

/* Eigenvalues (ascending, [..., n]) and eigenvectors ([..., n, n]) of the
 * symmetric s [..., n, n]. */
static void jacobi_eigh(ir_graph *g, tv s, int sweeps, tv *w, tv *vecs) {
  ir_type t = ir_type_of(g, s);
  int64_t n = t.dims[t.ndim - 1], n2 = n + (n & 1);
  if (n2 != n) {
    int64_t lo[TPUC_MAX_DIMS] = {0}, hi[TPUC_MAX_DIMS] = {0}, in[TPUC_MAX_DIMS] = {0};
    hi[t.ndim - 2] = hi[t.ndim - 1] = 1;
    s = ir_pad(g, s, lo_const(g, t.dtype, 0.0), lo, hi, in);
  }
  ir_type pt = ir_type_of(g, s);
  tv v = ir_convert(g, rc_cmp(g, pt, IR_EQ), pt.dtype);
  int64_t list[EIGH_MAX_N + 1], partner[EIGH_MAX_N + 1], first[EIGH_MAX_N + 1];
  for (int64_t i = 0; i < n2; i++) list[i] = i;
  for (int sw = 0; sw < sweeps; sw++) {
    for (int64_t r = 0; r + 1 < n2; r++) {
      schedule_pairs(list, n2, partner, first);
      jacobi_round(g, &s, &v, partner, first, n2);
      schedule_next(list, n2);
    }
  }
  tv d = diag_of(g, s);
  if (n2 != n) { /* drop the padding (its eigenpair is exactly (0, e_n)) */
    ir_type dt = ir_type_of(g, d);
    int64_t lo[TPUC_MAX_DIMS] = {0}, hi[TPUC_MAX_DIMS], st[TPUC_MAX_DIMS];
    for (int i = 0; i < dt.ndim; i++) hi[i] = dt.dims[i], st[i] = 1;
    hi[dt.ndim - 1] = n;
    d = ir_slice(g, d, lo, hi, st);
    int64_t vlo[TPUC_MAX_DIMS] = {0}, vhi[TPUC_MAX_DIMS], vst[TPUC_MAX_DIMS];
    for (int i = 0; i < pt.ndim; i++) vhi[i] = pt.dims[i], vst[i] = 1;
    vhi[pt.ndim - 2] = vhi[pt.ndim - 1] = n;
    v = ir_slice(g, v, vlo, vhi, vst);
  }
  tv idx;
  ir_sort(g, d, ir_type_of(g, d).ndim - 1, false, w, &idx);
  if (!vecs) return;
  ir_type vt = ir_type_of(g, v);
  *vecs = lo_take_along(g, v, vt.ndim - 1, spread(g, idx, ir_with_dtype(vt, TPUC_S64), false));
}

/* _linalg_eigh(A, UPLO="L", compute_v=True) -> (eigenvalues, eigenvectors);
 * _linalg_eigh.eigenvalues(..., *, eigenvalues, eigenvectors). */
static tpuc_status *l_linalg_eigh(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv a = lx_tensor(cx, 0);
  ir_type in = ir_type_of(g, a);
  ir_type wt = lx_out(cx, 0);
  if (!(in.dtype == TPUC_F32 || in.dtype == TPUC_F64) || wt.dtype != in.dtype)
    return lx_unimplemented(cx, "eigh: real f32/f64 only");
  if (in.ndim < 2 || in.dims[in.ndim - 1] > EIGH_MAX_N)
    return lx_unimplemented(cx, "eigh: n above the unrolled limit (EIGH_MAX_N)");
  const tpuc_arg *uplo = lx_arg(cx, 1);
  bool lower = !(uplo && uplo->kind == TPUC_ARG_STRING && (uplo->s[0] == 'U' || uplo->s[0] == 'u'));
  bool want_v = cx->noutputs > 1 && ir_numel(&cx->out_types[1]) > 0 &&
                cx->out_types[1].ndim == in.ndim;
  if (ir_numel(&in) == 0) {
    for (int i = 0; i < cx->noutputs; i++) cx->results[i] = ir_splat(g, cx->out_types[i], 0.0);
    return NULL;
  }
  tv w, v = IR_NONE;
  int sweeps = in.dtype == TPUC_F32 ? EIGH_SWEEPS_F32 : EIGH_SWEEPS_F64;
  jacobi_eigh(g, symmetrize(g, a, lower), sweeps, &w, want_v ? &v : NULL);
  cx->results[0] = lo_out(g, w, wt);
  if (cx->noutputs > 1)
    cx->results[1] = want_v ? lo_out(g, v, cx->out_types[1]) : ir_splat(g, cx->out_types[1], 0.0);
  return NULL;
}

/* The transpose of the last two dims. */
static tv mT(ir_graph *g, tv x) {
  ir_type t = ir_type_of(g, x);
  int64_t perm[TPUC_MAX_DIMS];
  for (int i = 0; i < t.ndim; i++) perm[i] = i;
  perm[t.ndim - 2] = t.ndim - 1;
  perm[t.ndim - 1] = t.ndim - 2;
  return ir_transpose(g, x, perm);
}

/* x[..., :r, :c] (x rank >= 2); vectors: x[..., :c] when r < 0. */
static tv head(ir_graph *g, tv x, int64_t r, int64_t c) {
  ir_type t = ir_type_of(g, x);
  int64_t lo[TPUC_MAX_DIMS] = {0}, hi[TPUC_MAX_DIMS], st[TPUC_MAX_DIMS];
  for (int i = 0; i < t.ndim; i++) hi[i] = t.dims[i], st[i] = 1;
  if (r >= 0) hi[t.ndim - 2] = r;
  hi[t.ndim - 1] = c;
  return ir_slice(g, x, lo, hi, st);
}

/* One one-sided (Hestenes) round on w [..., M, n] and v [..., n, n]: the
 * two-sided rotation of w^T w's pairs, applied to w's and v's columns. */
static void hestenes_round(ir_graph *g, tv *w, tv *v, const int64_t *partner,
                           const int64_t *first, int64_t n) {
  ir_type t = ir_type_of(g, *w);
  int64_t rows = t.ndim - 2;
  tv sq = lo_sum(g, ir_binary(g, IR_MUL, *w, *w), &rows, 1, false); /* ||w_r||^2 */
  round_consts rc = round_of(g, ir_type_of(g, sq), partner, first, n);
  tv wp = lo_take_dim(g, *w, t.ndim - 1, rc.pidx);
  tv dot = lo_sum(g, ir_binary(g, IR_MUL, *w, wp), &rows, 1, false); /* w_r . w_partner */
  tv c, sv;
  rotation(g, rc, sq, dot, &c, &sv);
  *w = ir_binary(g, IR_ADD, ir_binary(g, IR_MUL, *w, spread(g, c, t, false)),
                 ir_binary(g, IR_MUL, wp, spread(g, sv, t, false)));
  *v = rotate_cols(g, *v, rc, c, sv);
}

/* _linalg_svd(A, full_matrices=False, compute_uv=True, *, driver=None)
 * -> (U, S, Vh); _linalg_svd.U(..., *, U, S, Vh). One-sided Jacobi on the
 * columns of A (M >= N) or of A^T (M < N): after the sweeps the columns W are
 * orthogonal, W = U S, A V = W. S is their norms (descending); U is the Q of
 * W's Householder QR (lower/linalg_qr.c) with each column's sign set so that
 * R's diagonal (|R_jj| = s_j) is non-negative: for s_j > 0 that is
 * W_j / s_j, and where s_j = 0 (rank deficient) or full_matrices asks for
 * more columns it completes an orthonormal basis, as an SVD's U must be. */
static tpuc_status *l_linalg_svd(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv a = lx_tensor(cx, 0);
  ir_type in = ir_type_of(g, a);
  if (!(in.dtype == TPUC_F32 || in.dtype == TPUC_F64) || cx->noutputs < 3)
    return lx_unimplemented(cx, "svd: real f32/f64 only");
  if (in.ndim < 2) return lx_unimplemented(cx, "svd: a matrix or a batch of them");
  int64_t m = in.dims[in.ndim - 2], n = in.dims[in.ndim - 1];
  bool tr = m < n;
  int64_t big = tr ? n : m, k = tr ? m : n;
  if (k > EIGH_MAX_N) return lx_unimplemented(cx, "svd: min(M, N) above the unrolled limit");
  if (ir_numel(&in) == 0) { /* empty batch: empty outputs; k = 0: U, Vh identities (as the CPU) */
    for (int i = 0; i < 3; i++) {
      ir_type ot = cx->out_types[i];
      cx->results[i] = ir_numel(&ot) == 0 || i == 1
                           ? ir_splat(g, ot, 0.0)
                           : ir_convert(g, rc_cmp(g, ot, IR_EQ), ot.dtype);
    }
    return NULL;
  }
  bool want_uv = ir_numel(&cx->out_types[0]) > 0 && cx->out_types[0].ndim == in.ndim;
  bool full = want_uv && lx_bool(cx, 1, false);
  int sweeps = in.dtype == TPUC_F32 ? EIGH_SWEEPS_F32 : EIGH_SWEEPS_F64;
  tv w = tr ? mT(g, a) : a; /* [..., big, k] */
  int64_t k2 = k + (k & 1);
  ir_type t = ir_type_of(g, w);
  if (k2 != k) {
    int64_t lo[TPUC_MAX_DIMS] = {0}, hi[TPUC_MAX_DIMS] = {0}, inr[TPUC_MAX_DIMS] = {0};
    hi[t.ndim - 1] = 1;
    w = ir_pad(g, w, lo_const(g, t.dtype, 0.0), lo, hi, inr);
  }
  ir_type vt = t;
  vt.dims[vt.ndim - 2] = vt.dims[vt.ndim - 1] = k2;
  tv v = ir_convert(g, rc_cmp(g, vt, IR_EQ), vt.dtype);
  int64_t list[EIGH_MAX_N + 1], partner[EIGH_MAX_N + 1], first[EIGH_MAX_N + 1];
  for (int64_t i = 0; i < k2; i++) list[i] = i;
  for (int sw = 0; sw < sweeps; sw++) {
    for (int64_t r = 0; r + 1 < k2; r++) {
      schedule_pairs(list, k2, partner, first);
      hestenes_round(g, &w, &v, partner, first, k2);
      schedule_next(list, k2);
    }
  }
  w = head(g, w, big, k);
  v = head(g, v, k, k);
  int64_t rows = t.ndim - 2;
  tv sig = ir_unary(g, IR_SQRT, lo_sum(g, ir_binary(g, IR_MUL, w, w), &rows, 1, false));
  tv sorted, idx;
  ir_sort(g, sig, ir_type_of(g, sig).ndim - 1, true, &sorted, &idx);
  cx->results[1] = lo_out(g, sorted, cx->out_types[1]);
  if (!want_uv) {
    cx->results[0] = ir_splat(g, cx->out_types[0], 0.0);
    cx->results[2] = ir_splat(g, cx->out_types[2], 0.0);
    return NULL;
  }
  ir_type wt = ir_type_of(g, w);
  w = lo_take_along(g, w, wt.ndim - 1, spread(g, idx, ir_with_dtype(wt, TPUC_S64), false));
  ir_type kt = ir_type_of(g, v);
  v = lo_take_along(g, v, kt.ndim - 1, spread(g, idx, ir_with_dtype(kt, TPUC_S64), false));
  tv tau;
  tv f = lo_geqrf(g, w, &tau);
  int64_t qcols = full ? big : k;
  tv q = lo_householder_q(g, f, tau, k, qcols);
  /* sign(R_jj), 0 -> 1, and 1 for the completing columns */
  tv rd = diag_of(g, head(g, f, k, k));
  ir_type rdt = ir_type_of(g, rd);
  tv sgn = ir_select(g, ir_compare(g, IR_LT, rd, ir_splat(g, rdt, 0.0)), ir_splat(g, rdt, -1.0),
                     ir_splat(g, rdt, 1.0));
  if (qcols > k) {
    int64_t lo[TPUC_MAX_DIMS] = {0}, hi[TPUC_MAX_DIMS] = {0}, inr[TPUC_MAX_DIMS] = {0};
    hi[rdt.ndim - 1] = qcols - k;
    sgn = ir_pad(g, sgn, lo_const(g, rdt.dtype, 1.0), lo, hi, inr);
  }
  tv u = ir_binary(g, IR_MUL, q, spread(g, sgn, ir_type_of(g, q), false));
  /* A = U S V^T; for A^T = U' S V'^T: U = V', Vh = U'^T */
  cx->results[0] = lo_out(g, tr ? v : u, cx->out_types[0]);
  cx->results[2] = lo_out(g, tr ? mT(g, u) : mT(g, v), cx->out_types[2]);
  return NULL;
}

extern const tpuc_lowering tpuc_lowerings_linalg_eig[];
const tpuc_lowering tpuc_lowerings_linalg_eig[] = {
    {"aten::_linalg_eigh", l_linalg_eigh},
    {"aten::_linalg_eigh.eigenvalues", l_linalg_eigh},
    {"aten::_linalg_svd", l_linalg_svd},
    {"aten::_linalg_svd.U", l_linalg_svd},
    {NULL, NULL},
};
