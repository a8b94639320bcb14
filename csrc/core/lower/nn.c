/* nn.c — the nn family: softmax / log_softmax / _safe_softmax and their
 * backward, dropout (device generator), the losses (nll_loss[2d], mse,
 * binary cross-entropy with and without logits) and their backward, helpers
 * shared by nn_*.c, and the family's table. Normalization lives in
 * nn_norm.c, convolution and pooling in nn_conv.c, attention in nn_attn.c.
 * f16/bf16 compute in f32 like PyTorch's CPU kernels. */
#include "nn.h"

/* ---- shared helpers ---- */

bool nn_mask(const tpuc_lower_ctx *cx, int mask_arg, int i) {
  const int64_t *m;
  int n = lx_ints(cx, mask_arg, &m);
  return n <= i || m[i] != 0;
}

tpuc_status *nn_set_masked(tpuc_lower_ctx *cx, int mask_arg, const tv *vals) {
  int asked = 0;
  for (int i = 0; i < 3; i++) asked += nn_mask(cx, mask_arg, i);
  bool all = cx->noutputs >= 3;
  if (!all && cx->noutputs != asked) return lx_unimplemented(cx, "outputs do not match output_mask");
  int o = 0;
  for (int i = 0; i < 3 && o < cx->noutputs; i++) {
    bool want = nn_mask(cx, mask_arg, i);
    if (!want && !all) continue;
    ir_type t = lx_out(cx, o);
    if (want && vals[i] == IR_NONE) return lx_unimplemented(cx, "an asked-for gradient is undefined");
    cx->results[o++] = want ? lo_fit(cx->g, vals[i], t) : ir_splat(cx->g, t, 0.0);
  }
  return NULL;
}

tpuc_status *nn_zeros(tpuc_lower_ctx *cx) {
  for (int i = 0; i < cx->noutputs; i++) cx->results[i] = ir_splat(cx->g, lx_out(cx, i), 0.0);
  return NULL;
}

tv nn_chan(ir_graph *g, tv v, ir_type t) {
  int64_t one = 1;
  t.dtype = lo_dtype(g, v);
  return ir_broadcast_in_dim(g, v, t, &one);
}

/* ---- softmax ---- */

typedef enum { SM_SOFTMAX, SM_LOG, SM_SAFE } sm_kind;

/* _softmax / _log_softmax (self, dim, half_to_float) and _safe_softmax
 * (self, dim, dtype?): rows of -inf give 0 in _safe_softmax, NaN otherwise. */
static tpuc_status *lower_softmax(tpuc_lower_ctx *cx, sm_kind kind) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  if (xt.ndim == 0) {
    int64_t one = 1;
    x = ir_reshape(g, x, 1, &one);
  }
  x = ir_convert(g, x, cd);
  int64_t dim = lx_dim(lx_int(cx, 1, -1), lo_rank(g, x));
  tv m = lo_reduce(g, x, IR_RED_MAX, &dim, 1, true);
  tv xm = lo_bin(g, IR_SUB, x, m);
  tv e = ir_unary(g, IR_EXP, xm);
  tv s = lo_sum(g, e, &dim, 1, true);
  tv y = kind == SM_LOG ? lo_bin(g, IR_SUB, xm, ir_unary(g, IR_LOG, s)) : lo_bin(g, IR_DIV, e, s);
  if (kind == SM_SAFE) {
    tv dead = ir_compare(g, IR_EQ, m, lx_splat_like(g, m, -INFINITY));
    y = lo_where(g, dead, lo_const(g, cd, 0.0), y);
  }
  cx->results[0] = lo_fit(g, y, ot);
  return NULL;
}
static tpuc_status *l_softmax(tpuc_lower_ctx *cx) { return lower_softmax(cx, SM_SOFTMAX); }
static tpuc_status *l_log_softmax(tpuc_lower_ctx *cx) { return lower_softmax(cx, SM_LOG); }
static tpuc_status *l_safe_softmax(tpuc_lower_ctx *cx) { return lower_softmax(cx, SM_SAFE); }

/* _softmax_backward_data / _log_softmax_backward_data (grad_output,
 * output, dim, input_dtype). */
static tpuc_status *lower_softmax_backward(tpuc_lower_ctx *cx, bool log) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv gy = lx_tensor(cx, 0), y = lx_tensor(cx, 1);
  tpuc_dtype cd = lx_compute_dtype(lo_dtype(g, y));
  if (lo_rank(g, y) == 0) {
    int64_t one = 1;
    gy = ir_reshape(g, gy, 1, &one);
    y = ir_reshape(g, y, 1, &one);
  }
  gy = ir_convert(g, gy, cd);
  y = ir_convert(g, y, cd);
  int64_t dim = lx_dim(lx_int(cx, 2, -1), lo_rank(g, y));
  tv r;
  if (log) {
    tv s = lo_sum(g, gy, &dim, 1, true);
    r = lo_bin(g, IR_SUB, gy, lo_bin(g, IR_MUL, ir_unary(g, IR_EXP, y), s));
  } else {
    tv s = lo_sum(g, ir_binary(g, IR_MUL, gy, y), &dim, 1, true);
    r = ir_binary(g, IR_MUL, y, lo_bin(g, IR_SUB, gy, s));
  }
  cx->results[0] = lo_fit(g, r, ot);
  return NULL;
}
static tpuc_status *l_softmax_bw(tpuc_lower_ctx *cx) { return lower_softmax_backward(cx, false); }
static tpuc_status *l_log_softmax_bw(tpuc_lower_ctx *cx) { return lower_softmax_backward(cx, true); }

/* ---- dropout ---- */

/* native_dropout(input, p, train?) -> (out, mask): keeps an element with
 * probability 1-p (24 random bits per element), scales kept ones by 1/(1-p).
 * The engine appends the device generator's state as an RNG argument. */
static tpuc_status *l_native_dropout(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  bool train = lx_is_none(cx, 2) || lx_bool(cx, 2, true);
  ir_type mt = cx->noutputs > 1 ? lx_out(cx, 1) : ir_with_dtype(ot, TPUC_PRED);
  if (!train) {
    cx->results[0] = lo_out(g, x, ot);
    if (cx->noutputs > 1) cx->results[1] = ir_splat(g, mt, 1.0);
    return NULL;
  }
  tv state = lo_rng_state(cx);
  if (state == IR_NONE) return lx_unimplemented(cx, "dropout without a generator argument");
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  ir_type bt = ir_with_dtype(ot, TPUC_U32);
  tv bits;
  ir_rng_bits(g, state, bt, &bits, NULL);
  tv u = ir_binary(g, IR_SHR_LOGICAL, bits, ir_splat(g, bt, 8.0));
  u = ir_binary(g, IR_MUL, ir_convert(g, u, TPUC_F32), ir_splat(g, ir_with_dtype(ot, TPUC_F32), 1.0 / 16777216.0));
  tv p = lx_scalar(cx, 1, TPUC_F32);
  tv q = ir_binary(g, IR_SUB, lo_const(g, TPUC_F32, 1.0), p);
  tv keep = lo_cmp(g, IR_LT, u, q);
  tv qc = ir_convert(g, q, cd);
  tv scale = ir_select(g, ir_compare(g, IR_EQ, qc, lo_const(g, cd, 0.0)), lo_const(g, cd, 0.0),
                       ir_binary(g, IR_DIV, lo_const(g, cd, 1.0), qc));
  tv xc = ir_convert(g, x, cd);
  tv y = lo_bin(g, IR_MUL, ir_select(g, keep, xc, lx_splat_like(g, xc, 0.0)), scale);
  cx->results[0] = lo_fit(g, y, ot);
  if (cx->noutputs > 1) cx->results[1] = lo_fit(g, keep, mt);
  return NULL;
}

/* native_dropout_backward(grad_output, mask, scale). */
static tpuc_status *l_native_dropout_bw(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  tv gy = ir_convert(g, lx_tensor(cx, 0), cd);
  tv m = ir_convert(g, lx_tensor(cx, 1), cd);
  tv y = lo_bin(g, IR_MUL, lo_bin(g, IR_MUL, gy, m), lx_scalar(cx, 2, cd));
  cx->results[0] = lo_fit(g, y, ot);
  return NULL;
}

/* ---- losses ---- */


/* The loss-gradient scale: grad_output broadcast (none) or divided by the
 * element count (mean). */
static tv loss_grad_scale(ir_graph *g, tv go, ir_type t, int64_t reduction) {
  tv s = lx_coerce(g, go, t);
  return reduction == RED_MEAN ? lo_binc(g, IR_DIV, s, (double)ir_numel(&t)) : s;
}

typedef struct {
  tv x;        /* log-probabilities [N, C, ...] or [C], in cd */
  tv onehot;   /* pred, x's shape: the target class */
  tv w;        /* per-target weight (0 where ignored), target's shape */
  int cdim;    /* the class dim */
} nll_parts;

/* Common part of nll_loss[2d] forward and backward; args from `a`: self,
 * target, weight?, reduction, ignore_index; `check`: the targets' bounds check. */
static void nll_prepare(tpuc_lower_ctx *cx, int a, tpuc_dtype cd, bool check, nll_parts *p) {
  ir_graph *g = cx->g;
  p->x = ir_convert(g, lx_tensor(cx, a), cd);
  ir_type xt = ir_type_of(g, p->x);
  p->cdim = xt.ndim == 1 ? 0 : 1;
  tv t = ir_convert(g, lx_tensor(cx, a + 1), TPUC_S64);
  ir_type it = ir_with_dtype(xt, TPUC_S64);
  int64_t bd[TPUC_MAX_DIMS];
  for (int i = 0, k = 0; i < xt.ndim; i++)
    if (i != p->cdim) bd[k++] = i;
  tv tb = ir_broadcast_in_dim(g, t, it, bd);
  p->onehot = ir_compare(g, IR_EQ, ir_iota(g, it, p->cdim), tb);
  int64_t ignore = lx_int(cx, a + 4, -100);
  /* a target outside [0, C) matches no class: unchecked, its loss is 0 and it counts in the
   * mean. The forward checks it (the backward of a failed forward is never reported first). */
  if (check) lx_check_target(cx, t, xt.dims[p->cdim], ignore);
  tv valid = ir_compare(g, IR_NE, t, ir_splat_i64(g, ir_type_of(g, t), ignore));
  tv w;
  if (!lx_is_none(cx, a + 2)) {
    tv wv = ir_convert(g, lx_tensor(cx, a + 2), cd);
    tv wf = p->cdim == 0 ? wv : nn_chan(g, wv, xt);
    w = lo_pick_sum(g, ir_select(g, p->onehot, wf, lx_splat_like(g, p->x, 0.0)),
                    (int64_t[]){p->cdim}, 1, false);
  } else {
    w = ir_splat(g, ir_with_dtype(ir_type_of(g, t), cd), 1.0);
  }
  p->w = ir_select(g, valid, w, lx_splat_like(g, w, 0.0));
}

/* nll_loss_forward / nll_loss2d_forward (self, target, weight?, reduction,
 * ignore_index) -> (output, total_weight). */
static tpuc_status *l_nll_loss(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  nll_parts p;
  nll_prepare(cx, 0, cd, true, &p);
  int64_t red = lx_int(cx, 3, RED_MEAN), cdim = p.cdim;
  tv picked = lo_pick_sum(g, ir_select(g, p.onehot, p.x, lx_splat_like(g, p.x, 0.0)), &cdim, 1, false);
  tv loss = ir_unary(g, IR_NEG, ir_binary(g, IR_MUL, picked, p.w));
  tv total = lo_reduce_loss(g, p.w, RED_SUM);
  tv out = loss;
  if (red != RED_NONE) {
    out = lo_reduce_loss(g, loss, RED_SUM);
    if (red == RED_MEAN) out = ir_binary(g, IR_DIV, out, total);
  } else if (p.cdim == 1) {
    total = lo_const(g, cd, 0.0); /* PyTorch reports 0 for unreduced batches */
  }
  cx->results[0] = lo_fit(g, out, ot);
  if (cx->noutputs > 1) cx->results[1] = lo_fit(g, total, lx_out(cx, 1));
  return NULL;
}

/* nll_loss_backward / nll_loss2d_backward (grad_output, self, target,
 * weight?, reduction, ignore_index, total_weight). */
static tpuc_status *l_nll_loss_bw(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  nll_parts p;
  nll_prepare(cx, 1, cd, false, &p);
  int64_t red = lx_int(cx, 4, RED_MEAN);
  tv go = ir_convert(g, lx_tensor(cx, 0), cd);
  tv scale = red == RED_NONE ? go : ir_reshape(g, go, 0, NULL);
  if (red == RED_MEAN)
    scale = ir_binary(g, IR_DIV, scale, ir_reshape(g, ir_convert(g, lx_tensor(cx, 6), cd), 0, NULL));
  tv per = ir_unary(g, IR_NEG, lo_bin(g, IR_MUL, p.w, scale)); /* target's shape */
  ir_type xt = ir_type_of(g, p.x);
  int64_t bd[TPUC_MAX_DIMS];
  for (int i = 0, k = 0; i < xt.ndim; i++)
    if (i != p.cdim) bd[k++] = i;
  tv perb = ir_broadcast_in_dim(g, per, xt, bd);
  cx->results[0] = lo_fit(g, ir_select(g, p.onehot, perb, lx_splat_like(g, p.x, 0.0)), ot);
  return NULL;
}

/* mse_loss(self, target, reduction=mean). */
static tpuc_status *l_mse_loss(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  tv d = lo_bin(g, IR_SUB, ir_convert(g, lx_tensor(cx, 0), cd), lx_tensor(cx, 1));
  tv l = ir_binary(g, IR_MUL, d, d);
  cx->results[0] = lo_fit(g, lo_reduce_loss(g, l, lx_int(cx, 2, RED_MEAN)), ot);
  return NULL;
}

/* mse_loss_backward(grad_output, self, target, reduction). */
static tpuc_status *l_mse_loss_bw(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  tv d = lo_bin(g, IR_SUB, ir_convert(g, lx_tensor(cx, 1), cd), lx_tensor(cx, 2));
  ir_type t = ir_type_of(g, d);
  tv s = loss_grad_scale(g, ir_convert(g, lx_tensor(cx, 0), cd), t, lx_int(cx, 3, RED_MEAN));
  cx->results[0] = lo_fit(g, lo_binc(g, IR_MUL, ir_binary(g, IR_MUL, d, s), 2.0), ot);
  return NULL;
}

/* binary_cross_entropy(self, target, weight?, reduction): log terms clamped
 * at -100 as PyTorch does. */
static tpuc_status *l_bce(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  tv x = ir_convert(g, lx_tensor(cx, 0), cd);
  tv t = lx_coerce(g, lx_tensor(cx, 1), ir_type_of(g, x));
  tv lo = lx_splat_like(g, x, -100.0);
  tv lx_ = ir_binary(g, IR_MAX, ir_unary(g, IR_LOG, x), lo);
  tv l1x = ir_binary(g, IR_MAX, ir_unary(g, IR_LOG1P, ir_unary(g, IR_NEG, x)), lo);
  tv one_t = ir_binary(g, IR_SUB, lx_splat_like(g, t, 1.0), t);
  tv l = ir_unary(g, IR_NEG, ir_binary(g, IR_ADD, ir_binary(g, IR_MUL, t, lx_),
                                       ir_binary(g, IR_MUL, one_t, l1x)));
  if (!lx_is_none(cx, 2)) l = lo_bin(g, IR_MUL, l, lx_tensor(cx, 2));
  cx->results[0] = lo_fit(g, lo_reduce_loss(g, l, lx_int(cx, 3, RED_MEAN)), ot);
  return NULL;
}

/* binary_cross_entropy_backward(grad_output, self, target, weight?, reduction). */
static tpuc_status *l_bce_bw(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  tv x = ir_convert(g, lx_tensor(cx, 1), cd);
  ir_type xt = ir_type_of(g, x);
  tv t = lx_coerce(g, lx_tensor(cx, 2), xt);
  tv den = ir_binary(g, IR_MUL, ir_binary(g, IR_SUB, lx_splat_like(g, x, 1.0), x), x);
  den = ir_binary(g, IR_MAX, den, lx_splat_like(g, x, 1e-12));
  tv r = ir_binary(g, IR_DIV, ir_binary(g, IR_SUB, x, t), den);
  r = ir_binary(g, IR_MUL, r, loss_grad_scale(g, ir_convert(g, lx_tensor(cx, 0), cd), xt,
                                              lx_int(cx, 4, RED_MEAN)));
  if (!lx_is_none(cx, 3)) r = lo_bin(g, IR_MUL, r, lx_tensor(cx, 3));
  cx->results[0] = lo_fit(g, r, ot);
  return NULL;
}

/* binary_cross_entropy_with_logits(self, target, weight?, pos_weight?,
 * reduction): (1 - t) x + (1 + (pw - 1) t) softplus(-x). */
static tpuc_status *l_bce_logits(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  tv x = ir_convert(g, lx_tensor(cx, 0), cd);
  ir_type xt = ir_type_of(g, x);
  tv t = lx_coerce(g, lx_tensor(cx, 1), xt);
  tv zero = lx_splat_like(g, x, 0.0), one = lx_splat_like(g, x, 1.0);
  tv negx = ir_unary(g, IR_NEG, x);
  tv sp = ir_binary(g, IR_ADD,
                    ir_unary(g, IR_LOG1P, ir_unary(g, IR_EXP, ir_unary(g, IR_NEG, ir_unary(g, IR_ABS, x)))),
                    ir_binary(g, IR_MAX, negx, zero));
  tv lw = one;
  if (!lx_is_none(cx, 3)) {
    tv pw = lx_coerce(g, lx_tensor(cx, 3), xt);
    lw = ir_binary(g, IR_ADD, one, ir_binary(g, IR_MUL, ir_binary(g, IR_SUB, pw, one), t));
  }
  tv l = ir_binary(g, IR_ADD, ir_binary(g, IR_MUL, ir_binary(g, IR_SUB, one, t), x),
                   ir_binary(g, IR_MUL, lw, sp));
  if (!lx_is_none(cx, 2)) l = lo_bin(g, IR_MUL, l, lx_tensor(cx, 2));
  cx->results[0] = lo_fit(g, lo_reduce_loss(g, l, lx_int(cx, 4, RED_MEAN)), ot);
  return NULL;
}

const tpuc_lowering tpuc_lowerings_nn[] = {
    {"aten::_softmax", l_softmax},
    {"aten::_softmax.out", l_softmax},
    {"aten::_log_softmax", l_log_softmax},
    {"aten::_log_softmax.out", l_log_softmax},
    {"aten::_safe_softmax", l_safe_softmax},
    {"aten::_softmax_backward_data", l_softmax_bw},
    {"aten::_softmax_backward_data.out", l_softmax_bw},
    {"aten::_log_softmax_backward_data", l_log_softmax_bw},
    {"aten::_log_softmax_backward_data.out", l_log_softmax_bw},
    {"aten::native_dropout", l_native_dropout},
    {"aten::native_dropout.out", l_native_dropout},
    {"aten::native_dropout_backward", l_native_dropout_bw},
    {"aten::native_dropout_backward.out", l_native_dropout_bw},
    {"aten::nll_loss_forward", l_nll_loss},
    {"aten::nll_loss_forward.output", l_nll_loss},
    {"aten::nll_loss2d_forward", l_nll_loss},
    {"aten::nll_loss2d_forward.output", l_nll_loss},
    {"aten::nll_loss_backward", l_nll_loss_bw},
    {"aten::nll_loss_backward.grad_input", l_nll_loss_bw},
    {"aten::nll_loss2d_backward", l_nll_loss_bw},
    {"aten::nll_loss2d_backward.grad_input", l_nll_loss_bw},
    {"aten::mse_loss", l_mse_loss},
    {"aten::mse_loss.out", l_mse_loss},
    {"aten::mse_loss_backward", l_mse_loss_bw},
    {"aten::mse_loss_backward.grad_input", l_mse_loss_bw},
    {"aten::binary_cross_entropy", l_bce},
    {"aten::binary_cross_entropy.out", l_bce},
    {"aten::binary_cross_entropy_backward", l_bce_bw},
    {"aten::binary_cross_entropy_backward.grad_input", l_bce_bw},
    {"aten::binary_cross_entropy_with_logits", l_bce_logits},
    {"aten::binary_cross_entropy_with_logits.out", l_bce_logits},
    /* nn_norm.c */
    {"aten::native_layer_norm", nn_layer_norm},
    {"aten::native_layer_norm.out", nn_layer_norm},
    {"aten::native_layer_norm_backward", nn_layer_norm_backward},
    {"aten::native_layer_norm_backward.out", nn_layer_norm_backward},
    {"aten::native_batch_norm", nn_batch_norm},
    {"aten::native_batch_norm.out", nn_batch_norm},
    {"aten::_native_batch_norm_legit", nn_batch_norm},
    {"aten::_native_batch_norm_legit.out", nn_batch_norm},
    {"aten::_native_batch_norm_legit.no_stats", nn_batch_norm_legit_no_stats},
    {"aten::_native_batch_norm_legit.no_stats_out", nn_batch_norm_legit_no_stats},
    {"aten::_native_batch_norm_legit_no_training", nn_batch_norm_no_training},
    {"aten::_native_batch_norm_legit_no_training.out", nn_batch_norm_no_training},
    {"aten::_batch_norm_with_update", nn_batch_norm_with_update},
    {"aten::_batch_norm_with_update.out", nn_batch_norm_with_update},
    {"aten::_batch_norm_with_update_functional", nn_batch_norm_with_update},
    {"aten::_batch_norm_no_update", nn_batch_norm_no_update},
    {"aten::_batch_norm_no_update.out", nn_batch_norm_no_update},
    {"aten::native_batch_norm_backward", nn_batch_norm_backward},
    {"aten::native_batch_norm_backward.out", nn_batch_norm_backward},
    {"aten::batch_norm_backward", nn_batch_norm_backward},
    {"aten::native_group_norm", nn_group_norm},
    {"aten::native_group_norm.out", nn_group_norm},
    {"aten::native_group_norm_backward", nn_group_norm_backward},
    {"aten::native_group_norm_backward.out", nn_group_norm_backward},
    /* nn_conv.c */
    {"aten::convolution", nn_convolution},
    {"aten::convolution.out", nn_convolution},
    {"aten::convolution_backward", nn_convolution_backward},
    {"aten::convolution_backward.out", nn_convolution_backward},
    {"aten::convolution_overrideable", nn_convolution},
    {"aten::convolution_overrideable.out", nn_convolution},
    {"aten::convolution_backward_overrideable", nn_convolution_backward_overrideable},
    {"aten::convolution_backward_overrideable.out", nn_convolution_backward_overrideable},
    {"aten::max_pool2d_with_indices", nn_max_pool2d},
    {"aten::max_pool2d_with_indices.out", nn_max_pool2d},
    {"aten::max_pool2d_with_indices_backward", nn_max_pool2d_backward},
    {"aten::max_pool2d_with_indices_backward.grad_input", nn_max_pool2d_backward},
    {"aten::avg_pool2d", nn_avg_pool2d},
    {"aten::avg_pool2d.out", nn_avg_pool2d},
    {"aten::avg_pool2d_backward", nn_avg_pool2d_backward},
    {"aten::avg_pool2d_backward.grad_input", nn_avg_pool2d_backward},
    {"aten::_adaptive_avg_pool2d", nn_adaptive_avg_pool2d},
    {"aten::_adaptive_avg_pool2d.out", nn_adaptive_avg_pool2d},
    {"aten::adaptive_avg_pool2d.out", nn_adaptive_avg_pool2d},
    {"aten::_adaptive_avg_pool2d_backward", nn_adaptive_avg_pool2d_backward},
    {"aten::_adaptive_avg_pool2d_backward.out", nn_adaptive_avg_pool2d_backward},
    /* nn_attn.c */
    {"aten::_scaled_dot_product_flash_attention_for_cpu", nn_sdpa_flash_cpu},
    {"aten::_scaled_dot_product_flash_attention_for_cpu_backward", nn_sdpa_flash_cpu_backward},
    {NULL, NULL},
};
