/* nn_conv.c — convolution (1-D, 2-D and 3-D, groups, stride, padding, dilation,
 * transposed) and its backward, max pooling with indices and its backward,
 * average pooling and its backward, adaptive average pooling and its
 * backward. 1-D cases run as 2-D with a unit height. Output sizes come from
 * the caller's meta computation (ceil_mode included), so the lowerings only
 * pad enough to produce them. f16/bf16 accumulate in f32. */
#include "nn.h"

/* ---- convolution ---- */

#define NSP IR_CONV_MAX_SPATIAL

typedef struct {
  int nsp; /* spatial dims of the program: 2 (1-D runs as 2-D) or 3 */
  int64_t stride[NSP], pad[NSP], dil[NSP], outpad[NSP], groups;
  bool transposed;
} conv_params;

/* Reads stride/padding/dilation/output_padding at args a, a+1, a+2, a+4 and
 * groups at a+5 for an input of rank r (1-D maps to the width of 2-D). */
static void conv_read(const tpuc_lower_ctx *cx, int a, int r, conv_params *p) {
  int given = r - 2;
  p->nsp = given < 2 ? 2 : given;
  for (int i = 0; i < p->nsp; i++) {
    int k = i - (p->nsp - given);
    p->stride[i] = k < 0 ? 1 : lo_ints_at(cx, a, k, 1);
    p->pad[i] = k < 0 ? 0 : lo_ints_at(cx, a + 1, k, 0);
    p->dil[i] = k < 0 ? 1 : lo_ints_at(cx, a + 2, k, 1);
    p->outpad[i] = k < 0 ? 0 : lo_ints_at(cx, a + 4, k, 0);
  }
  p->transposed = lx_bool(cx, a + 3, false);
  p->groups = lx_int(cx, a + 5, 1);
}

/* A [N, C, L] value as [N, C, 1, L]. */
static tv as_2d(ir_graph *g, tv x) {
  ir_type t = ir_type_of(g, x);
  if (t.ndim != 3) return x;
  int64_t d[4] = {t.dims[0], t.dims[1], 1, t.dims[2]};
  return ir_reshape(g, x, 4, d);
}

static tv conv(ir_graph *g, tv x, tv w, const conv_params *p, const int64_t *stride,
               const int64_t *pad, const int64_t *lhs_dil, const int64_t *rhs_dil, tpuc_dtype cd) {
  return ir_conv(g, x, w, p->nsp, stride, pad, lhs_dil, rhs_dil, p->groups, cd);
}

/* Weight [g*a, b, k...] -> [g*b, a, k...], spatially flipped: the kernel of
 * the transposed convolution. */
static tv flip_regroup(ir_graph *g, tv w, const conv_params *p) {
  ir_type t = ir_type_of(g, w);
  int nsp = p->nsp;
  int64_t a = t.dims[0] / p->groups, b = t.dims[1];
  int64_t d5[NSP + 3] = {p->groups, a, b}, perm[NSP + 3] = {0, 2, 1};
  int64_t d4[NSP + 2] = {p->groups * b, a}, sp[NSP];
  for (int i = 0; i < nsp; i++) {
    d5[3 + i] = d4[2 + i] = t.dims[2 + i];
    perm[3 + i] = 3 + i;
    sp[i] = 2 + i;
  }
  tv r = ir_transpose(g, ir_reshape(g, w, nsp + 3, d5), perm);
  return ir_reverse(g, ir_reshape(g, r, nsp + 2, d4), sp, nsp);
}

/* Plain convolution of x and w (same dtype), result in cd. */
static tv conv_fwd(ir_graph *g, tv x, tv w, const conv_params *p, tpuc_dtype cd) {
  int64_t pad[2 * NSP], one[NSP];
  for (int i = 0; i < p->nsp; i++) {
    pad[2 * i] = pad[2 * i + 1] = p->pad[i];
    one[i] = 1;
  }
  return conv(g, x, w, p, p->stride, pad, one, p->dil, cd);
}

/* Transposed convolution: x [N, Cin, sp...], w [Cin, Cout/g, k...]. */
static tv conv_tr(ir_graph *g, tv x, tv w, const conv_params *p, tpuc_dtype cd) {
  ir_type wt = ir_type_of(g, w);
  int64_t pad[2 * NSP], one[NSP];
  for (int i = 0; i < p->nsp; i++) {
    int64_t k = p->dil[i] * (wt.dims[2 + i] - 1);
    pad[2 * i] = k - p->pad[i];
    pad[2 * i + 1] = k - p->pad[i] + p->outpad[i];
    one[i] = 1;
  }
  return conv(g, x, flip_regroup(g, w, p), p, one, pad, p->stride, p->dil, cd);
}

/* The weight gradient of a plain convolution: x [N, g*ci, sp...] input,
 * dy [N, co, osp...] output gradient, kernel k -> [co, ci, k...]. */
static tv conv_wgrad(ir_graph *g, tv x, tv dy, const int64_t *k, const conv_params *p,
                     tpuc_dtype cd) {
  ir_type xt = ir_type_of(g, x), yt = ir_type_of(g, dy);
  int nsp = p->nsp;
  int64_t G = p->groups, ci = xt.dims[1] / G, n = xt.dims[0];
  int64_t d5[NSP + 3] = {n, G, ci}, perm5[NSP + 3] = {2, 1, 0};
  int64_t d4[NSP + 2] = {ci, G * n}, perm4[NSP + 2] = {1, 0};
  int64_t pad[2 * NSP], one[NSP];
  for (int i = 0; i < nsp; i++) {
    int64_t h = xt.dims[2 + i], o = yt.dims[2 + i];
    d5[3 + i] = d4[2 + i] = h;
    perm5[3 + i] = 3 + i;
    perm4[2 + i] = 2 + i;
    pad[2 * i] = p->pad[i];
    pad[2 * i + 1] = (k[i] - 1) * p->dil[i] + (o - 1) * p->stride[i] + 1 - h - p->pad[i];
    one[i] = 1;
  }
  tv lhs = ir_reshape(g, ir_transpose(g, ir_reshape(g, x, nsp + 3, d5), perm5), nsp + 2, d4);
  tv rhs = ir_transpose(g, dy, perm4);
  tv r = conv(g, lhs, rhs, p, p->dil, pad, one, p->stride, cd); /* [ci, co, k...] */
  return ir_transpose(g, r, perm4);
}

/* convolution / convolution_overrideable (input, weight, bias?, stride,
 * padding, dilation, transposed, output_padding, groups). */
tpuc_status *nn_convolution(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0), w = lx_tensor(cx, 1);
  int r = lo_rank(g, x);
  if (r < 3 || r > NSP + 2 || lo_rank(g, w) != r)
    return lx_unimplemented(cx, "only 1-D, 2-D and 3-D batched convolutions");
  conv_params p;
  conv_read(cx, 3, r, &p);
  tpuc_dtype d = ot.dtype, cd = lx_compute_dtype(d);
  x = as_2d(g, ir_convert(g, x, d));
  w = as_2d(g, ir_convert(g, w, d));
  tv y = p.transposed ? conv_tr(g, x, w, &p, cd) : conv_fwd(g, x, w, &p, cd);
  if (!lx_is_none(cx, 2)) {
    tv b = ir_convert(g, lx_tensor(cx, 2), cd);
    y = ir_binary(g, IR_ADD, y, nn_chan(g, b, ir_type_of(g, y)));
  }
  cx->results[0] = lo_fit(g, y, ot);
  return NULL;
}

/* The convolution backward: stride at argument a (then padding, dilation,
 * transposed, output_padding, groups), output_mask at a + 6. */
static tpuc_status *conv_backward(tpuc_lower_ctx *cx, int a) {
  ir_graph *g = cx->g;
  tv dy = lx_tensor(cx, 0), x = lx_tensor(cx, 1), w = lx_tensor(cx, 2);
  int r = lo_rank(g, x);
  if (r < 3 || r > NSP + 2 || lo_rank(g, w) != r || lo_rank(g, dy) != r)
    return lx_unimplemented(cx, "only 1-D, 2-D and 3-D batched convolutions");
  conv_params p;
  conv_read(cx, a, r, &p);
  tpuc_dtype d = ir_type_of(g, x).dtype, cd = lx_compute_dtype(d);
  dy = as_2d(g, ir_convert(g, dy, d));
  x = as_2d(g, x);
  w = as_2d(g, ir_convert(g, w, d));
  ir_type xt = ir_type_of(g, x), wt = ir_type_of(g, w), yt = ir_type_of(g, dy);
  int64_t k[NSP];
  for (int i = 0; i < p.nsp; i++) k[i] = wt.dims[2 + i];
  tv vals[3] = {IR_NONE, IR_NONE, IR_NONE};
  if (nn_mask(cx, a + 6, 0)) {
    if (p.transposed) {
      /* a plain convolution of dy; output_padding may reach past a stride
       * (it need only be below stride or dilation), which would give
       * floor(outpad / stride) extra outputs: trim them off the high side */
      int64_t pad[2 * NSP], one[NSP];
      for (int i = 0; i < p.nsp; i++) {
        pad[2 * i] = p.pad[i];
        pad[2 * i + 1] = p.pad[i] - p.stride[i] * (p.outpad[i] / p.stride[i]);
        one[i] = 1;
      }
      vals[0] = conv(g, dy, w, &p, p.stride, pad, one, p.dil, cd);
    } else {
      conv_params q = p;
      for (int i = 0; i < p.nsp; i++)
        q.outpad[i] = xt.dims[2 + i] - ((yt.dims[2 + i] - 1) * p.stride[i] - 2 * p.pad[i] +
                                        p.dil[i] * (k[i] - 1) + 1);
      vals[0] = conv_tr(g, dy, w, &q, cd);
    }
  }
  if (nn_mask(cx, a + 6, 1))
    vals[1] = p.transposed ? conv_wgrad(g, dy, x, k, &p, cd) : conv_wgrad(g, x, dy, k, &p, cd);
  if (nn_mask(cx, a + 6, 2)) vals[2] = lo_sum_except(g, ir_convert(g, dy, cd), 1);
  return nn_set_masked(cx, a + 6, vals);
}

/* convolution_backward(grad_output, input, weight, bias_sizes?, stride,
 * padding, dilation, transposed, output_padding, groups, output_mask). */
tpuc_status *nn_convolution_backward(tpuc_lower_ctx *cx) { return conv_backward(cx, 4); }

/* convolution_backward_overrideable: the same without bias_sizes. */
tpuc_status *nn_convolution_backward_overrideable(tpuc_lower_ctx *cx) {
  return conv_backward(cx, 3);
}

/* ---- pooling ---- */

typedef struct {
  int64_t k[2], s[2], p[2], d[2];
} pool_params;

/* kernel at a, stride at a+1 (empty: the kernel), padding at a+2, and
 * dilation at a+3 when dil. */
static void pool_read(const tpuc_lower_ctx *cx, int a, bool dil, pool_params *p) {
  for (int i = 0; i < 2; i++) {
    p->k[i] = lo_ints_at(cx, a, i, 1);
    p->s[i] = lo_ints_at(cx, a + 1, i, p->k[i]);
    p->p[i] = lo_ints_at(cx, a + 2, i, 0);
    p->d[i] = dil ? lo_ints_at(cx, a + 3, i, 1) : 1;
  }
}

/* A [C, H, W] value as [1, C, H, W]. */
static tv as_4d(ir_graph *g, tv x) {
  ir_type t = ir_type_of(g, x);
  if (t.ndim != 3) return x;
  int64_t d[4] = {1, t.dims[0], t.dims[1], t.dims[2]};
  return ir_reshape(g, x, 4, d);
}

/* max_pool2d_with_indices(self, kernel_size, stride, padding, dilation,
 * ceil_mode) -> (out, indices): the window's elements are visited in order,
 * keeping the first maximum (a NaN wins), as PyTorch's CPU kernel does. */
tpuc_status *nn_max_pool2d(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = as_4d(g, lx_tensor(cx, 0));
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim != 4) return lx_unimplemented(cx, "max_pool2d input rank");
  if (ir_numel(&ot) == 0 || ir_numel(&xt) == 0) return nn_zeros(cx);
  pool_params p;
  pool_read(cx, 1, true, &p);
  int64_t o[2] = {ot.dims[ot.ndim - 2], ot.dims[ot.ndim - 1]};
  int64_t h[2] = {xt.dims[2], xt.dims[3]};
  int64_t lo[4] = {0, 0, p.p[0], p.p[1]}, hi[4] = {0, 0, 0, 0};
  for (int i = 0; i < 2; i++) {
    int64_t need = (o[i] - 1) * p.s[i] + p.d[i] * (p.k[i] - 1) + 1 - h[i] - p.p[i];
    hi[2 + i] = need > 0 ? need : 0;
  }
  tpuc_dtype dt = xt.dtype;
  tv xp = ir_pad(g, x, lo_init(g, dt, IR_RED_MAX), lo, hi, NULL);
  /* flat input positions, -1 in the padding */
  ir_type pt = ir_make_type(TPUC_S64, 2, h);
  tv pos = ir_binary(g, IR_ADD, ir_binary(g, IR_MUL, ir_iota(g, pt, 0), ir_splat_i64(g, pt, h[1])),
                     ir_iota(g, pt, 1));
  pos = ir_pad(g, pos, ir_splat_i64(g, ir_scalar_type(TPUC_S64), -1), lo + 2, hi + 2, NULL);
  ir_type rt = ir_make_type(dt, 4, (int64_t[4]){xt.dims[0], xt.dims[1], o[0], o[1]});
  ir_type it = ir_with_dtype(rt, TPUC_S64);
  /* -inf only exists in float types: an integer constant -inf is an emit error */
  tv best = ir_is_float(dt) ? ir_splat(g, rt, -INFINITY)
                            : ir_broadcast_in_dim(g, lo_init(g, dt, IR_RED_MAX), rt, NULL);
  tv bidx = ir_splat_i64(g, it, -1);
  int64_t bd2[2] = {2, 3};
  for (int64_t kh = 0; kh < p.k[0]; kh++)
    for (int64_t kw = 0; kw < p.k[1]; kw++) {
      int64_t st[4] = {0, 0, kh * p.d[0], kw * p.d[1]};
      int64_t lim[4] = {xt.dims[0], xt.dims[1], st[2] + (o[0] - 1) * p.s[0] + 1,
                        st[3] + (o[1] - 1) * p.s[1] + 1};
      int64_t str[4] = {1, 1, p.s[0], p.s[1]};
      tv v = ir_slice(g, xp, st, lim, str);
      tv ci = ir_broadcast_in_dim(g, ir_slice(g, pos, st + 2, lim + 2, str + 2), it, bd2);
      tv valid = ir_compare(g, IR_GE, ci, ir_splat_i64(g, it, 0));
      tv better = ir_binary(g, IR_OR, ir_compare(g, IR_GT, v, best), ir_compare(g, IR_NE, v, v));
      better = ir_binary(g, IR_OR, better, ir_compare(g, IR_LT, bidx, ir_splat_i64(g, it, 0)));
      tv upd = ir_binary(g, IR_AND, valid, better);
      best = ir_select(g, upd, v, best);
      bidx = ir_select(g, upd, ci, bidx);
    }
  cx->results[0] = lo_fit(g, best, ot);
  if (cx->noutputs > 1) cx->results[1] = lo_fit(g, bidx, lx_out(cx, 1));
  return NULL;
}

/* max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride,
 * padding, dilation, ceil_mode, indices): gradients summed into the
 * positions the forward picked. */
tpuc_status *nn_max_pool2d_backward(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = as_4d(g, lx_tensor(cx, 1));
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim != 4) return lx_unimplemented(cx, "max_pool2d input rank");
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  tv gy = ir_convert(g, lx_tensor(cx, 0), cd);
  tv idx = ir_convert(g, lx_tensor(cx, 7), TPUC_S64);
  int64_t nc = xt.dims[0] * xt.dims[1], hw = xt.dims[2] * xt.dims[3];
  int64_t m = ir_numel(ir_typeof(g, idx)) / (nc ? nc : 1);
  if (nc == 0 || m == 0 || hw == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  int64_t fd[2] = {nc, m}, zd[2] = {nc, hw};
  tv acc = lo_scatter_add_rows(g, ir_splat(g, ir_make_type(cd, 2, zd), 0.0),
                               ir_reshape(g, idx, 2, fd), ir_reshape(g, gy, 2, fd));
  cx->results[0] = lo_fit(g, acc, ot);
  return NULL;
}

/* The divisor of each average-pooling window along one dim, [o] in cd. */
static tv avg_divisor(ir_graph *g, int64_t o, int64_t h, int64_t k, int64_t s, int64_t p,
                      bool include_pad, tpuc_dtype cd) {
  ir_type t = ir_make_type(TPUC_S64, 1, &o);
  tv start = ir_binary(g, IR_SUB, ir_binary(g, IR_MUL, ir_iota(g, t, 0), ir_splat_i64(g, t, s)),
                       ir_splat_i64(g, t, p));
  tv end = ir_binary(g, IR_MIN, ir_binary(g, IR_ADD, start, ir_splat_i64(g, t, k)),
                     ir_splat_i64(g, t, h + p));
  if (!include_pad) {
    start = ir_binary(g, IR_MAX, start, ir_splat_i64(g, t, 0));
    end = ir_binary(g, IR_MIN, end, ir_splat_i64(g, t, h));
  }
  return ir_convert(g, ir_binary(g, IR_SUB, end, start), cd);
}

/* The divisors of avg_pool2d as [o0, o1] in cd. Args from `a`: ceil_mode,
 * count_include_pad, divisor_override. */
static tv avg_divisors(const tpuc_lower_ctx *cx, int a, const pool_params *p, const int64_t *h,
                       const int64_t *o, tpuc_dtype cd) {
  ir_graph *g = cx->g;
  ir_type t = ir_make_type(cd, 2, o);
  if (!lx_is_none(cx, a + 2)) return ir_splat(g, t, (double)lx_int(cx, a + 2, 1));
  bool inc = lx_bool(cx, a + 1, true);
  tv d0 = avg_divisor(g, o[0], h[0], p->k[0], p->s[0], p->p[0], inc, cd);
  tv d1 = avg_divisor(g, o[1], h[1], p->k[1], p->s[1], p->p[1], inc, cd);
  int64_t b0 = 0, b1 = 1;
  return ir_binary(g, IR_MUL, ir_broadcast_in_dim(g, d0, t, &b0), ir_broadcast_in_dim(g, d1, t, &b1));
}

/* avg_pool2d(self, kernel_size, stride, padding, ceil_mode,
 * count_include_pad, divisor_override?). */
tpuc_status *nn_avg_pool2d(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = as_4d(g, lx_tensor(cx, 0));
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim != 4) return lx_unimplemented(cx, "avg_pool2d input rank");
  if (ir_numel(&ot) == 0 || ir_numel(&xt) == 0) return nn_zeros(cx);
  pool_params p;
  pool_read(cx, 1, false, &p);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  int64_t o[2] = {ot.dims[ot.ndim - 2], ot.dims[ot.ndim - 1]}, h[2] = {xt.dims[2], xt.dims[3]};
  x = ir_convert(g, x, cd);
  int64_t pad[8] = {0, 0, 0, 0, p.p[0], 0, p.p[1], 0};
  int64_t st[4] = {0, 0, 0, 0}, lim[4] = {xt.dims[0], xt.dims[1], h[0], h[1]};
  for (int i = 0; i < 2; i++) {
    int64_t hi = (o[i] - 1) * p.s[i] + p.k[i] - h[i] - p.p[i];
    if (hi < 0) lim[2 + i] += hi; /* trailing rows no window reaches */
    pad[4 + 2 * i + 1] = hi > 0 ? hi : 0;
  }
  x = ir_slice(g, x, st, lim, NULL);
  int64_t win[4] = {1, 1, p.k[0], p.k[1]}, str[4] = {1, 1, p.s[0], p.s[1]};
  tv sum = ir_reduce_window(g, x, lo_const(g, cd, 0.0), IR_RED_SUM, win, str, pad);
  tv div = avg_divisors(cx, 4, &p, h, o, cd);
  tv y = lo_bin(g, IR_DIV, sum, div);
  cx->results[0] = lo_fit(g, y, ot);
  return NULL;
}

/* avg_pool2d_backward(grad_output, self, kernel_size, stride, padding,
 * ceil_mode, count_include_pad, divisor_override?): each output's gradient
 * spread over its window (a dilated sum over the padded input), the padding
 * cut away. */
tpuc_status *nn_avg_pool2d_backward(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = as_4d(g, lx_tensor(cx, 1));
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim != 4) return lx_unimplemented(cx, "avg_pool2d input rank");
  if (ir_numel(&ot) == 0 || ir_numel(&xt) == 0) return nn_zeros(cx);
  pool_params p;
  pool_read(cx, 2, false, &p);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  tv gy = as_4d(g, ir_convert(g, lx_tensor(cx, 0), cd));
  ir_type yt = ir_type_of(g, gy);
  int64_t o[2] = {yt.dims[2], yt.dims[3]}, h[2] = {xt.dims[2], xt.dims[3]};
  gy = lo_bin(g, IR_DIV, gy, avg_divisors(cx, 5, &p, h, o, cd));
  int64_t lo[4] = {0, 0, p.k[0] - 1, p.k[1] - 1}, hi[4] = {0, 0, 0, 0}, in[4] = {0, 0, 0, 0};
  for (int i = 0; i < 2; i++) {
    int64_t covered = (o[i] - 1) * p.s[i] + p.k[i];
    hi[2 + i] = p.k[i] - 1 + (p.p[i] + h[i] > covered ? p.p[i] + h[i] - covered : 0);
    in[2 + i] = p.s[i] - 1;
  }
  tv dil = ir_pad(g, gy, lo_const(g, cd, 0.0), lo, hi, in);
  int64_t win[4] = {1, 1, p.k[0], p.k[1]};
  tv spread = ir_reduce_window(g, dil, lo_const(g, cd, 0.0), IR_RED_SUM, win, NULL, NULL);
  int64_t st[4] = {0, 0, p.p[0], p.p[1]};
  int64_t lim[4] = {xt.dims[0], xt.dims[1], p.p[0] + h[0], p.p[1] + h[1]};
  cx->results[0] = lo_fit(g, ir_slice(g, spread, st, lim, NULL), ot);
  return NULL;
}

/* The 0/1 matrix [o, h] of adaptive pooling windows along one dim (window
 * i covers floor(i*h/o) .. ceil((i+1)*h/o)), and the window sizes [o]. */
static tv adaptive_matrix(ir_graph *g, int64_t o, int64_t h, tpuc_dtype cd, tv *sizes) {
  int64_t d[2] = {o, h};
  ir_type t = ir_make_type(TPUC_S64, 2, d), t1 = ir_make_type(TPUC_S64, 1, &o);
  tv i = ir_iota(g, t1, 0);
  tv start = ir_binary(g, IR_DIV, ir_binary(g, IR_MUL, i, ir_splat_i64(g, t1, h)),
                       ir_splat_i64(g, t1, o));
  tv ip1 = ir_binary(g, IR_ADD, i, ir_splat_i64(g, t1, 1));
  tv end = ir_binary(g, IR_DIV,
                     ir_binary(g, IR_ADD, ir_binary(g, IR_MUL, ip1, ir_splat_i64(g, t1, h)),
                               ir_splat_i64(g, t1, o - 1)),
                     ir_splat_i64(g, t1, o));
  *sizes = ir_convert(g, ir_binary(g, IR_SUB, end, start), cd);
  int64_t b0 = 0;
  tv col = ir_iota(g, t, 1);
  tv in = ir_binary(g, IR_AND, ir_compare(g, IR_GE, col, ir_broadcast_in_dim(g, start, t, &b0)),
                    ir_compare(g, IR_LT, col, ir_broadcast_in_dim(g, end, t, &b0)));
  return ir_convert(g, in, cd);
}

/* x [N, C, A, B] contracted with m0 [*, A] and m1 [*, B] along dims 2 and 3
 * (mdim: which dim of the matrices is contracted). */
static tv apply_2(ir_graph *g, tv x, tv m0, tv m1, int64_t mdim) {
  int64_t c3 = 3, c2 = 2, perm[4] = {0, 1, 3, 2};
  tpuc_dtype cd = lo_dtype(g, x);
  tv t = ir_dot_general(g, x, m1, NULL, NULL, 0, &c3, &mdim, 1, cd); /* [N, C, A, b] */
  t = ir_dot_general(g, t, m0, NULL, NULL, 0, &c2, &mdim, 1, cd);    /* [N, C, b, a] */
  return ir_transpose(g, t, perm);
}

/* _adaptive_avg_pool2d / adaptive_avg_pool2d.out (self, output_size). */
tpuc_status *nn_adaptive_avg_pool2d(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = as_4d(g, lx_tensor(cx, 0));
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim != 4) return lx_unimplemented(cx, "adaptive pool input");
  if (ir_numel(&ot) == 0 || ir_numel(&xt) == 0) return nn_zeros(cx);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  int64_t o0 = ot.dims[ot.ndim - 2], o1 = ot.dims[ot.ndim - 1];
  tv s0, s1;
  tv m0 = adaptive_matrix(g, o0, xt.dims[2], cd, &s0), m1 = adaptive_matrix(g, o1, xt.dims[3], cd, &s1);
  tv y = apply_2(g, ir_convert(g, x, cd), m0, m1, 1);
  ir_type yt = ir_type_of(g, y);
  int64_t b2 = 2, b3 = 3;
  y = ir_binary(g, IR_DIV, y, ir_broadcast_in_dim(g, s0, yt, &b2));
  y = ir_binary(g, IR_DIV, y, ir_broadcast_in_dim(g, s1, yt, &b3));
  cx->results[0] = lo_fit(g, y, ot);
  return NULL;
}

/* _adaptive_avg_pool2d_backward(grad_output, self). */
tpuc_status *nn_adaptive_avg_pool2d_backward(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = as_4d(g, lx_tensor(cx, 1));
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim != 4) return lx_unimplemented(cx, "adaptive pool input");
  if (ir_numel(&ot) == 0 || ir_numel(&xt) == 0) return nn_zeros(cx);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  tv gy = as_4d(g, ir_convert(g, lx_tensor(cx, 0), cd));
  ir_type yt = ir_type_of(g, gy);
  tv s0, s1;
  tv m0 = adaptive_matrix(g, yt.dims[2], xt.dims[2], cd, &s0);
  tv m1 = adaptive_matrix(g, yt.dims[3], xt.dims[3], cd, &s1);
  int64_t b2 = 2, b3 = 3;
  gy = ir_binary(g, IR_DIV, gy, ir_broadcast_in_dim(g, s0, yt, &b2));
  gy = ir_binary(g, IR_DIV, gy, ir_broadcast_in_dim(g, s1, yt, &b3));
  cx->results[0] = lo_fit(g, apply_2(g, gy, m0, m1, 0), ot);
  return NULL;
}
