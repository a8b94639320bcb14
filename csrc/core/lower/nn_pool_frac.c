/* nn_pool_frac.c — fractional_max_pool2d/3d and their backwards.
 *
 * The random part is an input (random_samples [N, C, S], drawn by the caller
 * on the device), so the op itself is deterministic. Per plane and spatial
 * dim d, the window starts are PyTorch's CPU sequence: with
 * alpha = (in - pool) / (out - 1), start[i] = (int)((i + u) * alpha) -
 * (int)(u * alpha) for i < out - 1 and in - pool for the last, computed in
 * the input's float type (f32 for f16/bf16, where the CPU rounds each step in
 * the 16-bit type). The samples' components follow the CPU: (W, H) in 2-D,
 * (T, H, W) in 3-D. fractional_max_pool3d_backward has no Meta kernel in
 * PyTorch 2.13: the glue sizes it like its self argument (fallback.cpp). The output is the window's max and
 * its flat index in the plane, the first of equal maxima (the CPU takes the
 * first too, but the last NaN where this takes the first). Windows are
 * gathered as [N, C, out..., pool...] positions; the backward scatter-adds
 * the gradient at the saved indices. Plain gathers, scatters and reductions:
 * ops a TPU compiler takes too (only the CPU plugin was run). */
#include "lower_ops.h"

/* Input [N?, C, in...] as [N, C, in...] (rank S + 2); false when the rank is not S + 1 or S + 2. */
static bool batched(ir_graph *g, tv *x, int s, bool *had_batch) {
  ir_type t = ir_type_of(g, *x);
  if (t.ndim == s + 2) {
    *had_batch = true;
    return true;
  }
  if (t.ndim != s + 1) return false;
  *had_batch = false;
  *x = lo_unsqueeze(g, *x, 0);
  return true;
}

/* The window starts of spatial dim d: s64 [N, C, out]. */
static tv starts(ir_graph *g, tv samples, int k, int64_t in, int64_t out, int64_t pool,
                 tpuc_dtype fd) {
  ir_type st = ir_type_of(g, samples);
  int64_t n = st.dims[0], c = st.dims[1];
  int64_t lo[3] = {0, 0, k}, hi[3] = {n, c, k + 1}, one[3] = {1, 1, 1};
  tv u = ir_convert(g, ir_slice(g, samples, lo, hi, one), fd); /* [N, C, 1] */
  int64_t od[3] = {n, c, out};
  ir_type it = ir_make_type(TPUC_S64, 3, od);
  tv ub = lx_broadcast_to(g, u, 3, od);
  tv last = ir_splat(g, it, (double)(in - pool));
  if (out <= 1) return last;
  double alpha_d = (double)(in - pool) / (double)(out - 1);
  tv alpha = ir_convert(g, ir_splat(g, ir_make_type(TPUC_F64, 3, od), alpha_d), fd);
  tv i = ir_convert(g, ir_iota(g, it, 2), fd);
  tv a = ir_convert(g, ir_binary(g, IR_MUL, ir_binary(g, IR_ADD, i, ub), alpha), TPUC_S64);
  tv b = ir_convert(g, ir_binary(g, IR_MUL, ub, alpha), TPUC_S64);
  tv seq = ir_binary(g, IR_SUB, a, b);
  tv is_last = ir_compare(g, IR_EQ, ir_iota(g, it, 2), ir_splat(g, it, (double)(out - 1)));
  return ir_select(g, is_last, last, seq);
}

/* Flat plane positions of every window element: s64 [N, C, out..., pool...]. */
static tv positions(ir_graph *g, tv samples, int s, const int64_t *in, const int64_t *out,
                    const int64_t *pool, tpuc_dtype fd) {
  ir_type st = ir_type_of(g, samples);
  int64_t n = st.dims[0], c = st.dims[1];
  int r = 2 + 2 * s;
  int64_t dims[TPUC_MAX_DIMS];
  dims[0] = n;
  dims[1] = c;
  for (int d = 0; d < s; d++) {
    dims[2 + d] = out[d];
    dims[2 + s + d] = pool[d];
  }
  ir_type pt = ir_make_type(TPUC_S64, r, dims);
  tv pos = ir_splat(g, pt, 0.0);
  int64_t stride = 1;
  for (int d = s - 1; d >= 0; d--) {
    /* the CPU's sample order: (W, H) in 2-D, (T, H, W) in 3-D */
    tv st_d = starts(g, samples, s == 2 ? s - 1 - d : d, in[d], out[d], pool[d], fd);
    int64_t bd[3] = {0, 1, 2 + d};
    tv sb = ir_broadcast_in_dim(g, st_d, pt, bd);
    tv coord = ir_binary(g, IR_ADD, sb, ir_iota(g, pt, 2 + s + d));
    pos = ir_binary(g, IR_ADD, pos, ir_binary(g, IR_MUL, coord, ir_splat(g, pt, (double)stride)));
    stride *= in[d];
  }
  return pos;
}

/* (self, kernel_size, output_size, random_samples) -> (output, indices). */
static tpuc_status *frac_pool(tpuc_lower_ctx *cx, int s) {
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, 0), samples = lx_tensor(cx, 3);
  bool had_batch;
  if (!batched(g, &x, s, &had_batch)) return lx_unimplemented(cx, "fractional_max_pool: rank");
  ir_type xt = ir_type_of(g, x), samt = ir_type_of(g, samples);
  if (!ir_is_float(xt.dtype)) return lx_unimplemented(cx, "fractional_max_pool: floating input");
  if (!had_batch) samples = samt.ndim == 2 ? lo_unsqueeze(g, samples, 0) : samples;
  if (ir_type_of(g, samples).ndim != 3) return lx_unimplemented(cx, "random_samples rank");
  int64_t in[3], out[3], pool[3], plane = 1, windows = 1, k = 1;
  for (int d = 0; d < s; d++) {
    in[d] = xt.dims[2 + d];
    pool[d] = lo_ints_at(cx, 1, d, 1);
    out[d] = lo_ints_at(cx, 2, d, 1);
    if (out[d] + pool[d] - 1 > in[d]) return lx_unimplemented(cx, "windows past the input");
    plane *= in[d];
    windows *= out[d];
    k *= pool[d];
  }
  ir_type o0 = lx_out(cx, 0), o1 = lx_out(cx, 1);
  int64_t nb = xt.dims[0], nc = xt.dims[1];
  if (nb * nc * windows == 0) {
    cx->results[0] = ir_splat(g, o0, 0.0);
    cx->results[1] = ir_splat(g, o1, 0.0);
    return NULL;
  }
  /* the CPU reads plane c of batch n at samples[n][c]: more samples than
   * planes (an unbatched input given [N, C, S] samples) use the first ones */
  ir_type sm = ir_type_of(g, samples);
  if (sm.dims[0] < nb || sm.dims[1] < nc || sm.dims[2] < s)
    return lx_unimplemented(cx, "fractional_max_pool: fewer random_samples than planes");
  if (sm.dims[0] != nb || sm.dims[1] != nc) {
    int64_t lo[3] = {0, 0, 0}, hi[3] = {nb, nc, sm.dims[2]}, one[3] = {1, 1, 1};
    samples = ir_slice(g, samples, lo, hi, one);
  }
  tpuc_dtype fd = xt.dtype == TPUC_F64 ? TPUC_F64 : TPUC_F32;
  tv pos = positions(g, samples, s, in, out, pool, fd);
  int64_t flat3[3] = {nb, nc, plane}, wk[3] = {nb, nc, windows * k}, w4[4] = {nb, nc, windows, k};
  tv xp = ir_reshape(g, x, 3, flat3);
  tv vals = ir_reshape(g, lo_take_along(g, xp, 2, ir_reshape(g, pos, 3, wk)), 4, w4);
  tv mx, arg;
  ir_argreduce(g, vals, 3, true, TPUC_S64, &mx, &arg);
  int64_t w4b[4] = {nb, nc, windows, 1};
  tv idx = lo_take_along(g, ir_reshape(g, pos, 4, w4), 3, ir_reshape(g, arg, 4, w4b));
  cx->results[0] = lo_out(g, ir_reshape(g, mx, o0.ndim, o0.dims), o0);
  cx->results[1] = lo_out(g, ir_reshape(g, idx, o1.ndim, o1.dims), o1);
  return NULL;
}

/* (grad_output, self, kernel_size, output_size, indices) -> grad_input. */
static tpuc_status *frac_pool_backward(tpuc_lower_ctx *cx, int s) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv go = lx_tensor(cx, 0), idx = lx_tensor(cx, 4);
  ir_type gt = ir_type_of(g, go);
  if (gt.ndim != s + 1 && gt.ndim != s + 2) return lx_unimplemented(cx, "rank");
  int64_t planes = 1, windows = 1, plane = 1;
  for (int d = 0; d < gt.ndim - s; d++) planes *= gt.dims[d];
  for (int d = gt.ndim - s; d < gt.ndim; d++) windows *= gt.dims[d];
  for (int d = ot.ndim - s; d < ot.ndim; d++) plane *= ot.dims[d];
  if (planes * windows == 0 || plane == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  tpuc_dtype acc = lx_compute_dtype(ot.dtype);
  int64_t pw[2] = {planes, windows}, pp[2] = {planes, plane};
  tv upd = ir_convert(g, ir_reshape(g, go, 2, pw), acc);
  tv at = ir_convert(g, ir_reshape(g, idx, 2, pw), TPUC_S64);
  tv gi = lo_scatter_add_rows(g, ir_splat(g, ir_make_type(acc, 2, pp), 0.0), at, upd);
  cx->results[0] = lo_out(g, ir_reshape(g, gi, ot.ndim, ot.dims), ot);
  return NULL;
}

static tpuc_status *l_frac2d(tpuc_lower_ctx *cx) { return frac_pool(cx, 2); }
static tpuc_status *l_frac3d(tpuc_lower_ctx *cx) { return frac_pool(cx, 3); }
static tpuc_status *l_frac2d_bw(tpuc_lower_ctx *cx) { return frac_pool_backward(cx, 2); }
static tpuc_status *l_frac3d_bw(tpuc_lower_ctx *cx) { return frac_pool_backward(cx, 3); }

extern const tpuc_lowering tpuc_lowerings_nn_pool_frac[];
const tpuc_lowering tpuc_lowerings_nn_pool_frac[] = {
    {"aten::fractional_max_pool2d", l_frac2d},
    {"aten::fractional_max_pool2d.output", l_frac2d},
    {"aten::fractional_max_pool3d", l_frac3d},
    {"aten::fractional_max_pool3d.output", l_frac3d},
    {"aten::fractional_max_pool2d_backward", l_frac2d_bw},
    {"aten::fractional_max_pool2d_backward.grad_input", l_frac2d_bw},
    {"aten::fractional_max_pool3d_backward", l_frac3d_bw},
    {"aten::fractional_max_pool3d_backward.grad_input", l_frac3d_bw},
    {NULL, NULL},
};
