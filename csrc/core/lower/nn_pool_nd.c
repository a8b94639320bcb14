/* nn_pool_nd.c — pooling the 2-D lowerings (nn_conv.c) do not cover, which
 * vision and video models still sent to the CPU: adaptive_max_pool2d/3d,
 * adaptive_avg_pool3d, max_pool3d_with_indices and avg_pool3d (each with its
 * backward), max_unpool2d/3d (a scatter; their backward is a gather), and
 * im2col / col2im (unfold / fold). Windowed maxima gather each window (NaN
 * wins, the first maximum's index); backward passes scatter-add by index.
 * f16/bf16 compute in f32 like PyTorch's CPU kernels. */
#include <stdlib.h>

#include "lower_ops.h"

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

/* adaptive_max_pool{2,3}d(self, output_size) -> (out, indices) over the
 * last n dims: window o covers floor(o*h/out) .. ceil((o+1)*h/out). */
static tpuc_status *adaptive_max_pool(tpuc_lower_ctx *cx, int n) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim != n + 1 && xt.ndim != n + 2) return lx_unimplemented(cx, "adaptive_max_pool rank");
  if (ir_numel(&ot) == 0) return lx_unimplemented(cx, "empty adaptive_max_pool");
  for (int d = 0; d < n; d++)
    if (ot.dims[ot.ndim - n + d] > 4096) return lx_unimplemented(cx, "adaptive pool output too large");
  win_axis *ax = ex_axes(g, n);
  if (!ax) return lx_unimplemented(cx, "out of memory");
  for (int d = 0; d < n; d++) {
    win_axis *a = &ax[d];
    a->size = xt.dims[xt.ndim - n + d];
    a->out = ot.dims[ot.ndim - n + d];
    a->step = 1;
    for (int64_t o = 0; o < a->out; o++) {
      a->start[o] = o * a->size / a->out;
      int64_t end = ((o + 1) * a->size + a->out - 1) / a->out;
      a->kn[o] = end - a->start[o];
      if (a->kn[o] > a->K) a->K = a->kn[o];
    }
  }
  tv vals, idx;
  bool ok = window_max(g, ex_batch(g, x, n), n, ax, &vals, &idx);
  free(ax);
  if (!ok) return NULL; /* the graph's error */
  cx->results[0] = lo_fit(g, vals, ot);
  if (cx->noutputs > 1) cx->results[1] = lo_fit(g, idx, lx_out(cx, 1));
  return NULL;
}
static tpuc_status *l_adaptive_max_pool2d(tpuc_lower_ctx *cx) { return adaptive_max_pool(cx, 2); }
static tpuc_status *l_adaptive_max_pool3d(tpuc_lower_ctx *cx) { return adaptive_max_pool(cx, 3); }

/* ---- adaptive_avg_pool3d ---- */

/* The averaging matrix [o, h] of adaptive pooling along one dim (1/size on
 * window i = floor(i*h/o) .. ceil((i+1)*h/o), 0 elsewhere), in cd. */
static tv adaptive_weights(ir_graph *g, int64_t o, int64_t h, tpuc_dtype cd) {
  int64_t d[2] = {o, h}, b0 = 0;
  ir_type t = ir_make_type(TPUC_S64, 2, d), t1 = ir_make_type(TPUC_S64, 1, &o);
  tv i = ir_iota(g, t1, 0);
  tv start = ir_binary(g, IR_DIV, ir_binary(g, IR_MUL, i, ir_splat_i64(g, t1, h)), ir_splat_i64(g, t1, o));
  tv ip1 = ir_binary(g, IR_ADD, i, ir_splat_i64(g, t1, 1));
  tv end = ir_binary(g, IR_DIV, ir_binary(g, IR_ADD, ir_binary(g, IR_MUL, ip1, ir_splat_i64(g, t1, h)),
                                          ir_splat_i64(g, t1, o - 1)),
                     ir_splat_i64(g, t1, o));
  tv col = ir_iota(g, t, 1);
  tv in = ir_binary(g, IR_AND, ir_compare(g, IR_GE, col, ir_broadcast_in_dim(g, start, t, &b0)),
                    ir_compare(g, IR_LT, col, ir_broadcast_in_dim(g, end, t, &b0)));
  tv size = ir_broadcast_in_dim(g, ir_convert(g, ir_binary(g, IR_SUB, end, start), cd),
                                ir_with_dtype(t, cd), &b0);
  return ir_binary(g, IR_DIV, ir_convert(g, in, cd), size);
}

/* x [B, A1, A2, A3] contracted along dim 1 three times with m[i] (dim mdim
 * contracted): each pass appends the new dim last, so after three the dims
 * are back in order. */
static tv apply_3(ir_graph *g, tv x, const tv *m, int64_t mdim) {
  int64_t c1 = 1;
  for (int i = 0; i < 3; i++) x = ir_dot_general(g, x, m[i], NULL, NULL, 0, &c1, &mdim, 1, lo_dtype(g, x));
  return x;
}

/* _adaptive_avg_pool3d / adaptive_avg_pool3d.out (self, output_size) and
 * _adaptive_avg_pool3d_backward(grad_output, self): three contractions with
 * averaging matrices, float32/float64. */
static tpuc_status *adaptive_avg_pool3d(tpuc_lower_ctx *cx, bool backward) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, backward ? 1 : 0);
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim != 4 && xt.ndim != 5) return lx_unimplemented(cx, "adaptive_avg_pool3d rank");
  /* PyTorch's CPU kernel sums each window in the 16-bit type itself, rounding
   * every addition, then divides three times: a float32 sum differs by far more
   * than an ulp. Matching it means a sequential per-element sum; not built, so
   * float16/bfloat16 stay on the CPU. */
  if (ot.dtype != TPUC_F32 && ot.dtype != TPUC_F64)
    return lx_unimplemented(cx, "adaptive_avg_pool3d: float16/bfloat16 (the CPU sums in them)");
  tpuc_dtype cd = ot.dtype;
  if (ir_numel(&ot) == 0 || ir_numel(&xt) == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  tv go = backward ? lx_tensor(cx, 0) : IR_NONE;
  ir_type st = backward ? ir_type_of(g, go) : ot; /* the pooled shape */
  tv m[3];
  for (int d = 0; d < 3; d++)
    m[d] = adaptive_weights(g, st.dims[st.ndim - 3 + d], xt.dims[xt.ndim - 3 + d], cd);
  tv in = ex_batch(g, ir_convert(g, backward ? go : x, cd), 3);
  cx->results[0] = lo_fit(g, apply_3(g, in, m, backward ? 0 : 1), ot);
  return NULL;
}
static tpuc_status *l_adaptive_avg_pool3d(tpuc_lower_ctx *cx) { return adaptive_avg_pool3d(cx, false); }
static tpuc_status *l_adaptive_avg_pool3d_bw(tpuc_lower_ctx *cx) { return adaptive_avg_pool3d(cx, true); }

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
  acc = lo_scatter_add_rows(g, acc, ir_reshape(g, ir_convert(g, idx, TPUC_S64), 2, ud),
                         ir_reshape(g, ir_convert(g, go, cd), 2, ud));
  cx->results[0] = lo_fit(g, acc, ot);
  return NULL;
}

/* adaptive_max_pool2d_backward(grad_output, self, indices). */
static tpuc_status *l_adaptive_max_pool2d_bw(tpuc_lower_ctx *cx) { return lower_max_pool_bw(cx, 2, 0, 1, 2); }
static tpuc_status *l_adaptive_max_pool3d_bw(tpuc_lower_ctx *cx) { return lower_max_pool_bw(cx, 3, 0, 1, 2); }

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
  if (ir_numel(&ot) == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
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

/* ---- the family's table ---- */

extern const tpuc_lowering tpuc_lowerings_nn_pool_nd[];
/* ---- max_unpool2d / max_unpool3d ---- */

/* max_unpool2d(self, indices, output_size) and max_unpool3d(self, indices,
 * output_size, stride, padding): zeros of the output's size, each input
 * element written at its flat index within its (N, C) plane. Indices from a
 * max pool are distinct or name equal values; for other repeated indices
 * which write wins is unspecified (the CPU: the last). */
static tpuc_status *lower_max_unpool(tpuc_lower_ctx *cx, int nsp) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0), idx = lx_tensor(cx, 1);
  ir_type xt = ir_type_of(g, x);
  if (ot.ndim < nsp + 1 || xt.ndim != ot.ndim) return lx_unimplemented(cx, "max_unpool: ranks");
  int64_t b = 1, p = 1, l = 1;
  for (int i = 0; i < ot.ndim - nsp; i++) b *= ot.dims[i];
  for (int i = ot.ndim - nsp; i < ot.ndim; i++) p *= ot.dims[i], l *= xt.dims[i];
  tv zero = ir_splat(g, ir_make_type(ot.dtype, 2, (int64_t[2]){b, p}), 0.0);
  if (b * p == 0 || l == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  int64_t bl[2] = {b, l};
  x = ir_reshape(g, ir_convert(g, x, ot.dtype), 2, bl);
  idx = ir_reshape(g, ir_convert(g, idx, TPUC_S64), 2, bl);
  tv y = lo_scatter_rows(g, zero, idx, x, IR_SCATTER_REPLACE);
  cx->results[0] = ir_reshape(g, y, ot.ndim, ot.dims);
  return NULL;
}
static tpuc_status *l_max_unpool2d(tpuc_lower_ctx *cx) { return lower_max_unpool(cx, 2); }
static tpuc_status *l_max_unpool3d(tpuc_lower_ctx *cx) { return lower_max_unpool(cx, 3); }

const tpuc_lowering tpuc_lowerings_nn_pool_nd[] = {
    {"aten::adaptive_max_pool2d", l_adaptive_max_pool2d},
    {"aten::adaptive_max_pool2d.out", l_adaptive_max_pool2d},
    {"aten::adaptive_max_pool2d_backward", l_adaptive_max_pool2d_bw},
    {"aten::adaptive_max_pool2d_backward.grad_input", l_adaptive_max_pool2d_bw},
    {"aten::adaptive_max_pool3d", l_adaptive_max_pool3d},
    {"aten::adaptive_max_pool3d.out", l_adaptive_max_pool3d},
    {"aten::adaptive_max_pool3d_backward", l_adaptive_max_pool3d_bw},
    {"aten::adaptive_max_pool3d_backward.grad_input", l_adaptive_max_pool3d_bw},
    {"aten::_adaptive_avg_pool3d", l_adaptive_avg_pool3d},
    {"aten::_adaptive_avg_pool3d.out", l_adaptive_avg_pool3d},
    {"aten::adaptive_avg_pool3d.out", l_adaptive_avg_pool3d},
    {"aten::_adaptive_avg_pool3d_backward", l_adaptive_avg_pool3d_bw},
    {"aten::_adaptive_avg_pool3d_backward.out", l_adaptive_avg_pool3d_bw},
    {"aten::max_pool3d_with_indices", l_max_pool3d},
    {"aten::max_pool3d_with_indices.out", l_max_pool3d},
    {"aten::max_pool3d_with_indices_backward", l_max_pool3d_bw},
    {"aten::max_pool3d_with_indices_backward.grad_input", l_max_pool3d_bw},
    {"aten::avg_pool3d", l_avg_pool3d},
    {"aten::avg_pool3d.out", l_avg_pool3d},
    {"aten::avg_pool3d_backward", l_avg_pool3d_bw},
    {"aten::avg_pool3d_backward.grad_input", l_avg_pool3d_bw},
    {"aten::max_unpool2d", l_max_unpool2d},
    {"aten::max_unpool2d.out", l_max_unpool2d},
    {"aten::max_unpool3d", l_max_unpool3d},
    {"aten::max_unpool3d.out", l_max_unpool3d},
    {"aten::im2col", l_im2col},
    {"aten::im2col.out", l_im2col},
    {"aten::col2im", l_col2im},
    {"aten::col2im.out", l_col2im},
    {NULL, NULL},
};
