/* nn_margin.c — the multi-class margin loss, multi_margin_loss and its
 * backward, as PyTorch's CPU kernels (plain StableHLO: any backend). For a
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
  tv xy = lo_sum(g, ir_binary(g, IR_MUL, hotf, x), &one, 1, true); /* [N, 1] */
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
  int64_t one = 1, b0 = 0;
  tv s = lx_coerce(g, lo_sum(g, dz, &one, 1, true), t);
  tv gi = ir_select(g, m.hot, ir_unary(g, IR_NEG, s), dz);
  int64_t red = lx_int(cx, 6, RED_MEAN);
  tv go = ir_convert(g, lx_tensor(cx, 0), t.dtype);
  if (red == RED_NONE && m.n > 1) {
    go = ir_broadcast_in_dim(g, ir_reshape(g, go, 1, &m.n), t, &b0);
  } else {
    go = lx_coerce(g, ir_reshape(g, go, 0, NULL), t);
    if (red == RED_MEAN) go = lo_binc(g, IR_DIV, go, (double)m.n);
  }
  cx->results[0] = lo_fit(g, ir_binary(g, IR_MUL, gi, go), ot);
  return NULL;
}

extern const tpuc_lowering tpuc_lowerings_nn_margin[];
const tpuc_lowering tpuc_lowerings_nn_margin[] = {
    {"aten::multi_margin_loss", l_multi_margin, 1u << 2},
    {"aten::multi_margin_loss.out", l_multi_margin, 1u << 2},
    {"aten::multi_margin_loss_backward", l_multi_margin_bw, 1u << 3},
    {"aten::multi_margin_loss_backward.grad_input", l_multi_margin_bw, 1u << 3},
    {NULL, NULL, 0},
};
