/* linalg.c — lowerings of the matrix-product family (mm, bmm, addmm, addbmm,
 * baddbmm, addmv, mv, dot, vdot) and of the factorisations StableHLO gives
 * directly (cholesky, triangular_solve) with what composes from them.
 *
 * Products: every product is one dot_general; f16/bf16
 * accumulate in f32 and round once at the end (as PyTorch's CPU kernels do);
 * beta/alpha are runtime scalars, and beta == 0 ignores `self` (NaN
 * included), as PyTorch documents. Functional, in-place and out= overloads
 * share a lowering: arguments are read by schema position.
 *
 * Factorisations (second half): linalg_cholesky_ex, cholesky,
 * linalg_solve_triangular, triangular_solve, _cholesky_solve_helper /
 * cholesky_solve, cholesky_inverse, all as stablehlo.cholesky and
 * stablehlo.triangular_solve plus masks and products. Both are HLO ops that
 * every XLA backend compiles itself: the CPU plugin expands cholesky into a
 * blocked HLO loop (a 512x512 factor gains least of bench/cases/fft_linalg.py's
 * cases: 1.5x over the fallback) and solves with its own kernels; a TPU compiler
 * accepts both (f32/complex64). No LAPACK custom call is emitted: those exist
 * only on the CPU and a TPU compiler would refuse the program. LU, QR, SVD
 * and the symmetric eigendecomposition have no StableHLO op: linalg_lu.c,
 * linalg_qr.c and linalg_eig.c write them out of elementwise ops (small
 * sizes). f32/f64/complex only (the CPU has no f16 LAPACK either). */
#include "lower_ops.h"

typedef enum { P_MM, P_BMM, P_ADDBMM, P_MV, P_DOT, P_VDOT } prod_kind;

/* Complex conjugate (vdot), identity for real values. */
static tv conj_of(ir_graph *g, tv x) {
  if (!ir_is_complex(lo_dtype(g, x))) return x;
  return ir_binary(g, IR_COMPLEX, ir_unary(g, IR_REAL, x),
                   ir_unary(g, IR_NEG, ir_unary(g, IR_IMAG, x)));
}

/* a [M, K] @ b [K, N] where b is the transpose of w [N, K] (a linear layer's
 * x @ W^T) and N > M: computed as (w @ a^T)^T. The same sums; XLA CPU's dot
 * (Eigen's contraction) is ~3x slower with the bigger operand on the right
 * contracted over its minor dimension than with it on the left (x [16, 256]
 * @ W^T for W [4096, 256]: 1.7 ms against 0.58 ms; at 128 rows 7.5 against
 * 3.3), and a linear layer's forward is that case. XLA folds the operand's
 * transpose into the dot's dimension numbers; the barrier keeps its algebraic
 * simplifier from folding the result's transpose back into the slow form
 * (it rewrites transpose(dot(w, a)) as dot(a, w^T)). The transpose is M x N.
 * Only for XLA's CPU compiler: on a TPU or GPU the plain dot is the fast form
 * and a barrier would keep the result from fusing with what uses it. */
static tv mm_of(ir_graph *g, tv a, tv b) {
  tv w;
  ir_type ta = ir_type_of(g, a), tb = ir_type_of(g, b);
  if (ir_graph_xla_cpu(g) && ta.ndim == 2 && tb.ndim == 2 && tb.dims[1] > ta.dims[0] && ir_transposed_2d(g, b, &w)) {
    int64_t c = 1, perm[2] = {1, 0};
    tpuc_dtype d = lo_dtype(g, b);
    tv wa = ir_dot_general(g, w, a, NULL, NULL, 0, &c, &c, 1, lx_compute_dtype(d));
    return ir_transpose(g, ir_barrier(g, wa), perm);
  }
  return lo_matmul(g, a, b, 0, false, false);
}

/* dot and mv with a long contraction on XLA's CPU compiler: its dot emitter adds
 * a vector product in one running sum (torch.dot of 1e6 uniform values erred by
 * 4e-4 relative, the CPU's 2e-6), so K goes in blocks of ir_graph_sum_block
 * (TPUC_SUM_BLOCK; zeros pad the last): one batched product per block, then
 * the blocks' sums as lo_sum_dot adds them. a [M, K] (mv) or [K] (dot), b [K].
 * IR_NONE where it does not apply (a short K, the switch off, other compilers). */
static tv blocked_contraction(ir_graph *g, tv a, tv b, tpuc_dtype cd) {
  ir_type ta = ir_type_of(g, a);
  int64_t k = ta.dims[ta.ndim - 1], bs = ir_graph_sum_block(g);
  if (!ir_graph_xla_cpu(g) || bs < 2 || k <= bs || (cd != TPUC_F32 && cd != TPUC_F64))
    return IR_NONE;
  int64_t groups = (k + bs - 1) / bs, pad = groups * bs - k;
  tpuc_dtype da = ta.dtype;
  int64_t lo[2] = {0, 0}, hi[2] = {0, pad}, in[2] = {0, 0};
  if (pad) {
    a = ir_pad(g, a, ir_splat(g, ir_scalar_type(da), 0.0), lo + 2 - ta.ndim, hi + 2 - ta.ndim, in);
    b = ir_pad(g, b, ir_splat(g, ir_scalar_type(da), 0.0), lo + 1, hi + 1, in);
  }
  int64_t bdims[2] = {groups, bs}, adims[3] = {ta.dims[0], groups, bs};
  b = ir_reshape(g, b, 2, bdims);
  int64_t cb = 1, bb = 0, parts_dim0 = 0;
  tv parts; /* [groups] (dot) or [groups, M] (mv) */
  if (ta.ndim == 1) {
    a = ir_reshape(g, a, 2, bdims);
    parts = ir_dot_general(g, a, b, &bb, &bb, 1, &cb, &cb, 1, cd);
  } else {
    a = ir_reshape(g, a, 3, adims);
    int64_t ba = 1, ca = 2;
    parts = ir_dot_general(g, a, b, &ba, &bb, 1, &ca, &cb, 1, cd);
  }
  tv sum = lo_sum_dot(g, parts, &parts_dim0, 1);
  return sum != IR_NONE ? sum : lo_sum(g, parts, &parts_dim0, 1, false);
}

/* The product of a and b, in lx_compute_dtype of b's dtype. */
static tv product(ir_graph *g, prod_kind k, tv a, tv b) {
  tpuc_dtype d = lo_dtype(g, b);
  tpuc_dtype cd = lx_compute_dtype(d);
  a = ir_convert(g, a, d);
  switch (k) {
    case P_MM:
      return mm_of(g, a, b);
    case P_BMM:
      return lo_matmul(g, a, b, 1, false, false);
    case P_ADDBMM: { /* [B,M,K] x [B,K,N] summed over B: contract B and K */
      int64_t ca[2] = {0, 2}, cb[2] = {0, 1};
      return ir_dot_general(g, a, b, NULL, NULL, 0, ca, cb, 2, cd);
    }
    case P_MV: {
      int64_t ca = 1, cb = 0;
      tv blocked = blocked_contraction(g, a, b, cd);
      return blocked != IR_NONE ? blocked : ir_dot_general(g, a, b, NULL, NULL, 0, &ca, &cb, 1, cd);
    }
    case P_VDOT:
      a = conj_of(g, a);
      /* fall through */
    case P_DOT: {
      int64_t c = 0;
      tv blocked = blocked_contraction(g, a, b, cd);
      return blocked != IR_NONE ? blocked : ir_dot_general(g, a, b, NULL, NULL, 0, &c, &c, 1, cd);
    }
  }
  return IR_NONE;
}

/* mm, bmm, mv, dot, vdot: (self, other) -> product. */
static tpuc_status *lower_product(tpuc_lower_ctx *cx, prod_kind k) {
  ir_type ot = lx_out(cx, 0);
  tv p = product(cx->g, k, lx_tensor(cx, 0), lx_tensor(cx, 1));
  cx->results[0] = lo_out(cx->g, p, ot);
  return NULL;
}

/* addmm-like: beta * self + alpha * product(arg1, arg2); beta at arg 3,
 * alpha at arg 4 (keyword-only, schema order). */
static tpuc_status *lower_add_product(tpuc_lower_ctx *cx, prod_kind k) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  if (ot.dtype == TPUC_PRED) return lx_unimplemented(cx, "bool matrix products");
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  ir_type ct = ir_with_dtype(ot, cd);
  tv p = ir_convert(g, product(g, k, lx_tensor(cx, 1), lx_tensor(cx, 2)), cd);
  tv alpha = lx_scalar(cx, 4, cd), beta = lx_scalar(cx, 3, cd);
  if (alpha != IR_NONE) p = ir_binary(g, IR_MUL, p, lx_coerce(g, alpha, ct));
  tv self = lx_coerce(g, lx_tensor(cx, 0), ct);
  if (beta != IR_NONE) {
    tv b = lx_coerce(g, beta, ct);
    tv scaled = ir_binary(g, IR_MUL, self, b);
    tv zero = ir_splat(g, ct, 0.0);
    self = ir_select(g, ir_compare(g, IR_EQ, b, zero), zero, scaled);
  }
  cx->results[0] = lo_out(g, ir_binary(g, IR_ADD, self, p), ot);
  return NULL;
}

static tpuc_status *l_mm(tpuc_lower_ctx *cx) { return lower_product(cx, P_MM); }
static tpuc_status *l_bmm(tpuc_lower_ctx *cx) { return lower_product(cx, P_BMM); }
static tpuc_status *l_mv(tpuc_lower_ctx *cx) { return lower_product(cx, P_MV); }
static tpuc_status *l_dot(tpuc_lower_ctx *cx) { return lower_product(cx, P_DOT); }
static tpuc_status *l_vdot(tpuc_lower_ctx *cx) { return lower_product(cx, P_VDOT); }
static tpuc_status *l_addmm(tpuc_lower_ctx *cx) { return lower_add_product(cx, P_MM); }
static tpuc_status *l_baddbmm(tpuc_lower_ctx *cx) { return lower_add_product(cx, P_BMM); }
static tpuc_status *l_addbmm(tpuc_lower_ctx *cx) { return lower_add_product(cx, P_ADDBMM); }
static tpuc_status *l_addmv(tpuc_lower_ctx *cx) { return lower_add_product(cx, P_MV); }

/* ---- factorisations ------------------------------------------------------ */

static bool lapack_dtype(tpuc_dtype d) {
  return d == TPUC_F32 || d == TPUC_F64 || d == TPUC_C64 || d == TPUC_C128;
}

/* pred [..., M, N] of x's shape: the lower (row >= col) or upper triangle. */
static tv tri_mask(ir_graph *g, ir_type t, bool lower) {
  ir_type it = ir_with_dtype(t, TPUC_S64);
  tv row = ir_iota(g, it, t.ndim - 2), col = ir_iota(g, it, t.ndim - 1);
  return ir_compare(g, lower ? IR_GE : IR_LE, row, col);
}

/* x with the other triangle zeroed. */
static tv keep_tri(ir_graph *g, tv x, bool lower) {
  ir_type t = ir_type_of(g, x);
  return ir_select(g, tri_mask(g, t, lower), x, ir_splat(g, t, 0.0));
}

/* The conjugate transpose of the last two dims. */
static tv adjoint(ir_graph *g, tv x) {
  ir_type t = ir_type_of(g, x);
  int64_t perm[TPUC_MAX_DIMS];
  for (int i = 0; i < t.ndim; i++) perm[i] = i;
  perm[t.ndim - 2] = t.ndim - 1;
  perm[t.ndim - 1] = t.ndim - 2;
  return conj_of(g, ir_transpose(g, x, perm));
}

/* x [..., R, C] broadcast to the batch dims of `like` (any rank >= 2). */
static tv to_batch(ir_graph *g, tv x, ir_type like) {
  ir_type t = ir_type_of(g, x);
  int64_t dims[TPUC_MAX_DIMS];
  for (int i = 0; i < like.ndim - 2; i++) dims[i] = like.dims[i];
  dims[like.ndim - 2] = t.dims[t.ndim - 2];
  dims[like.ndim - 1] = t.dims[t.ndim - 1];
  return lx_broadcast_to(g, x, like.ndim, dims);
}

/* Zeros for every output when one is empty (an empty batch or 0 x 0
 * matrices: nothing to factor); true when that was done. */
static bool empty_outputs(tpuc_lower_ctx *cx) {
  bool empty = false;
  for (int i = 0; i < cx->noutputs; i++) empty |= ir_numel(&cx->out_types[i]) == 0;
  if (!empty) return false;
  for (int i = 0; i < cx->noutputs; i++) cx->results[i] = ir_splat(cx->g, cx->out_types[i], 0.0);
  return true;
}

/* The Cholesky factor of a (lower: L, else U = L^H), the other triangle zero. */
static tv chol_factor(ir_graph *g, tv a, bool upper) {
  return keep_tri(g, ir_cholesky(g, a, !upper), !upper);
}

/* LAPACK's info for a factor, s32 [batch]: 0 when every pivot is positive
 * and finite, else the first column whose pivot is not. XLA's expanders (the
 * CPU plugin's, and as far as we know the TPU compiler's) return a factor of
 * NaN for a matrix that is not positive definite, so that column is then 1:
 * info says whether the factorization failed, not always at which leading
 * minor (LAPACK says the order; finding it would cost log2(M) more
 * factorizations on every call). */
static tv chol_info(ir_graph *g, tv f) {
  ir_type t = ir_type_of(g, f);
  if (ir_is_complex(t.dtype)) {
    f = ir_unary(g, IR_REAL, f);
    t = ir_type_of(g, f);
  }
  tv eye = ir_compare(g, IR_EQ, ir_iota(g, ir_with_dtype(t, TPUC_S64), t.ndim - 2),
                      ir_iota(g, ir_with_dtype(t, TPUC_S64), t.ndim - 1));
  int64_t last = t.ndim - 1;
  tv diag = lo_pick_sum(g, ir_select(g, eye, f, ir_splat(g, t, 0.0)), &last, 1, false);
  ir_type dt = ir_type_of(g, diag);
  tv bad = ir_unary(g, IR_NOT, ir_compare(g, IR_GT, diag, ir_splat(g, dt, 0.0)));
  bad = ir_binary(g, IR_OR, bad, ir_unary(g, IR_NOT, ir_unary(g, IR_IS_FINITE, diag)));
  ir_type st = ir_with_dtype(dt, TPUC_S32);
  tv order = ir_binary(g, IR_ADD, ir_iota(g, st, dt.ndim - 1), ir_splat(g, st, 1.0));
  tv big = ir_splat(g, st, 2147483647.0);
  int64_t m = dt.ndim - 1;
  tv first = ir_reduce(g, ir_select(g, bad, order, big), lo_const(g, TPUC_S32, 2147483647.0),
                       IR_RED_MIN, &m, 1);
  ir_type ft = ir_type_of(g, first);
  return ir_select(g, ir_compare(g, IR_EQ, first, ir_splat(g, ft, 2147483647.0)),
                   ir_splat(g, ft, 0.0), first);
}

/* linalg_cholesky_ex(self, *, upper, check_errors) -> (L, info). */
static tpuc_status *l_cholesky_ex(tpuc_lower_ctx *cx) {
  ir_type ot = lx_out(cx, 0);
  if (!lapack_dtype(ot.dtype)) return lx_unimplemented(cx, "cholesky: f32/f64/complex only");
  if (empty_outputs(cx)) return NULL;
  tv f = chol_factor(cx->g, lx_coerce(cx->g, lx_tensor(cx, 0), ot), lx_bool(cx, 1, false));
  cx->results[0] = f;
  if (cx->noutputs > 1) cx->results[1] = lo_out(cx->g, chol_info(cx->g, f), lx_out(cx, 1));
  return NULL;
}

/* cholesky(self, upper=False): the legacy form, no info. */
static tpuc_status *l_cholesky(tpuc_lower_ctx *cx) {
  ir_type ot = lx_out(cx, 0);
  if (!lapack_dtype(ot.dtype)) return lx_unimplemented(cx, "cholesky: f32/f64/complex only");
  if (empty_outputs(cx)) return NULL;
  tv a = lx_coerce(cx->g, lx_tensor(cx, 0), ot);
  cx->results[0] = chol_factor(cx->g, a, lx_bool(cx, 1, false));
  return NULL;
}

/* op(a) x = b (left) or x op(a) = b, a and b broadcast to out's batch dims. */
static tv tri_solve(ir_graph *g, tv a, tv b, ir_type ot, bool left, bool upper, bool unit,
                    ir_transpose_kind tr) {
  a = to_batch(g, ir_convert(g, a, ot.dtype), ot);
  b = to_batch(g, ir_convert(g, b, ot.dtype), ot);
  return ir_triangular_solve(g, a, b, left, !upper, unit, tr);
}

/* linalg_solve_triangular(A, B, *, upper, left=True, unitriangular=False). */
static tpuc_status *l_solve_triangular(tpuc_lower_ctx *cx) {
  ir_type ot = lx_out(cx, 0);
  if (!lapack_dtype(ot.dtype)) return lx_unimplemented(cx, "triangular solve: f32/f64/complex");
  if (empty_outputs(cx)) return NULL;
  cx->results[0] = tri_solve(cx->g, lx_tensor(cx, 0), lx_tensor(cx, 1), ot, lx_bool(cx, 3, true),
                             lx_bool(cx, 2, false), lx_bool(cx, 4, false), IR_TRANSPOSE_NO);
  return NULL;
}

/* triangular_solve(b, A, upper=True, transpose=False, unitriangular=False)
 * -> (solution, cloned_coefficient); `transpose` is A^T (not A^H). */
static tpuc_status *l_triangular_solve(tpuc_lower_ctx *cx) {
  ir_type ot = lx_out(cx, 0);
  if (!lapack_dtype(ot.dtype)) return lx_unimplemented(cx, "triangular solve: f32/f64/complex");
  if (empty_outputs(cx)) return NULL;
  tv a = lx_tensor(cx, 1);
  bool tr = lx_bool(cx, 3, false);
  cx->results[0] = tri_solve(cx->g, a, lx_tensor(cx, 0), ot, true, lx_bool(cx, 2, true),
                             lx_bool(cx, 4, false), tr ? IR_TRANSPOSE_T : IR_TRANSPOSE_NO);
  if (cx->noutputs > 1)
    cx->results[1] =
        to_batch(cx->g, ir_convert(cx->g, a, cx->out_types[1].dtype), cx->out_types[1]);
  return NULL;
}

/* x with L L^H x = b (upper: U^H U x = b): two triangular solves. */
static tv chol_solve(ir_graph *g, tv f, tv b, ir_type ot, bool upper) {
  tv y = tri_solve(g, f, b, ot, true, upper, false, upper ? IR_TRANSPOSE_ADJOINT : IR_TRANSPOSE_NO);
  return tri_solve(g, f, y, ot, true, upper, false, upper ? IR_TRANSPOSE_NO : IR_TRANSPOSE_ADJOINT);
}

/* _cholesky_solve_helper(self=B, A=factor, upper), cholesky_solve(B, L, upper). */
static tpuc_status *l_cholesky_solve(tpuc_lower_ctx *cx) {
  ir_type ot = lx_out(cx, 0);
  if (!lapack_dtype(ot.dtype)) return lx_unimplemented(cx, "cholesky_solve: f32/f64/complex");
  if (empty_outputs(cx)) return NULL;
  cx->results[0] = chol_solve(cx->g, lx_tensor(cx, 1), lx_tensor(cx, 0), ot, lx_bool(cx, 2, false));
  return NULL;
}

/* cholesky_inverse(L, upper=False): (L L^H)^-1 = L^-H L^-1, computed as
 * inv(L) [lower] then its Gram product, which is Hermitian by construction. */
static tpuc_status *l_cholesky_inverse(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  if (!lapack_dtype(ot.dtype)) return lx_unimplemented(cx, "cholesky_inverse: f32/f64/complex");
  if (empty_outputs(cx)) return NULL;
  bool upper = lx_bool(cx, 1, false);
  tv f = ir_convert(g, lx_tensor(cx, 0), ot.dtype);
  ir_type it = ir_with_dtype(ot, TPUC_S64);
  tv eye = ir_compare(g, IR_EQ, ir_iota(g, it, ot.ndim - 2), ir_iota(g, it, ot.ndim - 1));
  eye = ir_convert(g, eye, ot.dtype);
  /* lower: W = L^-1, A^-1 = W^H W; upper (A = U^H U): W = U^-1, A^-1 = W W^H */
  tv w = ir_triangular_solve(g, f, eye, true, !upper, false, IR_TRANSPOSE_NO);
  int nb = ot.ndim - 2;
  tv r = upper ? lo_matmul(g, w, adjoint(g, w), nb, false, false)
               : lo_matmul(g, adjoint(g, w), w, nb, false, false);
  cx->results[0] = lo_out(g, r, ot);
  return NULL;
}

const tpuc_lowering tpuc_lowerings_linalg[] = {
    {"aten::mm", l_mm},
    {"aten::mm.out", l_mm},
    {"aten::bmm", l_bmm},
    {"aten::bmm.out", l_bmm},
    {"aten::mv", l_mv},
    {"aten::mv.out", l_mv},
    {"aten::dot", l_dot},
    {"aten::dot.out", l_dot},
    {"aten::vdot", l_vdot},
    {"aten::vdot.out", l_vdot},
    {"aten::addmm", l_addmm},
    {"aten::addmm.out", l_addmm},
    {"aten::addmm_", l_addmm},
    {"aten::baddbmm", l_baddbmm},
    {"aten::baddbmm.out", l_baddbmm},
    {"aten::baddbmm_", l_baddbmm},
    {"aten::addbmm", l_addbmm},
    {"aten::addbmm.out", l_addbmm},
    {"aten::addbmm_", l_addbmm},
    {"aten::addmv", l_addmv},
    {"aten::addmv.out", l_addmv},
    {"aten::addmv_", l_addmv},
    {"aten::linalg_cholesky_ex", l_cholesky_ex},
    {"aten::linalg_cholesky_ex.L", l_cholesky_ex},
    {"aten::cholesky", l_cholesky},
    {"aten::cholesky.out", l_cholesky},
    {"aten::linalg_solve_triangular", l_solve_triangular},
    {"aten::linalg_solve_triangular.out", l_solve_triangular},
    {"aten::triangular_solve", l_triangular_solve},
    {"aten::triangular_solve.X", l_triangular_solve},
    {"aten::_cholesky_solve_helper", l_cholesky_solve},
    {"aten::_cholesky_solve_helper.out", l_cholesky_solve},
    {"aten::cholesky_solve", l_cholesky_solve},
    {"aten::cholesky_solve.out", l_cholesky_solve},
    {"aten::cholesky_inverse", l_cholesky_inverse},
    {"aten::cholesky_inverse.out", l_cholesky_inverse},
    {NULL, NULL},
};
