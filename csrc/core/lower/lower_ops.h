/* lower_ops.h — small IR helpers shared by the linalg, shape, index and nn
 * lowerings: constants, reductions that keep dims, broadcasting binary ops,
 * index wrapping and a batched matmul with f32 accumulation for f16/bf16.
 * Header-only (static inline) so each family file stays self-contained. */
#ifndef TPUC_LOWER_OPS_H
#define TPUC_LOWER_OPS_H

#include <math.h>
#include <string.h>

#include "lower.h"

/* A rank-0 constant. */
static inline tv lo_const(ir_graph *g, tpuc_dtype d, double v) {
  return ir_splat(g, ir_scalar_type(d), v);
}

static inline tpuc_dtype lo_dtype(ir_graph *g, tv x) { return ir_type_of(g, x).dtype; }
static inline int lo_rank(ir_graph *g, tv x) { return ir_type_of(g, x).ndim; }

/* The identity of a reducer for dtype d (lowest/highest value for max/min). */
static inline tv lo_init(ir_graph *g, tpuc_dtype d, ir_reducer r) {
  ir_type t = ir_scalar_type(d);
  switch (r) {
    case IR_RED_SUM:
    case IR_RED_OR:
    case IR_RED_XOR:
      return ir_splat(g, t, 0.0);
    case IR_RED_PROD:
    case IR_RED_AND:
      return ir_splat(g, t, 1.0);
    case IR_RED_MAX:
    case IR_RED_MIN: {
      bool mx = r == IR_RED_MAX;
      if (ir_is_float(d)) return ir_splat(g, t, mx ? -INFINITY : INFINITY);
      if (d == TPUC_PRED) return ir_splat(g, t, mx ? 0.0 : 1.0);
      int bits = (int)tpuc_dtype_size(d) * 8;
      if (ir_is_unsigned(d))
        return mx ? ir_splat_i64(g, t, 0)
                  : ir_splat_i64(g, t, bits >= 64 ? -1 : (int64_t)((1ULL << bits) - 1));
      int64_t hi = bits >= 64 ? INT64_MAX : (int64_t)((1ULL << (bits - 1)) - 1);
      return ir_splat_i64(g, t, mx ? -hi - 1 : hi);
    }
  }
  return ir_splat(g, t, 0.0);
}

/* reduce.c: a float32/float64 sum over dims that are a leading run, a trailing
 * run or both, as blocked products with ones (as torch.sum's): IR_NONE otherwise. */
tv lo_sum_dot(ir_graph *g, tv x, const int64_t *dims, int n);

/* Reduces `dims` of x; with keep, the reduced dims stay as size 1. `dot`: a sum over
 * dims that include the first, on XLA's CPU compiler, goes through lo_sum_dot where it
 * applies: XLA's reduce loops add such sums in one running sum (a batch norm's
 * per-channel mean over 5e5 values erred by 1e-6, 30x the CPU's). Sums over trailing
 * dims only stay XLA's: its loops are vectorised across the row there (softmax's error
 * was the CPU's), and fused with what feeds them they are faster (log_softmax over
 * 32000 classes took 2.2x as a product). GPU and TPU compilers reduce in trees. */
static inline tv lo_reduce_as(ir_graph *g, tv x, ir_reducer r, const int64_t *dims, int n, bool keep,
                              bool dot) {
  ir_type t = ir_type_of(g, x);
  bool leading = false;
  for (int i = 0; i < n; i++) leading = leading || dims[i] == 0;
  dot = dot && leading && r == IR_RED_SUM && ir_graph_xla_cpu(g) && ir_graph_sum_block(g) >= 2;
  tv y = dot ? lo_sum_dot(g, x, dims, n) : IR_NONE; /* TPUC_SUM_BLOCK=0: XLA's reduce */
  if (y == IR_NONE) y = ir_reduce(g, x, lo_init(g, t.dtype, r), r, dims, n);
  if (!keep) return y;
  for (int i = 0; i < n; i++)
    if (dims[i] >= 0 && dims[i] < t.ndim) t.dims[dims[i]] = 1;
  return ir_reshape(g, y, t.ndim, t.dims);
}

static inline tv lo_reduce(ir_graph *g, tv x, ir_reducer r, const int64_t *dims, int n, bool keep) {
  return lo_reduce_as(g, x, r, dims, n, keep, true);
}

/* A sum whose terms are zero but (at most) one per result, such as a one-hot select:
 * exact in any order, so XLA's reduce, which fuses with the select (a blocked product
 * would first write the selected tensor out: nll_loss over 32000 classes took 2x). */
static inline tv lo_pick_sum(ir_graph *g, tv x, const int64_t *dims, int n, bool keep) {
  return lo_reduce_as(g, x, IR_RED_SUM, dims, n, keep, false);
}

static inline tv lo_sum(ir_graph *g, tv x, const int64_t *dims, int n, bool keep) {
  return lo_reduce(g, x, IR_RED_SUM, dims, n, keep);
}

/* Reduces every dim but `keep_dim` (for per-channel statistics). */
static inline tv lo_sum_except(ir_graph *g, tv x, int keep_dim) {
  int64_t dims[TPUC_MAX_DIMS];
  int n = 0, r = lo_rank(g, x);
  for (int i = 0; i < r; i++)
    if (i != keep_dim) dims[n++] = i;
  return lo_sum(g, x, dims, n, false);
}

/* Numpy-style broadcast of shapes a and b into *t (dtype of a). */
static inline bool lo_bshape_t(ir_graph *g, ir_type ta, ir_type tb, ir_type *t) {
  int n = ta.ndim > tb.ndim ? ta.ndim : tb.ndim;
  *t = ta;
  t->ndim = n;
  for (int i = 0; i < n; i++) {
    int ia = i - (n - ta.ndim), ib = i - (n - tb.ndim);
    int64_t da = ia >= 0 ? ta.dims[ia] : 1, db = ib >= 0 ? tb.dims[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      ir_fail(g, "lowering: shapes do not broadcast");
      return false;
    }
    t->dims[i] = da == 1 ? db : da;
  }
  return true;
}

static inline bool lo_bshape(ir_graph *g, tv a, tv b, ir_type *t) {
  return lo_bshape_t(g, ir_type_of(g, a), ir_type_of(g, b), t);
}

/* Binary op with numpy broadcasting; b is converted to a's dtype. */
static inline tv lo_bin(ir_graph *g, ir_binary_op op, tv a, tv b) {
  if (a == IR_NONE || b == IR_NONE) return IR_NONE;
  b = ir_convert(g, b, lo_dtype(g, a));
  ir_type t;
  if (!lo_bshape(g, a, b, &t)) return IR_NONE;
  return ir_binary(g, op, lx_broadcast_to(g, a, t.ndim, t.dims),
                   lx_broadcast_to(g, b, t.ndim, t.dims));
}

static inline tv lo_cmp(ir_graph *g, ir_cmp c, tv a, tv b) {
  if (a == IR_NONE || b == IR_NONE) return IR_NONE;
  b = ir_convert(g, b, lo_dtype(g, a));
  ir_type t;
  if (!lo_bshape(g, a, b, &t)) return IR_NONE;
  return ir_compare(g, c, lx_broadcast_to(g, a, t.ndim, t.dims),
                    lx_broadcast_to(g, b, t.ndim, t.dims));
}

/* select(p, a, b) with all three broadcast together; b takes a's dtype. */
static inline tv lo_where(ir_graph *g, tv p, tv a, tv b) {
  if (p == IR_NONE || a == IR_NONE || b == IR_NONE) return IR_NONE;
  b = ir_convert(g, b, lo_dtype(g, a));
  ir_type t, u;
  if (!lo_bshape(g, a, b, &t)) return IR_NONE;
  a = lx_broadcast_to(g, a, t.ndim, t.dims);
  if (!lo_bshape(g, a, p, &u)) return IR_NONE;
  return ir_select(g, lx_broadcast_to(g, p, u.ndim, u.dims), lx_broadcast_to(g, a, u.ndim, u.dims),
                   lx_broadcast_to(g, b, u.ndim, u.dims));
}

/* Binary op with a constant of a's dtype. */
static inline tv lo_binc(ir_graph *g, ir_binary_op op, tv a, double c) {
  if (a == IR_NONE) return IR_NONE;
  return ir_binary(g, op, a, lx_splat_like(g, a, c));
}

/* Keeps the shape, converts to t's dtype; t must be x's shape (or a
 * broadcast of it). The usual last step of a lowering. */
static inline tv lo_out(ir_graph *g, tv x, ir_type t) { return lx_coerce(g, x, t); }

/* x converted to t's dtype and reshaped to t's shape (same element count). */
static inline tv lo_fit(ir_graph *g, tv x, ir_type t) {
  return ir_reshape(g, ir_convert(g, x, t.dtype), t.ndim, t.dims);
}

/* Integer index values as s64, negative ones wrapped by `size`. */
static inline tv lo_wrap_index(ir_graph *g, tv idx, int64_t size) {
  idx = ir_convert(g, idx, TPUC_S64);
  ir_type t = ir_type_of(g, idx);
  tv zero = ir_splat_i64(g, t, 0);
  tv wrapped = ir_binary(g, IR_ADD, idx, ir_splat_i64(g, t, size));
  return ir_select(g, ir_compare(g, IR_LT, idx, zero), wrapped, idx);
}

/* x with a size-1 dim inserted at `dim`. */
static inline tv lo_unsqueeze(ir_graph *g, tv x, int dim) {
  ir_type t = ir_type_of(g, x);
  int64_t dims[TPUC_MAX_DIMS];
  int n = 0;
  for (int i = 0; i <= t.ndim; i++) {
    if (i == dim) dims[n++] = 1;
    if (i < t.ndim) dims[n++] = t.dims[i];
  }
  return ir_reshape(g, x, n, dims);
}

/* a @ b over the last two dims with `nb` leading batch dims (same sizes in
 * a and b): [batch, M, N]. ta/tb: a is [batch, K, M] / b is [batch, N, K].
 * a takes b's dtype; f16/bf16 accumulate in f32 (the result's dtype is
 * lx_compute_dtype of the inputs'). */
static inline tv lo_matmul(ir_graph *g, tv a, tv b, int nb, bool ta, bool tb) {
  int64_t bd[TPUC_MAX_DIMS];
  for (int i = 0; i < nb; i++) bd[i] = i;
  int64_t ca = nb + (ta ? 0 : 1), cb = nb + (tb ? 1 : 0);
  tpuc_dtype d = lo_dtype(g, b);
  a = ir_convert(g, a, d);
  return ir_dot_general(g, a, b, bd, bd, nb, &ca, &cb, 1, lx_compute_dtype(d));
}

/* Value of int list arg i at position k (repeating a single value, as
 * PyTorch's int[2] arguments do), or dflt when absent/empty. */
static inline int64_t lo_ints_at(const tpuc_lower_ctx *cx, int i, int k, int64_t dflt) {
  const int64_t *v;
  int n = lx_ints(cx, i, &v);
  if (n <= 0) return dflt;
  return v[k < n ? k : n - 1];
}

/* The RNG argument of an op (an explicit Generator? or the one the engine
 * appends for ops that draw from the default generator), or IR_NONE. */
static inline tv lo_rng_state(const tpuc_lower_ctx *cx) {
  for (int i = cx->call->nargs - 1; i >= 0; i--)
    if (cx->call->args[i].kind == TPUC_ARG_RNG) return cx->scalar_vals[i];
  return IR_NONE;
}

/* PyTorch's loss reductions (the `reduction` int argument). */
enum { RED_NONE = 0, RED_MEAN = 1, RED_SUM = 2 };

/* Reduces a per-element loss by `reduction`. */
static inline tv lo_reduce_loss(ir_graph *g, tv l, int64_t reduction) {
  if (reduction == RED_NONE) return l;
  ir_type t = ir_type_of(g, l);
  int64_t dims[TPUC_MAX_DIMS];
  for (int i = 0; i < t.ndim; i++) dims[i] = i;
  tv s = lo_sum(g, l, dims, t.ndim, false);
  return reduction == RED_MEAN ? lo_binc(g, IR_DIV, s, (double)ir_numel(&t)) : s;
}

/* gather.c: x [B, M] with upd [B, n] added at positions idx [B, n] (s64). */
tv lo_scatter_add_rows(ir_graph *g, tv x, tv idx, tv upd);
/* gather.c: the same with `combine` (IR_SCATTER_REPLACE or a reducer). */
tv lo_scatter_rows(ir_graph *g, tv x, tv idx, tv upd, ir_reducer combine);
/* gather.c: x indexed along `dim` by idx of any shape (s64, in range):
 * x.dims[:dim] + idx.shape + x.dims[dim+1:]. */
tv lo_take_dim(ir_graph *g, tv x, int dim, tv idx);
/* Slices of upd (x's shape with n at dim) combined into x's slices idx[k]
 * (idx [n], s64) with `combine` (IR_SCATTER_REPLACE or a reducer). */
tv lo_put_dim(ir_graph *g, tv x, int dim, tv idx, tv upd, ir_reducer combine);
/* Full coordinates [I..., r] for element-wise gather/scatter along `dim`:
 * component `dim` is idx, the others are positions in idx. */
tv lo_elem_coords(ir_graph *g, int dim, tv idx, int r);
/* torch.gather: out[i...] = x[..., idx[i...], ...] (idx of x's rank). */
tv lo_take_along(ir_graph *g, tv x, int dim, tv idx);

/* linalg_steps.c: the rank-0 s32 value j broadcast to t's shape (as s32). */
tv lo_s32_like(ir_graph *g, tv j, ir_type t);
/* linalg_steps.c: x[..., r:r+h, c:c+w] of a [..., R, C] value; r, c rank-0 s32 values. */
tv lo_mat_dslice(ir_graph *g, tv x, tv r, tv c, int64_t h, int64_t w);
/* linalg_steps.c: x [..., R, C] with u [..., h, w] written at (r, c), rank-0 s32 values. */
tv lo_mat_dput(ir_graph *g, tv x, tv u, tv r, tv c);
/* linalg_steps.c: st[0..n) = step(st, j) for j = 0 .. k-1 (j a rank-0 s32 value of the
 * graph step builds in): unrolled when k <= unroll_max, else one stablehlo.while (ir_loop,
 * n <= IR_LOOP_MAX; step then builds in the loop body and must read only st and j). */
typedef void (*lo_step_fn)(ir_graph *g, tv *st, tv j);
void lo_run_steps(ir_graph *g, tv *st, int n, int64_t k, int64_t unroll_max, lo_step_fn step);
/* linalg_qr.c: LAPACK's geqrf of a [..., M, N] (f32/f64):
 * the factored matrix (R on and above the diagonal, reflectors below) and
 * tau [..., min(M, N)]. */
tv lo_geqrf(ir_graph *g, tv a, tv *tau);
/* linalg_qr.c: Q = H_0 ... H_{k-1} I[:, :qcols] (dorg2r) from the reflectors
 * below the diagonal of v [..., M, >= k] and tau [..., >= k]: [..., M, qcols]. */
tv lo_householder_q(ir_graph *g, tv v, tv tau, int64_t k, int64_t qcols);

#endif /* TPUC_LOWER_OPS_H */
