/* nn_extra.c — nn ops that small transformer and vision models still sent to
 * the CPU (ranked by tests/conformance/model_usage.py): glu, prelu, the
 * huber and smooth-L1 losses, each with its backward. f16/bf16 compute in
 * f32 like PyTorch's CPU kernels. */
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
    {NULL, NULL},
};
