/* vector.c — products and distances of vectors: linalg_cross (torch.cross
 * and torch.linalg.cross; its backward is two crosses, composite in
 * PyTorch) and cdist's _cdist_forward/_cdist_backward (below).
 * The operands broadcast to the output's shape; each component is
 * a_i b_j - a_j b_i in the dtype itself, float16/bfloat16 included (c10's
 * Half/BFloat16 operators round each product and the difference, and so
 * does this). Plain
 * StableHLO (slices, multiplies, a concatenate): any backend. */
#include <math.h>

#include "elementwise.h"

/* Component k of x along dim d, as a slice of width 1. */
static tv component(ir_graph *g, tv x, int d, int64_t k) {
  ir_type t = ir_type_of(g, x);
  int64_t st[TPUC_MAX_DIMS] = {0}, lim[TPUC_MAX_DIMS], step[TPUC_MAX_DIMS];
  for (int i = 0; i < t.ndim; i++) lim[i] = t.dims[i], step[i] = 1;
  st[d] = k;
  lim[d] = k + 1;
  return ir_slice(g, x, st, lim, step);
}

/* (self, other, dim) */
static tpuc_status *vec_cross(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type o = cx->out_types[0];
  int64_t d = lx_int(cx, 2, -1);
  if (d < -o.ndim || d >= o.ndim) return lx_unimplemented(cx, "cross: dim");
  d = lx_dim(d, o.ndim);
  if (o.dims[d] != 3) return lx_unimplemented(cx, "cross: dim of size 3");
  int idx[2] = {0, 1};
  tpuc_dtype cd = ew_compute_dtype(cx, idx, 2, EW_COMPLEX | EW_EXACT);
  if (cd == EW_UNDEFINED || cd == TPUC_PRED) return lx_unimplemented(cx, "cross: dtype");
  ir_type t = ew_out_as(cx, cd);
  tv a = ew_operand(cx, 0, t), b = ew_operand(cx, 1, t), c[3];
  for (int k = 0; k < 3; k++) {
    int i = (k + 1) % 3, j = (k + 2) % 3;
    tv p = ir_binary(g, IR_MUL, component(g, a, (int)d, i), component(g, b, (int)d, j));
    tv q = ir_binary(g, IR_MUL, component(g, a, (int)d, j), component(g, b, (int)d, i));
    c[k] = ir_binary(g, IR_SUB, p, q);
  }
  return ew_finish(cx, ir_concat(g, c, 3, (int)d));
}

/* ---- cdist ---- */

/* x1 [.., P, M] and x2 [.., R, M] broadcast to [batch.., P, R, M] (the batch
 * of the [batch.., P, R] type o) and subtracted. */
static tv pair_diff(ir_graph *g, tv x1, tv x2, ir_type o) {
  ir_type a = ir_type_of(g, x1), b = ir_type_of(g, x2);
  int64_t d[TPUC_MAX_DIMS + 1];
  int r = o.ndim + 1;
  int64_t m = a.dims[a.ndim - 1];
  int64_t s1[TPUC_MAX_DIMS + 1], s2[TPUC_MAX_DIMS + 1];
  for (int i = 0; i < a.ndim - 1; i++) s1[i] = a.dims[i];
  s1[a.ndim - 1] = 1, s1[a.ndim] = m;
  for (int i = 0; i < b.ndim - 2; i++) s2[i] = b.dims[i];
  s2[b.ndim - 2] = 1, s2[b.ndim - 1] = b.dims[b.ndim - 2], s2[b.ndim] = m;
  for (int i = 0; i < o.ndim; i++) d[i] = o.dims[i];
  d[o.ndim] = m;
  tv u = lx_broadcast_to(g, ir_reshape(g, x1, a.ndim + 1, s1), r, d);
  tv v = lx_broadcast_to(g, ir_reshape(g, x2, b.ndim + 1, s2), r, d);
  return ir_binary(g, IR_SUB, u, v);
}

/* p: a build-time value (static: 0, 1, 2 and PyTorch's other special
 * exponents) or a runtime one, where +inf must still give the max norm. */
typedef struct {
  bool known;
  double v;
  tv rt; /* rank 0, the compute dtype */
} p_arg;

static p_arg read_p(tpuc_lower_ctx *cx, int i, tpuc_dtype d) {
  p_arg p = {false, 0, IR_NONE};
  if (ir_splat_value(cx->g, cx->scalar_vals[i], &p.v)) p.known = true;
  else p.rt = lx_scalar(cx, i, d);
  return p;
}

/* pred: p == v, at x's shape */
static tv p_is(ir_graph *g, const p_arg *p, tv x, double v) {
  if (p->known) return ir_compare(g, IR_EQ, lx_splat_like(g, x, p->v == v ? 1 : 0), lx_splat_like(g, x, 1));
  ir_type t = ir_type_of(g, x);
  return ir_compare(g, IR_EQ, lx_broadcast_to(g, p->rt, t.ndim, t.dims), lx_splat_like(g, x, v));
}
/* p at x's shape */
static tv p_at(ir_graph *g, const p_arg *p, tv x) {
  if (p->known) return lx_splat_like(g, x, p->v);
  ir_type t = ir_type_of(g, x);
  return lx_broadcast_to(g, p->rt, t.ndim, t.dims);
}
static tv reduce_last(ir_graph *g, tv x, ir_reducer r) {
  ir_type t = ir_type_of(g, x);
  int64_t last = t.ndim - 1;
  return ir_reduce(g, x, ir_splat(g, ir_scalar_type(t.dtype), r == IR_RED_MAX ? -INFINITY : 0.0), r,
                   &last, 1);
}

#define SEL(c, a, b) ir_select(g, (c), (a), (b))
#define MUL(a, b) ir_binary(g, IR_MUL, (a), (b))
#define DIV(a, b) ir_binary(g, IR_DIV, (a), (b))
#define POW(a, b) ir_binary(g, IR_POW, (a), (b))

/* _cdist_forward(x1, x2, p, compute_mode): the p-norm of each pair's
 * difference (0: the nonzero count, inf: the max), computed directly as
 * PyTorch's CPU kernel does (its matmul form for p = 2 belongs to cdist
 * itself, a composite of native ops). float32/float64, as the CPU. */
static tpuc_status *vec_cdist(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type o = cx->out_types[0];
  if (o.dtype != TPUC_F32 && o.dtype != TPUC_F64) return lx_unimplemented(cx, "cdist: dtype");
  if (o.ndim < 2) return lx_unimplemented(cx, "cdist: shape");
  tv x1 = lx_convert(g, lx_tensor(cx, 0), o.dtype), x2 = lx_convert(g, lx_tensor(cx, 1), o.dtype);
  ir_type t1 = ir_type_of(g, x1);
  if (ir_numel(&o) == 0 || t1.dims[t1.ndim - 1] == 0) { /* no pairs, or no features: 0 */
    cx->results[0] = ir_splat(g, o, 0.0);
    return NULL;
  }
  tv a = ir_unary(g, IR_ABS, pair_diff(g, x1, x2, o));
  p_arg p = read_p(cx, 2, o.dtype);
  tv nz = ir_convert(g, ir_compare(g, IR_NE, a, lx_splat_like(g, a, 0)), o.dtype);
  tv terms = SEL(p_is(g, &p, a, 2), MUL(a, a),
                 SEL(p_is(g, &p, a, 1), a, SEL(p_is(g, &p, a, 0), nz, POW(a, p_at(g, &p, a)))));
  tv s = reduce_last(g, terms, IR_RED_SUM), mx = reduce_last(g, a, IR_RED_MAX);
  tv general = POW(s, DIV(lx_splat_like(g, s, 1), p_at(g, &p, s)));
  tv r = SEL(p_is(g, &p, s, 2), ir_unary(g, IR_SQRT, s),
             SEL(ir_binary(g, IR_OR, p_is(g, &p, s, 1), p_is(g, &p, s, 0)), s,
                 SEL(p_is(g, &p, s, INFINITY), mx, general)));
  cx->results[0] = lx_coerce(g, r, o);
  return NULL;
}

/* _cdist_backward(grad, x1, x2, p, cdist) -> grad_x1: sum over x2's rows of
 * each pair's term, PyTorch's CPU formulas: p = 1 sign(d) g; p < 2 (d = 0:
 * 0) sign(d) |d|^(p-1) g / D^(p-1); p = 2 (D = 0: 0) d g / D; inf
 * sign(d) (|d| == D) g; otherwise (D = 0: 0) d |d|^(p-2) g / D^(p-1). */
static tpuc_status *vec_cdist_backward(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type o = cx->out_types[0];
  if (o.dtype != TPUC_F32 && o.dtype != TPUC_F64) return lx_unimplemented(cx, "cdist: dtype");
  tv gr = lx_convert(g, lx_tensor(cx, 0), o.dtype), dist = lx_convert(g, lx_tensor(cx, 4), o.dtype);
  ir_type gt = ir_type_of(g, gr);
  if (gt.ndim < 2) return lx_unimplemented(cx, "cdist: shape");
  if (ir_numel(&gt) == 0 || ir_numel(&o) == 0) { /* nothing flows back */
    cx->results[0] = ir_splat(g, o, 0.0);
    return NULL;
  }
  tv x1 = lx_convert(g, lx_tensor(cx, 1), o.dtype), x2 = lx_convert(g, lx_tensor(cx, 2), o.dtype);
  tv d = pair_diff(g, x1, x2, gt); /* [.., P, R, M] */
  ir_type dt = ir_type_of(g, d);
  int64_t bd[TPUC_MAX_DIMS + 1];
  for (int i = 0; i < gt.ndim; i++) bd[i] = i;
  tv G = ir_broadcast_in_dim(g, gr, dt, bd), D = ir_broadcast_in_dim(g, dist, dt, bd);
  p_arg p = read_p(cx, 3, o.dtype);
  tv zero = lx_splat_like(g, d, 0), a = ir_unary(g, IR_ABS, d), sg = ir_unary(g, IR_SIGN, d);
  tv pv = p_at(g, &p, d), one = lx_splat_like(g, d, 1);
  tv pm1 = ir_binary(g, IR_SUB, pv, one), pm2 = ir_binary(g, IR_SUB, pm1, one);
  tv Dz = ir_compare(g, IR_EQ, D, zero);
  tv t1 = MUL(sg, G);
  tv lt2 = SEL(ir_compare(g, IR_EQ, d, zero), zero,
               DIV(MUL(MUL(sg, POW(a, pm1)), G), POW(D, pm1)));
  tv t2 = SEL(Dz, zero, DIV(MUL(G, d), D));
  tv tinf = MUL(MUL(sg, ir_convert(g, ir_compare(g, IR_EQ, a, D), o.dtype)), G);
  tv tgen = SEL(Dz, zero, DIV(MUL(MUL(d, POW(a, pm2)), G), POW(D, pm1)));
  tv term = SEL(p_is(g, &p, d, 0), zero,
                SEL(p_is(g, &p, d, 1), t1,
                    SEL(p_is(g, &p, d, 2), t2,
                        SEL(p_is(g, &p, d, INFINITY), tinf,
                            SEL(ir_compare(g, IR_LT, pv, lx_splat_like(g, d, 2)), lt2, tgen)))));
  int64_t rdim = dt.ndim - 2; /* x2's rows */
  tv r = ir_reduce(g, term, ir_splat(g, ir_scalar_type(o.dtype), 0.0), IR_RED_SUM, &rdim, 1);
  ir_type rt = ir_type_of(g, r);
  if (ir_numel(&rt) != ir_numel(&o)) return lx_unimplemented(cx, "cdist backward: broadcast batch");
  cx->results[0] = ir_reshape(g, r, o.ndim, o.dims);
  return NULL;
}
#undef SEL
#undef MUL
#undef DIV
#undef POW

#define E(name, fn) {"aten::" name, fn, 0}
extern const tpuc_lowering tpuc_lowerings_vector[];
const tpuc_lowering tpuc_lowerings_vector[] = {
    E("linalg_cross", vec_cross),
    E("linalg_cross.out", vec_cross),
    {"aten::_cdist_forward", vec_cdist, 1u << 2},
    {"aten::_cdist_forward.out", vec_cdist, 1u << 2},
    {"aten::_cdist_backward", vec_cdist_backward, 1u << 3},
    {"aten::_cdist_backward.out", vec_cdist_backward, 1u << 3},
    {NULL, NULL, 0},
};
