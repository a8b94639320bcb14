/* nn_norm.c — normalization layers: native_layer_norm and its backward,
 * batch norm in all of ATen's forms (native_batch_norm,
 * _native_batch_norm_legit[_no_training], _batch_norm_with_update[_functional],
 * _batch_norm_no_update) with running-statistic updates, their backward, and
 * group norm. Statistics are computed in f32 for f16/bf16 inputs, as
 * PyTorch's CPU kernels do; eps and momentum are runtime scalars. */
#include "nn.h"

/* Mean and biased variance of x over `dims`, kept as size-1 dims. */
static void moments(ir_graph *g, tv x, const int64_t *dims, int n, tv *mean, tv *var) {
  ir_type t = ir_type_of(g, x);
  double count = 1;
  for (int i = 0; i < n; i++) count *= (double)t.dims[dims[i]];
  *mean = lo_binc(g, IR_DIV, lo_sum(g, x, dims, n, true), count);
  tv xc = lo_bin(g, IR_SUB, x, *mean);
  *var = lo_binc(g, IR_DIV, lo_sum(g, ir_binary(g, IR_MUL, xc, xc), dims, n, true), count);
}

static tv rsqrt_eps(ir_graph *g, tv var, tv eps) {
  return ir_unary(g, IR_RSQRT, lo_bin(g, IR_ADD, var, eps));
}

/* An optional tensor argument converted to dtype d, or IR_NONE. */
static tv opt_tensor(const tpuc_lower_ctx *cx, int i, tpuc_dtype d) {
  return lx_is_none(cx, i) ? IR_NONE : ir_convert(cx->g, lx_tensor(cx, i), d);
}

/* ---- layer norm ---- */

/* native_layer_norm(input, normalized_shape, weight?, bias?, eps) ->
 * (out, mean, rstd). */
tpuc_status *nn_layer_norm(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  const int64_t *ns;
  int nn = lx_ints(cx, 1, &ns);
  int axis = xt.ndim - nn;
  if (nn < 0 || axis < 0) return lx_unimplemented(cx, "bad normalized_shape");
  tpuc_dtype cd = lx_compute_dtype(xt.dtype);
  x = ir_convert(g, x, cd);
  int64_t dims[TPUC_MAX_DIMS];
  for (int i = 0; i < nn; i++) dims[i] = axis + i;
  tv mean, var;
  moments(g, x, dims, nn, &mean, &var);
  tv rstd = rsqrt_eps(g, var, lx_scalar(cx, 4, cd));
  tv y = lo_bin(g, IR_MUL, lo_bin(g, IR_SUB, x, mean), rstd);
  tv w = opt_tensor(cx, 2, cd), b = opt_tensor(cx, 3, cd);
  if (w != IR_NONE) y = lo_bin(g, IR_MUL, y, w);
  if (b != IR_NONE) y = lo_bin(g, IR_ADD, y, b);
  cx->results[0] = lo_out(g, y, lx_out(cx, 0));
  if (cx->noutputs > 2) {
    cx->results[1] = lo_fit(g, mean, lx_out(cx, 1));
    cx->results[2] = lo_fit(g, rstd, lx_out(cx, 2));
  }
  return NULL;
}

/* native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd,
 * weight?, bias?, output_mask) -> (grad_input, grad_weight, grad_bias). */
tpuc_status *nn_layer_norm_backward(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, 1);
  ir_type xt = ir_type_of(g, x);
  const int64_t *ns;
  int nn = lx_ints(cx, 2, &ns);
  int axis = xt.ndim - nn;
  if (nn < 0 || axis < 0) return lx_unimplemented(cx, "bad normalized_shape");
  tpuc_dtype cd = lx_compute_dtype(xt.dtype);
  x = ir_convert(g, x, cd);
  tv gy = ir_convert(g, lx_tensor(cx, 0), cd);
  tv mean = ir_convert(g, lx_tensor(cx, 3), cd), rstd = ir_convert(g, lx_tensor(cx, 4), cd);
  /* mean/rstd may come flattened: give them the kept-dims shape */
  ir_type kt = xt;
  for (int i = axis; i < xt.ndim; i++) kt.dims[i] = 1;
  mean = ir_reshape(g, mean, kt.ndim, kt.dims);
  rstd = ir_reshape(g, rstd, kt.ndim, kt.dims);
  tv xhat = lo_bin(g, IR_MUL, lo_bin(g, IR_SUB, x, mean), rstd);
  int64_t nd[TPUC_MAX_DIMS], bd[TPUC_MAX_DIMS];
  double count = 1;
  for (int i = 0; i < nn; i++) {
    nd[i] = axis + i;
    count *= (double)xt.dims[axis + i];
  }
  for (int i = 0; i < axis; i++) bd[i] = i;
  tv vals[3] = {IR_NONE, IR_NONE, IR_NONE};
  if (nn_mask(cx, 7, 0)) {
    tv w = opt_tensor(cx, 5, cd);
    tv gw = w != IR_NONE ? lo_bin(g, IR_MUL, gy, w) : gy;
    tv a = lo_binc(g, IR_DIV, lo_sum(g, gw, nd, nn, true), count);
    tv b = lo_binc(g, IR_DIV, lo_sum(g, ir_binary(g, IR_MUL, gw, xhat), nd, nn, true), count);
    tv inner = lo_bin(g, IR_SUB, lo_bin(g, IR_SUB, gw, a), lo_bin(g, IR_MUL, xhat, b));
    vals[0] = lo_bin(g, IR_MUL, inner, rstd);
  }
  if (nn_mask(cx, 7, 1)) vals[1] = lo_sum(g, ir_binary(g, IR_MUL, gy, xhat), bd, axis, false);
  if (nn_mask(cx, 7, 2)) vals[2] = lo_sum(g, gy, bd, axis, false);
  return nn_set_masked(cx, 7, vals);
}

/* ---- batch norm ---- */

typedef struct {
  int rm, rv;       /* running mean/var arguments, -1: none */
  int training;     /* 0 / 1, or -1: read from argument train_arg */
  int train_arg;
  int mom, eps;     /* scalar arguments */
  int run_out;      /* first of the two running-stat outputs, -1: none */
  int reserve_out;  /* an empty `reserve` output, -1: none */
} bn_spec;

static tpuc_status *bn_forward(tpuc_lower_ctx *cx, const bn_spec *s) {
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim < 2) return lx_unimplemented(cx, "batch norm of rank < 2");
  tpuc_dtype cd = lx_compute_dtype(xt.dtype);
  x = ir_convert(g, x, cd);
  ir_type ct = ir_with_dtype(xt, cd);
  bool has_run = s->rm >= 0 && !lx_is_none(cx, s->rm) && !lx_is_none(cx, s->rv);
  bool training = s->training >= 0 ? s->training != 0 : lx_bool(cx, s->train_arg, true);
  if (s->training < 0 && s->train_arg < 0) training = !has_run; /* _batch_norm_no_update */
  if (!training && !has_run) return lx_unimplemented(cx, "eval batch norm without running stats");
  tv eps = lx_scalar(cx, s->eps, cd);
  tv rm = has_run ? ir_convert(g, lx_tensor(cx, s->rm), cd) : IR_NONE;
  tv rv = has_run ? ir_convert(g, lx_tensor(cx, s->rv), cd) : IR_NONE;
  int64_t dims[TPUC_MAX_DIMS];
  int nd = 0;
  for (int i = 0; i < xt.ndim; i++)
    if (i != 1) dims[nd++] = i;
  double n = (double)(ir_numel(&xt) / (xt.dims[1] ? xt.dims[1] : 1));
  tv mean, var, invstd;
  if (training) {
    moments(g, x, dims, nd, &mean, &var);
    int64_t c = xt.dims[1];
    mean = ir_reshape(g, mean, 1, &c);
    var = ir_reshape(g, var, 1, &c);
  } else {
    mean = rm;
    var = rv;
  }
  invstd = rsqrt_eps(g, var, eps);
  tv y = ir_binary(g, IR_MUL, ir_binary(g, IR_SUB, x, nn_chan(g, mean, ct)), nn_chan(g, invstd, ct));
  tv w = opt_tensor(cx, 1, cd), b = opt_tensor(cx, 2, cd);
  if (w != IR_NONE) y = ir_binary(g, IR_MUL, y, nn_chan(g, w, ct));
  if (b != IR_NONE) y = ir_binary(g, IR_ADD, y, nn_chan(g, b, ct));
  cx->results[0] = lo_out(g, y, lx_out(cx, 0));
  for (int i = 1; i <= 2 && i < cx->noutputs; i++) {
    ir_type t = lx_out(cx, i);
    /* eval: PyTorch's CPU returns save_mean/save_invstd empty, and leaves
     * out= ones (the arguments after eps) as they were */
    const tpuc_tensor *given = training ? NULL : lx_tensor_desc(cx, s->eps + 1 + i);
    if (given)
      cx->results[i] = lo_fit(g, lx_tensor(cx, s->eps + 1 + i), t);
    else
      cx->results[i] = ir_numel(&t) == 0 ? ir_splat(g, t, 0.0) : lo_fit(g, i == 1 ? mean : invstd, t);
  }
  if (s->reserve_out >= 0 && s->reserve_out < cx->noutputs)
    cx->results[s->reserve_out] = ir_splat(g, lx_out(cx, s->reserve_out), 0.0);
  if (s->run_out >= 0 && s->run_out + 1 < cx->noutputs) {
    if (!has_run) return lx_unimplemented(cx, "running-stat outputs without running stats");
    tv new_m = rm, new_v = rv;
    if (training) {
      tv m = lx_scalar(cx, s->mom, cd);
      tv one_m = ir_binary(g, IR_SUB, lo_const(g, cd, 1.0), m);
      tv unbiased = lo_binc(g, IR_MUL, var, n / (n > 1 ? n - 1 : 0.0));
      new_m = lo_bin(g, IR_ADD, lo_bin(g, IR_MUL, rm, one_m), lo_bin(g, IR_MUL, mean, m));
      new_v = lo_bin(g, IR_ADD, lo_bin(g, IR_MUL, rv, one_m), lo_bin(g, IR_MUL, unbiased, m));
    }
    cx->results[s->run_out] = lo_fit(g, new_m, lx_out(cx, s->run_out));
    cx->results[s->run_out + 1] = lo_fit(g, new_v, lx_out(cx, s->run_out + 1));
  }
  return NULL;
}

/* native_batch_norm / _native_batch_norm_legit (input, weight?, bias?,
 * running_mean?, running_var?, training, momentum, eps); outputs 3 and 4,
 * when given, receive the updated running statistics. */
tpuc_status *nn_batch_norm(tpuc_lower_ctx *cx) {
  bn_spec s = {3, 4, -1, 5, 6, 7, 3, -1};
  return bn_forward(cx, &s);
}

/* _native_batch_norm_legit.no_stats(input, weight?, bias?, training, momentum, eps). */
tpuc_status *nn_batch_norm_legit_no_stats(tpuc_lower_ctx *cx) {
  bn_spec s = {-1, -1, -1, 3, 4, 5, -1, -1};
  return bn_forward(cx, &s);
}

/* _native_batch_norm_legit_no_training(input, weight?, bias?, running_mean,
 * running_var, momentum, eps). */
tpuc_status *nn_batch_norm_no_training(tpuc_lower_ctx *cx) {
  bn_spec s = {3, 4, 0, -1, 5, 6, -1, -1};
  return bn_forward(cx, &s);
}

/* _batch_norm_with_update[_functional](input, weight?, bias?, running_mean,
 * running_var, momentum, eps) -> (out, save_mean, save_invstd, reserve,
 * running_mean, running_var). */
tpuc_status *nn_batch_norm_with_update(tpuc_lower_ctx *cx) {
  bn_spec s = {3, 4, 1, -1, 5, 6, 4, 3};
  return bn_forward(cx, &s);
}

/* _batch_norm_no_update(input, weight?, bias?, running_mean?, running_var?,
 * momentum, eps): running stats when given, else batch stats. */
tpuc_status *nn_batch_norm_no_update(tpuc_lower_ctx *cx) {
  bn_spec s = {3, 4, -1, -1, 5, 6, -1, 3};
  return bn_forward(cx, &s);
}

/* native_batch_norm_backward / batch_norm_backward (grad_out, input,
 * weight?, running_mean?, running_var?, save_mean?, save_invstd?, train,
 * eps, output_mask[, reserve]). */
tpuc_status *nn_batch_norm_backward(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, 1);
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim < 2) return lx_unimplemented(cx, "batch norm of rank < 2");
  tpuc_dtype cd = lx_compute_dtype(xt.dtype);
  ir_type ct = ir_with_dtype(xt, cd);
  x = ir_convert(g, x, cd);
  tv gy = ir_convert(g, lx_tensor(cx, 0), cd);
  bool train = lx_bool(cx, 7, true);
  tv mean, invstd;
  if (train) {
    if (lx_is_none(cx, 5) || lx_is_none(cx, 6)) return lx_unimplemented(cx, "no saved stats");
    mean = ir_convert(g, lx_tensor(cx, 5), cd);
    invstd = ir_convert(g, lx_tensor(cx, 6), cd);
  } else {
    if (lx_is_none(cx, 3) || lx_is_none(cx, 4)) return lx_unimplemented(cx, "no running stats");
    mean = ir_convert(g, lx_tensor(cx, 3), cd);
    invstd = rsqrt_eps(g, ir_convert(g, lx_tensor(cx, 4), cd), lx_scalar(cx, 8, cd));
  }
  tv w = opt_tensor(cx, 2, cd);
  tv xhat = ir_binary(g, IR_MUL, ir_binary(g, IR_SUB, x, nn_chan(g, mean, ct)), nn_chan(g, invstd, ct));
  double n = (double)(ir_numel(&xt) / (xt.dims[1] ? xt.dims[1] : 1));
  tv sum_g = lo_sum_except(g, gy, 1);
  tv sum_gx = lo_sum_except(g, ir_binary(g, IR_MUL, gy, xhat), 1);
  tv vals[3] = {IR_NONE, IR_NONE, IR_NONE};
  if (nn_mask(cx, 9, 0)) {
    tv scale = w != IR_NONE ? ir_binary(g, IR_MUL, invstd, w) : invstd;
    tv dx = gy;
    if (train) {
      tv a = nn_chan(g, lo_binc(g, IR_DIV, sum_g, n), ct);
      tv b = nn_chan(g, lo_binc(g, IR_DIV, sum_gx, n), ct);
      dx = ir_binary(g, IR_SUB, ir_binary(g, IR_SUB, gy, a), ir_binary(g, IR_MUL, xhat, b));
    }
    vals[0] = ir_binary(g, IR_MUL, dx, nn_chan(g, scale, ct));
  }
  vals[1] = nn_mask(cx, 9, 1) ? sum_gx : IR_NONE;
  vals[2] = nn_mask(cx, 9, 2) ? sum_g : IR_NONE;
  return nn_set_masked(cx, 9, vals);
}

/* ---- group norm ---- */

/* native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) ->
 * (out, mean [N, G], rstd [N, G]). */
tpuc_status *nn_group_norm(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  int64_t n = lx_int(cx, 3, 0), c = lx_int(cx, 4, 0), hw = lx_int(cx, 5, 0), G = lx_int(cx, 6, 1);
  if (G < 1 || c % G || n * c * hw != ir_numel(&xt) || n * c * hw == 0)
    return lx_unimplemented(cx, "group norm shapes");
  tpuc_dtype cd = lx_compute_dtype(xt.dtype);
  int64_t gd[3] = {n, G, c / G * hw}, cdims[3] = {n, c, hw}, two = 2;
  tv xr = ir_reshape(g, ir_convert(g, x, cd), 3, gd);
  tv mean, var;
  moments(g, xr, &two, 1, &mean, &var);
  tv rstd = rsqrt_eps(g, var, lx_scalar(cx, 7, cd));
  tv y = lo_bin(g, IR_MUL, lo_bin(g, IR_SUB, xr, mean), rstd);
  y = ir_reshape(g, y, 3, cdims);
  ir_type yt = ir_type_of(g, y);
  tv w = opt_tensor(cx, 1, cd), b = opt_tensor(cx, 2, cd);
  if (w != IR_NONE) y = ir_binary(g, IR_MUL, y, nn_chan(g, w, yt));
  if (b != IR_NONE) y = ir_binary(g, IR_ADD, y, nn_chan(g, b, yt));
  cx->results[0] = lo_fit(g, y, lx_out(cx, 0));
  if (cx->noutputs > 2) {
    cx->results[1] = lo_fit(g, mean, lx_out(cx, 1));
    cx->results[2] = lo_fit(g, rstd, lx_out(cx, 2));
  }
  return NULL;
}

/* native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C,
 * HxW, group, output_mask). */
tpuc_status *nn_group_norm_backward(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, 1);
  ir_type xt = ir_type_of(g, x);
  int64_t n = lx_int(cx, 5, 0), c = lx_int(cx, 6, 0), hw = lx_int(cx, 7, 0), G = lx_int(cx, 8, 1);
  if (G < 1 || c % G || n * c * hw != ir_numel(&xt) || n * c * hw == 0)
    return lx_unimplemented(cx, "group norm shapes");
  tpuc_dtype cd = lx_compute_dtype(xt.dtype);
  int64_t gd[3] = {n, G, c / G * hw}, cdims[3] = {n, c, hw}, kd[3] = {n, G, 1}, two = 2;
  double d = (double)(c / G * hw);
  tv xr = ir_reshape(g, ir_convert(g, x, cd), 3, gd);
  tv gy = ir_reshape(g, ir_convert(g, lx_tensor(cx, 0), cd), 3, cdims);
  tv mean = ir_reshape(g, ir_convert(g, lx_tensor(cx, 2), cd), 3, kd);
  tv rstd = ir_reshape(g, ir_convert(g, lx_tensor(cx, 3), cd), 3, kd);
  tv xhat = lo_bin(g, IR_MUL, lo_bin(g, IR_SUB, xr, mean), rstd);
  tv w = opt_tensor(cx, 4, cd);
  tv vals[3] = {IR_NONE, IR_NONE, IR_NONE};
  if (nn_mask(cx, 9, 0)) {
    tv gw = w != IR_NONE ? ir_binary(g, IR_MUL, gy, nn_chan(g, w, ir_type_of(g, gy))) : gy;
    gw = ir_reshape(g, gw, 3, gd);
    tv a = lo_binc(g, IR_DIV, lo_sum(g, gw, &two, 1, true), d);
    tv b = lo_binc(g, IR_DIV, lo_sum(g, ir_binary(g, IR_MUL, gw, xhat), &two, 1, true), d);
    tv inner = lo_bin(g, IR_SUB, lo_bin(g, IR_SUB, gw, a), lo_bin(g, IR_MUL, xhat, b));
    vals[0] = lo_bin(g, IR_MUL, inner, rstd);
  }
  tv xh = ir_reshape(g, xhat, 3, cdims);
  int64_t rd[2] = {0, 2};
  if (nn_mask(cx, 9, 1)) vals[1] = lo_sum(g, ir_binary(g, IR_MUL, gy, xh), rd, 2, false);
  if (nn_mask(cx, 9, 2)) vals[2] = lo_sum(g, gy, rd, 2, false);
  return nn_set_masked(cx, 9, vals);
}
