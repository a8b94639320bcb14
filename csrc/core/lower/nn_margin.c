/* nn_margin.c — the margin losses multi_margin_loss and
 * multilabel_margin_loss (below) with their backwards, as PyTorch's CPU
 * kernels (plain StableHLO: any backend). multi_margin_loss: for a
 * row x of C scores with target y, z_j = margin - x_y + x_j, and the row's
 * loss is sum_{j != y} max(z_j, 0)^p w_y / C (p 1 or 2, w the optional class
 * weights); the reduction is over rows. float32/float64, as the CPU. */
#include "lower_ops.h"

/* The pieces shared by forward and backward: x as [N, C], the one-hot of the
 * targets, z and the per-row weight w_y (or 1), all [N, C] in x's dtype. */
typedef struct {
  tv x, hot, z, w;
  int64_t n, c;
} margin_rows;

/* p (a Scalar, built into the program: 1 and 2 are PyTorch's special
 * exponents, the only ones the CPU kernel accepts); 0 when not known. */
static int p_of(tpuc_lower_ctx *cx, int i) {
  double v = 0;
  if (lx_is_none(cx, i)) return 1;
  if (!ir_splat_value(cx->g, cx->scalar_vals[i], &v)) return 0;
  return v == 1 ? 1 : v == 2 ? 2 : 0;
}

static bool rows_of(tpuc_lower_ctx *cx, int self, int target, int margin, int weight, margin_rows *m) {
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, self), y = lx_tensor(cx, target);
  ir_type xt = ir_type_of(g, x);
  if ((xt.dtype != TPUC_F32 && xt.dtype != TPUC_F64) || xt.ndim > 2 || ir_numel(&xt) == 0) return false;
  m->c = xt.ndim == 0 ? 1 : xt.dims[xt.ndim - 1];
  m->n = xt.ndim == 2 ? xt.dims[0] : 1;
  int64_t d[2] = {m->n, m->c}, b0 = 0;
  ir_type t = ir_make_type(xt.dtype, 2, d), it = ir_make_type(TPUC_S64, 2, d);
  x = ir_reshape(g, x, 2, d);
  y = ir_reshape(g, ir_convert(g, y, TPUC_S64), 1, &m->n);
  tv hot = ir_compare(g, IR_EQ, ir_iota(g, it, 1), ir_broadcast_in_dim(g, y, it, &b0));
  tv hotf = ir_convert(g, hot, xt.dtype);
  int64_t one = 1;
  tv xy = lo_pick_sum(g, ir_binary(g, IR_MUL, hotf, x), &one, 1, true); /* [N, 1] */
  tv mg = lx_scalar(cx, margin, xt.dtype);
  if (mg == IR_NONE) mg = lo_const(g, xt.dtype, 1.0);
  tv z = ir_binary(g, IR_ADD, ir_binary(g, IR_SUB, lx_coerce(g, mg, t), lx_coerce(g, xy, t)), x);
  tv w = ir_splat(g, t, 1.0);
  if (!lx_is_none(cx, weight)) {
    tv wv = ir_reshape(g, ir_convert(g, lx_tensor(cx, weight), xt.dtype), 1, &m->c);
    int64_t b1 = 1;
    tv wy = lo_sum(g, ir_binary(g, IR_MUL, hotf, ir_broadcast_in_dim(g, wv, t, &b1)), &one, 1, true);
    w = lx_coerce(g, wy, t);
  }
  m->x = x, m->hot = hot, m->z = z, m->w = w;
  return true;
}

/* gi [N, C] times the loss's incoming gradient (input 0): per row without
 * reduction, else the scalar (divided by N for a mean). */
static tv times_grad_output(tpuc_lower_ctx *cx, tv gi, int64_t n, int64_t red) {
  ir_graph *g = cx->g;
  ir_type t = ir_type_of(g, gi);
  tv go = ir_convert(g, lx_tensor(cx, 0), t.dtype);
  int64_t b0 = 0;
  if (red == RED_NONE && n > 1) {
    go = ir_broadcast_in_dim(g, ir_reshape(g, go, 1, &n), t, &b0);
  } else {
    go = lx_coerce(g, ir_reshape(g, go, 0, NULL), t);
    if (red == RED_MEAN) go = lo_binc(g, IR_DIV, go, (double)n);
  }
  return ir_binary(g, IR_MUL, gi, go);
}

/* multi_margin_loss(self, target, p, margin, weight, reduction) */
static tpuc_status *l_multi_margin(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  int p = p_of(cx, 2);
  margin_rows m;
  if ((p != 1 && p != 2) || !rows_of(cx, 0, 1, 3, 4, &m)) return lx_unimplemented(cx, "multi_margin_loss");
  /* one row, no reduction: PyTorch's Meta kernel says [1], its CPU kernel [] */
  if (lx_int(cx, 5, RED_MEAN) == RED_NONE && ir_type_of(g, lx_tensor(cx, 0)).ndim < 2)
    return lx_unimplemented(cx, "multi_margin_loss: 1-D input without reduction (Meta and CPU shapes differ)");
  tv zero = lx_splat_like(g, m.z, 0.0);
  tv h = ir_select(g, ir_compare(g, IR_GT, m.z, zero), m.z, zero);
  if (p == 2) h = ir_binary(g, IR_MUL, h, h);
  h = ir_select(g, m.hot, zero, ir_binary(g, IR_MUL, h, m.w));
  int64_t one = 1;
  tv row = lo_binc(g, IR_DIV, lo_sum(g, h, &one, 1, false), (double)m.c); /* [N] */
  int64_t red = lx_int(cx, 5, RED_MEAN);
  cx->results[0] = lo_fit(g, red == RED_NONE ? row : lo_reduce_loss(g, row, red), ot);
  return NULL;
}

/* multi_margin_loss_backward(grad_output, self, target, p, margin, weight,
 * reduction): d/dx_j = [z_j > 0] (p = 2: 2 z_j) w_y / C for j != y, and
 * minus their sum at y, times the row's gradient. */
static tpuc_status *l_multi_margin_bw(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  int p = p_of(cx, 3);
  margin_rows m;
  if ((p != 1 && p != 2) || !rows_of(cx, 1, 2, 4, 5, &m)) return lx_unimplemented(cx, "multi_margin_loss");
  ir_type t = ir_type_of(g, m.x);
  tv zero = lx_splat_like(g, m.z, 0.0);
  tv dz = ir_convert(g, ir_compare(g, IR_GT, m.z, zero), t.dtype);
  if (p == 2) dz = ir_binary(g, IR_MUL, dz, ir_binary(g, IR_MUL, lx_splat_like(g, m.z, 2.0), m.z));
  dz = ir_select(g, m.hot, zero, lo_binc(g, IR_DIV, ir_binary(g, IR_MUL, dz, m.w), (double)m.c));
  int64_t one = 1;
  tv s = lx_coerce(g, lo_sum(g, dz, &one, 1, true), t);
  tv gi = ir_select(g, m.hot, ir_unary(g, IR_NEG, s), dz);
  int64_t red = lx_int(cx, 6, RED_MEAN);
  cx->results[0] = lo_fit(g, times_grad_output(cx, gi, m.n, red), ot);
  return NULL;
}

/* ---- multilabel_margin_loss ---- */

/* Each row's labels are target[0..] up to the first negative; for label k
 * (value l_k) and every non-label class d, z = 1 - x_{l_k} + x_d counts when
 * positive. Built as [N, K, C] masks (K = C label slots). */
typedef struct {
  tv x, act, z, hot, is_t; /* x [N, C]; act, z [N, K, C] in x's dtype; hot [N, K, C]; is_t [N, C] pred */
  int64_t n, c;
} label_rows;

static bool labels_of(tpuc_lower_ctx *cx, int self, int target, label_rows *m) {
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, self), y = lx_tensor(cx, target);
  ir_type xt = ir_type_of(g, x);
  if ((xt.dtype != TPUC_F32 && xt.dtype != TPUC_F64) || xt.ndim > 2 || ir_numel(&xt) == 0) return false;
  int64_t c = xt.ndim == 0 ? 1 : xt.dims[xt.ndim - 1], n = xt.ndim == 2 ? xt.dims[0] : 1;
  int64_t d2[2] = {n, c}, d3[3] = {n, c, c};
  tpuc_dtype fd = xt.dtype;
  x = ir_reshape(g, x, 2, d2);
  y = ir_reshape(g, ir_convert(g, y, TPUC_S64), 2, d2);
  ir_type i2 = ir_make_type(TPUC_S64, 2, d2), i3 = ir_make_type(TPUC_S64, 3, d3);
  ir_type f3 = ir_make_type(fd, 3, d3);
  /* first negative label slot (c when none); slot k valid below it */
  tv kio = ir_iota(g, i2, 1);
  tv negk = ir_select(g, ir_compare(g, IR_LT, y, ir_splat_i64(g, i2, 0)), kio, ir_splat_i64(g, i2, c));
  int64_t one = 1, b0 = 0, b01[2] = {0, 1}, b02[2] = {0, 2};
  tv first = ir_reduce(g, negk, ir_splat_i64(g, ir_scalar_type(TPUC_S64), c), IR_RED_MIN, &one, 1); /* [N] */
  tv valid = ir_compare(g, IR_LT, kio, ir_broadcast_in_dim(g, first, i2, &b0));                     /* [N, K] */
  tv valid3 = ir_broadcast_in_dim(g, valid, ir_with_dtype(i3, TPUC_PRED), b01);
  tv hot = ir_binary(g, IR_AND, valid3,
                     ir_compare(g, IR_EQ, ir_broadcast_in_dim(g, y, i3, b01), ir_iota(g, i3, 2)));
  tv is_t = ir_reduce(g, hot, ir_splat(g, ir_scalar_type(TPUC_PRED), 0), IR_RED_OR, &one, 1); /* [N, C] */
  tv x3 = ir_broadcast_in_dim(g, x, f3, b02);                                                 /* x_d */
  int64_t two = 2;
  tv xl = ir_reduce(g, ir_select(g, hot, x3, ir_splat(g, f3, 0)), lo_const(g, fd, 0), IR_RED_SUM, &two, 1);
  tv z = ir_binary(g, IR_ADD, ir_binary(g, IR_SUB, ir_splat(g, f3, 1), ir_broadcast_in_dim(g, xl, f3, b01)), x3);
  tv act = ir_binary(g, IR_AND, valid3, ir_unary(g, IR_NOT, ir_broadcast_in_dim(g, is_t, ir_with_dtype(i3, TPUC_PRED), b02)));
  act = ir_binary(g, IR_AND, act, ir_compare(g, IR_GT, z, ir_splat(g, f3, 0)));
  m->x = x, m->act = ir_convert(g, act, fd), m->z = z, m->hot = hot, m->is_t = is_t, m->n = n, m->c = c;
  return true;
}

/* multilabel_margin_loss_forward(self, target, reduction) -> (output, is_target) */
static tpuc_status *l_multilabel_margin(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  int64_t red = lx_int(cx, 2, RED_MEAN);
  label_rows m;
  if (!labels_of(cx, 0, 1, &m)) return lx_unimplemented(cx, "multilabel_margin_loss");
  if (red == RED_NONE && ir_type_of(g, lx_tensor(cx, 0)).ndim < 2 && ot.ndim != 0)
    return lx_unimplemented(cx, "multilabel_margin_loss: 1-D input without reduction");
  int64_t kd[2] = {1, 2};
  tv row = ir_reduce(g, ir_binary(g, IR_MUL, m.act, m.z), lo_const(g, ir_type_of(g, m.z).dtype, 0), IR_RED_SUM, kd, 2);
  row = lo_binc(g, IR_DIV, row, (double)m.c); /* [N] */
  cx->results[0] = lo_fit(g, red == RED_NONE ? row : lo_reduce_loss(g, row, red), ot);
  if (cx->noutputs > 1) cx->results[1] = lo_fit(g, m.is_t, lx_out(cx, 1));
  return NULL;
}

/* multilabel_margin_loss_backward(grad_output, self, target, reduction,
 * is_target): +1/C at each counted d, -1/C at its label, as the CPU's loop. */
static tpuc_status *l_multilabel_margin_bw(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  int64_t red = lx_int(cx, 3, RED_MEAN);
  label_rows m;
  if (!labels_of(cx, 1, 2, &m)) return lx_unimplemented(cx, "multilabel_margin_loss");
  ir_type t = ir_type_of(g, m.x);
  int64_t one = 1, two = 2, b01[2] = {0, 1};
  tv zero = lo_const(g, t.dtype, 0);
  tv plus = ir_reduce(g, m.act, zero, IR_RED_SUM, &one, 1);                   /* [N, C] over k */
  tv per_k = ir_reduce(g, m.act, zero, IR_RED_SUM, &two, 1);                  /* [N, K] over d */
  ir_type t3 = ir_type_of(g, m.act);
  tv minus = ir_reduce(g, ir_select(g, m.hot, ir_broadcast_in_dim(g, per_k, t3, b01), ir_splat(g, t3, 0)), zero,
                       IR_RED_SUM, &one, 1);                                  /* [N, C] at labels */
  tv gi = lo_binc(g, IR_DIV, ir_binary(g, IR_SUB, plus, minus), (double)m.c);
  cx->results[0] = lo_fit(g, times_grad_output(cx, gi, m.n, red), ot);
  return NULL;
}

extern const tpuc_lowering tpuc_lowerings_nn_margin[];
const tpuc_lowering tpuc_lowerings_nn_margin[] = {
    {"aten::multi_margin_loss", l_multi_margin, 1u << 2},
    {"aten::multi_margin_loss.out", l_multi_margin, 1u << 2},
    {"aten::multi_margin_loss_backward", l_multi_margin_bw, 1u << 3},
    {"aten::multi_margin_loss_backward.grad_input", l_multi_margin_bw, 1u << 3},
    {"aten::multilabel_margin_loss_forward", l_multilabel_margin, 0},
    {"aten::multilabel_margin_loss_forward.output", l_multilabel_margin, 0},
    {"aten::multilabel_margin_loss_backward", l_multilabel_margin_bw, 0},
    {"aten::multilabel_margin_loss_backward.grad_input", l_multilabel_margin_bw, 0},
    {NULL, NULL, 0},
};
