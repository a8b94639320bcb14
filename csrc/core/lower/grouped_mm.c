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
 * leaves them uninitialised). A bias, 3-D x 2-D and missing offs where they
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
    r = grouped_rows(g, a, b, lx_tensor(cx, 2), cd);
  } else if (at.ndim == 2 && bt.ndim == 2 && has_offs) {
    r = grouped_inner(g, a, b, lx_tensor(cx, 2), cd);
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
