/* grouped_mm.c — aten::_grouped_mm (the MoE experts' grouped matmul) as one
 * program of fixed shape, whatever the number of rows per group.
 *
 * PyTorch's CompositeExplicitAutograd kernel splits the op into one mm per
 * group with a data-dependent row count, so every new routing compiled new
 * programs. Here the group of each row is computed on the device from `offs`
 * (cumulative row ends, int32): gid[i] = #{g : offs[g] <= i}; a one-hot
 * [rows, G] mask built from it selects, inside a single dot_general, the
 * group's matrix for each row. The cost is that of G dense products (the
 * masked terms are zeros), the shapes never change, and the backward (PyTorch's
 * GroupedMmBackward0, which calls _grouped_mm again with transposed operands)
 * runs through the same lowering.
 *
 * Cases (the ones autograd and MoE layers use):
 *   2-D x 3-D, offs over rows: A [M,K], B [G,K,N] -> [M,N]   (forward, grad A)
 *   2-D x 2-D, offs over K:    A [M,K], B [K,N]   -> [G,M,N] (grad B)
 *   3-D x 3-D, no offs:        A [G,M,K], B [G,K,N] -> [G,M,N] (batched)
 * Rows past offs[G-1] belong to no group and come out as zeros (PyTorch
 * leaves them uninitialised).
 *
 * Many groups (G >= GATHER_MIN_GROUPS) and a small enough [M,K,N] intermediate
 * take the gather forms instead, which do the useful work only (no G factor):
 * rows: each row's group matrix is gathered (B[gid] [M,K,N]) and multiplied
 * row by row (a batched dot); inner: the products A[m,k] B[k,n] [K,M,N] are
 * scatter-added into their group. Same f32 products and f32 sums (any order),
 * so the same error bound. MoE layers (64 experts, top-8) spent ~64x the
 * useful flops in the masked form.
 *
 * A bias, 3-D x 2-D and missing offs where they
 * are needed are declined (the CPU fallback runs them). bf16/f16 multiply
 * exactly in f32 and accumulate in f32, rounded once (as PyTorch's kernels do). */
#include "lower_ops.h"

/* The one-hot group membership [n, G] (pred) of positions 0..n-1 given the
 * cumulative ends offs [G] (any integer dtype). */
static tv group_onehot(ir_graph *g, tv offs, int64_t n) {
  ir_type ot = ir_type_of(g, offs);
  int64_t G = ot.dims[0];
  int64_t d2[2] = {n, G};
  ir_type it = ir_make_type(TPUC_S64, 2, d2);
  tv pos = ir_iota(g, it, 0);
  int64_t bd1 = 1;
  tv ends = ir_broadcast_in_dim(g, ir_convert(g, offs, TPUC_S64), it, &bd1);
  tv ended = ir_convert(g, ir_compare(g, IR_GE, pos, ends), TPUC_S64); /* offs[g] <= i */
  int64_t red = 1;
  tv gid = lo_sum(g, ended, &red, 1, true);                            /* [n, 1] */
  int64_t bd[2] = {0, 1};
  tv gidb = ir_broadcast_in_dim(g, gid, it, bd);
  return ir_compare(g, IR_EQ, ir_iota(g, it, 1), gidb);
}

enum { GATHER_MIN_GROUPS = 8 };
#define GATHER_MAX_ELEMS ((int64_t)1 << 26) /* the [M,K,N] intermediate (256 MiB in f32) */

static bool use_gather(int64_t G, int64_t m, int64_t k, int64_t n) {
  return G >= GATHER_MIN_GROUPS && m > 0 && k > 0 && n > 0 && m <= GATHER_MAX_ELEMS / k / n;
}

/* The group of positions 0..n-1: gid [n] (s64) = #{g : offs[g] <= i}, which is
 * G for positions past the last end. */
static tv group_ids(ir_graph *g, tv offs, int64_t n) {
  int64_t G = ir_type_of(g, offs).dims[0];
  int64_t d2[2] = {n, G};
  ir_type it = ir_make_type(TPUC_S64, 2, d2);
  int64_t bd1 = 1;
  tv ends = ir_broadcast_in_dim(g, ir_convert(g, offs, TPUC_S64), it, &bd1);
  tv ended = ir_convert(g, ir_compare(g, IR_GE, ir_iota(g, it, 0), ends), TPUC_S64);
  int64_t red = 1;
  return lo_sum(g, ended, &red, 1, false); /* [n] */
}

/* rows, gather form: out[i] = A[i] . B[gid[i]], rows of no group zero. */
static tv grouped_rows_gather(ir_graph *g, tv a, tv b, tv offs, tpuc_dtype cd) {
  ir_type at = ir_type_of(g, a), bt = ir_type_of(g, b);
  int64_t M = at.dims[0], G = bt.dims[0], N = bt.dims[2];
  tv gid = group_ids(g, offs, M);
  ir_type gt = ir_type_of(g, gid);
  tv valid = ir_compare(g, IR_LT, gid, ir_splat_i64(g, gt, G));
  tv idx = ir_select(g, valid, gid, ir_splat_i64(g, gt, G - 1));
  tv w = lo_take_dim(g, b, 0, idx); /* [M, K, N] */
  int64_t ab = 0, wb = 0, ac = 1, wc = 1;
  tv r = ir_dot_general(g, a, w, &ab, &wb, 1, &ac, &wc, 1, cd); /* [M, N] */
  int64_t d2[2] = {M, N}, bd = 0;
  ir_type rt = ir_make_type(cd, 2, d2);
  return ir_select(g, ir_broadcast_in_dim(g, valid, ir_with_dtype(rt, TPUC_PRED), &bd), r,
                   ir_splat(g, rt, 0.0));
}

/* inner, gather form: out[g] = sum over k of group g of A[:,k] (x) B[k,:]. */
static tv grouped_inner_gather(ir_graph *g, tv a, tv b, tv offs, tpuc_dtype cd) {
  ir_type at = ir_type_of(g, a), bt = ir_type_of(g, b);
  int64_t M = at.dims[0], K = at.dims[1], N = bt.dims[1];
  int64_t G = ir_type_of(g, offs).dims[0];
  tv gid = group_ids(g, offs, K);
  ir_type gt = ir_type_of(g, gid);
  tv valid = ir_compare(g, IR_LT, gid, ir_splat_i64(g, gt, G));
  tv idx = ir_select(g, valid, gid, ir_splat_i64(g, gt, G - 1));
  int64_t d3[3] = {K, M, N};
  ir_type pt = ir_make_type(cd, 3, d3);
  int64_t bda[2] = {1, 0}, bdb[2] = {0, 2}, bdv = 0;
  tv p = ir_binary(g, IR_MUL, ir_broadcast_in_dim(g, a, pt, bda), ir_broadcast_in_dim(g, b, pt, bdb));
  p = ir_select(g, ir_broadcast_in_dim(g, valid, ir_with_dtype(pt, TPUC_PRED), &bdv), p,
                ir_splat(g, pt, 0.0));
  int64_t o3[3] = {G, M, N};
  return lo_put_dim(g, ir_splat(g, ir_make_type(cd, 3, o3), 0.0), 0, idx, p, IR_RED_SUM);
}

/* x * mask, with mask (pred) broadcast into x's type through `bdims`. */
static tv masked(ir_graph *g, tv x, tv mask, const int64_t *bdims) {
  ir_type xt = ir_type_of(g, x);
  tv m = ir_broadcast_in_dim(g, ir_convert(g, mask, xt.dtype), xt, bdims);
  return ir_binary(g, IR_MUL, x, m);
}

/* A [M,K] x B [G,K,N], rows grouped by offs -> [M,N] in cd. */
static tv grouped_rows(ir_graph *g, tv a, tv b, tv offs, tpuc_dtype cd) {
  ir_type at = ir_type_of(g, a), bt = ir_type_of(g, b);
  int64_t M = at.dims[0], K = at.dims[1], G = bt.dims[0], N = bt.dims[2];
  tv oh = group_onehot(g, offs, M); /* [M, G] */
  if (K <= N) {
    /* X[i, g, k] = A[i, k] * oh[i, g]; out = X [M, G*K] . B [G*K, N] */
    int64_t d3[3] = {M, G, K};
    int64_t bda[2] = {0, 2}, bdm[2] = {0, 1};
    tv x = ir_broadcast_in_dim(g, a, ir_make_type(at.dtype, 3, d3), bda);
    x = masked(g, x, oh, bdm);
    int64_t xf[2] = {M, G * K}, bf[2] = {G * K, N};
    x = ir_reshape(g, x, 2, xf);
    tv b2 = ir_reshape(g, b, 2, bf);
    int64_t ca = 1, cb = 0;
    return ir_dot_general(g, x, b2, NULL, NULL, 0, &ca, &cb, 1, cd);
  }
  /* R[i, g, n] = sum_k A[i,k] B[g,k,n]; out = sum_g R * oh */
  int64_t ca = 1, cb = 1;
  tv r = ir_dot_general(g, a, b, NULL, NULL, 0, &ca, &cb, 1, cd); /* [M, G, N] */
  int64_t bdm[2] = {0, 1};
  r = masked(g, r, oh, bdm);
  int64_t red = 1;
  return lo_sum(g, r, &red, 1, false);
}

/* A [M,K] x B [K,N], K grouped by offs -> [G,M,N] in cd. */
static tv grouped_inner(ir_graph *g, tv a, tv b, tv offs, tpuc_dtype cd) {
  ir_type at = ir_type_of(g, a), bt = ir_type_of(g, b);
  int64_t M = at.dims[0], K = at.dims[1], N = bt.dims[1];
  int64_t G = ir_type_of(g, offs).dims[0];
  tv oh = group_onehot(g, offs, K); /* [K, G] */
  tv r;
  if (M <= N) {
    /* X[i, k, g] = A[i,k] * oh[k,g]; R = X . B contracting k -> [M, G, N] */
    int64_t d3[3] = {M, K, G};
    int64_t bda[2] = {0, 1}, bdm[2] = {1, 2};
    tv x = ir_broadcast_in_dim(g, a, ir_make_type(at.dtype, 3, d3), bda);
    x = masked(g, x, oh, bdm);
    int64_t ca = 1, cb = 0;
    r = ir_dot_general(g, x, b, NULL, NULL, 0, &ca, &cb, 1, cd);
  } else {
    /* Y[k, g, n] = B[k,n] * oh[k,g]; R = A . Y contracting k -> [M, G, N] */
    int64_t d3[3] = {K, G, N};
    int64_t bdb[2] = {0, 2}, bdm[2] = {0, 1};
    tv y = ir_broadcast_in_dim(g, b, ir_make_type(bt.dtype, 3, d3), bdb);
    y = masked(g, y, oh, bdm);
    int64_t ca = 1, cb = 0;
    r = ir_dot_general(g, a, y, NULL, NULL, 0, &ca, &cb, 1, cd);
  }
  (void)G;
  int64_t perm[3] = {1, 0, 2};
  return ir_transpose(g, r, perm);
}

/* _grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None) */
static tpuc_status *l_grouped_mm(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  if (!lx_is_none(cx, 3)) return lx_unimplemented(cx, "_grouped_mm with a bias");
  tv a = lx_tensor(cx, 0), b = lx_tensor(cx, 1);
  bool has_offs = !lx_is_none(cx, 2);
  ir_type at = ir_type_of(g, a), bt = ir_type_of(g, b);
  if (!ir_is_float(at.dtype) || !ir_is_float(bt.dtype))
    return lx_unimplemented(cx, "_grouped_mm of non-float matrices");
  tpuc_dtype d = bt.dtype, cd = lx_compute_dtype(d);
  if (at.dtype != d) a = ir_convert(g, a, d);
  /* Products of bf16/f16 values are exact in f32: compute in f32 (XLA CPU's
   * dot has no bf16 x bf16 -> f32 form for these shapes). */
  if (has_offs) {
    a = ir_convert(g, a, cd);
    b = ir_convert(g, b, cd);
  }
  tv r;
  if (at.ndim == 2 && bt.ndim == 3 && has_offs) {
    r = use_gather(bt.dims[0], at.dims[0], at.dims[1], bt.dims[2])
            ? grouped_rows_gather(g, a, b, lx_tensor(cx, 2), cd)
            : grouped_rows(g, a, b, lx_tensor(cx, 2), cd);
  } else if (at.ndim == 2 && bt.ndim == 2 && has_offs) {
    int64_t G = ir_type_of(g, lx_tensor(cx, 2)).dims[0];
    r = use_gather(G, at.dims[1], at.dims[0], bt.dims[1])
            ? grouped_inner_gather(g, a, b, lx_tensor(cx, 2), cd)
            : grouped_inner(g, a, b, lx_tensor(cx, 2), cd);
  } else if (at.ndim == 3 && bt.ndim == 3 && !has_offs) {
    r = lo_matmul(g, a, b, 1, false, false);
  } else {
    return lx_unimplemented(cx, "_grouped_mm: only 2-D x 3-D and 2-D x 2-D with offs, "
                                "3-D x 3-D without");
  }
  cx->results[0] = lo_out(g, ir_convert(g, r, cd), ot);
  return NULL;
}

const tpuc_lowering tpuc_lowerings_grouped_mm[] = {
    {"aten::_grouped_mm", l_grouped_mm},
    {NULL, NULL},
};
