/* reduce.c — lowerings of PyTorch's reductions and scans: sum, nansum, mean,
 * prod, amax/amin/aminmax, max/min (whole tensor, or along a dim with
 * indices), median (from a stable sort), argmax/argmin, var/std and var_mean/std_mean (runtime correction), norm and
 * linalg_vector_norm (runtime order p), renorm, all/any, logsumexp, count_nonzero,
 * cumsum/cumprod (as windowed reductions) and trace (the diagonal's sum).
 *
 * Conventions, as PyTorch: an absent or empty dim list reduces every dim; a
 * rank-0 input accepts dim 0/-1 and reduces nothing; float16/bfloat16
 * accumulate in float32; max/min-like reductions return NaN when a NaN is
 * reduced. The reduced value has the output's elements in order, so keepdim
 * is a reshape to the output's sizes (given by the caller). */
#include <math.h>

#include "../base/base.h" /* tpuc_status_make */
#include "elementwise.h"

/* The dims arg i names (an int, an int list; absent or empty: every dim),
 * normalised and ascending; i < 0 means every dim. Returns their count. */
static int dims_of(const tpuc_lower_ctx *cx, int i, int ndim, int64_t *dims) {
  const int64_t *v = NULL;
  int n = i < 0 ? -1 : lx_ints(cx, i, &v);
  bool use[TPUC_MAX_DIMS] = {false};
  if (ndim == 0) return 0;
  for (int k = 0; k < n; k++) {
    int64_t d = lx_dim(v[k], ndim);
    if (d < 0 || d >= ndim) {
      ir_fail(cx->g, "reduction: dim %lld out of range for rank %d", (long long)v[k], ndim);
      return 0;
    }
    use[d] = true;
  }
  int m = 0;
  for (int d = 0; d < ndim; d++)
    if (n <= 0 || use[d]) dims[m++] = d;
  return m;
}

static int64_t count_of(const ir_type *t, const int64_t *dims, int n) {
  int64_t c = 1;
  for (int k = 0; k < n; k++) c *= t->dims[dims[k]];
  return c;
}

/* results[k] = v converted to output k's dtype and shaped as it (keepdim). */
static void put(tpuc_lower_ctx *cx, int k, tv v) {
  ir_type o = cx->out_types[k];
  cx->results[k] = ir_reshape(cx->g, lx_convert(cx->g, v, o.dtype), o.ndim, o.dims);
}

static tv reduce(ir_graph *g, tv x, ir_reducer r, const int64_t *dims, int n) {
  return ir_reduce(g, x, ew_reduce_init(g, ir_type_of(g, x).dtype, r), r, dims, n);
}

static tv to_pred(ir_graph *g, tv x) {
  if (ir_type_of(g, x).dtype == TPUC_PRED) return x;
  return ir_compare(g, IR_NE, x, ew_splat(g, x, 0.0));
}

/* max or min over dims; NaN if any reduced element is NaN. */
static tv extreme(ir_graph *g, tv x, bool is_max, const int64_t *dims, int n) {
  tpuc_dtype d = ir_type_of(g, x).dtype;
  if (d == TPUC_PRED) return reduce(g, x, is_max ? IR_RED_OR : IR_RED_AND, dims, n);
  tv r = reduce(g, x, is_max ? IR_RED_MAX : IR_RED_MIN, dims, n);
  if (!ir_is_float(d)) return r;
  tv nan = reduce(g, ew_isnan(g, x), IR_RED_OR, dims, n);
  return ir_select(g, nan, ew_splat(g, r, NAN), r);
}

/* A reduced value r broadcast back over x's type (t) along the kept dims. */
static tv expand_back(ir_graph *g, tv r, ir_type t, const int64_t *dims, int n) {
  bool red[TPUC_MAX_DIMS] = {false};
  for (int k = 0; k < n; k++) red[dims[k]] = true;
  int64_t bd[TPUC_MAX_DIMS];
  int m = 0;
  for (int d = 0; d < t.ndim; d++)
    if (!red[d]) bd[m++] = d;
  return ir_broadcast_in_dim(g, r, ir_with_dtype(t, ir_type_of(g, r).dtype), bd);
}

/* Self (arg 0) in the dtype output 0 accumulates in. */
static tv self_acc(tpuc_lower_ctx *cx) {
  return lx_convert(cx->g, lx_tensor(cx, 0), lx_compute_dtype(cx->out_types[0].dtype));
}

/* ---- sum, mean, prod ---- */

/* One level of a blocked sum: m is [red, kept] (prefix) or [kept, red];
 * red is padded with zeros to a multiple of b and each block of b summed by a
 * dot with ones: [groups, kept] or [kept, groups]. */
static tv sum_blocks(ir_graph *g, tv m, int64_t kept, int64_t red, int64_t b, bool prefix) {
  tpuc_dtype dt = ir_type_of(g, m).dtype;
  int64_t groups = (red + b - 1) / b;
  if (groups * b != red) {
    int64_t lo[2] = {0, 0}, hi[2] = {0, 0}, in[2] = {0, 0};
    hi[prefix ? 0 : 1] = groups * b - red;
    m = ir_pad(g, m, ir_splat(g, ir_scalar_type(dt), 0.0), lo, hi, in);
  }
  int64_t three[3] = {groups, b, kept}, c1 = 1, c2 = 2, c0 = 0;
  if (!prefix) three[0] = kept, three[1] = groups, three[2] = b;
  tv m3 = ir_reshape(g, m, 3, three);
  if (prefix) { /* a batch of [1, b] x [b, kept] products, one per group */
    int64_t gb[2] = {groups, b};
    tv ones2 = ir_splat(g, ir_make_type(dt, 2, gb), 1.0);
    return ir_dot_general(g, ones2, m3, &c0, &c0, 1, &c1, &c1, 1, dt);
  }
  tv ones = ir_splat(g, ir_make_type(dt, 1, &b), 1.0);
  return ir_dot_general(g, m3, ones, NULL, NULL, 0, &c2, &c0, 1, dt);
}

/* A float sum over leading or trailing dims as a product with a vector of
 * ones: XLA CPU hands dots to its matmul library (vectorised, every core,
 * blocked accumulation), where its reduce loops are several times slower
 * (bench: op_profile). IR_NONE when the dims are neither.
 * A long sum goes in levels of at most ir_graph_sum_block elements
 * (TPUC_SUM_BLOCK, 256): XLA CPU's dot adds a row in one running sum, whose
 * float32 error grew with the count (1e7 uniform values: 5e-5 relative, the
 * CPU's cascade sum 6e-8); blocks of 256 and then their sums keep it near
 * the CPU's, at one more small dot per level. */
static tv sum_as_dot(ir_graph *g, tv x, const int64_t *dims, int n) {
  ir_type t = ir_type_of(g, x);
  if ((t.dtype != TPUC_F32 && t.dtype != TPUC_F64) || n == 0 || t.ndim == 0) return IR_NONE;
  bool prefix = true, suffix = true;
  for (int k = 0; k < n; k++) {
    prefix = prefix && dims[k] == k;
    suffix = suffix && dims[k] == t.ndim - n + k;
  }
  if (!prefix && !suffix) return IR_NONE;
  int64_t kept = 1, red = 1;
  for (int d = 0; d < t.ndim; d++) {
    bool r = prefix ? d < n : d >= t.ndim - n;
    if (r) red *= t.dims[d];
    else kept *= t.dims[d];
  }
  if (red < 2 || kept * red == 0) return IR_NONE;
  const int64_t b = ir_graph_sum_block(g);
  /* a whole-tensor sum in blocks as rows: the batched form is slower there */
  if (kept == 1 && b >= 2 && red > b) prefix = false;
  int64_t two[2] = {prefix ? red : kept, prefix ? kept : red}, c0 = 0, c1 = 1;
  tv m = ir_reshape(g, x, 2, two);
  while (b >= 2 && red > b) {
    m = sum_blocks(g, m, kept, red, b, prefix);
    red = (red + b - 1) / b;
  }
  tv ones = ir_splat(g, ir_make_type(t.dtype, 1, &red), 1.0);
  return prefix ? ir_dot_general(g, ones, m, NULL, NULL, 0, &c0, &c0, 1, t.dtype)
                : ir_dot_general(g, m, ones, NULL, NULL, 0, &c1, &c0, 1, t.dtype);
}

/* A float sum over dims that are a run at the front, a run at the back, or
 * both: the trailing run first, then the leading one (a batch norm's
 * (0, 2, 3) of NCHW), each by sum_as_dot. IR_NONE for other dims or dtypes.
 * With TPUC_SUM_BLOCK=0 only a single run (torch.sum's path before blocks). */
tv lo_sum_dot(ir_graph *g, tv x, const int64_t *dims, int n) {
  ir_type t = ir_type_of(g, x);
  if (n <= 0 || n > t.ndim) return IR_NONE;
  int64_t d[TPUC_MAX_DIMS];
  for (int i = 0; i < n; i++) { /* sorted copy (insertion) */
    int64_t v = dims[i];
    int j = i;
    for (; j > 0 && d[j - 1] > v; j--) d[j] = d[j - 1];
    d[j] = v;
  }
  int64_t kept[TPUC_MAX_DIMS]; /* the result's shape, as ir_reduce gives it */
  int nk = 0;
  for (int i = 0, j = 0; i < t.ndim; i++) {
    if (j < n && d[j] == i) j++;
    else kept[nk++] = t.dims[i];
  }
  tv v = sum_as_dot(g, x, d, n); /* flat: the kept dims multiplied */
  if (v != IR_NONE) return ir_reshape(g, v, nk, kept);
  int lead = 0, trail = 0;
  while (lead < n && d[lead] == lead) lead++;
  while (trail < n - lead && d[n - 1 - trail] == t.ndim - 1 - trail) trail++;
  if (lead == 0 || trail == 0 || lead + trail != n || ir_graph_sum_block(g) < 2) return IR_NONE;
  tv y = sum_as_dot(g, x, d + lead, trail);
  if (y == IR_NONE) return IR_NONE;
  y = sum_as_dot(g, ir_reshape(g, y, t.ndim - trail, t.dims), d, lead);
  return y == IR_NONE ? IR_NONE : ir_reshape(g, y, nk, kept);
}

/* torch.sum's sum over dims: lo_sum_dot where it applies, else XLA's reduce */
static tv sum_dims(ir_graph *g, tv x, const int64_t *dims, int n) {
  tv v = lo_sum_dot(g, x, dims, n);
  return v != IR_NONE ? v : reduce(g, x, IR_RED_SUM, dims, n);
}

/* The sums of var/std: as sum_dims; with TPUC_SUM_BLOCK=0 XLA's reduce, as before. */
static tv moment_sum(ir_graph *g, tv x, const int64_t *dims, int n) {
  return ir_graph_sum_block(g) >= 2 ? sum_dims(g, x, dims, n) : reduce(g, x, IR_RED_SUM, dims, n);
}

static tpuc_status *accumulate(tpuc_lower_ctx *cx, int dims_arg, ir_reducer r, bool mean) {
  ir_graph *g = cx->g;
  tv x = self_acc(cx);
  ir_type t = ir_type_of(g, x);
  int64_t dims[TPUC_MAX_DIMS];
  int n = dims_of(cx, dims_arg, t.ndim, dims);
  tv v = r == IR_RED_SUM ? sum_dims(g, x, dims, n) : reduce(g, x, r, dims, n);
  if (mean) v = ir_binary(g, IR_DIV, v, ew_splat(g, v, (double)count_of(&t, dims, n)));
  put(cx, 0, v);
  return NULL;
}

static tpuc_status *rd_sum_dims(tpuc_lower_ctx *cx) { return accumulate(cx, 1, IR_RED_SUM, false); }
static tpuc_status *rd_sum_all(tpuc_lower_ctx *cx) { return accumulate(cx, -1, IR_RED_SUM, false); }
static tpuc_status *rd_mean_dims(tpuc_lower_ctx *cx) { return accumulate(cx, 1, IR_RED_SUM, true); }
static tpuc_status *rd_mean_all(tpuc_lower_ctx *cx) { return accumulate(cx, -1, IR_RED_SUM, true); }
static tpuc_status *rd_prod_dim(tpuc_lower_ctx *cx) { return accumulate(cx, 1, IR_RED_PROD, false); }
static tpuc_status *rd_prod_all(tpuc_lower_ctx *cx) { return accumulate(cx, -1, IR_RED_PROD, false); }

static tpuc_status *rd_nansum(tpuc_lower_ctx *cx) { /* (self, dim?, keepdim, *, dtype?) */
  ir_graph *g = cx->g;
  tv x = self_acc(cx);
  x = ir_select(g, ew_isnan(g, x), ew_splat(g, x, 0.0), x);
  int64_t dims[TPUC_MAX_DIMS];
  int n = dims_of(cx, 1, ir_type_of(g, x).ndim, dims);
  put(cx, 0, reduce(g, x, IR_RED_SUM, dims, n));
  return NULL;
}

/* ---- max, min, argmax, argmin, median ---- */

static tpuc_status *extreme_op(tpuc_lower_ctx *cx, int dims_arg, bool is_max) {
  tv x = lx_tensor(cx, 0);
  if (ir_is_complex(ir_type_of(cx->g, x).dtype)) return lx_unimplemented(cx, "complex input");
  int64_t dims[TPUC_MAX_DIMS];
  int n = dims_of(cx, dims_arg, ir_type_of(cx->g, x).ndim, dims);
  put(cx, 0, extreme(cx->g, x, is_max, dims, n));
  return NULL;
}

static tpuc_status *rd_aminmax(tpuc_lower_ctx *cx) { /* (self, *, dim?, keepdim) -> (min, max) */
  tv x = lx_tensor(cx, 0);
  if (ir_is_complex(ir_type_of(cx->g, x).dtype)) return lx_unimplemented(cx, "complex input");
  int64_t dims[TPUC_MAX_DIMS];
  int n = dims_of(cx, 1, ir_type_of(cx->g, x).ndim, dims);
  put(cx, 0, extreme(cx->g, x, false, dims, n));
  put(cx, 1, extreme(cx->g, x, true, dims, n));
  return NULL;
}

static tpuc_status *rd_amax(tpuc_lower_ctx *cx) { return extreme_op(cx, 1, true); }
static tpuc_status *rd_amin(tpuc_lower_ctx *cx) { return extreme_op(cx, 1, false); }
/* max() / min() of every element: PyTorch raises for an empty tensor (a max over nothing
 * would be -inf / +inf here, XLA's identity). */
static tpuc_status *extreme_all(tpuc_lower_ctx *cx, bool is_max) {
  ir_type t = ir_type_of(cx->g, lx_tensor(cx, 0));
  if (ir_numel(&t) == 0)
    return tpuc_status_make(TPUC_ERR_RUNTIME,
                            "%s(): Expected reduction dim to be specified for input.numel() == 0. "
                            "Specify the reduction dim with the 'dim' argument.",
                            is_max ? "max" : "min");
  return extreme_op(cx, -1, is_max);
}

static tpuc_status *rd_max_all(tpuc_lower_ctx *cx) { return extreme_all(cx, true); }
static tpuc_status *rd_min_all(tpuc_lower_ctx *cx) { return extreme_all(cx, false); }

/* Values and s64 indices of the max/min of x along dim (x of rank >= 1). */
static void arg_extreme(ir_graph *g, tv x, int dim, bool is_max, tv *values, tv *indices) {
  tpuc_dtype d = ir_type_of(g, x).dtype;
  if (d == TPUC_PRED) x = ir_convert(g, x, TPUC_S32);
  ir_argreduce(g, x, dim, is_max, TPUC_S64, values, indices);
  *values = ir_convert(g, *values, d);
}

static tpuc_status *extreme_dim(tpuc_lower_ctx *cx, bool is_max) { /* (self, dim, keepdim) */
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, 0), v, i;
  ir_type t = ir_type_of(g, x);
  if (ir_is_complex(t.dtype)) return lx_unimplemented(cx, "complex input");
  if (t.ndim == 0) {
    v = x;
    i = ir_splat(g, ir_scalar_type(TPUC_S64), 0);
  } else {
    arg_extreme(g, x, (int)lx_dim(lx_int(cx, 1, 0), t.ndim), is_max, &v, &i);
  }
  put(cx, 0, v);
  put(cx, 1, i);
  return NULL;
}

static tpuc_status *rd_max_dim(tpuc_lower_ctx *cx) { return extreme_dim(cx, true); }
static tpuc_status *rd_min_dim(tpuc_lower_ctx *cx) { return extreme_dim(cx, false); }

static tpuc_status *arg_op(tpuc_lower_ctx *cx, bool is_max) { /* (self, dim?, keepdim) */
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, 0), v, i;
  ir_type t = ir_type_of(g, x);
  if (ir_is_complex(t.dtype)) return lx_unimplemented(cx, "complex input");
  int64_t dim = 0;
  if (lx_is_none(cx, 1)) {
    int64_t numel = ir_numel(&t);
    x = ir_reshape(g, x, 1, &numel);
  } else {
    dim = lx_dim(lx_int(cx, 1, 0), t.ndim);
  }
  if (ir_type_of(g, x).ndim == 0) {
    i = ir_splat(g, ir_scalar_type(TPUC_S64), 0);
  } else {
    arg_extreme(g, x, (int)dim, is_max, &v, &i);
  }
  put(cx, 0, i);
  return NULL;
}

static tpuc_status *rd_argmax(tpuc_lower_ctx *cx) { return arg_op(cx, true); }
static tpuc_status *rd_argmin(tpuc_lower_ctx *cx) { return arg_op(cx, false); }

/* The lower median of x along dim (rank >= 1) and its index, from a stable
 * sort; a NaN in the row makes it NaN, at the first NaN's index. */
static void median_along(ir_graph *g, tv x, int dim, tv *values, tv *indices) {
  tpuc_dtype d = ir_type_of(g, x).dtype;
  if (d == TPUC_PRED) x = ir_convert(g, x, TPUC_S32);
  ir_type t = ir_type_of(g, x);
  tv sorted, perm;
  ir_sort(g, x, dim, false, &sorted, &perm);
  int64_t lo[TPUC_MAX_DIMS] = {0}, hi[TPUC_MAX_DIMS], st[TPUC_MAX_DIMS];
  for (int k = 0; k < t.ndim; k++) {
    hi[k] = t.dims[k];
    st[k] = 1;
  }
  lo[dim] = (t.dims[dim] - 1) / 2;
  hi[dim] = lo[dim] + 1;
  int64_t dd = dim;
  tv v = ir_reduce(g, ir_slice(g, sorted, lo, hi, st), ew_reduce_init(g, t.dtype, IR_RED_SUM),
                   IR_RED_SUM, &dd, 1);
  tv i = ir_reduce(g, ir_slice(g, perm, lo, hi, st), ew_reduce_init(g, TPUC_S64, IR_RED_SUM),
                   IR_RED_SUM, &dd, 1);
  if (ir_is_float(t.dtype)) {
    tv nan_v, nan_i, isnan = ir_convert(g, ew_isnan(g, x), TPUC_S32);
    ir_argreduce(g, isnan, dim, true, TPUC_S64, &nan_v, &nan_i);
    tv has_nan = ir_compare(g, IR_NE, nan_v, ir_splat(g, ir_type_of(g, nan_v), 0));
    v = ir_select(g, has_nan, ew_splat(g, v, NAN), v);
    i = ir_select(g, has_nan, nan_i, i);
  }
  *values = ir_convert(g, v, d);
  *indices = i;
}

static tpuc_status *rd_median_all(tpuc_lower_ctx *cx) { /* (self) */
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, 0), v, i;
  ir_type t = ir_type_of(g, x);
  int64_t numel = ir_numel(&t);
  if (ir_is_complex(t.dtype) || numel == 0) return lx_unimplemented(cx, "input");
  median_along(g, ir_reshape(g, x, 1, &numel), 0, &v, &i);
  put(cx, 0, v);
  return NULL;
}

static tpuc_status *rd_median_dim(tpuc_lower_ctx *cx) { /* (self, dim, keepdim) */
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, 0), v, i;
  ir_type t = ir_type_of(g, x);
  if (ir_is_complex(t.dtype) || ir_numel(&t) == 0) return lx_unimplemented(cx, "input");
  if (t.ndim == 0) {
    v = x;
    i = ir_splat(g, ir_scalar_type(TPUC_S64), 0);
  } else {
    median_along(g, x, (int)lx_dim(lx_int(cx, 1, 0), t.ndim), &v, &i);
  }
  put(cx, 0, v);
  put(cx, 1, i);
  return NULL;
}

/* nanmedian: the lower median of the non-NaN values along dim and its index
 * (PyTorch's CPU: position (n_valid - 1) / 2, C division, of a sort that puts
 * NaN last, so an all-NaN row gives NaN; its index is where the CPU's
 * nth_element left a NaN, here the row's first NaN). NaNs are made
 * positive first: the sort's total order puts a negative NaN first. Picked by
 * a one-hot max (not a sum, which would turn -0.0 into +0.0). */
static void nanmedian_along(ir_graph *g, tv x, int dim, tv *values, tv *indices) {
  ir_type t = ir_type_of(g, x);
  tv key = x, valid = IR_NONE;
  if (ir_is_float(t.dtype)) {
    tv nan = ew_isnan(g, x);
    key = ir_select(g, nan, ew_splat(g, x, NAN), x);
    valid = ir_convert(g, ir_unary(g, IR_NOT, nan), TPUC_S64);
  }
  tv sorted, perm;
  ir_sort(g, key, dim, false, &sorted, &perm);
  int64_t dd = dim, n = t.dims[dim];
  ir_type it = ir_with_dtype(t, TPUC_S64);
  tv count = valid == IR_NONE ? IR_NONE
                              : ir_reduce(g, valid, ew_reduce_init(g, TPUC_S64, IR_RED_SUM), IR_RED_SUM, &dd, 1);
  tv pos; /* [.. without dim] */
  if (count == IR_NONE) { /* integers: no NaN */
    int64_t rd[TPUC_MAX_DIMS];
    for (int k = 0, j = 0; k < t.ndim; k++)
      if (k != dim) rd[j++] = t.dims[k];
    pos = ir_splat_i64(g, ir_make_type(TPUC_S64, t.ndim - 1, rd), (n - 1) / 2);
  } else {
    ir_type rt = ir_type_of(g, count);
    tv km1 = ir_binary(g, IR_SUB, count, ir_splat_i64(g, rt, 1));
    pos = ir_binary(g, IR_DIV, km1, ir_splat_i64(g, rt, 2)); /* truncates: -1 / 2 = 0 */
  }
  int64_t bd[TPUC_MAX_DIMS];
  for (int k = 0, j = 0; k < t.ndim; k++)
    if (k != dim) bd[j++] = k;
  tv at = ir_compare(g, IR_EQ, ir_iota(g, it, dim), ir_broadcast_in_dim(g, pos, it, bd));
  tv low = ew_reduce_init(g, t.dtype, IR_RED_MAX);
  tv v = ir_reduce(g, ir_select(g, at, sorted, ir_broadcast_in_dim(g, low, t, NULL)), low, IR_RED_MAX, &dd, 1);
  tv i = ir_reduce(g, ir_select(g, at, perm, ir_splat_i64(g, it, -1)), ew_reduce_init(g, TPUC_S64, IR_RED_MAX),
                   IR_RED_MAX, &dd, 1);
  if (count != IR_NONE) /* all NaN: NaN (the max above skips it on XLA CPU) */
    v = ir_select(g, ir_compare(g, IR_EQ, count, ir_splat_i64(g, ir_type_of(g, count), 0)),
                  ew_splat(g, v, NAN), v);
  *values = v;
  *indices = i;
}

static tpuc_status *rd_nanmedian_all(tpuc_lower_ctx *cx) { /* (self) */
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, 0), v, i;
  ir_type t = ir_type_of(g, x);
  int64_t numel = ir_numel(&t);
  if (ir_is_complex(t.dtype) || t.dtype == TPUC_PRED || numel == 0) return lx_unimplemented(cx, "input");
  nanmedian_along(g, ir_reshape(g, x, 1, &numel), 0, &v, &i);
  put(cx, 0, v);
  return NULL;
}

/* An empty input whose reduced dim is not empty: empty results (the CPU
 * errors on an empty reduced dim, which the caller's meta check reports). */
static bool empty_results(tpuc_lower_ctx *cx) {
  for (int k = 0; k < cx->noutputs; k++)
    if (ir_numel(&cx->out_types[k]) != 0) return false;
  for (int k = 0; k < cx->noutputs; k++) cx->results[k] = ir_splat(cx->g, cx->out_types[k], 0.0);
  return true;
}

static tpuc_status *rd_nanmedian_dim(tpuc_lower_ctx *cx) { /* (self, dim, keepdim) */
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, 0), v, i;
  ir_type t = ir_type_of(g, x);
  if (ir_numel(&t) == 0 && t.dtype != TPUC_PRED && !ir_is_complex(t.dtype) && empty_results(cx)) return NULL;
  if (ir_is_complex(t.dtype) || t.dtype == TPUC_PRED || ir_numel(&t) == 0) return lx_unimplemented(cx, "input");
  if (t.ndim == 0) {
    v = x;
    i = ir_splat(g, ir_scalar_type(TPUC_S64), 0);
  } else {
    nanmedian_along(g, x, (int)lx_dim(lx_int(cx, 1, 0), t.ndim), &v, &i);
  }
  put(cx, 0, v);
  put(cx, 1, i);
  return NULL;
}

/* ---- var, std ---- */

/* (self, dim?, *, correction?, keepdim): the variance (or its square root)
 * with denominator max(N - correction, 0); optionally the mean as output 1. */
static tpuc_status *moments(tpuc_lower_ctx *cx, bool take_sqrt, bool with_mean) {
  ir_graph *g = cx->g;
  if (ir_is_complex(lx_tensor_desc(cx, 0)->dtype)) return lx_unimplemented(cx, "complex input");
  tv x = self_acc(cx);
  ir_type t = ir_type_of(g, x);
  int64_t dims[TPUC_MAX_DIMS];
  int n = dims_of(cx, 1, t.ndim, dims);
  tv count = ir_splat(g, ir_scalar_type(t.dtype), (double)count_of(&t, dims, n));
  tv sum = moment_sum(g, x, dims, n);
  tv mean = ir_binary(g, IR_DIV, sum, lx_broadcast_to(g, count, ir_type_of(g, sum).ndim,
                                                      ir_type_of(g, sum).dims));
  tv dev = ir_binary(g, IR_SUB, x, expand_back(g, mean, t, dims, n));
  tv ss = moment_sum(g, ir_binary(g, IR_MUL, dev, dev), dims, n);
  tv corr = lx_is_none(cx, 2) ? ir_splat(g, ir_scalar_type(t.dtype), 1.0) : lx_scalar(cx, 2, t.dtype);
  tv denom = ir_binary(g, IR_MAX, ir_binary(g, IR_SUB, count, corr), ew_splat(g, count, 0.0));
  ir_type st = ir_type_of(g, ss);
  tv var = ir_binary(g, IR_DIV, ss, lx_broadcast_to(g, denom, st.ndim, st.dims));
  put(cx, 0, take_sqrt ? ir_unary(g, IR_SQRT, var) : var);
  if (with_mean) put(cx, 1, mean);
  return NULL;
}

static tpuc_status *rd_var(tpuc_lower_ctx *cx) { return moments(cx, false, false); }
static tpuc_status *rd_std(tpuc_lower_ctx *cx) { return moments(cx, true, false); }
static tpuc_status *rd_var_mean(tpuc_lower_ctx *cx) { return moments(cx, false, true); }
static tpuc_status *rd_std_mean(tpuc_lower_ctx *cx) { return moments(cx, true, true); }

/* ---- norms ---- */

/* The p-norm with p = 0, 1 or 2 known when the program is built (absent p,
 * or a p baked into the signature: tpuc_scalar_is_static): only that
 * formula. Returns IR_NONE for any other p. */
static tv norm_static(ir_graph *g, tv a, double p, const int64_t *dims, int n) {
  tpuc_dtype d = ir_type_of(g, a).dtype;
  if (p == 2) return ir_unary(g, IR_SQRT, reduce(g, ir_binary(g, IR_MUL, a, a), IR_RED_SUM, dims, n));
  if (p == 1) return reduce(g, a, IR_RED_SUM, dims, n);
  if (p == 0) return reduce(g, ir_convert(g, to_pred(g, a), d), IR_RED_SUM, dims, n);
  return IR_NONE;
}

/* The p-norm of self over dims (arg p_arg, default 2): sqrt(sum x^2) for 2,
 * sum |x| for 1, the nonzero count for 0, max/min |x| for +-inf,
 * (sum |x|^p)^(1/p) otherwise. When p is known at build time (absent, or
 * 0/1/2 baked into the signature) only its formula is built; otherwise p is
 * a runtime value and all are computed, one selected (an elementwise pow and
 * two extra reductions over every element: ~3x the time of the p = 2 form
 * on XLA CPU, which clip_grad_norm_ pays on every gradient). */
static tv pnorm(tpuc_lower_ctx *cx, tv a, int p_arg, const int64_t *dims, int n) {
  ir_graph *g = cx->g;
  ir_type t = ir_type_of(g, a);
  tpuc_dtype d = t.dtype;
  double pv = 2;
  if (lx_is_none(cx, p_arg) || ir_splat_value(g, cx->scalar_vals[p_arg], &pv)) {
    tv r = norm_static(g, a, pv, dims, n);
    if (r != IR_NONE) return r;
  }
  tv p = lx_is_none(cx, p_arg) ? ir_splat(g, ir_scalar_type(d), 2.0) : lx_scalar(cx, p_arg, d);
#define P_IS(v) ir_compare(g, IR_EQ, p, ir_splat(g, ir_scalar_type(d), (v)))
  tv is2 = P_IS(2.0), is1 = P_IS(1.0), is0 = P_IS(0.0), is_inf = P_IS(INFINITY),
     is_ninf = P_IS(-INFINITY);
#undef P_IS
  tv powed = ir_binary(g, IR_POW, a, lx_broadcast_to(g, p, t.ndim, t.dims));
  tv nonzero = ir_convert(g, to_pred(g, a), d);
  tv terms = ir_select(g, is2, ir_binary(g, IR_MUL, a, a),
                       ir_select(g, is1, a, ir_select(g, is0, nonzero, powed)));
  tv s = reduce(g, terms, IR_RED_SUM, dims, n);
  ir_type st = ir_type_of(g, s);
  tv inv_p = ir_binary(g, IR_DIV, ir_splat(g, ir_scalar_type(d), 1.0), p);
  tv general = ir_binary(g, IR_POW, s, lx_broadcast_to(g, inv_p, st.ndim, st.dims));
  tv r = ir_select(g, is2, ir_unary(g, IR_SQRT, s),
                   ir_select(g, ir_binary(g, IR_OR, is1, is0), s, general));
  r = ir_select(g, is_inf, extreme(g, a, true, dims, n), r);
  return ir_select(g, is_ninf, extreme(g, a, false, dims, n), r);
}

static tpuc_status *norm(tpuc_lower_ctx *cx, int p_arg, int dims_arg) {
  tpuc_dtype in = lx_tensor_desc(cx, 0)->dtype;
  if (!ir_is_float(in) || !ir_is_float(cx->out_types[0].dtype))
    return lx_unimplemented(cx, "input dtype");
  tv a = ir_unary(cx->g, IR_ABS, self_acc(cx));
  int64_t dims[TPUC_MAX_DIMS];
  int n = dims_of(cx, dims_arg, ir_type_of(cx->g, a).ndim, dims);
  put(cx, 0, pnorm(cx, a, p_arg, dims, n));
  return NULL;
}

/* renorm(self, p, dim, maxnorm): each slice along dim whose p-norm over the
 * other dims exceeds maxnorm is scaled by maxnorm / (norm + 1e-7); the
 * factor is computed in the accumulating dtype (f32 for f16/bf16) and
 * applied in self's, as PyTorch's CPU kernel. */
static tpuc_status *rd_renorm(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  if (!ir_is_float(ot.dtype) || ot.ndim == 0) return lx_unimplemented(cx, "renorm: dtype or rank");
  tv a = ir_unary(g, IR_ABS, self_acc(cx));
  ir_type t = ir_type_of(g, a);
  int64_t keep = lx_dim(lx_int(cx, 2, 0), t.ndim), dims[TPUC_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < t.ndim; i++)
    if (i != keep) dims[n++] = i;
  tv r = pnorm(cx, a, 1, dims, n); /* [size at dim] */
  tv mx = lx_broadcast_to(g, lx_scalar(cx, 3, t.dtype), 1, &t.dims[keep]);
  tv f = ir_binary(g, IR_DIV, mx, ir_binary(g, IR_ADD, r, ew_splat(g, r, 1e-7)));
  f = ir_select(g, ir_compare(g, IR_GT, r, mx), f, ew_splat(g, r, 1.0));
  f = ir_broadcast_in_dim(g, ir_convert(g, f, ot.dtype), ot, &keep);
  cx->results[0] = ir_binary(g, IR_MUL, ir_convert(g, lx_tensor(cx, 0), ot.dtype), f);
  return NULL;
}

static tpuc_status *rd_norm_dims(tpuc_lower_ctx *cx) { return norm(cx, 1, 2); }
static tpuc_status *rd_norm_all(tpuc_lower_ctx *cx) { return norm(cx, 1, -1); }

/* ---- all, any, count_nonzero ---- */

static tpuc_status *logical_reduce(tpuc_lower_ctx *cx, int dims_arg, ir_reducer r) {
  ir_graph *g = cx->g;
  tv x = to_pred(g, lx_tensor(cx, 0));
  int64_t dims[TPUC_MAX_DIMS];
  int n = dims_of(cx, dims_arg, ir_type_of(g, x).ndim, dims);
  put(cx, 0, reduce(g, x, r, dims, n));
  return NULL;
}

static tpuc_status *rd_all_dims(tpuc_lower_ctx *cx) { return logical_reduce(cx, 1, IR_RED_AND); }
static tpuc_status *rd_all_all(tpuc_lower_ctx *cx) { return logical_reduce(cx, -1, IR_RED_AND); }
static tpuc_status *rd_any_dims(tpuc_lower_ctx *cx) { return logical_reduce(cx, 1, IR_RED_OR); }
static tpuc_status *rd_any_all(tpuc_lower_ctx *cx) { return logical_reduce(cx, -1, IR_RED_OR); }

static tpuc_status *rd_count_nonzero(tpuc_lower_ctx *cx) { /* (self, dim? or dim[]) */
  ir_graph *g = cx->g;
  tv x = ir_convert(g, to_pred(g, lx_tensor(cx, 0)), TPUC_S64);
  int64_t dims[TPUC_MAX_DIMS];
  int n = dims_of(cx, 1, ir_type_of(g, x).ndim, dims);
  put(cx, 0, reduce(g, x, IR_RED_SUM, dims, n));
  return NULL;
}

/* ---- logsumexp ---- */

static tpuc_status *rd_logsumexp(tpuc_lower_ctx *cx) { /* (self, dim[], keepdim) */
  ir_graph *g = cx->g;
  if (!ir_is_float(cx->out_types[0].dtype)) return lx_unimplemented(cx, "output dtype");
  tv x = self_acc(cx);
  ir_type t = ir_type_of(g, x);
  int64_t dims[TPUC_MAX_DIMS];
  int n = dims_of(cx, 1, t.ndim, dims);
  /* shift by the max, except where it is infinite (as PyTorch) */
  tv m = extreme(g, x, true, dims, n);
  tv inf = ir_compare(g, IR_EQ, ir_unary(g, IR_ABS, m), ew_splat(g, m, INFINITY));
  m = ir_select(g, inf, ew_splat(g, m, 0.0), m);
  tv e = ir_unary(g, IR_EXP, ir_binary(g, IR_SUB, x, expand_back(g, m, t, dims, n)));
  tv r = ir_binary(g, IR_ADD, ir_unary(g, IR_LOG, reduce(g, e, IR_RED_SUM, dims, n)), m);
  put(cx, 0, r);
  return NULL;
}

/* ---- cumsum, cumprod ---- */

/* (self, dim, *, dtype?): a window of the whole dim, padded before. */
static tpuc_status *scan(tpuc_lower_ctx *cx, ir_reducer r) {
  ir_graph *g = cx->g;
  tv x = self_acc(cx);
  ir_type t = ir_type_of(g, x);
  if (t.ndim == 0) {
    put(cx, 0, x);
    return NULL;
  }
  int64_t dim = lx_dim(lx_int(cx, 1, 0), t.ndim);
  int64_t window[TPUC_MAX_DIMS], pad[2 * TPUC_MAX_DIMS] = {0};
  for (int d = 0; d < t.ndim; d++) window[d] = 1;
  if (dim < 0 || dim >= t.ndim) return lx_unimplemented(cx, "dim out of range");
  if (t.dims[dim] > 0) {
    window[dim] = t.dims[dim];
    pad[2 * dim] = t.dims[dim] - 1;
    x = ir_reduce_window(g, x, ew_reduce_init(g, t.dtype, r), r, window, NULL, pad);
  }
  put(cx, 0, x);
  return NULL;
}

static tpuc_status *rd_cumsum(tpuc_lower_ctx *cx) { return scan(cx, IR_RED_SUM); }
static tpuc_status *rd_cumprod(tpuc_lower_ctx *cx) { return scan(cx, IR_RED_PROD); }

/* trace(self): the sum of a matrix's diagonal, accumulated in the output's
 * dtype (int64 for integers, as PyTorch; f32 for f16/bf16). */
static tpuc_status *rd_trace(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  if (lx_tensor_desc(cx, 0)->dtype == TPUC_PRED) return lx_unimplemented(cx, "trace: bool (the CPU has no kernel)");
  tv x = self_acc(cx);
  ir_type t = ir_type_of(g, x);
  if (t.ndim != 2) return lx_unimplemented(cx, "trace: not a matrix");
  ir_type it = ir_make_type(TPUC_S64, 2, t.dims);
  tv diag = ir_compare(g, IR_EQ, ir_iota(g, it, 0), ir_iota(g, it, 1));
  tv v = ir_select(g, diag, x, ew_splat(g, x, 0.0));
  int64_t dims[2] = {0, 1};
  put(cx, 0, reduce(g, v, IR_RED_SUM, dims, 2));
  return NULL;
}

/* ---- the table ---- */

#define E(name, fn) {"aten::" name, fn}

const tpuc_lowering tpuc_lowerings_reduce[] = {
    E("sum.dim_IntList", rd_sum_dims), E("sum.IntList_out", rd_sum_dims),
    E("sum", rd_sum_all), E("sum.out", rd_sum_all),
    E("mean.dim", rd_mean_dims), E("mean.out", rd_mean_dims),
    E("mean", rd_mean_all), E("mean.dtype_out", rd_mean_all),
    E("prod.dim_int", rd_prod_dim), E("prod.int_out", rd_prod_dim),
    E("prod", rd_prod_all), E("prod.out", rd_prod_all),
    E("nansum", rd_nansum), E("nansum.out", rd_nansum),
    E("aminmax", rd_aminmax), E("aminmax.out", rd_aminmax),
    E("median", rd_median_all), E("median.out", rd_median_all),
    E("median.dim", rd_median_dim), E("median.dim_values", rd_median_dim),
    E("nanmedian", rd_nanmedian_all), E("nanmedian.out", rd_nanmedian_all),
    E("nanmedian.dim", rd_nanmedian_dim), E("nanmedian.dim_values", rd_nanmedian_dim),
    E("amax", rd_amax), E("amax.out", rd_amax),
    E("amin", rd_amin), E("amin.out", rd_amin),
    E("max", rd_max_all), E("max.unary_out", rd_max_all),
    E("min", rd_min_all), E("min.unary_out", rd_min_all),
    E("max.dim", rd_max_dim), E("max.dim_max", rd_max_dim),
    E("min.dim", rd_min_dim), E("min.dim_min", rd_min_dim),
    E("argmax", rd_argmax), E("argmax.out", rd_argmax),
    E("argmin", rd_argmin), E("argmin.out", rd_argmin),
    E("var.correction", rd_var), E("var.correction_out", rd_var),
    E("std.correction", rd_std), E("std.correction_out", rd_std),
    E("var_mean.correction", rd_var_mean), E("var_mean.correction_out", rd_var_mean),
    E("std_mean.correction", rd_std_mean), E("std_mean.correction_out", rd_std_mean),
    {"aten::norm.ScalarOpt_dim", rd_norm_dims, 1u << 1}, {"aten::norm.ScalarOpt_dim_dtype", rd_norm_dims, 1u << 1},
    {"aten::norm.out", rd_norm_dims, 1u << 1}, {"aten::norm.dtype_out", rd_norm_dims, 1u << 1},
    {"aten::norm.Scalar", rd_norm_all, 1u << 1}, {"aten::norm.Scalar_out", rd_norm_all, 1u << 1},
    {"aten::norm.ScalarOpt_dtype", rd_norm_all, 1u << 1}, {"aten::norm.ScalarOpt_dtype_out", rd_norm_all, 1u << 1},
    {"aten::linalg_vector_norm", rd_norm_dims, 1u << 1}, {"aten::linalg_vector_norm.out", rd_norm_dims, 1u << 1},
    E("all", rd_all_all), E("all.all_out", rd_all_all),
    E("all.dim", rd_all_dims), E("all.out", rd_all_dims),
    E("all.dims", rd_all_dims), E("all.dims_out", rd_all_dims),
    E("any", rd_any_all), E("any.all_out", rd_any_all),
    E("any.dim", rd_any_dims), E("any.out", rd_any_dims),
    E("any.dims", rd_any_dims), E("any.dims_out", rd_any_dims),
    E("count_nonzero", rd_count_nonzero), E("count_nonzero.out", rd_count_nonzero),
    E("count_nonzero.dim_IntList", rd_count_nonzero),
    E("count_nonzero.dim_IntList_out", rd_count_nonzero),
    E("logsumexp", rd_logsumexp), E("logsumexp.out", rd_logsumexp),
    E("cumsum", rd_cumsum), E("cumsum_", rd_cumsum), E("cumsum.out", rd_cumsum),
    {"aten::renorm", rd_renorm, 1u << 1}, {"aten::renorm.out", rd_renorm, 1u << 1},
    {"aten::renorm_", rd_renorm, 1u << 1},
    E("trace", rd_trace), E("trace.out", rd_trace),
    E("cumprod", rd_cumprod), E("cumprod_", rd_cumprod), E("cumprod.out", rd_cumprod),
    {NULL, NULL},
};
