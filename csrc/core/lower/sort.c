/* sort.c — the sort family: sort (every overload), topk, kthvalue (argsort
 * and msort are composites of sort), and the scans that carry an order:
 * cummax/cummin (values and indices) and logcumsumexp; and mode.
 *
 * Order, as PyTorch's CPU: NaN is the greatest value (first when descending,
 * never among topk(largest=False) unless k needs it), -0.0 equals +0.0, and
 * equal elements keep their input order (the CPU sorts stably whatever
 * `stable` says). The IR's sort compares floats in IEEE total order, so the
 * sort key maps -0.0 to +0.0 and every NaN to +NaN; the values returned are
 * then gathered from the input by the permutation, keeping signs and NaNs.
 *
 * The scans are Hillis-Steele prefix scans: ceil(log2 n) steps, each
 * combining every element with the one 2^k before it (O(n log n) work, no
 * serial loop, the same graph on every backend). */
#include <math.h>

#include "elementwise.h"
#include "lower_ops.h"


/* The key PyTorch's order sorts by (see the header); bool as u8. */
static tv sort_key(ir_graph *g, tv x) {
  tpuc_dtype d = lo_dtype(g, x);
  if (d == TPUC_PRED) return ir_convert(g, x, TPUC_U8);
  if (!ir_is_float(d)) return x;
  tv zero = ew_splat(g, x, 0.0);
  x = ir_select(g, ir_compare(g, IR_EQ, x, zero), zero, x);
  return ir_select(g, ew_isnan(g, x), ew_splat(g, x, NAN), x);
}

/* Stable sort of x (rank >= 1, no complex) along dim: values, s64 indices. */
static void sort_along(ir_graph *g, tv x, int dim, bool desc, tv *values, tv *indices) {
  tpuc_dtype d = lo_dtype(g, x);
  tv sorted;
  ir_sort(g, sort_key(g, x), dim, desc, &sorted, indices);
  if (ir_is_float(d))
    *values = lo_take_along(g, x, dim, *indices);
  else if (d == TPUC_PRED)
    *values = ir_compare(g, IR_NE, sorted, ew_splat(g, sorted, 0.0));
  else
    *values = sorted;
}

/* x restricted to [lo, hi) along dim. */
static tv slice_dim(ir_graph *g, tv x, int dim, int64_t lo, int64_t hi) {
  ir_type t = ir_type_of(g, x);
  int64_t a[TPUC_MAX_DIMS] = {0}, b[TPUC_MAX_DIMS], s[TPUC_MAX_DIMS];
  for (int k = 0; k < t.ndim; k++) {
    b[k] = t.dims[k];
    s[k] = 1;
  }
  a[dim] = lo;
  b[dim] = hi;
  return ir_slice(g, x, a, b, s);
}

/* Shared checks: self's rank, dtype and the normalised dim at `dim_arg`.
 * Returns NULL and sets *dim (-1 for rank 0), or a decline. */
static tpuc_status *self_and_dim(tpuc_lower_ctx *cx, int dim_arg, int64_t dflt, tv *x, int *dim) {
  *x = lx_tensor(cx, 0);
  ir_type t = ir_type_of(cx->g, *x);
  if (ir_is_complex(t.dtype)) return lx_unimplemented(cx, "complex input");
  if (t.ndim == 0) {
    *dim = -1;
    return NULL;
  }
  int64_t d = lx_dim(lx_int(cx, dim_arg, dflt), t.ndim);
  if (d < 0 || d >= t.ndim) return lx_unimplemented(cx, "dim out of range");
  *dim = (int)d;
  return NULL;
}

/* Every output as zeros of its type (empty results) or, for rank 0, x and
 * index 0 (PyTorch's sort/topk/kthvalue/cummax of a scalar). */
static tpuc_status *trivial(tpuc_lower_ctx *cx, tv x) {
  ir_graph *g = cx->g;
  for (int i = 0; i < cx->noutputs; i++) {
    ir_type t = lx_out(cx, i);
    cx->results[i] = (i == 0 && ir_numel(&t) > 0) ? lo_fit(g, x, t) : ir_splat(g, t, 0.0);
  }
  return NULL;
}

/* ---- sort, topk, kthvalue ---- */

/* (self, dim, descending) at arg positions dim_arg, dim_arg + 1. */
static tpuc_status *sort_op(tpuc_lower_ctx *cx, int dim_arg) {
  ir_graph *g = cx->g;
  tv x, v, i;
  int dim = -1;
  tpuc_status *st = self_and_dim(cx, dim_arg, -1, &x, &dim);
  if (st) return st;
  ir_type t = ir_type_of(g, x);
  if (dim < 0 || ir_numel(&t) == 0) return trivial(cx, x);
  sort_along(g, x, dim, lx_bool(cx, dim_arg + 1, false), &v, &i);
  cx->results[0] = lo_fit(g, v, lx_out(cx, 0));
  if (cx->noutputs > 1) cx->results[1] = lo_fit(g, i, lx_out(cx, 1));
  return NULL;
}

/* sort(self, dim, descending) and sort.values(..., *, values, indices). */
static tpuc_status *so_sort(tpuc_lower_ctx *cx) { return sort_op(cx, 1); }
/* sort.stable(self, *, stable?, dim, descending) and sort.values_stable. */
static tpuc_status *so_sort_stable(tpuc_lower_ctx *cx) { return sort_op(cx, 2); }

/* topk(self, k, dim, largest, sorted) [+ values, indices]: the first k of a
 * stable sort (descending for largest), so the output is always sorted. */
static tpuc_status *so_topk(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv x, v, i;
  int dim = -1;
  tpuc_status *st = self_and_dim(cx, 2, -1, &x, &dim);
  if (st) return st;
  ir_type t = ir_type_of(g, x), ot = lx_out(cx, 0);
  if (dim < 0 || ir_numel(&ot) == 0) return trivial(cx, x);
  int64_t k = lx_int(cx, 1, 1);
  if (k < 0 || k > t.dims[dim]) return lx_unimplemented(cx, "k out of range");
  sort_along(g, x, dim, lx_bool(cx, 3, true), &v, &i);
  cx->results[0] = lo_fit(g, slice_dim(g, v, dim, 0, k), ot);
  cx->results[1] = lo_fit(g, slice_dim(g, i, dim, 0, k), lx_out(cx, 1));
  return NULL;
}

/* kthvalue(self, k, dim, keepdim) [+ values, indices]: the k-th smallest
 * (1-based; NaN greatest), at its index in a stable ascending sort. */
static tpuc_status *so_kthvalue(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv x, v, i;
  int dim = -1;
  tpuc_status *st = self_and_dim(cx, 2, -1, &x, &dim);
  if (st) return st;
  ir_type t = ir_type_of(g, x), ot = lx_out(cx, 0);
  int64_t k = lx_int(cx, 1, 1);
  if (dim < 0 || ir_numel(&ot) == 0) return trivial(cx, x);
  if (k < 1 || k > t.dims[dim]) return lx_unimplemented(cx, "k out of range");
  sort_along(g, x, dim, false, &v, &i);
  cx->results[0] = lo_fit(g, slice_dim(g, v, dim, k - 1, k), ot);
  cx->results[1] = lo_fit(g, slice_dim(g, i, dim, k - 1, k), lx_out(cx, 1));
  return NULL;
}

/* ---- scans ---- */

typedef tv (*combine_fn)(ir_graph *g, tv earlier, tv later);

/* Inclusive prefix scan of x along dim with an associative `combine`;
 * `pad` (rank 0) is its identity (what comes before the first element). */
static tv prefix_scan(ir_graph *g, tv x, int dim, combine_fn combine, tv pad) {
  ir_type t = ir_type_of(g, x);
  int64_t n = t.dims[dim];
  for (int64_t s = 1; s < n; s *= 2) {
    int64_t lo[TPUC_MAX_DIMS] = {0}, hi[TPUC_MAX_DIMS] = {0}, in[TPUC_MAX_DIMS] = {0};
    lo[dim] = s;
    tv before = ir_pad(g, slice_dim(g, x, dim, 0, n - s), pad, lo, hi, in);
    x = combine(g, before, x);
  }
  return x;
}

static tv c_max(ir_graph *g, tv a, tv b) { return ir_binary(g, IR_MAX, a, b); }
static tv c_min(ir_graph *g, tv a, tv b) { return ir_binary(g, IR_MIN, a, b); }

/* log(exp(a) + exp(b)) as PyTorch's CPU logcumsumexp: NaN propagates; two
 * equal infinities give that infinity. */
static tv c_logaddexp(ir_graph *g, tv a, tv b) {
  tv mn = ew_min(g, a, b), mx = ew_max(g, a, b);
  tv r = ir_binary(g, IR_ADD, ir_unary(g, IR_LOG1P, ir_unary(g, IR_EXP, ir_binary(g, IR_SUB, mn, mx))), mx);
  tv same_inf = ir_binary(g, IR_AND, ir_compare(g, IR_EQ, mn, mx), ew_isinf(g, mn));
  return ir_select(g, same_inf, mx, r);
}

/* cummax/cummin(self, dim) [+ values, indices], as PyTorch's CPU loop:
 * out = x[i], idx = i whenever x[i] is NaN or (out is not NaN and x[i] >=
 * out (<= for min)). So the value is the running extreme, NaN from the first
 * NaN on; the index is the last i so far where x[i] is NaN or equals the
 * running extreme at i — the running max of those positions — and the
 * value is x at that index. */
static tpuc_status *cum_extreme(tpuc_lower_ctx *cx, bool is_max) {
  ir_graph *g = cx->g;
  tv x;
  int dim = -1;
  tpuc_status *st = self_and_dim(cx, 1, 0, &x, &dim);
  if (st) return st;
  ir_type t = ir_type_of(g, x);
  if (dim < 0 || ir_numel(&t) == 0) return trivial(cx, x);
  tpuc_dtype d = t.dtype;
  tv xs = d == TPUC_PRED ? ir_convert(g, x, TPUC_U8) : x;
  tv nan = ew_isnan(g, xs);
  tv clean = xs;
  if (ir_is_float(d)) clean = ir_select(g, nan, ew_splat(g, xs, is_max ? -INFINITY : INFINITY), xs);
  /* the identity: the lowest (highest) value of the dtype, -inf/+inf */
  tv ext = prefix_scan(g, clean, dim, is_max ? c_max : c_min,
                       ew_reduce_init(g, lo_dtype(g, clean), is_max ? IR_RED_MAX : IR_RED_MIN));
  if (ir_is_float(d)) {
    tv seen = prefix_scan(g, ir_convert(g, nan, TPUC_S32), dim, c_max, lo_const(g, TPUC_S32, 0.0));
    tv any = ir_compare(g, IR_NE, seen, ir_splat(g, ir_type_of(g, seen), 0.0));
    ext = ir_select(g, any, ew_splat(g, xs, NAN), ext);
  }
  ir_type it = ir_with_dtype(t, TPUC_S64);
  tv pos = ir_iota(g, it, dim);
  tv mark = ir_binary(g, IR_OR, nan, ir_compare(g, IR_EQ, xs, ext));
  tv idx = prefix_scan(g, ir_select(g, mark, pos, ir_splat(g, it, -1.0)), dim, c_max,
                       lo_const(g, TPUC_S64, -1.0));
  /* the CPU's value is x[idx] itself (its sign of zero, its NaN) */
  cx->results[0] = lo_fit(g, lo_take_along(g, x, dim, idx), lx_out(cx, 0));
  cx->results[1] = lo_fit(g, idx, lx_out(cx, 1));
  return NULL;
}

static tpuc_status *so_cummax(tpuc_lower_ctx *cx) { return cum_extreme(cx, true); }
static tpuc_status *so_cummin(tpuc_lower_ctx *cx) { return cum_extreme(cx, false); }

/* logcumsumexp(self, dim) [+ out]: floats only; f16/bf16 in f32. */
static tpuc_status *so_logcumsumexp(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv x;
  int dim = -1;
  tpuc_status *st = self_and_dim(cx, 1, 0, &x, &dim);
  if (st) return st;
  ir_type t = ir_type_of(g, x);
  if (!ir_is_float(t.dtype)) return lx_unimplemented(cx, "non-float input");
  if (dim < 0 || ir_numel(&t) == 0) return trivial(cx, x);
  x = ir_convert(g, x, lx_compute_dtype(t.dtype));
  cx->results[0] = lo_fit(g, prefix_scan(g, x, dim, c_logaddexp, lo_const(g, lo_dtype(g, x), -INFINITY)), lx_out(cx, 0));
  return NULL;
}

/* ---- mode ---- */

/* mode(self, dim=-1, keepdim=False) -> (values, indices): the most frequent
 * value along dim (ties: the smallest) and the position of its last
 * occurrence, which is what PyTorch's CPU gives for rows of up to 16
 * elements (it sorts each row with std::sort, an insertion sort there, so
 * stable). Longer rows are declined: there the CPU's index among equal
 * elements is whatever its introsort leaves last, which only the CPU
 * reproduces. Counted over all pairs of a row, [B, n, n] compares that XLA
 * fuses. */
static tpuc_status *so_mode(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type vt = lx_out(cx, 0), it = lx_out(cx, 1);
  tv x = lx_tensor(cx, 0);
  ir_type t = ir_type_of(g, x);
  if (ir_is_complex(t.dtype) || ir_numel(&t) == 0) return lx_unimplemented(cx, "mode: complex or empty");
  if (t.ndim == 0) {
    cx->results[0] = lo_fit(g, x, vt);
    cx->results[1] = ir_splat(g, it, 0.0);
    return NULL;
  }
  int dim = (int)lx_dim(lx_int(cx, 1, -1), t.ndim);
  int64_t perm[TPUC_MAX_DIMS], b = 1, n = t.dims[dim];
  if (n > 16) return lx_unimplemented(cx, "mode: rows over 16 (the CPU's index among equal elements is its sort's)");
  int k = 0;
  for (int i = 0; i < t.ndim; i++)
    if (i != dim) perm[k++] = i, b *= t.dims[i];
  perm[k] = dim;
  if (t.dtype == TPUC_PRED) x = ir_convert(g, x, TPUC_S32);
  int64_t bn[2] = {b, n}, bnn[3] = {b, n, n}, d01[2] = {0, 1}, d02[2] = {0, 2}, one = 1, zero = 0;
  tv x2 = ir_reshape(g, ir_transpose(g, x, perm), 2, bn);
  tpuc_dtype d = lo_dtype(g, x2);
  ir_type t3 = ir_make_type(d, 3, bnn), t2 = ir_make_type(d, 2, bn), i2 = ir_make_type(TPUC_S64, 2, bn);
  tv eq = ir_compare(g, IR_EQ, ir_broadcast_in_dim(g, x2, t3, d01), ir_broadcast_in_dim(g, x2, t3, d02));
  int64_t two = 2;
  tv cnt = lo_sum(g, ir_convert(g, eq, TPUC_S64), &two, 1, false); /* [B, n] */
  tv maxc = ir_broadcast_in_dim(g, lo_reduce(g, cnt, IR_RED_MAX, &one, 1, false), i2, &zero);
  tv big = ir_broadcast_in_dim(g, lo_init(g, d, IR_RED_MIN), t2, NULL);
  tv val = lo_reduce(g, ir_select(g, ir_compare(g, IR_EQ, cnt, maxc), x2, big), IR_RED_MIN, &one, 1, false);
  tv at = ir_compare(g, IR_EQ, x2, ir_broadcast_in_dim(g, val, t2, &zero));
  tv pos = ir_select(g, at, ir_iota(g, i2, 1), ir_splat_i64(g, i2, -1));
  cx->results[0] = lo_fit(g, val, vt);
  cx->results[1] = lo_fit(g, lo_reduce(g, pos, IR_RED_MAX, &one, 1, false), it);
  return NULL;
}

/* ---- the table ---- */

#define E(name, fn) {"aten::" name, fn}

const tpuc_lowering tpuc_lowerings_sort[] = {
    E("sort", so_sort), E("sort.values", so_sort),
    E("sort.stable", so_sort_stable), E("sort.values_stable", so_sort_stable),
    E("topk", so_topk), E("topk.values", so_topk),
    E("kthvalue", so_kthvalue), E("kthvalue.values", so_kthvalue),
    E("cummax", so_cummax), E("cummax.out", so_cummax),
    E("cummin", so_cummin), E("cummin.out", so_cummin),
    E("mode", so_mode), E("mode.values", so_mode),
    E("logcumsumexp", so_logcumsumexp), E("logcumsumexp.out", so_logcumsumexp),
    {NULL, NULL},
};
