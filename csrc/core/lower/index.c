/* index.c — lowerings of indexing: index_select, gather, scatter (src,
 * value, reduce), scatter_add, scatter_reduce, index.Tensor (advanced
 * indexing, boolean masks included), index_put / _index_put_impl_,
 * index_add, index_copy, index_reduce, index_fill, masked_scatter, take, put, embedding
 * and embedding_dense_backward. Everything becomes a StableHLO gather or
 * scatter; negative indices wrap like PyTorch where PyTorch accepts them.
 * Out-of-range indices are a user error PyTorch reports; XLA would clamp
 * (gather) or drop (scatter), so when checks are on every index is checked
 * inside the program with PyTorch's own range and words (lx_check_index,
 * lower/bounds.c). */
#include "lower_ops.h"

/* ---- building blocks ---- */


/* torch.scatter: x[..., idx[i...], ...] (op)= upd[i...] (upd of idx's shape). */
static tv scatter_elems(ir_graph *g, tv x, int dim, tv idx, tv upd, ir_reducer combine) {
  int r = lo_rank(g, x);
  ir_scatter_dims d;
  memset(&d, 0, sizeof d);
  for (int i = 0; i < r; i++) {
    d.inserted_window_dims[d.n_inserted++] = i;
    d.scatter_dims_to_operand_dims[d.n_scatter_dims++] = i;
  }
  d.index_vector_dim = lo_rank(g, idx);
  return ir_scatter(g, x, lo_elem_coords(g, dim, idx, r), upd, &d, combine);
}

/* A rank-0 x as [1] (PyTorch treats 0-d as 1-element along dim 0). */
static tv at_least_1d(ir_graph *g, tv x) {
  int64_t one = 1;
  return lo_rank(g, x) == 0 ? ir_reshape(g, x, 1, &one) : x;
}

static const char *lx_string(const tpuc_lower_ctx *cx, int i) {
  const tpuc_arg *a = lx_arg(cx, i);
  return a && a->kind == TPUC_ARG_STRING ? a->s : NULL;
}

/* ---- index_select, gather, take, embedding ---- */

/* index_select(self, dim, index). */
static tpuc_status *l_index_select(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = at_least_1d(g, lx_tensor(cx, 0));
  ir_type xt = ir_type_of(g, x);
  int dim = (int)lx_dim(lx_int(cx, 1, 0), xt.ndim);
  lx_check_index(cx, lx_tensor(cx, 2), xt.dims[dim], false, TPUC_CHECK_IN_SELF, dim);
  tv idx = at_least_1d(g, lo_wrap_index(g, lx_tensor(cx, 2), xt.dims[dim]));
  cx->results[0] = lo_out(g, ir_reshape(g, lo_take_dim(g, x, dim, idx), ot.ndim, ot.dims), ot);
  return NULL;
}

/* gather(self, dim, index, *, sparse_grad=False). */
static tpuc_status *l_gather(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = at_least_1d(g, lx_tensor(cx, 0));
  ir_type xt = ir_type_of(g, x);
  int dim = (int)lx_dim(lx_int(cx, 1, 0), xt.ndim);
  lx_check_index(cx, lx_tensor(cx, 2), xt.dims[dim], false, TPUC_CHECK_DIM_RUNTIME, dim);
  tv idx = at_least_1d(g, lo_wrap_index(g, lx_tensor(cx, 2), xt.dims[dim]));
  if (ir_numel(&ot) == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  cx->results[0] = lo_out(g, ir_reshape(g, lo_take_along(g, x, dim, idx), ot.ndim, ot.dims), ot);
  return NULL;
}

/* take(self, index): indices into the flattened tensor. */
static tpuc_status *l_take(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  lx_check_index(cx, lx_tensor(cx, 1), ir_numel(&xt), true, TPUC_CHECK_FLAT, 0);
  if (ir_numel(&ot) == 0) { /* no index: nothing to gather (a gather from an empty x is invalid) */
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  int64_t n = ir_numel(&xt);
  x = ir_reshape(g, x, 1, &n);
  tv idx = lo_wrap_index(g, lx_tensor(cx, 1), n);
  cx->results[0] = lo_out(g, lo_take_dim(g, x, 0, idx), ot);
  return NULL;
}

/* embedding(weight, indices, padding_idx=-1, scale_grad_by_freq, sparse). */
static tpuc_status *l_embedding(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv w = lx_tensor(cx, 0);
  lx_check_index(cx, lx_tensor(cx, 1), ir_type_of(g, w).dims[0], false, TPUC_CHECK_IN_SELF, 0);
  tv idx = lo_wrap_index(g, lx_tensor(cx, 1), ir_type_of(g, w).dims[0]);
  cx->results[0] = lo_out(g, lo_take_dim(g, w, 0, idx), ot);
  return NULL;
}

/* embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
 * scale_grad_by_freq): rows of grad summed into their index, in f32 for
 * f16/bf16; rows of padding_idx dropped. */
static tpuc_status *l_embedding_backward(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  if (ot.ndim != 2) return lx_unimplemented(cx, "embedding weight of rank != 2");
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  /* PyTorch's CPU kernel silently drops such rows; the forward raised */
  lx_check_index(cx, lx_tensor(cx, 1), ot.dims[0], false, TPUC_CHECK_IN_SELF, 0);
  tv gr = ir_convert(g, lx_tensor(cx, 0), cd);
  tv idx = ir_convert(g, lx_tensor(cx, 1), TPUC_S64);
  int64_t n = ir_numel(ir_typeof(g, idx)), nw = ot.dims[0], dd = ot.dims[1];
  int64_t gd[2] = {n, dd};
  idx = ir_reshape(g, idx, 1, &n);
  gr = ir_reshape(g, gr, 2, gd);
  int64_t pad = lx_int(cx, 3, -1);
  if (pad >= 0) {
    tv keep = ir_compare(g, IR_NE, idx, ir_splat_i64(g, ir_type_of(g, idx), pad));
    gr = lo_where(g, ir_reshape(g, keep, 2, (int64_t[2]){n, 1}), gr, lo_const(g, cd, 0.0));
  }
  if (lx_bool(cx, 4, false)) { /* scale_grad_by_freq */
    tv ones = ir_splat(g, ir_make_type(cd, 1, &n), 1.0);
    tv counts = lo_put_dim(g, ir_splat(g, ir_make_type(cd, 1, &nw), 0.0), 0, idx, ones, IR_RED_SUM);
    tv per_row = lo_take_dim(g, counts, 0, idx);
    gr = lo_bin(g, IR_DIV, gr, ir_reshape(g, per_row, 2, (int64_t[2]){n, 1}));
  }
  tv acc = lo_put_dim(g, ir_splat(g, ir_with_dtype(ot, cd), 0.0), 0, idx, gr, IR_RED_SUM);
  cx->results[0] = lo_out(g, acc, ot);
  return NULL;
}

/* ---- scatter family ---- */

/* The reducer named by scatter's `reduce` string; false if unknown. */
static bool scatter_reducer(const char *s, ir_reducer *r) {
  if (!s) return false;
  if (!strcmp(s, "add") || !strcmp(s, "sum")) *r = IR_RED_SUM;
  else if (!strcmp(s, "multiply") || !strcmp(s, "prod")) *r = IR_RED_PROD;
  else if (!strcmp(s, "amax")) *r = IR_RED_MAX;
  else if (!strcmp(s, "amin")) *r = IR_RED_MIN;
  else return false;
  return true;
}

/* Updates for scatter: src cut to index's shape, or a value broadcast to it. */
static tv scatter_updates(ir_graph *g, tv src, tv index, tpuc_dtype d) {
  ir_type it = ir_type_of(g, index), st = ir_type_of(g, src);
  src = ir_convert(g, src, d);
  if (st.ndim == 0) return lx_broadcast_to(g, src, it.ndim, it.dims);
  int64_t start[TPUC_MAX_DIMS] = {0};
  return ir_slice(g, src, start, it.dims, NULL);
}

/* scatter.{src,value,reduce,value_reduce} and scatter_add: (self, dim,
 * index, src|value[, reduce]). */
static tpuc_status *lower_scatter(tpuc_lower_ctx *cx, bool add) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = ir_convert(g, at_least_1d(g, lx_tensor(cx, 0)), ot.dtype);
  ir_type xt = ir_type_of(g, x);
  int dim = (int)lx_dim(lx_int(cx, 1, 0), xt.ndim);
  lx_check_index(cx, lx_tensor(cx, 2), xt.dims[dim], false, TPUC_CHECK_DIM_RUNTIME, dim);
  tv index = at_least_1d(g, lo_wrap_index(g, lx_tensor(cx, 2), xt.dims[dim]));
  const tpuc_arg *a3 = lx_arg(cx, 3);
  tv src = a3 && a3->kind == TPUC_ARG_SCALAR ? lx_scalar(cx, 3, ot.dtype) : lx_tensor(cx, 3);
  ir_reducer r = add ? IR_RED_SUM : IR_SCATTER_REPLACE;
  const char *rs = lx_string(cx, 4);
  if (rs && !scatter_reducer(rs, &r)) return lx_unimplemented(cx, "unknown reduce");
  if (ir_numel(ir_typeof(g, index)) == 0) {
    cx->results[0] = lo_out(g, ir_reshape(g, x, ot.ndim, ot.dims), ot);
    return NULL;
  }
  tv upd = at_least_1d(g, scatter_updates(g, src, index, ot.dtype));
  tv y = scatter_elems(g, x, dim, index, upd, r);
  cx->results[0] = ir_reshape(g, y, ot.ndim, ot.dims);
  return NULL;
}
static tpuc_status *l_scatter(tpuc_lower_ctx *cx) { return lower_scatter(cx, false); }
static tpuc_status *l_scatter_add(tpuc_lower_ctx *cx) { return lower_scatter(cx, true); }

/* scatter_reduce.two(self, dim, index, src, reduce, *, include_self=True):
 * sum/prod/mean/amax/amin. Without include_self the scattered positions
 * start from the reducer's identity; mean divides by the count of values
 * (floor division for integers, as PyTorch). */
static tpuc_status *l_scatter_reduce(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = ir_convert(g, at_least_1d(g, lx_tensor(cx, 0)), ot.dtype);
  ir_type xt = ir_type_of(g, x);
  int dim = (int)lx_dim(lx_int(cx, 1, 0), xt.ndim);
  lx_check_index(cx, lx_tensor(cx, 2), xt.dims[dim], false, TPUC_CHECK_DIM_RUNTIME, dim);
  tv index = at_least_1d(g, lo_wrap_index(g, lx_tensor(cx, 2), xt.dims[dim]));
  const char *rs = lx_string(cx, 4);
  bool mean = rs && !strcmp(rs, "mean"), self_in = lx_bool(cx, 5, true);
  ir_reducer r = IR_RED_SUM;
  if (!mean && !scatter_reducer(rs, &r)) return lx_unimplemented(cx, "unknown reduce");
  if (ir_numel(ir_typeof(g, index)) == 0) {
    cx->results[0] = lo_out(g, ir_reshape(g, x, ot.ndim, ot.dims), ot);
    return NULL;
  }
  tv upd = at_least_1d(g, scatter_updates(g, lx_tensor(cx, 3), index, ot.dtype));
  ir_type it = ir_type_of(g, index);
  if (!self_in) {
    tv hit = scatter_elems(g, ir_splat(g, ir_with_dtype(xt, TPUC_PRED), 0.0), dim, index,
                           ir_splat(g, ir_with_dtype(it, TPUC_PRED), 1.0), IR_SCATTER_REPLACE);
    tv ident = ir_broadcast_in_dim(g, lo_init(g, xt.dtype, r), xt, NULL);
    x = ir_select(g, hit, ident, x);
  }
  tv y = scatter_elems(g, x, dim, index, upd, r);
  if (mean) {
    tv cnt = scatter_elems(g, ir_splat(g, xt, self_in ? 1.0 : 0.0), dim, index,
                           ir_splat(g, ir_with_dtype(it, xt.dtype), 1.0), IR_RED_SUM);
    cnt = ir_binary(g, IR_MAX, cnt, ir_splat(g, xt, 1.0));
    if (ir_is_float(xt.dtype) || ir_is_complex(xt.dtype)) {
      y = ir_binary(g, IR_DIV, y, cnt);
    } else { /* floor division; y and cnt > 0 */
      tv q = ir_binary(g, IR_DIV, y, cnt);
      tv fix = ir_compare(g, IR_NE, ir_binary(g, IR_MUL, q, cnt), y);
      fix = ir_binary(g, IR_AND, fix, ir_compare(g, IR_LT, y, ir_splat(g, xt, 0.0)));
      y = ir_select(g, fix, ir_binary(g, IR_SUB, q, ir_splat(g, xt, 1.0)), q);
    }
  }
  cx->results[0] = ir_reshape(g, y, ot.ndim, ot.dims);
  return NULL;
}

/* ---- dim-wise put: index_add, index_copy, index_fill ---- */

/* index_add(self, dim, index, source, *, alpha=1) and
 * index_copy(self, dim, index, source). */
static tpuc_status *lower_index_add(tpuc_lower_ctx *cx, bool copy) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = ir_convert(g, at_least_1d(g, lx_tensor(cx, 0)), ot.dtype);
  ir_type xt = ir_type_of(g, x);
  int dim = (int)lx_dim(lx_int(cx, 1, 0), xt.ndim);
  /* PyTorch's CPU words: index_copy_ its own; index_add "in self" for 1-d self,
   * a RuntimeError naming the dimension otherwise */
  lx_check_index(cx, lx_tensor(cx, 2), xt.dims[dim], false,
                 copy ? TPUC_CHECK_COPY : xt.ndim > 1 ? TPUC_CHECK_DIM_RUNTIME : TPUC_CHECK_IN_SELF,
                 dim);
  tv idx = at_least_1d(g, lo_wrap_index(g, lx_tensor(cx, 2), xt.dims[dim]));
  tv src = ir_convert(g, lx_tensor(cx, 3), ot.dtype);
  ir_type st = xt;
  st.dims[dim] = ir_type_of(g, idx).dims[0];
  src = ir_reshape(g, src, st.ndim, st.dims);
  tv alpha = copy ? IR_NONE : lx_scalar(cx, 4, ot.dtype);
  if (alpha != IR_NONE) src = lo_bin(g, IR_MUL, src, alpha);
  tv y = lo_put_dim(g, x, dim, idx, src, copy ? IR_SCATTER_REPLACE : IR_RED_SUM);
  cx->results[0] = ir_reshape(g, y, ot.ndim, ot.dims);
  return NULL;
}
static tpuc_status *l_index_add(tpuc_lower_ctx *cx) { return lower_index_add(cx, false); }
static tpuc_status *l_index_copy(tpuc_lower_ctx *cx) { return lower_index_add(cx, true); }

/* index_reduce(self, dim, index, source, reduce, *, include_self=True):
 * prod/mean/amax/amin of source's slices into self's slices index[k]; as
 * scatter_reduce, but slice-wise (the positions index names start from the
 * reducer's identity without include_self; mean divides by the count, floor
 * division for integers). */
static tpuc_status *l_index_reduce(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = ir_convert(g, at_least_1d(g, lx_tensor(cx, 0)), ot.dtype);
  ir_type xt = ir_type_of(g, x);
  int dim = (int)lx_dim(lx_int(cx, 1, 0), xt.ndim);
  lx_check_index(cx, lx_tensor(cx, 2), xt.dims[dim], false, TPUC_CHECK_DIM_INDEX, dim);
  tv idx = at_least_1d(g, lo_wrap_index(g, lx_tensor(cx, 2), xt.dims[dim]));
  const char *rs = lx_string(cx, 4);
  bool mean = rs && !strcmp(rs, "mean"), self_in = lx_bool(cx, 5, true);
  ir_reducer r = IR_RED_SUM;
  if (!mean && !scatter_reducer(rs, &r)) return lx_unimplemented(cx, "unknown reduce");
  int64_t k = ir_type_of(g, idx).dims[0];
  if (k == 0) {
    cx->results[0] = lo_out(g, ir_reshape(g, x, ot.ndim, ot.dims), ot);
    return NULL;
  }
  ir_type st = xt;
  st.dims[dim] = k;
  tv src = ir_reshape(g, ir_convert(g, lx_tensor(cx, 3), ot.dtype), st.ndim, st.dims);
  if (!self_in) {
    int64_t n = xt.dims[dim], bd = dim;
    tv hit = lo_put_dim(g, ir_splat(g, ir_make_type(TPUC_PRED, 1, &n), 0.0), 0, idx,
                        ir_splat(g, ir_make_type(TPUC_PRED, 1, &k), 1.0), IR_SCATTER_REPLACE);
    hit = ir_broadcast_in_dim(g, hit, ir_with_dtype(xt, TPUC_PRED), &bd);
    x = ir_select(g, hit, ir_broadcast_in_dim(g, lo_init(g, xt.dtype, r), xt, NULL), x);
  }
  tv y = lo_put_dim(g, x, dim, idx, src, r);
  if (mean) {
    tv cnt = lo_put_dim(g, ir_splat(g, xt, self_in ? 1.0 : 0.0), dim, idx, ir_splat(g, st, 1.0), IR_RED_SUM);
    cnt = ir_binary(g, IR_MAX, cnt, ir_splat(g, xt, 1.0));
    tv q = ir_binary(g, IR_DIV, y, cnt);
    if (!ir_is_float(xt.dtype) && !ir_is_complex(xt.dtype)) { /* floor division; cnt > 0 */
      tv fix = ir_compare(g, IR_NE, ir_binary(g, IR_MUL, q, cnt), y);
      fix = ir_binary(g, IR_AND, fix, ir_compare(g, IR_LT, y, ir_splat(g, xt, 0.0)));
      q = ir_select(g, fix, ir_binary(g, IR_SUB, q, ir_splat(g, xt, 1.0)), q);
    }
    y = q;
  }
  cx->results[0] = ir_reshape(g, y, ot.ndim, ot.dims);
  return NULL;
}

/* index_fill.{int_Scalar,int_Tensor}(self, dim, index, value). */
static tpuc_status *l_index_fill(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = ir_convert(g, at_least_1d(g, lx_tensor(cx, 0)), ot.dtype);
  ir_type xt = ir_type_of(g, x);
  int dim = (int)lx_dim(lx_int(cx, 1, 0), xt.ndim);
  lx_check_index(cx, lx_tensor(cx, 2), xt.dims[dim], true, TPUC_CHECK_DIM_INDEX, dim);
  tv idx = at_least_1d(g, lo_wrap_index(g, lx_tensor(cx, 2), xt.dims[dim]));
  const tpuc_arg *a3 = lx_arg(cx, 3);
  tv v = a3 && a3->kind == TPUC_ARG_SCALAR ? lx_scalar(cx, 3, ot.dtype)
                                           : ir_convert(g, lx_tensor(cx, 3), ot.dtype);
  int64_t n = xt.dims[dim], k = ir_type_of(g, idx).dims[0];
  tv hit = lo_put_dim(g, ir_splat(g, ir_make_type(TPUC_PRED, 1, &n), 0.0), 0, idx,
                   ir_splat(g, ir_make_type(TPUC_PRED, 1, &k), 1.0), IR_SCATTER_REPLACE);
  int64_t bd = dim;
  tv mask = ir_broadcast_in_dim(g, hit, ir_with_dtype(xt, TPUC_PRED), &bd);
  tv y = ir_select(g, mask, lx_broadcast_to(g, ir_reshape(g, v, 0, NULL), xt.ndim, xt.dims), x);
  cx->results[0] = ir_reshape(g, y, ot.ndim, ot.dims);
  return NULL;
}

/* ---- boolean masks ---- */

/* Positions of the true elements of a flattened mask first, in order, then
 * the false ones: a stable descending sort of the mask. [M] s64. */
static tv mask_order(ir_graph *g, tv mask) {
  ir_type mt = ir_type_of(g, mask);
  int64_t m = ir_numel(&mt);
  tv flat = ir_convert(g, ir_reshape(g, ir_convert(g, mask, TPUC_PRED), 1, &m), TPUC_S32);
  tv sorted, perm;
  ir_sort(g, flat, 0, true, &sorted, &perm);
  return perm;
}

/* The number of true elements of a mask, rank-0 s64. */
static tv mask_count(ir_graph *g, tv mask) {
  tv m = ir_convert(g, ir_convert(g, mask, TPUC_PRED), TPUC_S64);
  int64_t dims[TPUC_MAX_DIMS];
  int r = lo_rank(g, m);
  for (int i = 0; i < r; i++) dims[i] = i;
  return lo_sum(g, m, dims, r, false);
}

/* Scatters the first rows of `rows` ([R, rest...], R >= 1; row r >= R uses
 * row R-1) into the true rows of x2 ([M, rest...]) in order, where `mask`
 * has M elements. combine: replace or sum. */
static tv masked_put_rows(ir_graph *g, tv x2, tv mask, tv rows, ir_reducer combine) {
  ir_type xt = ir_type_of(g, x2), rt = ir_type_of(g, rows);
  int64_t m = xt.dims[0];
  ir_type mt = ir_make_type(TPUC_S64, 1, &m);
  tv r = ir_iota(g, mt, 0);
  tv src_row = ir_binary(g, IR_MIN, r, ir_splat_i64(g, mt, rt.dims[0] - 1));
  tv upd = lo_take_dim(g, rows, 0, src_row);
  tv cnt = lx_broadcast_to(g, mask_count(g, mask), 1, &m);
  tv target = ir_select(g, ir_compare(g, IR_LT, r, cnt), mask_order(g, mask), ir_splat_i64(g, mt, m));
  return lo_put_dim(g, x2, 0, target, upd, combine);
}

/* masked_scatter(self, mask, source): the true positions of mask
 * (broadcast to self) take source's elements in order. */
static tpuc_status *l_masked_scatter(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  int64_t m = ir_numel(&ot);
  if (m == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  tv x = ir_reshape(g, ir_convert(g, lx_tensor(cx, 0), ot.dtype), 1, &m);
  tv mask = lx_broadcast_to(g, lx_tensor(cx, 1), ot.ndim, ot.dims);
  tv src = ir_convert(g, lx_tensor(cx, 2), ot.dtype);
  int64_t s = ir_numel(ir_typeof(g, src));
  if (s == 0) {
    cx->results[0] = lo_out(g, lx_tensor(cx, 0), ot);
    return NULL;
  }
  src = ir_reshape(g, src, 1, &s);
  tv y = masked_put_rows(g, x, mask, src, IR_SCATTER_REPLACE);
  cx->results[0] = ir_reshape(g, y, ot.ndim, ot.dims);
  return NULL;
}

/* ---- advanced indexing ---- */

typedef struct {
  int r;                       /* rank of self */
  int k;                       /* indexed dims (after expanding masks) */
  int64_t dims[TPUC_MAX_DIMS]; /* which dims of self, in order */
  tv idx[TPUC_MAX_DIMS];       /* their s64 wrapped indices, broadcast to b */
  ir_type b;                   /* broadcast shape of the indices */
  bool adjacent;               /* indexed dims are consecutive */
  int mask_at;                 /* list position of a boolean mask, or -1 */
  int mask_rank;
  tv mask;
} adv_index;

/* Reads a Tensor?[] argument; a None entry is IR_NONE. */
static int opt_tensors(const tpuc_lower_ctx *cx, int i, tv *out, int max) {
  int n = lx_tensors(cx, i, out, max);
  const tpuc_arg *a = lx_arg(cx, i);
  for (int k = 0; k < n && k < max && a; k++) {
    const tpuc_tensor *t = &cx->call->tensors[a->tensors.first + k];
    if (!t->storage && t->ndim <= 0) out[k] = IR_NONE;
  }
  return n;
}

/* Parses self's index list. count: the number of true elements when a mask
 * is present (from the result's static shape), else ignored. Fails (false)
 * for combinations this file does not lower. */
static bool adv_parse(tpuc_lower_ctx *cx, tv self, const tv *list, int n, adv_index *ai) {
  ir_graph *g = cx->g;
  ir_type st = ir_type_of(g, self);
  memset(ai, 0, sizeof *ai);
  ai->r = st.ndim;
  ai->mask_at = -1;
  int dim = 0, first = -1, last = -1, nonnull = 0;
  for (int i = 0; i < n; i++) {
    if (list[i] == IR_NONE) {
      dim++;
      continue;
    }
    ir_type it = ir_type_of(g, list[i]);
    bool is_mask = it.dtype == TPUC_PRED || it.dtype == TPUC_U8;
    int used = is_mask ? it.ndim : 1;
    if (is_mask && it.ndim == 0) return false;
    if (dim + used > st.ndim || ai->k + used > TPUC_MAX_DIMS) return false;
    if (is_mask) {
      if (ai->mask_at >= 0) return false;
      ai->mask_at = i;
      ai->mask_rank = it.ndim;
      ai->mask = list[i];
      for (int j = 0; j < used; j++) ai->dims[ai->k++] = dim + j;
    } else {
      lx_check_index(cx, list[i], st.dims[dim], true, TPUC_CHECK_DIM_INDEX, dim);
      ai->idx[ai->k] = lo_wrap_index(g, list[i], st.dims[dim]);
      ai->dims[ai->k++] = dim;
    }
    if (first < 0) first = i;
    last = i;
    nonnull++;
    dim += used;
  }
  if (nonnull == 0) return false;
  ai->adjacent = last - first + 1 == nonnull;
  if (ai->mask_at >= 0 && nonnull > 1) return false;
  return true;
}

/* Broadcasts the (non-mask) indices to one shape. */
static bool adv_broadcast(ir_graph *g, adv_index *ai) {
  ir_type b = ir_make_type(TPUC_S64, 0, NULL);
  for (int i = 0; i < ai->k; i++)
    if (!lo_bshape_t(g, b, ir_type_of(g, ai->idx[i]), &b)) return false;
  for (int i = 0; i < ai->k; i++) ai->idx[i] = lx_broadcast_to(g, ai->idx[i], b.ndim, b.dims);
  ai->b = b;
  return true;
}

/* self transposed so the indexed dims come first; perm in *perm. */
static tv adv_front(ir_graph *g, tv self, const adv_index *ai, int64_t *perm) {
  bool used[TPUC_MAX_DIMS] = {false};
  int n = 0;
  for (int i = 0; i < ai->k; i++) {
    perm[n++] = ai->dims[i];
    used[ai->dims[i]] = true;
  }
  for (int i = 0; i < ai->r; i++)
    if (!used[i]) perm[n++] = i;
  return ir_transpose(g, self, perm);
}

/* The stacked index vectors [b..., k]. */
static tv adv_coords(ir_graph *g, const adv_index *ai) {
  int64_t dims[TPUC_MAX_DIMS];
  memcpy(dims, ai->b.dims, sizeof dims);
  dims[ai->b.ndim] = 1;
  tv parts[TPUC_MAX_DIMS];
  for (int i = 0; i < ai->k; i++) parts[i] = ir_reshape(g, ai->idx[i], ai->b.ndim + 1, dims);
  return ir_concat(g, parts, ai->k, ai->b.ndim);
}

/* Moves the b dims of a [b..., rest...] value to position p (or back). */
static tv adv_move_b(ir_graph *g, tv v, int nb, int p, bool back) {
  int r = lo_rank(g, v);
  int64_t perm[TPUC_MAX_DIMS], inv[TPUC_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < p; i++) perm[n++] = nb + i; /* rest before p */
  for (int i = 0; i < nb; i++) perm[n++] = i;     /* b */
  for (int i = nb + p; i < r; i++) perm[n++] = i; /* rest after */
  if (!back) return ir_transpose(g, v, perm);
  for (int i = 0; i < r; i++) inv[perm[i]] = i;
  return ir_transpose(g, v, inv);
}

/* Replaces a boolean mask by the k index vectors of its first `count` true
 * elements (row-major order). */
static void adv_expand_mask(ir_graph *g, tv self, adv_index *ai, int64_t count) {
  ir_type st = ir_type_of(g, self);
  tv pos = mask_order(g, ai->mask);
  int64_t z = 0;
  pos = ir_slice(g, pos, &z, &count, NULL);
  ir_type ct = ir_make_type(TPUC_S64, 1, &count);
  int64_t stride = 1;
  for (int j = ai->mask_rank - 1; j >= 0; j--) {
    int64_t size = st.dims[ai->dims[j]];
    tv q = ir_binary(g, IR_DIV, pos, ir_splat_i64(g, ct, stride));
    ai->idx[j] = ir_binary(g, IR_REM, q, ir_splat_i64(g, ct, size));
    stride *= size;
  }
}

/* index.Tensor(self, Tensor?[] indices) and _unsafe_index. */
static tpuc_status *l_index(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv self = lx_tensor(cx, 0), list[TPUC_MAX_DIMS];
  int n = opt_tensors(cx, 1, list, TPUC_MAX_DIMS);
  adv_index ai;
  if (n > TPUC_MAX_DIMS || !adv_parse(cx, self, list, n, &ai))
    return lx_unimplemented(cx, "index combination");
  int p = ai.adjacent ? (int)ai.dims[0] : 0;
  if (ai.mask_at >= 0) adv_expand_mask(g, self, &ai, ot.dims[p]);
  if (!adv_broadcast(g, &ai)) return lx_unimplemented(cx, "indices do not broadcast");
  if (ir_numel(&ot) == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  int64_t perm[TPUC_MAX_DIMS];
  tv x = adv_front(g, self, &ai, perm);
  ir_type xt = ir_type_of(g, x);
  int nb = ai.b.ndim, rest = ai.r - ai.k;
  if (nb + rest > TPUC_MAX_DIMS - 1) return lx_unimplemented(cx, "result rank too large");
  ir_gather_dims d;
  memset(&d, 0, sizeof d);
  ir_type rt = ir_make_type(xt.dtype, 0, NULL);
  for (int i = 0; i < nb; i++) rt.dims[rt.ndim++] = ai.b.dims[i];
  for (int i = 0; i < ai.r; i++) {
    d.slice_sizes[i] = i < ai.k ? 1 : xt.dims[i];
    if (i < ai.k) {
      d.collapsed_slice_dims[d.n_collapsed++] = i;
      d.start_index_map[d.n_start_index_map++] = i;
    } else {
      d.offset_dims[d.n_offset_dims++] = nb + i - ai.k;
      rt.dims[rt.ndim++] = xt.dims[i];
    }
  }
  d.index_vector_dim = nb;
  tv y = ir_gather(g, x, adv_coords(g, &ai), &d, rt);
  if (ai.adjacent && p > 0) y = adv_move_b(g, y, nb, p, false);
  cx->results[0] = lo_out(g, ir_reshape(g, y, ot.ndim, ot.dims), ot);
  return NULL;
}

/* index_put with one boolean mask: rows of values go to the true positions. */
static tv index_put_mask(ir_graph *g, tv self, const adv_index *ai, tv values, ir_reducer combine) {
  ir_type st = ir_type_of(g, self);
  int64_t perm[TPUC_MAX_DIMS], inv[TPUC_MAX_DIMS];
  tv x = adv_front(g, self, ai, perm);
  ir_type xt = ir_type_of(g, x);
  int64_t m = 1, dims[TPUC_MAX_DIMS];
  for (int i = 0; i < ai->k; i++) m *= xt.dims[i];
  int rest = ai->r - ai->k;
  dims[0] = m;
  for (int i = 0; i < rest; i++) dims[1 + i] = xt.dims[ai->k + i];
  x = ir_reshape(g, x, 1 + rest, dims);
  /* values broadcast to [count or 1, rest...] */
  ir_type vt = ir_type_of(g, values);
  int64_t rows = vt.ndim > rest ? vt.dims[vt.ndim - rest - 1] : 1;
  dims[0] = rows;
  tv v = lx_broadcast_to(g, values, 1 + rest, dims);
  tv y = masked_put_rows(g, x, ai->mask, v, combine);
  y = ir_reshape(g, y, xt.ndim, xt.dims);
  for (int i = 0; i < st.ndim; i++) inv[perm[i]] = i;
  return ir_transpose(g, y, inv);
}

/* index_put(self, Tensor?[] indices, values, accumulate=False) and
 * _index_put_impl_(..., unsafe). */
static tpuc_status *l_index_put(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv self = ir_convert(g, lx_tensor(cx, 0), ot.dtype), list[TPUC_MAX_DIMS];
  int n = opt_tensors(cx, 1, list, TPUC_MAX_DIMS);
  tv values = ir_convert(g, lx_tensor(cx, 2), ot.dtype);
  ir_reducer combine = lx_bool(cx, 3, false) ? IR_RED_SUM : IR_SCATTER_REPLACE;
  adv_index ai;
  if (n > TPUC_MAX_DIMS || !adv_parse(cx, self, list, n, &ai))
    return lx_unimplemented(cx, "index combination");
  if (ir_numel(&ot) == 0) {
    cx->results[0] = self;
    return NULL;
  }
  if (ai.mask_at >= 0) {
    if (ir_numel(ir_typeof(g, values)) == 0) {
      cx->results[0] = self;
      return NULL;
    }
    cx->results[0] = index_put_mask(g, self, &ai, values, combine);
    return NULL;
  }
  if (!adv_broadcast(g, &ai)) return lx_unimplemented(cx, "indices do not broadcast");
  if (ir_numel(&ai.b) == 0) {
    cx->results[0] = self;
    return NULL;
  }
  int64_t perm[TPUC_MAX_DIMS], inv[TPUC_MAX_DIMS];
  tv x = adv_front(g, self, &ai, perm);
  ir_type xt = ir_type_of(g, x);
  int nb = ai.b.ndim, rest = ai.r - ai.k;
  if (nb + rest > TPUC_MAX_DIMS - 1) return lx_unimplemented(cx, "rank too large");
  /* values broadcast to what self[indices] would be, then to [b, rest] */
  int p = ai.adjacent ? (int)ai.dims[0] : 0;
  ir_type ut = ir_make_type(ot.dtype, 0, NULL); /* [b..., rest...] */
  for (int i = 0; i < nb; i++) ut.dims[ut.ndim++] = ai.b.dims[i];
  for (int i = ai.k; i < ai.r; i++) ut.dims[ut.ndim++] = xt.dims[i];
  tv upd;
  if (ai.adjacent && p > 0) {
    ir_type nt = ut; /* natural order: rest[:p], b, rest[p:] */
    int q = 0;
    for (int i = 0; i < p; i++) nt.dims[q++] = xt.dims[ai.k + i];
    for (int i = 0; i < nb; i++) nt.dims[q++] = ai.b.dims[i];
    for (int i = ai.k + p; i < ai.r; i++) nt.dims[q++] = xt.dims[i];
    upd = adv_move_b(g, lx_broadcast_to(g, values, nt.ndim, nt.dims), nb, p, true);
  } else {
    upd = lx_broadcast_to(g, values, ut.ndim, ut.dims);
  }
  ir_scatter_dims d;
  memset(&d, 0, sizeof d);
  for (int i = 0; i < rest; i++) d.update_window_dims[d.n_update_window_dims++] = nb + i;
  for (int i = 0; i < ai.k; i++) {
    d.inserted_window_dims[d.n_inserted++] = i;
    d.scatter_dims_to_operand_dims[d.n_scatter_dims++] = i;
  }
  d.index_vector_dim = nb;
  tv y = ir_scatter(g, x, adv_coords(g, &ai), upd, &d, combine);
  for (int i = 0; i < ai.r; i++) inv[perm[i]] = i;
  cx->results[0] = ir_transpose(g, y, inv);
  return NULL;
}

/* put(self, index, source, accumulate=False): flat positions. */
static tpuc_status *l_put(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  int64_t n = ir_numel(&ot);
  tv x = ir_reshape(g, ir_convert(g, lx_tensor(cx, 0), ot.dtype), 1, &n);
  lx_check_index(cx, lx_tensor(cx, 1), n, true, TPUC_CHECK_FLAT, 0);
  tv idx = lo_wrap_index(g, lx_tensor(cx, 1), n);
  int64_t k = ir_numel(ir_typeof(g, idx));
  if (k == 0 || n == 0) {
    cx->results[0] = lo_out(g, lx_tensor(cx, 0), ot);
    return NULL;
  }
  idx = ir_reshape(g, idx, 1, &k);
  tv src = ir_reshape(g, ir_convert(g, lx_tensor(cx, 2), ot.dtype), 1, &k);
  ir_reducer c = lx_bool(cx, 3, false) ? IR_RED_SUM : IR_SCATTER_REPLACE;
  cx->results[0] = ir_reshape(g, lo_put_dim(g, x, 0, idx, src, c), ot.ndim, ot.dims);
  return NULL;
}

const tpuc_lowering tpuc_lowerings_index[] = {
    {"aten::index_select", l_index_select},
    {"aten::index_select.out", l_index_select},
    {"aten::gather", l_gather},
    {"aten::gather.out", l_gather},
    {"aten::take", l_take},
    {"aten::take.out", l_take},
    {"aten::embedding", l_embedding},
    {"aten::embedding.out", l_embedding},
    {"aten::embedding_dense_backward", l_embedding_backward},
    {"aten::embedding_dense_backward.out", l_embedding_backward},
    {"aten::scatter.src", l_scatter},
    {"aten::scatter.value", l_scatter},
    {"aten::scatter.reduce", l_scatter},
    {"aten::scatter.value_reduce", l_scatter},
    {"aten::scatter.src_out", l_scatter},
    {"aten::scatter.value_out", l_scatter},
    {"aten::scatter.reduce_out", l_scatter},
    {"aten::scatter.value_reduce_out", l_scatter},
    {"aten::scatter_.src", l_scatter},
    {"aten::scatter_.value", l_scatter},
    {"aten::scatter_.reduce", l_scatter},
    {"aten::scatter_.value_reduce", l_scatter},
    {"aten::scatter_add", l_scatter_add},
    {"aten::scatter_add.out", l_scatter_add},
    {"aten::scatter_add_", l_scatter_add},
    {"aten::scatter_reduce.two", l_scatter_reduce},
    {"aten::scatter_reduce.two_out", l_scatter_reduce},
    {"aten::scatter_reduce_.two", l_scatter_reduce},
    {"aten::index_add", l_index_add},
    {"aten::index_add.out", l_index_add},
    {"aten::index_add_", l_index_add},
    {"aten::index_copy", l_index_copy},
    {"aten::index_copy.out", l_index_copy},
    {"aten::index_copy_", l_index_copy},
    {"aten::index_reduce", l_index_reduce},
    {"aten::index_reduce.out", l_index_reduce},
    {"aten::index_reduce_", l_index_reduce},
    {"aten::index_fill.int_Scalar", l_index_fill},
    {"aten::index_fill.int_Tensor", l_index_fill},
    {"aten::index_fill.int_Scalar_out", l_index_fill},
    {"aten::index_fill.int_Tensor_out", l_index_fill},
    {"aten::index_fill_.int_Scalar", l_index_fill},
    {"aten::index_fill_.int_Tensor", l_index_fill},
    {"aten::masked_scatter", l_masked_scatter},
    {"aten::masked_scatter.out", l_masked_scatter},
    {"aten::masked_scatter_", l_masked_scatter},
    {"aten::index.Tensor", l_index},
    {"aten::index.Tensor_out", l_index},
    {"aten::_unsafe_index.Tensor", l_index},
    {"aten::index_put", l_index_put},
    {"aten::index_put.out", l_index_put},
    {"aten::index_put_", l_index_put},
    {"aten::_index_put_impl_", l_index_put},
    {"aten::_index_put_impl", l_index_put},
    {"aten::_index_put_impl.out", l_index_put},
    {"aten::_unsafe_index_put", l_index_put},
    {"aten::put", l_put},
    {"aten::put.out", l_put},
    {"aten::put_", l_put},
    {NULL, NULL},
};
