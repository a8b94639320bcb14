/* gather.c — indexing building blocks shared by the index, sort, upsample
 * and nn lowerings: taking and scattering slices along one dimension, and
 * element-wise gathers (torch.gather's semantics). */
#include "lower_ops.h"

/* x indexed along `dim` by idx of any shape (s64, wrapped):
 * x.dims[:dim] + idx.shape + x.dims[dim+1:]. */
tv lo_take_dim(ir_graph *g, tv x, int dim, tv idx) {
  ir_type xt = ir_type_of(g, x), it = ir_type_of(g, idx);
  if (it.ndim + xt.ndim > TPUC_MAX_DIMS) {
    ir_fail(g, "index: result rank too large");
    return IR_NONE;
  }
  ir_gather_dims d;
  memset(&d, 0, sizeof d);
  ir_type rt = ir_make_type(xt.dtype, 0, NULL);
  for (int i = 0; i < dim; i++) rt.dims[rt.ndim++] = xt.dims[i];
  for (int i = 0; i < it.ndim; i++) rt.dims[rt.ndim++] = it.dims[i];
  for (int i = dim + 1; i < xt.ndim; i++) rt.dims[rt.ndim++] = xt.dims[i];
  for (int i = 0; i < xt.ndim; i++) {
    d.slice_sizes[i] = i == dim ? 1 : xt.dims[i];
    if (i != dim) d.offset_dims[d.n_offset_dims++] = i < dim ? i : i - 1 + it.ndim;
  }
  d.collapsed_slice_dims[d.n_collapsed++] = dim;
  d.start_index_map[d.n_start_index_map++] = dim;
  d.index_vector_dim = it.ndim;
  return ir_gather(g, x, idx, &d, rt);
}

/* Adds/replaces slices of x along `dim`: upd has x's shape with n at dim,
 * idx is [n] (s64). */
tv lo_put_dim(ir_graph *g, tv x, int dim, tv idx, tv upd, ir_reducer combine) {
  ir_type xt = ir_type_of(g, x);
  int64_t n = ir_type_of(g, idx).dims[0], two[2] = {n, 1};
  ir_scatter_dims d;
  memset(&d, 0, sizeof d);
  for (int i = 0; i < xt.ndim; i++)
    if (i != dim) d.update_window_dims[d.n_update_window_dims++] = i;
  d.inserted_window_dims[d.n_inserted++] = dim;
  d.scatter_dims_to_operand_dims[d.n_scatter_dims++] = dim;
  d.index_vector_dim = 1;
  return ir_scatter(g, x, ir_reshape(g, idx, 2, two), upd, &d, combine);
}

/* Full coordinates for element-wise gather/scatter along `dim`: [I..., r]
 * where component `dim` is idx and the others are positions in idx. */
tv lo_elem_coords(ir_graph *g, int dim, tv idx, int r) {
  ir_type it = ir_type_of(g, idx);
  int64_t dims[TPUC_MAX_DIMS];
  memcpy(dims, it.dims, sizeof dims);
  dims[it.ndim] = 1;
  tv parts[TPUC_MAX_DIMS];
  for (int i = 0; i < r; i++) {
    tv c = i == dim ? idx : ir_iota(g, it, i);
    parts[i] = ir_reshape(g, c, it.ndim + 1, dims);
  }
  return ir_concat(g, parts, r, it.ndim);
}

/* torch.gather: out[i...] = x[..., idx[i...], ...] (idx same rank as x). */
tv lo_take_along(ir_graph *g, tv x, int dim, tv idx) {
  ir_type xt = ir_type_of(g, x), it = ir_type_of(g, idx);
  int r = xt.ndim;
  ir_gather_dims d;
  memset(&d, 0, sizeof d);
  for (int i = 0; i < r; i++) {
    d.collapsed_slice_dims[d.n_collapsed++] = i;
    d.start_index_map[d.n_start_index_map++] = i;
    d.slice_sizes[i] = 1;
  }
  d.index_vector_dim = it.ndim;
  return ir_gather(g, x, lo_elem_coords(g, dim, idx, r), &d, ir_with_dtype(it, xt.dtype));
}

/* x [B, M] with upd [B, n] added at positions idx [B, n] (s64). */
tv lo_scatter_add_rows(ir_graph *g, tv x, tv idx, tv upd) { return lo_scatter_rows(g, x, idx, upd, IR_RED_SUM); }

/* x [B, M] with upd [B, n] combined into positions idx [B, n] (s64). */
tv lo_scatter_rows(ir_graph *g, tv x, tv idx, tv upd, ir_reducer combine) {
  ir_type it = ir_type_of(g, idx);
  int64_t cd[3] = {it.dims[0], it.dims[1], 1};
  tv parts[2] = {ir_reshape(g, ir_iota(g, it, 0), 3, cd), ir_reshape(g, idx, 3, cd)};
  ir_scatter_dims d;
  memset(&d, 0, sizeof d);
  d.inserted_window_dims[0] = 0;
  d.inserted_window_dims[1] = 1;
  d.n_inserted = 2;
  d.scatter_dims_to_operand_dims[0] = 0;
  d.scatter_dims_to_operand_dims[1] = 1;
  d.n_scatter_dims = 2;
  d.index_vector_dim = 2;
  return ir_scatter(g, x, ir_concat(g, parts, 2, 2), upd, &d, combine);
}
