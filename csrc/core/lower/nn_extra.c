/* nn_extra.c — nn ops that small transformer and vision models still sent to
 * the CPU (ranked by tests/conformance/model_usage.py): glu, prelu, the
 * huber and smooth-L1 losses, each with its backward. f16/bf16 compute in
 * f32 like PyTorch's CPU kernels. */
#include <stdlib.h>

#include "lower_ops.h"

enum { RED_NONE = 0, RED_MEAN = 1, RED_SUM = 2 };

/* ---- helpers ---- */

/* Reduces a per-element loss by `reduction`. */
static tv ex_reduce_loss(ir_graph *g, tv l, int64_t reduction) {
  if (reduction == RED_NONE) return l;
  ir_type t = ir_type_of(g, l);
  int64_t dims[TPUC_MAX_DIMS];
  for (int i = 0; i < t.ndim; i++) dims[i] = i;
  tv s = lo_sum(g, l, dims, t.ndim, false);
  return reduction == RED_MEAN ? lo_binc(g, IR_DIV, s, (double)ir_numel(&t)) : s;
}

/* x summed down to t's shape (numpy broadcasting in reverse: leading dims
 * and dims where t has 1), converted to t's dtype. */
static tv ex_sum_to(ir_graph *g, tv x, ir_type t) {
  ir_type xt = ir_type_of(g, x);
  int64_t dims[TPUC_MAX_DIMS];
  int n = 0, lead = xt.ndim - t.ndim;
  if (lead < 0) return lo_fit(g, x, t);
  for (int i = 0; i < xt.ndim; i++)
    if (i < lead || (t.dims[i - lead] == 1 && xt.dims[i] != 1)) dims[n++] = i;
  if (n) x = lo_sum(g, x, dims, n, false);
  return lo_fit(g, x, t);
}


/* ---- glu ---- */

/* The halves of x along dim (a: first, b: second). */
static void glu_halves(ir_graph *g, tv x, int dim, tv *a, tv *b) {
  ir_type t = ir_type_of(g, x);
  int64_t s[TPUC_MAX_DIMS] = {0}, l[TPUC_MAX_DIMS], st[TPUC_MAX_DIMS];
  for (int i = 0; i < t.ndim; i++) {
    l[i] = t.dims[i];
    st[i] = 1;
  }
  int64_t h = t.dims[dim] / 2;
  l[dim] = h;
  *a = ir_slice(g, x, s, l, st);
  s[dim] = h;
  l[dim] = 2 * h;
  *b = ir_slice(g, x, s, l, st);
}

/* glu(self, dim=-1) = a * sigmoid(b). */
static tpuc_status *l_glu(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = ir_convert(g, lx_tensor(cx, 0), lx_compute_dtype(ot.dtype));
  int dim = (int)lx_dim(lx_int(cx, 1, -1), lo_rank(g, x));
  tv a, b;
  glu_halves(g, x, dim, &a, &b);
  cx->results[0] = lo_fit(g, ir_binary(g, IR_MUL, a, ir_unary(g, IR_LOGISTIC, b)), ot);
  return NULL;
}

/* glu_backward(grad_output, self, dim): [go * s(b), go * a * s(b) (1 - s(b))]. */
static tpuc_status *l_glu_bw(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  tv go = ir_convert(g, lx_tensor(cx, 0), cd), x = ir_convert(g, lx_tensor(cx, 1), cd);
  int dim = (int)lx_dim(lx_int(cx, 2, -1), lo_rank(g, x));
  tv a, b;
  glu_halves(g, x, dim, &a, &b);
  tv sb = ir_unary(g, IR_LOGISTIC, b);
  tv ga = ir_binary(g, IR_MUL, go, sb);
  tv gb = ir_binary(g, IR_MUL, ir_binary(g, IR_MUL, ga, a),
                    ir_binary(g, IR_SUB, lx_splat_like(g, sb, 1.0), sb));
  tv parts[2] = {ga, gb};
  cx->results[0] = lo_fit(g, ir_concat(g, parts, 2, dim), ot);
  return NULL;
}

/* ---- prelu ---- */

/* _prelu_kernel(self, weight): weight broadcasts against self (prelu
 * reshapes it to [1, C, 1, ...] first). */
static tpuc_status *l_prelu(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  tv x = lx_coerce(g, lx_tensor(cx, 0), ir_with_dtype(ot, cd));
  tv w = lx_coerce(g, lx_tensor(cx, 1), ir_with_dtype(ot, cd));
  tv pos = ir_compare(g, IR_GT, x, lx_splat_like(g, x, 0.0));
  cx->results[0] = lo_fit(g, ir_select(g, pos, x, ir_binary(g, IR_MUL, w, x)), ot);
  return NULL;
}

/* _prelu_kernel_backward(grad_output, self, weight) -> (grad_self,
 * grad_weight), each of the shape the meta kernel gives (the broadcast
 * shape; autograd sums it down to the weight's). */
static tpuc_status *l_prelu_bw(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv go = lx_tensor(cx, 0), x = lx_tensor(cx, 1), w = lx_tensor(cx, 2);
  ir_type bt;
  if (!lo_bshape(g, x, w, &bt) || !lo_bshape_t(g, bt, ir_type_of(g, go), &bt))
    return lx_unimplemented(cx, "prelu shapes");
  bt.dtype = lx_compute_dtype(lo_dtype(g, x));
  go = lx_coerce(g, go, bt);
  x = lx_coerce(g, x, bt);
  w = lx_coerce(g, w, bt);
  tv zero = lx_splat_like(g, x, 0.0);
  tv pos = ir_compare(g, IR_GT, x, zero);
  tv gx = ir_select(g, pos, go, ir_binary(g, IR_MUL, w, go));
  tv gw = ir_select(g, pos, zero, ir_binary(g, IR_MUL, x, go));
  tv vals[2] = {gx, gw};
  for (int i = 0; i < 2 && i < cx->noutputs; i++) {
    cx->results[i] = ex_sum_to(g, vals[i], lx_out(cx, i));
  }
  return NULL;
}

/* ---- huber / smooth L1 ---- */

/* huber_loss(self, target, reduction, delta) and smooth_l1_loss(self,
 * target, reduction, beta): per element z = |x - t|,
 *   huber:     z < d ? z^2 / 2     : d (z - d / 2)
 *   smooth L1: z < b ? z^2 / 2 / b : z - b / 2. */
static tpuc_status *lower_huber(tpuc_lower_ctx *cx, bool smooth) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  tv d = lo_bin(g, IR_SUB, ir_convert(g, lx_tensor(cx, 0), cd), lx_tensor(cx, 1));
  tv z = ir_unary(g, IR_ABS, d);
  ir_type zt = ir_type_of(g, z);
  tv p = lx_scalar(cx, 3, cd);
  if (p == IR_NONE) p = lo_const(g, cd, 1.0);
  p = lx_coerce(g, p, zt);
  tv half = lx_splat_like(g, z, 0.5);
  tv quad = ir_binary(g, IR_MUL, ir_binary(g, IR_MUL, half, z), z);
  tv lin = ir_binary(g, IR_SUB, z, ir_binary(g, IR_MUL, half, p));
  if (smooth)
    quad = ir_binary(g, IR_DIV, quad, p);
  else
    lin = ir_binary(g, IR_MUL, p, lin);
  tv l = ir_select(g, ir_compare(g, IR_LT, z, p), quad, lin);
  cx->results[0] = lo_fit(g, ex_reduce_loss(g, l, lx_int(cx, 2, RED_MEAN)), ot);
  return NULL;
}
static tpuc_status *l_huber(tpuc_lower_ctx *cx) { return lower_huber(cx, false); }
static tpuc_status *l_smooth_l1(tpuc_lower_ctx *cx) { return lower_huber(cx, true); }

/* huber_loss_backward(grad_output, self, target, reduction, delta) and
 * smooth_l1_loss_backward(grad_output, self, target, reduction, beta),
 * as PyTorch's CPU kernels (x = self - target, n = 1/numel for mean):
 *   huber:     x <= -d ? -n go d : x >= d ? n go d : n x go
 *   smooth L1: x <= -b ? -n go   : x >= b ? n go   : n x go / b. */
static tpuc_status *lower_huber_bw(tpuc_lower_ctx *cx, bool smooth) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  tv x = lo_bin(g, IR_SUB, ir_convert(g, lx_tensor(cx, 1), cd), lx_tensor(cx, 2));
  ir_type xt = ir_type_of(g, x);
  if (!lo_bshape_t(g, xt, ir_with_dtype(ot, cd), &xt)) return lx_unimplemented(cx, "loss shapes");
  x = lx_coerce(g, x, xt);
  tv go = lx_coerce(g, ir_convert(g, lx_tensor(cx, 0), cd), xt);
  if (lx_int(cx, 3, RED_MEAN) == RED_MEAN) go = lo_binc(g, IR_DIV, go, (double)ir_numel(&xt));
  tv p = lx_scalar(cx, 4, cd);
  if (p == IR_NONE) p = lo_const(g, cd, 1.0);
  p = lx_coerce(g, p, xt);
  tv hi = smooth ? go : ir_binary(g, IR_MUL, go, p);
  tv mid = ir_binary(g, IR_MUL, x, go);
  if (smooth) mid = ir_binary(g, IR_DIV, mid, p);
  tv r = ir_select(g, ir_compare(g, IR_GE, x, p), hi, mid);
  r = ir_select(g, ir_compare(g, IR_LE, x, ir_unary(g, IR_NEG, p)), ir_unary(g, IR_NEG, hi), r);
  cx->results[0] = lo_fit(g, r, ot);
  return NULL;
}
static tpuc_status *l_huber_bw(tpuc_lower_ctx *cx) { return lower_huber_bw(cx, false); }
static tpuc_status *l_smooth_l1_bw(tpuc_lower_ctx *cx) { return lower_huber_bw(cx, true); }

/* ---- windowed max with indices (adaptive_max_pool2d, max_pool3d) ---- */

/* One spatial dim of a windowed max: output o reads positions
 * start[o] + k * step for k < kn[o] (kn <= K), clipped to [0, size). */
typedef struct {
  int64_t size, out, K, step;
  int64_t start[4096], kn[4096];
} win_axis;

/* A constant s64 vector. */
static tv ex_i64s(ir_graph *g, const int64_t *v, int64_t n) { return ir_const_i64s(g, v, (int)n); }

/* x [B, I_1..I_n] (n spatial dims) -> values and flat indices (into
 * I_1*..*I_n) of the max over each window [B, O_1..O_n]. NaN wins and the
 * first maximum in row-major window order is taken, as PyTorch's CPU. */
static bool window_max(ir_graph *g, tv x, int n, const win_axis *ax, tv *vals, tv *idx) {
  ir_type xt = ir_type_of(g, x);
  int64_t kall = 1;
  tv v = x;
  tv valid = IR_NONE; /* pred [O_1, K_1, .., O_n, K_n] */
  int64_t vdims[2 * TPUC_MAX_DIMS];
  for (int d = 0; d < n; d++) {
    const win_axis *a = &ax[d];
    int64_t m = a->out * a->K;
    int64_t *pos = malloc((size_t)m * sizeof *pos), *ok = malloc((size_t)m * sizeof *ok);
    if (!pos || !ok) {
      free(pos);
      free(ok);
      ir_fail(g, "window_max: out of memory");
      return false;
    }
    for (int64_t o = 0; o < a->out; o++)
      for (int64_t k = 0; k < a->K; k++) {
        int64_t p = a->start[o] + k * a->step;
        ok[o * a->K + k] = k < a->kn[o] && p >= 0 && p < a->size;
        pos[o * a->K + k] = p < 0 ? 0 : p >= a->size ? a->size - 1 : p;
      }
    v = lo_take_dim(g, v, 1 + d, ex_i64s(g, pos, m));
    int64_t two[2] = {a->out, a->K};
    tv okv = ir_reshape(g, ir_compare(g, IR_NE, ex_i64s(g, ok, m), ir_splat_i64(g, ir_make_type(TPUC_S64, 1, &m), 0)), 2, two);
    free(pos);
    free(ok);
    vdims[2 * d] = a->out;
    vdims[2 * d + 1] = a->K;
    if (valid == IR_NONE) {
      valid = okv;
    } else {
      ir_type vt = ir_make_type(TPUC_PRED, 2 * d + 2, vdims);
      int64_t bl[2 * TPUC_MAX_DIMS], br[2] = {2 * d, 2 * d + 1};
      for (int i = 0; i < 2 * d; i++) bl[i] = i;
      valid = ir_binary(g, IR_AND, ir_broadcast_in_dim(g, valid, vt, bl), ir_broadcast_in_dim(g, okv, vt, br));
    }
    kall *= a->K;
  }
  /* v: [B, O_1*K_1, ..] -> [B, O_1, K_1, ..] -> [B, O_1.., K_1..] -> [B, O.., K] */
  int64_t sd[1 + 2 * TPUC_MAX_DIMS], perm[1 + 2 * TPUC_MAX_DIMS], fd[2 + TPUC_MAX_DIMS];
  sd[0] = xt.dims[0];
  for (int d = 0; d < 2 * n; d++) sd[1 + d] = vdims[d];
  v = ir_reshape(g, v, 1 + 2 * n, sd);
  perm[0] = 0;
  for (int d = 0; d < n; d++) {
    perm[1 + d] = 1 + 2 * d;
    perm[1 + n + d] = 2 + 2 * d;
  }
  v = ir_transpose(g, v, perm);
  fd[0] = xt.dims[0];
  for (int d = 0; d < n; d++) fd[1 + d] = ax[d].out;
  fd[1 + n] = kall;
  v = ir_reshape(g, v, n + 2, fd);
  int64_t vperm[2 * TPUC_MAX_DIMS];
  for (int d = 0; d < n; d++) {
    vperm[d] = 2 * d;
    vperm[n + d] = 2 * d + 1;
  }
  valid = ir_reshape(g, ir_transpose(g, valid, vperm), n + 1, fd + 1);
  ir_type full = ir_type_of(g, v);
  int64_t bd[TPUC_MAX_DIMS + 1];
  for (int i = 0; i <= n; i++) bd[i] = i + 1;
  tv lowest = ir_broadcast_in_dim(g, lo_init(g, full.dtype, IR_RED_MAX), full, NULL);
  v = ir_select(g, ir_broadcast_in_dim(g, valid, ir_with_dtype(full, TPUC_PRED), bd), v, lowest);
  tv k;
  ir_argreduce(g, v, n + 1, true, TPUC_S64, vals, &k);
  /* flat index: sum over dims of (start[o_d] + k_d * step_d) * stride_d */
  ir_type ot = ir_type_of(g, k);
  tv flat = ir_splat_i64(g, ot, 0);
  int64_t kdiv = kall, istride = 1;
  for (int d = 0; d < n; d++) istride *= ax[d].size;
  for (int d = 0; d < n; d++) {
    const win_axis *a = &ax[d];
    kdiv /= a->K;
    istride /= a->size;
    tv kd = ir_binary(g, IR_REM, ir_binary(g, IR_DIV, k, ir_splat_i64(g, ot, kdiv)), ir_splat_i64(g, ot, a->K));
    int64_t one = 1 + d;
    tv st = ir_broadcast_in_dim(g, ex_i64s(g, a->start, a->out), ot, &one);
    tv p = ir_binary(g, IR_ADD, st, ir_binary(g, IR_MUL, kd, ir_splat_i64(g, ot, a->step)));
    flat = ir_binary(g, IR_ADD, flat, ir_binary(g, IR_MUL, p, ir_splat_i64(g, ot, istride)));
  }
  *idx = flat;
  return true;
}

/* x [B, M] with upd [B, n] added at positions idx [B, n] (s64). */
static tv scatter_add_rows(ir_graph *g, tv x, tv idx, tv upd) {
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
  return ir_scatter(g, x, ir_concat(g, parts, 2, 2), upd, &d, IR_RED_SUM);
}

/* Flattens all but the last n dims of x (rank n+1 or n+2) into one: [B, ...]. */
static tv ex_batch(ir_graph *g, tv x, int n) {
  ir_type t = ir_type_of(g, x);
  int64_t d[TPUC_MAX_DIMS];
  int lead = t.ndim - n;
  d[0] = 1;
  for (int i = 0; i < lead; i++) d[0] *= t.dims[i];
  for (int i = 0; i < n; i++) d[1 + i] = t.dims[lead + i];
  return ir_reshape(g, x, n + 1, d);
}

static win_axis *ex_axes(ir_graph *g, int n) {
  win_axis *ax = calloc((size_t)n, sizeof *ax);
  if (!ax) ir_fail(g, "pooling: out of memory");
  return ax;
}

/* adaptive_max_pool2d(self, output_size) -> (out, indices). */
static tpuc_status *l_adaptive_max_pool2d(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim != 3 && xt.ndim != 4) return lx_unimplemented(cx, "adaptive_max_pool2d rank");
  if (ir_numel(&ot) == 0) return lx_unimplemented(cx, "empty adaptive_max_pool2d");
  for (int d = 0; d < 2; d++)
    if (ot.dims[ot.ndim - 2 + d] > 4096) return lx_unimplemented(cx, "adaptive pool output too large");
  win_axis *ax = ex_axes(g, 2);
  if (!ax) return lx_unimplemented(cx, "out of memory");
  for (int d = 0; d < 2; d++) {
    win_axis *a = &ax[d];
    a->size = xt.dims[xt.ndim - 2 + d];
    a->out = ot.dims[ot.ndim - 2 + d];
    a->step = 1;
    for (int64_t o = 0; o < a->out; o++) {
      a->start[o] = o * a->size / a->out;
      int64_t end = ((o + 1) * a->size + a->out - 1) / a->out;
      a->kn[o] = end - a->start[o];
      if (a->kn[o] > a->K) a->K = a->kn[o];
    }
  }
  tv vals, idx;
  bool ok = window_max(g, ex_batch(g, x, 2), 2, ax, &vals, &idx);
  free(ax);
  if (!ok) return NULL; /* the graph's error */
  cx->results[0] = lo_fit(g, vals, ot);
  if (cx->noutputs > 1) cx->results[1] = lo_fit(g, idx, lx_out(cx, 1));
  return NULL;
}

/* The backward of a max pooling with indices over n spatial dims:
 * grad_output at `go_arg`, self at `self_arg`, indices at `idx_arg`. */
static tpuc_status *lower_max_pool_bw(tpuc_lower_ctx *cx, int n, int go_arg, int self_arg, int idx_arg) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv go = lx_tensor(cx, go_arg), x = lx_tensor(cx, self_arg), idx = lx_tensor(cx, idx_arg);
  ir_type xt = ir_type_of(g, x), gt = ir_type_of(g, go);
  if (xt.ndim < n + 1) return lx_unimplemented(cx, "pooling rank");
  int64_t b = 1, m = 1, k = 1;
  for (int i = 0; i < xt.ndim - n; i++) b *= xt.dims[i];
  for (int i = xt.ndim - n; i < xt.ndim; i++) m *= xt.dims[i];
  k = b ? ir_numel(&gt) / b : 0;
  if (b == 0 || m == 0 || k == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  int64_t zd[2] = {b, m}, ud[2] = {b, k};
  tv acc = ir_splat(g, ir_make_type(cd, 2, zd), 0.0);
  acc = scatter_add_rows(g, acc, ir_reshape(g, ir_convert(g, idx, TPUC_S64), 2, ud),
                         ir_reshape(g, ir_convert(g, go, cd), 2, ud));
  cx->results[0] = lo_fit(g, acc, ot);
  return NULL;
}

/* adaptive_max_pool2d_backward(grad_output, self, indices). */
static tpuc_status *l_adaptive_max_pool2d_bw(tpuc_lower_ctx *cx) { return lower_max_pool_bw(cx, 2, 0, 1, 2); }

/* Pooling params of n spatial dims from arg `a`: kernel_size, stride
 * (empty: the kernel), padding, [dilation]. */
static void pool_params_nd(const tpuc_lower_ctx *cx, int a, int n, bool dil, int64_t *k, int64_t *s,
                           int64_t *p, int64_t *d) {
  for (int i = 0; i < n; i++) {
    k[i] = lo_ints_at(cx, a, i, 1);
    s[i] = lo_ints_at(cx, a + 1, i, k[i]);
    p[i] = lo_ints_at(cx, a + 2, i, 0);
    d[i] = dil ? lo_ints_at(cx, a + 3, i, 1) : 1;
  }
}

/* max_pool3d_with_indices(self, kernel_size, stride, padding, dilation,
 * ceil_mode) -> (out, indices); output sizes from the caller. */
static tpuc_status *l_max_pool3d(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim != 4 && xt.ndim != 5) return lx_unimplemented(cx, "max_pool3d rank");
  if (ir_numel(&ot) == 0) return lx_unimplemented(cx, "empty max_pool3d");
  int64_t k[3], s[3], p[3], dl[3];
  pool_params_nd(cx, 1, 3, true, k, s, p, dl);
  for (int d = 0; d < 3; d++)
    if (ot.dims[ot.ndim - 3 + d] > 4096) return lx_unimplemented(cx, "max_pool3d output too large");
  win_axis *ax = ex_axes(g, 3);
  if (!ax) return lx_unimplemented(cx, "out of memory");
  for (int d = 0; d < 3; d++) {
    win_axis *a = &ax[d];
    a->size = xt.dims[xt.ndim - 3 + d];
    a->out = ot.dims[ot.ndim - 3 + d];
    a->step = dl[d];
    a->K = k[d];
    for (int64_t o = 0; o < a->out; o++) {
      a->start[o] = o * s[d] - p[d];
      a->kn[o] = k[d];
    }
  }
  tv vals, idx;
  bool ok = window_max(g, ex_batch(g, x, 3), 3, ax, &vals, &idx);
  free(ax);
  if (!ok) return NULL;
  cx->results[0] = lo_fit(g, vals, ot);
  if (cx->noutputs > 1) cx->results[1] = lo_fit(g, idx, lx_out(cx, 1));
  return NULL;
}

/* max_pool3d_with_indices_backward(grad_output, self, kernel_size, stride,
 * padding, dilation, ceil_mode, indices). */
static tpuc_status *l_max_pool3d_bw(tpuc_lower_ctx *cx) { return lower_max_pool_bw(cx, 3, 0, 1, 7); }

/* ---- avg_pool3d ---- */

/* The divisor of each window along one dim as a [o] vector in cd. */
static tv avg_div_axis(ir_graph *g, int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, bool include_pad,
                       tpuc_dtype cd) {
  int64_t *iv = malloc((size_t)out * sizeof *iv);
  if (!iv) {
    ir_fail(g, "avg_pool3d: out of memory");
    return IR_NONE;
  }
  for (int64_t o = 0; o < out; o++) {
    int64_t st = o * s - p, en = st + k < in + p ? st + k : in + p;
    int64_t a = st < 0 ? 0 : st, b = en > in ? in : en;
    iv[o] = include_pad ? en - st : b - a;
  }
  tv r = ir_convert(g, ex_i64s(g, iv, out), cd);
  free(iv);
  return r;
}

/* The divisors of avg_pool3d over [B, O1, O2, O3] in cd: divisor_override
 * at arg `a + 2`, count_include_pad at `a + 1`. */
static tv avg_divisors3(const tpuc_lower_ctx *cx, int a, const int64_t *in, const int64_t *out,
                        const int64_t *k, const int64_t *s, const int64_t *p, ir_type t) {
  ir_graph *g = cx->g;
  if (!lx_is_none(cx, a + 2)) return ir_splat(g, t, (double)lx_int(cx, a + 2, 1));
  bool include_pad = lx_bool(cx, a + 1, true);
  tv r = IR_NONE;
  for (int d = 0; d < 3; d++) {
    int64_t bd = 1 + d;
    tv v = ir_broadcast_in_dim(g, avg_div_axis(g, in[d], out[d], k[d], s[d], p[d], include_pad, t.dtype), t, &bd);
    r = r == IR_NONE ? v : ir_binary(g, IR_MUL, r, v);
  }
  return r;
}

/* avg_pool3d(self, kernel_size, stride, padding, ceil_mode,
 * count_include_pad, divisor_override?). */
static tpuc_status *l_avg_pool3d(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim != 4 && xt.ndim != 5) return lx_unimplemented(cx, "avg_pool3d rank");
  if (ir_numel(&ot) == 0) return lx_unimplemented(cx, "empty avg_pool3d");
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  int64_t k[3], s[3], p[3], dl[3];
  pool_params_nd(cx, 1, 3, false, k, s, p, dl);
  tv v = ir_convert(g, ex_batch(g, x, 3), cd);
  ir_type vt = ir_type_of(g, v);
  int64_t win[4] = {1, k[0], k[1], k[2]}, str[4] = {1, s[0], s[1], s[2]}, pad[8] = {0};
  int64_t in[3], out[3], lim[4], start[4] = {0}, one[4] = {1, 1, 1, 1};
  lim[0] = vt.dims[0];
  for (int d = 0; d < 3; d++) {
    in[d] = vt.dims[1 + d];
    out[d] = ot.dims[ot.ndim - 3 + d];
    int64_t need = (out[d] - 1) * s[d] + k[d] - in[d] - p[d];
    pad[2 + 2 * d] = p[d];
    pad[3 + 2 * d] = need > 0 ? need : 0;
    lim[1 + d] = out[d];
  }
  tv sum = ir_reduce_window(g, v, lo_const(g, cd, 0.0), IR_RED_SUM, win, str, pad);
  sum = ir_slice(g, sum, start, lim, one);
  ir_type st = ir_type_of(g, sum);
  tv r = ir_binary(g, IR_DIV, sum, avg_divisors3(cx, 4, in, out, k, s, p, st));
  cx->results[0] = lo_fit(g, r, ot);
  return NULL;
}

/* avg_pool3d_backward(grad_output, self, kernel_size, stride, padding,
 * ceil_mode, count_include_pad, divisor_override?): each window's share
 * (grad / divisor) summed back over the positions it covers. */
static tpuc_status *l_avg_pool3d_bw(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv go = lx_tensor(cx, 0), x = lx_tensor(cx, 1);
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim != 4 && xt.ndim != 5) return lx_unimplemented(cx, "avg_pool3d rank");
  if (ir_numel(&ot) == 0 || ir_numel(&xt) == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  int64_t k[3], s[3], p[3], dl[3];
  pool_params_nd(cx, 2, 3, false, k, s, p, dl);
  tv gv = ir_convert(g, ex_batch(g, go, 3), cd);
  ir_type gt = ir_type_of(g, gv);
  int64_t in[3], out[3];
  for (int d = 0; d < 3; d++) {
    in[d] = xt.dims[xt.ndim - 3 + d];
    out[d] = gt.dims[1 + d];
  }
  gv = ir_binary(g, IR_DIV, gv, avg_divisors3(cx, 5, in, out, k, s, p, gt));
  /* dilate by the stride, pad k-1 before, window-sum with stride 1: the
   * gradient of the padded input; then drop the padding */
  int64_t lo[4] = {0}, hi[4] = {0}, it[4] = {0}, win[4] = {1, k[0], k[1], k[2]}, one[4] = {1, 1, 1, 1};
  int64_t start[4] = {0}, lim[4] = {gt.dims[0], 0, 0, 0};
  for (int d = 0; d < 3; d++) {
    int64_t full = in[d] + p[d], span = (out[d] - 1) * s[d] + k[d];
    if (span > full) full = span;
    it[1 + d] = s[d] - 1;
    lo[1 + d] = k[d] - 1;
    hi[1 + d] = full - (out[d] - 1) * s[d] - 1;
    start[1 + d] = p[d];
    lim[1 + d] = p[d] + in[d];
  }
  tv padded = ir_pad(g, gv, lo_const(g, cd, 0.0), lo, hi, it);
  tv r = ir_reduce_window(g, padded, lo_const(g, cd, 0.0), IR_RED_SUM, win, one, NULL);
  r = ir_slice(g, r, start, lim, one);
  cx->results[0] = lo_fit(g, r, ot);
  return NULL;
}

/* ---- im2col / col2im ---- */

typedef struct {
  int64_t k[2], d[2], p[2], s[2];
} fold_params;

/* kernel_size, dilation, padding, stride from arg a. */
static void fold_read(const tpuc_lower_ctx *cx, int a, fold_params *f) {
  for (int i = 0; i < 2; i++) {
    f->k[i] = lo_ints_at(cx, a, i, 1);
    f->d[i] = lo_ints_at(cx, a + 1, i, 1);
    f->p[i] = lo_ints_at(cx, a + 2, i, 0);
    f->s[i] = lo_ints_at(cx, a + 3, i, 1);
  }
}

static int64_t fold_blocks(const fold_params *f, int i, int64_t size) {
  return (size + 2 * f->p[i] - f->d[i] * (f->k[i] - 1) - 1) / f->s[i] + 1;
}

/* im2col(self, kernel_size, dilation, padding, stride): [N, C, H, W] ->
 * [N, C*kh*kw, L], rows ordered (c, ki, kj) as PyTorch. */
static tpuc_status *l_im2col(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim != 3 && xt.ndim != 4) return lx_unimplemented(cx, "im2col rank");
  if (ir_numel(&ot) == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  fold_params f;
  fold_read(cx, 1, &f);
  int64_t n = xt.ndim == 4 ? xt.dims[0] : 1, c = xt.dims[xt.ndim - 3], h = xt.dims[xt.ndim - 2],
          w = xt.dims[xt.ndim - 1];
  int64_t d4[4] = {n, c, h, w};
  x = ir_reshape(g, x, 4, d4);
  int64_t oh = fold_blocks(&f, 0, h), ow = fold_blocks(&f, 1, w);
  int64_t lo[4] = {0, 0, f.p[0], f.p[1]}, it[4] = {0};
  x = ir_pad(g, x, lo_const(g, xt.dtype, 0.0), lo, lo, it);
  int64_t kk = f.k[0] * f.k[1];
  tv *parts = malloc((size_t)kk * sizeof *parts);
  if (!parts) return lx_unimplemented(cx, "out of memory");
  for (int64_t i = 0; i < f.k[0]; i++)
    for (int64_t j = 0; j < f.k[1]; j++) {
      int64_t st[4] = {0, 0, i * f.d[0], j * f.d[1]};
      int64_t lim[4] = {n, c, st[2] + (oh - 1) * f.s[0] + 1, st[3] + (ow - 1) * f.s[1] + 1};
      int64_t str[4] = {1, 1, f.s[0], f.s[1]}, pd[4] = {n, c, 1, oh * ow};
      parts[i * f.k[1] + j] = ir_reshape(g, ir_slice(g, x, st, lim, str), 4, pd);
    }
  tv r = ir_concat(g, parts, (int)kk, 2);
  free(parts);
  cx->results[0] = lo_fit(g, r, ot);
  return NULL;
}

/* col2im(self, output_size, kernel_size, dilation, padding, stride): the
 * sum of the [N, C*kh*kw, L] blocks back into [N, C, H, W]. */
static tpuc_status *l_col2im(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  if ((xt.ndim != 2 && xt.ndim != 3) || ot.ndim < 3) return lx_unimplemented(cx, "col2im rank");
  if (ir_numel(&ot) == 0 || ir_numel(&xt) == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  fold_params f;
  fold_read(cx, 2, &f);
  int64_t h = lo_ints_at(cx, 1, 0, 1), w = lo_ints_at(cx, 1, 1, 1);
  int64_t oh = fold_blocks(&f, 0, h), ow = fold_blocks(&f, 1, w), kk = f.k[0] * f.k[1];
  int64_t n = xt.ndim == 3 ? xt.dims[0] : 1, c = xt.dims[xt.ndim - 2] / kk;
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  int64_t d5[5] = {n, c, kk, oh, ow};
  x = ir_reshape(g, ir_convert(g, x, cd), 5, d5);
  int64_t hp = h + 2 * f.p[0], wp = w + 2 * f.p[1];
  tv acc = IR_NONE;
  for (int64_t i = 0; i < f.k[0]; i++)
    for (int64_t j = 0; j < f.k[1]; j++) {
      int64_t q = i * f.k[1] + j;
      int64_t st[5] = {0, 0, q, 0, 0}, lim[5] = {n, c, q + 1, oh, ow}, one[5] = {1, 1, 1, 1, 1};
      int64_t d4[4] = {n, c, oh, ow};
      tv piece = ir_reshape(g, ir_slice(g, x, st, lim, one), 4, d4);
      int64_t lo[4] = {0, 0, i * f.d[0], j * f.d[1]}, it[4] = {0, 0, f.s[0] - 1, f.s[1] - 1};
      int64_t hi[4] = {0, 0, hp - (lo[2] + (oh - 1) * f.s[0] + 1), wp - (lo[3] + (ow - 1) * f.s[1] + 1)};
      piece = ir_pad(g, piece, lo_const(g, cd, 0.0), lo, hi, it);
      acc = acc == IR_NONE ? piece : ir_binary(g, IR_ADD, acc, piece);
    }
  int64_t st[4] = {0, 0, f.p[0], f.p[1]}, lim[4] = {n, c, f.p[0] + h, f.p[1] + w}, one[4] = {1, 1, 1, 1};
  cx->results[0] = lo_fit(g, ir_slice(g, acc, st, lim, one), ot);
  return NULL;
}

/* ---- embedding_renorm_, repeat_interleave, bucketize, searchsorted ---- */

/* embedding_renorm_(self, indices, max_norm, norm_type): each row named by
 * indices whose norm exceeds max_norm is scaled by max_norm / (norm + 1e-7).
 * norm_type is a runtime value: 2, 1, inf, -inf, 0 and any other p. */
static tpuc_status *l_embedding_renorm(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv w = lx_tensor(cx, 0), idx = lx_tensor(cx, 1);
  ir_type wt = ir_type_of(g, w), it = ir_type_of(g, idx);
  if (wt.ndim != 2 || !ir_is_float(wt.dtype)) return lx_unimplemented(cx, "embedding_renorm_ weight");
  int64_t v = wt.dims[0], n = ir_numel(&it);
  if (n == 0 || v == 0) {
    cx->results[0] = lo_out(g, w, ot);
    return NULL;
  }
  tpuc_dtype cd = lx_compute_dtype(wt.dtype);
  tv wc = ir_convert(g, w, cd);
  /* the rows named: a scatter of ones */
  int64_t two[2] = {n, 1};
  tv iv = ir_reshape(g, lo_wrap_index(g, ir_reshape(g, idx, 1, &n), v), 2, two);
  ir_scatter_dims d;
  memset(&d, 0, sizeof d);
  d.inserted_window_dims[d.n_inserted++] = 0;
  d.scatter_dims_to_operand_dims[d.n_scatter_dims++] = 0;
  d.index_vector_dim = 1;
  tv hit = ir_scatter(g, ir_splat(g, ir_make_type(TPUC_S32, 1, &v), 0.0), iv,
                      ir_splat(g, ir_make_type(TPUC_S32, 1, &n), 1.0), &d, IR_SCATTER_REPLACE);
  int64_t last = 1;
  tv a = ir_unary(g, IR_ABS, wc);
  tv p = lx_scalar(cx, 3, cd);
  ir_type nt = ir_make_type(cd, 1, &v);
  tv pv = ir_broadcast_in_dim(g, p, nt, NULL);
  tv n2 = ir_unary(g, IR_SQRT, lo_sum(g, ir_binary(g, IR_MUL, a, a), &last, 1, false));
  tv n1 = lo_sum(g, a, &last, 1, false);
  tv nmax = lo_reduce(g, a, IR_RED_MAX, &last, 1, false);
  tv nmin = lo_reduce(g, a, IR_RED_MIN, &last, 1, false);
  tv n0 = lo_sum(g, ir_convert(g, ir_compare(g, IR_NE, a, lx_splat_like(g, a, 0.0)), cd), &last, 1, false);
  tv pb = ir_broadcast_in_dim(g, p, ir_type_of(g, a), NULL);
  tv np = ir_binary(g, IR_POW, lo_sum(g, ir_binary(g, IR_POW, a, pb), &last, 1, false),
                    ir_binary(g, IR_DIV, ir_splat(g, nt, 1.0), pv));
  tv inf = ir_splat(g, nt, INFINITY);
  tv norm = np;
  norm = ir_select(g, ir_compare(g, IR_EQ, pv, ir_splat(g, nt, 0.0)), n0, norm);
  norm = ir_select(g, ir_compare(g, IR_EQ, pv, ir_unary(g, IR_NEG, inf)), nmin, norm);
  norm = ir_select(g, ir_compare(g, IR_EQ, pv, inf), nmax, norm);
  norm = ir_select(g, ir_compare(g, IR_EQ, pv, ir_splat(g, nt, 1.0)), n1, norm);
  norm = ir_select(g, ir_compare(g, IR_EQ, pv, ir_splat(g, nt, 2.0)), n2, norm);
  /* scale in f64 as PyTorch (norm.item<double>()), applied in cd */
  ir_type n64 = ir_make_type(TPUC_F64, 1, &v);
  tv maxn = ir_broadcast_in_dim(g, lx_scalar(cx, 2, TPUC_F64), n64, NULL);
  tv norm64 = ir_convert(g, norm, TPUC_F64);
  tv scale = ir_binary(g, IR_DIV, maxn, ir_binary(g, IR_ADD, norm64, ir_splat(g, n64, 1e-7)));
  tv apply = ir_binary(g, IR_AND, ir_compare(g, IR_GT, norm64, maxn),
                       ir_compare(g, IR_NE, hit, ir_splat(g, ir_make_type(TPUC_S32, 1, &v), 0.0)));
  int64_t zero = 0;
  ir_type wct = ir_type_of(g, wc);
  tv scaled = ir_binary(g, IR_MUL, wc, ir_broadcast_in_dim(g, ir_convert(g, scale, cd), wct, &zero));
  tv r = ir_select(g, ir_broadcast_in_dim(g, apply, ir_with_dtype(wct, TPUC_PRED), &zero), scaled, wc);
  cx->results[0] = lo_fit(g, r, ot);
  return NULL;
}

/* repeat_interleave.Tensor(repeats, *, output_size): out[j] = the i with
 * cumsum[i-1] <= j < cumsum[i] (output_size given, else no Meta result). */
static tpuc_status *l_repeat_interleave(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv r = lx_tensor(cx, 0);
  ir_type rt = ir_type_of(g, r);
  if (rt.ndim > 1 || ot.ndim != 1) return lx_unimplemented(cx, "repeat_interleave repeats rank");
  int64_t n = ir_numel(&rt), m = ot.dims[0];
  if (m == 0 || n == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  r = ir_convert(g, ir_reshape(g, r, 1, &n), TPUC_S64);
  int64_t win = n, one = 1, pad[2] = {n - 1, 0};
  tv cs = ir_reduce_window(g, r, lo_const(g, TPUC_S64, 0.0), IR_RED_SUM, &win, &one, pad);
  int64_t md[2] = {m, n}, b1 = 1;
  ir_type mt = ir_make_type(TPUC_S64, 2, md);
  tv le = ir_compare(g, IR_LE, ir_broadcast_in_dim(g, cs, mt, &b1), ir_iota(g, mt, 0));
  int64_t red = 1;
  cx->results[0] = lo_fit(g, lo_sum(g, ir_convert(g, le, TPUC_S64), &red, 1, false), ot);
  return NULL;
}

/* How many of the sorted values seq[..., M] lie before each value v, as
 * PyTorch's binary search: left counts !(s >= v), right !(s > v). seq is
 * 1-D, or v's leading dims + [M]. */
static tv count_before(ir_graph *g, tv seq, tv v, bool right) {
  ir_type st = ir_type_of(g, seq), vt = ir_type_of(g, v);
  if (st.dtype != vt.dtype) {
    tpuc_dtype c = ir_is_float(st.dtype) || ir_is_float(vt.dtype) ? TPUC_F64 : TPUC_S64;
    seq = ir_convert(g, seq, c);
    v = ir_convert(g, v, c);
    st.dtype = vt.dtype = c;
  }
  ir_type ct = vt;
  ct.dims[ct.ndim++] = st.dims[st.ndim - 1];
  int64_t bs[TPUC_MAX_DIMS], bv[TPUC_MAX_DIMS];
  for (int i = 0; i < vt.ndim; i++) bv[i] = i;
  if (st.ndim == 1) {
    bs[0] = vt.ndim;
  } else {
    for (int i = 0; i < st.ndim - 1; i++) bs[i] = i;
    bs[st.ndim - 1] = vt.ndim;
  }
  tv sb = ir_broadcast_in_dim(g, seq, ct, bs), vb = ir_broadcast_in_dim(g, v, ct, bv);
  tv after = ir_compare(g, right ? IR_GT : IR_GE, sb, vb);
  tv before = ir_convert(g, ir_unary(g, IR_NOT, after), TPUC_S64);
  int64_t last = vt.ndim;
  return lo_sum(g, before, &last, 1, false);
}

/* bucketize.Tensor / .Scalar (self, boundaries, *, out_int32, right). */
static tpuc_status *l_bucketize(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  const tpuc_tensor *bd = lx_tensor_desc(cx, 1);
  if (!bd || bd->ndim != 1) return lx_unimplemented(cx, "bucketize boundaries rank");
  tv b = lx_tensor(cx, 1);
  const tpuc_arg *a0 = lx_arg(cx, 0);
  tv v = a0 && a0->kind == TPUC_ARG_SCALAR ? lx_scalar(cx, 0, lo_dtype(g, b)) : lx_tensor(cx, 0);
  if (ir_numel(&ot) == 0 || bd->sizes[0] == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  cx->results[0] = lo_fit(g, count_before(g, b, v, lx_bool(cx, 3, false)), ot);
  return NULL;
}

/* searchsorted.Tensor / .Scalar (sorted_sequence, self, *, out_int32,
 * right, side, sorter). */
static tpuc_status *l_searchsorted(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv seq = lx_tensor(cx, 0);
  ir_type st = ir_type_of(g, seq);
  if (st.ndim < 1) return lx_unimplemented(cx, "searchsorted sequence rank");
  const tpuc_arg *a1 = lx_arg(cx, 1);
  tv v = a1 && a1->kind == TPUC_ARG_SCALAR ? lx_scalar(cx, 1, st.dtype) : lx_tensor(cx, 1);
  ir_type vt = ir_type_of(g, v);
  if (st.ndim > 1 && (vt.ndim != st.ndim)) return lx_unimplemented(cx, "searchsorted shapes");
  bool right = lx_bool(cx, 3, false);
  const tpuc_arg *side = lx_arg(cx, 4);
  if (side && side->kind == TPUC_ARG_STRING) right = strcmp(side->s, "right") == 0;
  /* nothing to search (an empty sequence: every position is 0) */
  if (ir_numel(&ot) == 0 || st.dims[st.ndim - 1] == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  if (!lx_is_none(cx, 5)) {
    if (st.ndim != 1) return lx_unimplemented(cx, "searchsorted sorter of a batched sequence");
    int64_t m = st.dims[0];
    ir_gather_dims d;
    memset(&d, 0, sizeof d);
    int64_t two[2] = {m, 1};
    d.collapsed_slice_dims[d.n_collapsed++] = 0;
    d.start_index_map[d.n_start_index_map++] = 0;
    d.index_vector_dim = 1;
    d.slice_sizes[0] = 1;
    tv s = ir_reshape(g, lo_wrap_index(g, lx_tensor(cx, 5), m), 2, two);
    seq = ir_gather(g, seq, s, &d, st);
  }

  cx->results[0] = lo_fit(g, count_before(g, seq, v, right), ot);
  return NULL;
}

/* ---- multinomial ---- */

/* multinomial(self, num_samples, replacement=False, *, generator): inverse
 * CDF sampling, one uniform per sample from the device generator: the
 * first category whose cumulative weight exceeds u * total (never one of
 * weight 0). Without replacement only num_samples == 1 (the same thing);
 * PyTorch's checks of the weights' values (negative, all zero) are not
 * made on the device. */
static tpuc_status *l_multinomial(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv p = lx_tensor(cx, 0);
  ir_type pt = ir_type_of(g, p);
  int64_t ns = lx_int(cx, 1, 1);
  if (!lx_bool(cx, 2, false) && ns > 1) return lx_unimplemented(cx, "multinomial without replacement");
  if (pt.ndim < 1 || pt.ndim > 2 || !ir_is_float(pt.dtype)) return lx_unimplemented(cx, "multinomial weights");
  tv state = lo_rng_state(cx);
  if (state == IR_NONE) return lx_unimplemented(cx, "multinomial without a generator state");
  int64_t n = pt.ndim == 2 ? pt.dims[0] : 1, k = pt.dims[pt.ndim - 1];
  if (n * ns == 0 || k == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  bool dbl = pt.dtype == TPUC_F64;
  tpuc_dtype cd = dbl ? TPUC_F64 : TPUC_F32;
  int64_t nk[2] = {n, k};
  p = ir_reshape(g, ir_convert(g, p, cd), 2, nk);
  int64_t win[2] = {1, k}, one[2] = {1, 1}, pad[4] = {0, 0, k - 1, 0};
  tv cdf = ir_reduce_window(g, p, lo_const(g, cd, 0.0), IR_RED_SUM, win, one, pad);
  int64_t st[2] = {0, k - 1}, lim[2] = {n, k};
  tv total = ir_slice(g, cdf, st, lim, one); /* [n, 1] */
  /* uniforms in [0, 1): a random mantissa under the exponent of 1.0, minus 1 */
  int64_t m = n * ns, sd[2] = {n, ns};
  ir_type bt = ir_make_type(dbl ? TPUC_U64 : TPUC_U32, 1, &m);
  tv bits, next;
  ir_rng_bits(g, state, bt, &bits, &next);
  ir_type bs = ir_with_dtype(bt, TPUC_S64);
  tv shift = dbl ? ir_bitcast(g, ir_splat_i64(g, bs, 12), bt) : ir_splat_i64(g, bt, 9);
  tv onebits = dbl ? ir_bitcast(g, ir_splat_i64(g, bs, 0x3FF0000000000000LL), bt) : ir_splat_i64(g, bt, 0x3F800000);
  tv u = ir_bitcast(g, ir_binary(g, IR_OR, ir_binary(g, IR_SHR_LOGICAL, bits, shift), onebits), ir_with_dtype(bt, cd));
  u = ir_reshape(g, ir_binary(g, IR_SUB, u, ir_splat(g, ir_with_dtype(bt, cd), 1.0)), 2, sd);
  int64_t b01[2] = {0, 1}, b02[2] = {0, 2};
  tv target = ir_binary(g, IR_MUL, u, ir_broadcast_in_dim(g, total, ir_make_type(cd, 2, sd), b01));
  int64_t cdims[3] = {n, ns, k};
  ir_type ct = ir_make_type(cd, 3, cdims);
  tv le = ir_compare(g, IR_LE, ir_broadcast_in_dim(g, cdf, ct, b02), ir_broadcast_in_dim(g, target, ct, b01));
  int64_t last = 2, kd = 1;
  tv count = lo_sum(g, ir_convert(g, le, TPUC_S64), &last, 1, false); /* [n, ns] */
  ir_type it = ir_make_type(TPUC_S64, 2, nk);
  tv nz = ir_select(g, ir_compare(g, IR_GT, p, lx_splat_like(g, p, 0.0)), ir_iota(g, it, 1), ir_splat_i64(g, it, 0));
  tv lastnz = lo_reduce(g, nz, IR_RED_MAX, &kd, 1, true); /* [n, 1] */
  tv idx = ir_binary(g, IR_MIN, count, ir_broadcast_in_dim(g, lastnz, ir_make_type(TPUC_S64, 2, sd), b01));
  cx->results[0] = lo_fit(g, idx, ot);
  return NULL;
}

/* ---- the family's table ---- */

extern const tpuc_lowering tpuc_lowerings_nn_extra[];
const tpuc_lowering tpuc_lowerings_nn_extra[] = {
    {"aten::glu", l_glu},
    {"aten::glu.out", l_glu},
    {"aten::glu_backward", l_glu_bw},
    {"aten::glu_backward.grad_input", l_glu_bw},
    {"aten::_prelu_kernel", l_prelu},
    {"aten::_prelu_kernel_backward", l_prelu_bw},
    {"aten::huber_loss", l_huber},
    {"aten::huber_loss.out", l_huber},
    {"aten::huber_loss_backward", l_huber_bw},
    {"aten::huber_loss_backward.out", l_huber_bw},
    {"aten::smooth_l1_loss", l_smooth_l1},
    {"aten::smooth_l1_loss.out", l_smooth_l1},
    {"aten::smooth_l1_loss_backward", l_smooth_l1_bw},
    {"aten::smooth_l1_loss_backward.grad_input", l_smooth_l1_bw},
    {"aten::adaptive_max_pool2d", l_adaptive_max_pool2d},
    {"aten::adaptive_max_pool2d.out", l_adaptive_max_pool2d},
    {"aten::adaptive_max_pool2d_backward", l_adaptive_max_pool2d_bw},
    {"aten::adaptive_max_pool2d_backward.grad_input", l_adaptive_max_pool2d_bw},
    {"aten::max_pool3d_with_indices", l_max_pool3d},
    {"aten::max_pool3d_with_indices.out", l_max_pool3d},
    {"aten::max_pool3d_with_indices_backward", l_max_pool3d_bw},
    {"aten::max_pool3d_with_indices_backward.grad_input", l_max_pool3d_bw},
    {"aten::avg_pool3d", l_avg_pool3d},
    {"aten::avg_pool3d.out", l_avg_pool3d},
    {"aten::avg_pool3d_backward", l_avg_pool3d_bw},
    {"aten::avg_pool3d_backward.grad_input", l_avg_pool3d_bw},
    {"aten::im2col", l_im2col},
    {"aten::im2col.out", l_im2col},
    {"aten::col2im", l_col2im},
    {"aten::col2im.out", l_col2im},
    {"aten::embedding_renorm_", l_embedding_renorm},
    {"aten::embedding_renorm", l_embedding_renorm},
    {"aten::embedding_renorm.out", l_embedding_renorm},
    {"aten::repeat_interleave.Tensor", l_repeat_interleave},
    {"aten::repeat_interleave.Tensor_out", l_repeat_interleave},
    {"aten::bucketize.Tensor", l_bucketize},
    {"aten::bucketize.Tensor_out", l_bucketize},
    {"aten::bucketize.Scalar", l_bucketize},
    {"aten::bucketize.Scalar_out", l_bucketize},
    {"aten::searchsorted.Tensor", l_searchsorted},
    {"aten::searchsorted.Tensor_out", l_searchsorted},
    {"aten::searchsorted.Scalar", l_searchsorted},
    {"aten::searchsorted.Scalar_out", l_searchsorted},
    {"aten::multinomial", l_multinomial},
    {"aten::multinomial.out", l_multinomial},
    {NULL, NULL},
};
