/* shape.c — lowerings that move data without arithmetic: cat, stack, flip,
 * roll, repeat, channel_shuffle, unfold_backward, tril/triu, constant/reflection/replication padding (and the
 * backward of the latter two), diag_embed, tril/triu_indices, and the *_copy
 * forms of view ops (split, unbind, slice, select, narrow, expand, permute...)
 * that functionalization produces. Views themselves are metadata in the C++
 * glue; these run when a copy is asked for. Result types come from the
 * caller's meta computation, so several lowerings just reshape to them. */
#include <stdlib.h>

#include "lower_ops.h"

/* ---- concatenation ---- */

/* cat(Tensor[] tensors, int dim=0). Inputs of numel 0 add nothing (this
 * also skips PyTorch's legacy empty 1-D tensors). */
static tpuc_status *l_cat(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv xs[256], keep[256];
  int n = lx_tensors(cx, 0, xs, 256);
  if (n > 256) return lx_unimplemented(cx, "more than 256 inputs");
  int dim = (int)lx_dim(lx_int(cx, 1, 0), ot.ndim), k = 0;
  for (int i = 0; i < n; i++) {
    ir_type t = ir_type_of(g, xs[i]);
    if (ir_numel(&t) == 0) continue;
    keep[k++] = ir_convert(g, xs[i], ot.dtype);
  }
  if (k == 0 || ir_numel(&ot) == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  cx->results[0] = ir_concat(g, keep, k, dim);
  return NULL;
}

/* stack(Tensor[] tensors, int dim=0). */
static tpuc_status *l_stack(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv xs[256];
  int n = lx_tensors(cx, 0, xs, 256);
  if (n > 256 || n < 1) return lx_unimplemented(cx, "stack of 0 or more than 256 inputs");
  int dim = (int)lx_dim(lx_int(cx, 1, 0), ot.ndim);
  for (int i = 0; i < n; i++) xs[i] = ir_convert(g, lo_unsqueeze(g, xs[i], dim), ot.dtype);
  cx->results[0] = lo_out(g, ir_concat(g, xs, n, dim), ot);
  return NULL;
}

/* ---- reordering ---- */

/* flip(Tensor self, int[] dims). */
static tpuc_status *l_flip(tpuc_lower_ctx *cx) {
  ir_type ot = lx_out(cx, 0);
  const int64_t *v;
  int n = lx_ints(cx, 1, &v);
  int64_t dims[TPUC_MAX_DIMS];
  if (n > ot.ndim) return lx_unimplemented(cx, "more flip dims than the rank");
  int k = 0;
  for (int i = 0; i < n; i++) {
    int64_t d = lx_dim(v[i], ot.ndim);
    if (ot.ndim && ot.dims[d] > 1) dims[k++] = d;
  }
  cx->results[0] = ir_reverse(cx->g, lx_tensor(cx, 0), dims, k);
  return NULL;
}

/* channel_shuffle(self, groups): [N, C, *] as [N, g, C/g, *], the two group
 * dims swapped, flattened back. */
static tpuc_status *l_channel_shuffle(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  int64_t grp = lx_int(cx, 1, 1);
  if (ot.ndim < 2 || grp <= 0 || ot.dims[1] % grp || ot.ndim + 1 > TPUC_MAX_DIMS)
    return lx_unimplemented(cx, "channel_shuffle: shape");
  int64_t d[TPUC_MAX_DIMS], perm[TPUC_MAX_DIMS];
  d[0] = ot.dims[0], d[1] = grp, d[2] = ot.dims[1] / grp;
  for (int i = 2; i < ot.ndim; i++) d[i + 1] = ot.dims[i];
  for (int i = 0; i <= ot.ndim; i++) perm[i] = i;
  perm[1] = 2, perm[2] = 1;
  tv y = ir_transpose(g, ir_reshape(g, x, ot.ndim + 1, d), perm);
  cx->results[0] = lo_out(g, ir_reshape(g, y, ot.ndim, ot.dims), ot);
  return NULL;
}

/* unfold_backward(grad_in, input_sizes, dim, size, step): the gradient of
 * x.unfold(dim, size, step). grad_in has W windows at dim and the window's
 * `size` elements last; element k of window w adds to position w*step + k:
 * one scatter-add of the [W*size] slices along dim. */
static tpuc_status *l_unfold_backward(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv gi = ir_convert(g, lx_tensor(cx, 0), lx_compute_dtype(ot.dtype));
  ir_type gt = ir_type_of(g, gi);
  int64_t size = lx_int(cx, 3, 1), step = lx_int(cx, 4, 1);
  if (ot.ndim == 0 && gt.ndim == 1) { /* a 0-d input: its unfold is [size], size 0 or 1 */
    int64_t d0 = 0;
    cx->results[0] = lo_fit(g, lo_sum(g, gi, &d0, 1, false), ot);
    return NULL;
  }
  if (gt.ndim != ot.ndim + 1 || step <= 0) return lx_unimplemented(cx, "unfold_backward: shape");
  int dim = (int)lx_dim(lx_int(cx, 2, 0), ot.ndim);
  int64_t w = gt.dims[dim], perm[TPUC_MAX_DIMS], d[TPUC_MAX_DIMS];
  if (w * size == 0 || ir_numel(&ot) == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  int k = 0;
  for (int i = 0; i < ot.ndim; i++) {
    perm[k++] = i;
    if (i == dim) perm[k++] = ot.ndim; /* the window's elements right after its index */
  }
  for (int i = 0; i < ot.ndim; i++) d[i] = i == dim ? w * size : gt.dims[i];
  tv upd = ir_reshape(g, ir_transpose(g, gi, perm), ot.ndim, d);
  int64_t m = w * size;
  ir_type mt = ir_make_type(TPUC_S64, 1, &m);
  tv i = ir_iota(g, mt, 0), sz = ir_splat_i64(g, mt, size);
  tv idx = ir_binary(g, IR_ADD, ir_binary(g, IR_MUL, ir_binary(g, IR_DIV, i, sz), ir_splat_i64(g, mt, step)),
                     ir_binary(g, IR_REM, i, sz));
  tv zero = ir_splat(g, ir_with_dtype(ot, gt.dtype), 0.0);
  cx->results[0] = lo_out(g, lo_put_dim(g, zero, dim, idx, upd, IR_RED_SUM), ot);
  return NULL;
}

/* x rotated by `shift` along dim: element i moves to (i + shift) mod n. */
static tv roll_dim(ir_graph *g, tv x, int dim, int64_t shift) {
  ir_type t = ir_type_of(g, x);
  int64_t n = t.dims[dim];
  if (n == 0) return x;
  shift = ((shift % n) + n) % n;
  if (shift == 0) return x;
  int64_t start[TPUC_MAX_DIMS] = {0}, limit[TPUC_MAX_DIMS];
  memcpy(limit, t.dims, sizeof limit);
  start[dim] = n - shift;
  tv tail = ir_slice(g, x, start, limit, NULL);
  start[dim] = 0;
  limit[dim] = n - shift;
  tv head = ir_slice(g, x, start, limit, NULL);
  tv parts[2] = {tail, head};
  return ir_concat(g, parts, 2, dim);
}

/* roll(Tensor self, SymInt[1] shifts, int[1] dims=[]). */
static tpuc_status *l_roll(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  const int64_t *sh, *dm;
  int ns = lx_ints(cx, 1, &sh), nd = lx_ints(cx, 2, &dm);
  if (nd <= 0) { /* flattened */
    if (ns != 1) return lx_unimplemented(cx, "roll without dims takes one shift");
    int64_t numel = ir_numel(&ot);
    x = roll_dim(g, ir_reshape(g, x, 1, &numel), 0, sh[0]);
  } else {
    if (ns != nd) return lx_unimplemented(cx, "shifts and dims differ in length");
    for (int i = 0; i < nd; i++) x = roll_dim(g, x, (int)lx_dim(dm[i], ot.ndim), sh[i]);
  }
  cx->results[0] = ir_reshape(g, x, ot.ndim, ot.dims);
  return NULL;
}

/* repeat(Tensor self, SymInt[] repeats): broadcast into [r0, d0, r1, d1...]
 * (leaving out the r_i == 1) and merge each pair. */
static tpuc_status *l_repeat(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  const int64_t *rep;
  int nr = lx_ints(cx, 1, &rep);
  if (nr < xt.ndim) return lx_unimplemented(cx, "fewer repeats than dims");
  if (ir_numel(&ot) == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  int lead = nr - xt.ndim, n = 0;
  int64_t dims[2 * TPUC_MAX_DIMS], bd[TPUC_MAX_DIMS];
  for (int i = 0; i < nr; i++) {
    int64_t d = i < lead ? 1 : xt.dims[i - lead];
    if (rep[i] != 1) dims[n++] = rep[i];
    if (i >= lead) bd[i - lead] = n;
    dims[n++] = d;
  }
  if (n > TPUC_MAX_DIMS) return lx_unimplemented(cx, "too many repeated dims");
  ir_type bt = ir_make_type(xt.dtype, n, dims);
  tv b = ir_broadcast_in_dim(g, x, bt, bd);
  cx->results[0] = ir_reshape(g, b, ot.ndim, ot.dims);
  return NULL;
}

/* ---- triangles ---- */

/* tril/triu(Tensor self, SymInt diagonal=0): keep col - row <= k (tril) or
 * >= k (triu) in the last two dims. */
static tpuc_status *lower_tri(tpuc_lower_ctx *cx, bool upper) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  if (ot.ndim < 2) return lx_unimplemented(cx, "tril/triu of rank < 2");
  tv x = ir_convert(g, lx_tensor(cx, 0), ot.dtype);
  int64_t rc[2] = {ot.dims[ot.ndim - 2], ot.dims[ot.ndim - 1]};
  ir_type it = ir_make_type(TPUC_S64, 2, rc);
  tv diff = ir_binary(g, IR_SUB, ir_iota(g, it, 1), ir_iota(g, it, 0));
  tv k = ir_splat_i64(g, it, lx_int(cx, 1, 0));
  tv mask = ir_compare(g, upper ? IR_GE : IR_LE, diff, k);
  mask = lx_broadcast_to(g, mask, ot.ndim, ot.dims);
  cx->results[0] = ir_select(g, mask, x, ir_splat(g, ot, 0.0));
  return NULL;
}
static tpuc_status *l_tril(tpuc_lower_ctx *cx) { return lower_tri(cx, false); }
static tpuc_status *l_triu(tpuc_lower_ctx *cx) { return lower_tri(cx, true); }

/* tril_indices/triu_indices(int row, int col, int offset=0, ...): a
 * constant computed here (shapes are static). */
static tpuc_status *lower_tri_indices(tpuc_lower_ctx *cx, bool upper) {
  ir_type ot = lx_out(cx, 0);
  int64_t rows = lx_int(cx, 0, 0), cols = lx_int(cx, 1, 0), off = lx_int(cx, 2, 0);
  int64_t n = ot.ndim == 2 ? ot.dims[1] : -1;
  if (n < 0 || n > (1 << 16)) return lx_unimplemented(cx, "tri indices: too many");
  int64_t *v = malloc((size_t)(2 * n + 1) * sizeof *v);
  if (!v) return lx_unimplemented(cx, "out of host memory");
  int64_t k = 0;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      bool in = upper ? c - r >= off : c - r <= off;
      if (in && k < n) {
        v[k] = r;
        v[n + k] = c;
        k++;
      }
    }
  tpuc_status *st = NULL;
  if (k != n) {
    st = lx_unimplemented(cx, "tri indices: count differs from the output size");
  } else {
    tv c = ir_const_i64s(cx->g, v, (int)(2 * n));
    cx->results[0] = lo_out(cx->g, ir_reshape(cx->g, c, 2, ot.dims), ot);
  }
  free(v);
  return st;
}
static tpuc_status *l_tril_indices(tpuc_lower_ctx *cx) { return lower_tri_indices(cx, false); }
static tpuc_status *l_triu_indices(tpuc_lower_ctx *cx) { return lower_tri_indices(cx, true); }

/* diag_embed(Tensor self, int offset=0, int dim1=-2, int dim2=-1): the last
 * dim, zero-padded to the diagonal's length, broadcast along one of the two
 * new dims and masked to the diagonal j - i == offset. */
static tpuc_status *l_diag_embed(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = ir_convert(g, lx_tensor(cx, 0), ot.dtype);
  ir_type xt = ir_type_of(g, x);
  int64_t off = lx_int(cx, 1, 0);
  int d1 = (int)lx_dim(lx_int(cx, 2, -2), ot.ndim), d2 = (int)lx_dim(lx_int(cx, 3, -1), ot.ndim);
  if (xt.ndim < 1 || d1 == d2 || ot.ndim != xt.ndim + 1)
    return lx_unimplemented(cx, "diag_embed: unexpected shapes");
  int64_t lo[TPUC_MAX_DIMS] = {0}, hi[TPUC_MAX_DIMS] = {0};
  hi[xt.ndim - 1] = off < 0 ? -off : off;
  x = ir_pad(g, x, lo_const(g, ot.dtype, 0.0), lo, hi, NULL);
  int64_t bd[TPUC_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < ot.ndim; i++)
    if (i != d1 && i != d2) bd[k++] = i;
  bd[xt.ndim - 1] = off >= 0 ? d1 : d2;
  tv b = ir_broadcast_in_dim(g, x, ot, bd);
  ir_type it = ir_with_dtype(ot, TPUC_S64);
  tv diff = ir_binary(g, IR_SUB, ir_iota(g, it, d2), ir_iota(g, it, d1));
  tv mask = ir_compare(g, IR_EQ, diff, ir_splat_i64(g, it, off));
  cx->results[0] = ir_select(g, mask, b, ir_splat(g, ot, 0.0));
  return NULL;
}

/* ---- padding ---- */

/* constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0): pairs from the
 * last dim backwards; negative pads crop. */
static tpuc_status *l_constant_pad(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = ir_convert(g, lx_tensor(cx, 0), ot.dtype);
  const int64_t *p;
  int np = lx_ints(cx, 1, &p);
  if (np < 0 || np % 2 || np / 2 > ot.ndim) return lx_unimplemented(cx, "bad pad list");
  int64_t lo[TPUC_MAX_DIMS] = {0}, hi[TPUC_MAX_DIMS] = {0};
  for (int i = 0; i < np / 2; i++) {
    lo[ot.ndim - 1 - i] = p[2 * i];
    hi[ot.ndim - 1 - i] = p[2 * i + 1];
  }
  tv v = lx_scalar(cx, 2, ot.dtype);
  if (v == IR_NONE) v = lo_const(g, ot.dtype, 0.0);
  if (ir_numel(&ot) == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  cx->results[0] = ir_pad(g, x, v, lo, hi, NULL);
  return NULL;
}

static tv slice_dim(ir_graph *g, tv x, int dim, int64_t a, int64_t b) {
  ir_type t = ir_type_of(g, x);
  int64_t start[TPUC_MAX_DIMS] = {0}, limit[TPUC_MAX_DIMS];
  memcpy(limit, t.dims, sizeof limit);
  start[dim] = a;
  limit[dim] = b;
  return ir_slice(g, x, start, limit, NULL);
}

/* Reflection (mirror without the edge) or replication (repeat the edge)
 * padding of one dim. */
static tv edge_pad(ir_graph *g, tv x, int dim, int64_t lo, int64_t hi, bool reflect) {
  ir_type t = ir_type_of(g, x);
  int64_t n = t.dims[dim], d = dim;
  tv parts[3];
  int k = 0;
  if (lo > 0) {
    if (reflect) {
      parts[k++] = ir_reverse(g, slice_dim(g, x, dim, 1, lo + 1), &d, 1);
    } else {
      ir_type bt = t;
      bt.dims[dim] = lo;
      int64_t bd[TPUC_MAX_DIMS];
      for (int i = 0; i < t.ndim; i++) bd[i] = i;
      parts[k++] = ir_broadcast_in_dim(g, slice_dim(g, x, dim, 0, 1), bt, bd);
    }
  }
  parts[k++] = x;
  if (hi > 0) {
    if (reflect) {
      parts[k++] = ir_reverse(g, slice_dim(g, x, dim, n - 1 - hi, n - 1), &d, 1);
    } else {
      ir_type bt = t;
      bt.dims[dim] = hi;
      int64_t bd[TPUC_MAX_DIMS];
      for (int i = 0; i < t.ndim; i++) bd[i] = i;
      parts[k++] = ir_broadcast_in_dim(g, slice_dim(g, x, dim, n - 1, n), bt, bd);
    }
  }
  return ir_concat(g, parts, k, dim);
}

/* The adjoint of edge_pad: gradient of size n + lo + hi along dim -> n. */
static tv edge_pad_grad(ir_graph *g, tv gy, int dim, int64_t lo, int64_t hi, bool reflect) {
  ir_type t = ir_type_of(g, gy);
  int64_t n = t.dims[dim] - lo - hi, d = dim;
  tv mid = slice_dim(g, gy, dim, lo, lo + n);
  tv zero = lo_const(g, t.dtype, 0.0);
  int64_t plo[TPUC_MAX_DIMS] = {0}, phi[TPUC_MAX_DIMS] = {0};
  if (lo > 0) {
    tv part = slice_dim(g, gy, dim, 0, lo);
    if (reflect) {
      part = ir_reverse(g, part, &d, 1); /* lands on 1 .. lo */
      plo[dim] = 1;
      phi[dim] = n - 1 - lo;
    } else {
      part = lo_sum(g, part, &d, 1, true); /* lands on 0 */
      plo[dim] = 0;
      phi[dim] = n - 1;
    }
    mid = ir_binary(g, IR_ADD, mid, ir_pad(g, part, zero, plo, phi, NULL));
  }
  if (hi > 0) {
    tv part = slice_dim(g, gy, dim, lo + n, lo + n + hi);
    if (reflect) {
      part = ir_reverse(g, part, &d, 1); /* lands on n-1-hi .. n-2 */
      plo[dim] = n - 1 - hi;
      phi[dim] = 1;
    } else {
      part = lo_sum(g, part, &d, 1, true); /* lands on n-1 */
      plo[dim] = n - 1;
      phi[dim] = 0;
    }
    mid = ir_binary(g, IR_ADD, mid, ir_pad(g, part, zero, plo, phi, NULL));
  }
  return mid;
}

/* Replication padding by lo/hi along dim, either sign (a negative pad crops):
 * output j reads input clamp(j - lo, 0, n - 1), a gather; its backward
 * scatter-adds the gradient back to those positions (gy: m = n + lo + hi). */
static tv replicate_index(ir_graph *g, int64_t m, int64_t n, int64_t lo) {
  ir_type it = ir_make_type(TPUC_S64, 1, &m);
  tv j = ir_binary(g, IR_SUB, ir_iota(g, it, 0), ir_splat_i64(g, it, lo));
  return ir_clamp(g, ir_splat_i64(g, it, 0), j, ir_splat_i64(g, it, n - 1));
}
static tv replicate_any(ir_graph *g, tv x, int dim, int64_t lo, int64_t hi) {
  int64_t n = ir_type_of(g, x).dims[dim];
  return lo_take_dim(g, x, dim, replicate_index(g, n + lo + hi, n, lo));
}
static tv replicate_any_grad(ir_graph *g, tv gy, int dim, int64_t lo, int64_t hi) {
  ir_type t = ir_type_of(g, gy);
  int64_t m = t.dims[dim], n = m - lo - hi;
  ir_type zt = t;
  zt.dims[dim] = n;
  if (m == 0) return ir_splat(g, zt, 0.0);
  return lo_put_dim(g, ir_splat(g, zt, 0.0), dim, replicate_index(g, m, n, lo), gy, IR_RED_SUM);
}

/* reflection_padNd / replication_padNd (self, padding) and their backward
 * (grad_output, self, padding): `padding` pairs from the last dim back. */
static tpuc_status *lower_edge_pad(tpuc_lower_ctx *cx, bool reflect, bool backward) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  const int64_t *p;
  int np = lx_ints(cx, backward ? 2 : 1, &p);
  if (np < 2 || np % 2 || np / 2 > ot.ndim) return lx_unimplemented(cx, "bad padding");
  tv x = lx_tensor(cx, 0);
  tpuc_dtype cd = backward ? lx_compute_dtype(ot.dtype) : ot.dtype;
  x = ir_convert(g, x, cd);
  for (int i = 0; i < np / 2; i++) {
    int dim = ot.ndim - 1 - i;
    int64_t lo = p[2 * i], hi = p[2 * i + 1];
    int64_t n = backward ? ot.dims[dim] : ir_type_of(g, x).dims[dim];
    if (!reflect && (lo < 0 || hi < 0) && n > 0) {
      x = backward ? replicate_any_grad(g, x, dim, lo, hi) : replicate_any(g, x, dim, lo, hi);
      continue;
    }
    if (lo < 0 || hi < 0) return lx_unimplemented(cx, "negative reflection padding");
    if (reflect && (lo >= n || hi >= n)) return lx_unimplemented(cx, "padding >= input size");
    if (n == 0) return lx_unimplemented(cx, "padding an empty dim");
    x = backward ? edge_pad_grad(g, x, dim, lo, hi, reflect) : edge_pad(g, x, dim, lo, hi, reflect);
  }
  cx->results[0] = lo_out(g, x, ot);
  return NULL;
}
static tpuc_status *l_reflection_pad(tpuc_lower_ctx *cx) { return lower_edge_pad(cx, true, false); }
static tpuc_status *l_replication_pad(tpuc_lower_ctx *cx) { return lower_edge_pad(cx, false, false); }
static tpuc_status *l_reflection_pad_bw(tpuc_lower_ctx *cx) { return lower_edge_pad(cx, true, true); }
static tpuc_status *l_replication_pad_bw(tpuc_lower_ctx *cx) { return lower_edge_pad(cx, false, true); }

/* ---- copies of views ---- */

/* split_copy / split_with_sizes_copy (self, sizes, dim) and unbind_copy
 * (self, dim): consecutive slices along dim, one per output. */
static tpuc_status *lower_split(tpuc_lower_ctx *cx, bool unbind) {
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  int dim = (int)lx_dim(lx_int(cx, unbind ? 1 : 2, 0), xt.ndim);
  int64_t at = 0;
  for (int i = 0; i < cx->noutputs; i++) {
    ir_type ot = lx_out(cx, i);
    int64_t len = unbind ? 1 : ot.dims[dim];
    if (at + len > xt.dims[dim]) return lx_unimplemented(cx, "split: pieces exceed the input");
    tv piece = slice_dim(g, x, dim, at, at + len);
    cx->results[i] = lo_out(g, ir_reshape(g, piece, ot.ndim, ot.dims), ot);
    at += len;
  }
  return NULL;
}
static tpuc_status *l_split(tpuc_lower_ctx *cx) { return lower_split(cx, false); }
static tpuc_status *l_unbind(tpuc_lower_ctx *cx) { return lower_split(cx, true); }

/* Clamps a slice bound like PyTorch (negative wraps, then clamp). */
static int64_t slice_bound(int64_t v, int64_t n) {
  if (v < 0) v += n;
  return v < 0 ? 0 : (v > n ? n : v);
}

/* slice_copy.Tensor(self, dim=0, start=None, end=None, step=1). */
static tpuc_status *l_slice_copy(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  int dim = (int)lx_dim(lx_int(cx, 1, 0), xt.ndim);
  int64_t n = xt.dims[dim];
  int64_t a = slice_bound(lx_int(cx, 2, 0), n), b = slice_bound(lx_int(cx, 3, INT64_MAX), n);
  int64_t step = lx_int(cx, 4, 1);
  if (b < a) b = a;
  if (step < 1) return lx_unimplemented(cx, "slice step < 1");
  int64_t start[TPUC_MAX_DIMS] = {0}, limit[TPUC_MAX_DIMS], stride[TPUC_MAX_DIMS];
  memcpy(limit, xt.dims, sizeof limit);
  for (int i = 0; i < TPUC_MAX_DIMS; i++) stride[i] = 1;
  start[dim] = a;
  limit[dim] = b;
  stride[dim] = step;
  cx->results[0] = lo_out(g, ir_slice(g, x, start, limit, stride), ot);
  return NULL;
}

/* select_copy.int(self, dim, index) and narrow_copy(self, dim, start, length). */
static tpuc_status *lower_select_narrow(tpuc_lower_ctx *cx, bool narrow) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  int dim = (int)lx_dim(lx_int(cx, 1, 0), xt.ndim);
  int64_t n = xt.dims[dim], a = lx_int(cx, 2, 0);
  if (a < 0) a += n;
  int64_t len = narrow ? lx_int(cx, 3, 0) : 1;
  if (a < 0 || a + len > n) return lx_unimplemented(cx, "index out of range");
  tv piece = slice_dim(g, x, dim, a, a + len);
  cx->results[0] = lo_out(g, ir_reshape(g, piece, ot.ndim, ot.dims), ot);
  return NULL;
}
static tpuc_status *l_select_copy(tpuc_lower_ctx *cx) { return lower_select_narrow(cx, false); }
static tpuc_status *l_narrow_copy(tpuc_lower_ctx *cx) { return lower_select_narrow(cx, true); }

/* view_copy, squeeze/unsqueeze_copy, alias_copy: same elements, new shape. */
static tpuc_status *l_reshape_copy(tpuc_lower_ctx *cx) {
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  if (ir_type_of(cx->g, x).dtype != ot.dtype) return lx_unimplemented(cx, "dtype views");
  cx->results[0] = ir_reshape(cx->g, x, ot.ndim, ot.dims);
  return NULL;
}

/* expand_copy(self, size, implicit=False). */
static tpuc_status *l_expand_copy(tpuc_lower_ctx *cx) {
  ir_type ot = lx_out(cx, 0);
  cx->results[0] = lo_out(cx->g, lx_tensor(cx, 0), ot);
  return NULL;
}

/* permute_copy(self, dims), transpose_copy.int(self, d0, d1), t_copy(self). */
static tpuc_status *lower_permute(tpuc_lower_ctx *cx, int kind) {
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  int r = ot.ndim;
  int64_t perm[TPUC_MAX_DIMS];
  for (int i = 0; i < r; i++) perm[i] = i;
  if (kind == 0) {
    const int64_t *v;
    if (lx_ints(cx, 1, &v) != r) return lx_unimplemented(cx, "permutation of the wrong length");
    for (int i = 0; i < r; i++) perm[i] = lx_dim(v[i], r);
  } else if (r >= 2) {
    int64_t a = kind == 1 ? lx_dim(lx_int(cx, 1, 0), r) : 0;
    int64_t b = kind == 1 ? lx_dim(lx_int(cx, 2, 0), r) : 1;
    perm[a] = b;
    perm[b] = a;
  }
  cx->results[0] = ir_transpose(cx->g, x, perm);
  return NULL;
}
static tpuc_status *l_permute_copy(tpuc_lower_ctx *cx) { return lower_permute(cx, 0); }
static tpuc_status *l_transpose_copy(tpuc_lower_ctx *cx) { return lower_permute(cx, 1); }
static tpuc_status *l_t_copy(tpuc_lower_ctx *cx) { return lower_permute(cx, 2); }

const tpuc_lowering tpuc_lowerings_shape[] = {
    {"aten::cat", l_cat},
    {"aten::cat.out", l_cat},
    {"aten::stack", l_stack},
    {"aten::stack.out", l_stack},
    {"aten::flip", l_flip},
    {"aten::flip.out", l_flip},
    {"aten::roll", l_roll},
    {"aten::roll.out", l_roll},
    {"aten::repeat", l_repeat},
    {"aten::repeat.out", l_repeat},
    {"aten::tril", l_tril},
    {"aten::tril.out", l_tril},
    {"aten::tril_", l_tril},
    {"aten::triu", l_triu},
    {"aten::triu.out", l_triu},
    {"aten::triu_", l_triu},
    {"aten::tril_indices", l_tril_indices},
    {"aten::tril_indices.out", l_tril_indices},
    {"aten::triu_indices", l_triu_indices},
    {"aten::triu_indices.out", l_triu_indices},
    {"aten::unfold_backward", l_unfold_backward},
    {"aten::unfold_backward.out", l_unfold_backward},
    {"aten::channel_shuffle", l_channel_shuffle},
    {"aten::channel_shuffle.out", l_channel_shuffle},
    {"aten::native_channel_shuffle", l_channel_shuffle},
    {"aten::diag_embed", l_diag_embed},
    {"aten::diag_embed.out", l_diag_embed},
    {"aten::constant_pad_nd", l_constant_pad},
    {"aten::constant_pad_nd.out", l_constant_pad},
    {"aten::reflection_pad1d", l_reflection_pad},
    {"aten::reflection_pad1d.out", l_reflection_pad},
    {"aten::reflection_pad2d", l_reflection_pad},
    {"aten::reflection_pad2d.out", l_reflection_pad},
    {"aten::reflection_pad3d", l_reflection_pad},
    {"aten::reflection_pad3d.out", l_reflection_pad},
    {"aten::replication_pad1d", l_replication_pad},
    {"aten::replication_pad1d.out", l_replication_pad},
    {"aten::replication_pad2d", l_replication_pad},
    {"aten::replication_pad2d.out", l_replication_pad},
    {"aten::replication_pad3d", l_replication_pad},
    {"aten::replication_pad3d.out", l_replication_pad},
    {"aten::reflection_pad1d_backward", l_reflection_pad_bw},
    {"aten::reflection_pad1d_backward.grad_input", l_reflection_pad_bw},
    {"aten::reflection_pad2d_backward", l_reflection_pad_bw},
    {"aten::reflection_pad2d_backward.grad_input", l_reflection_pad_bw},
    {"aten::reflection_pad3d_backward", l_reflection_pad_bw},
    {"aten::reflection_pad3d_backward.grad_input", l_reflection_pad_bw},
    {"aten::replication_pad1d_backward", l_replication_pad_bw},
    {"aten::replication_pad1d_backward.grad_input", l_replication_pad_bw},
    {"aten::replication_pad2d_backward", l_replication_pad_bw},
    {"aten::replication_pad2d_backward.grad_input", l_replication_pad_bw},
    {"aten::replication_pad3d_backward", l_replication_pad_bw},
    {"aten::replication_pad3d_backward.grad_input", l_replication_pad_bw},
    {"aten::split_copy.Tensor", l_split},
    {"aten::split_copy.Tensor_out", l_split},
    {"aten::split_with_sizes_copy", l_split},
    {"aten::split_with_sizes_copy.out", l_split},
    {"aten::unbind_copy.int", l_unbind},
    {"aten::unbind_copy.int_out", l_unbind},
    {"aten::slice_copy.Tensor", l_slice_copy},
    {"aten::slice_copy.Tensor_out", l_slice_copy},
    {"aten::select_copy.int", l_select_copy},
    {"aten::select_copy.int_out", l_select_copy},
    {"aten::narrow_copy", l_narrow_copy},
    {"aten::narrow_copy.out", l_narrow_copy},
    {"aten::view_copy", l_reshape_copy},
    {"aten::view_copy.out", l_reshape_copy},
    {"aten::squeeze_copy", l_reshape_copy},
    {"aten::squeeze_copy.out", l_reshape_copy},
    {"aten::squeeze_copy.dim", l_reshape_copy},
    {"aten::squeeze_copy.dim_out", l_reshape_copy},
    {"aten::squeeze_copy.dims", l_reshape_copy},
    {"aten::squeeze_copy.dims_out", l_reshape_copy},
    {"aten::unsqueeze_copy", l_reshape_copy},
    {"aten::unsqueeze_copy.out", l_reshape_copy},
    {"aten::alias_copy", l_reshape_copy},
    {"aten::alias_copy.out", l_reshape_copy},
    {"aten::expand_copy", l_expand_copy},
    {"aten::expand_copy.out", l_expand_copy},
    {"aten::permute_copy", l_permute_copy},
    {"aten::permute_copy.out", l_permute_copy},
    {"aten::transpose_copy.int", l_transpose_copy},
    {"aten::transpose_copy.int_out", l_transpose_copy},
    {"aten::t_copy", l_t_copy},
    {"aten::t_copy.out", l_t_copy},
    {NULL, NULL},
};
