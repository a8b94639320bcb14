/* distance.c — pairwise distances: _pdist_forward and _pdist_backward
 * (torch.nn.functional.pdist), as PyTorch's CPU kernels (plain StableHLO).
 *
 * pdist(x [N, M], p) is the p-norm of x_i - x_j for every pair i < j, in
 * row-major pair order: the count of nonzeros for p = 0, max |d| for
 * p = inf, (sum |d|^p)^(1/p) otherwise. p is a runtime value (a float
 * argument), so every formula is built and one selected (XLA folds the
 * selects when p is a constant of the program). The backward adds
 * grad * d(dist)/d(x_i) to row i and subtracts it from row j, with the
 * CPU's conventions at zero distance (a zero gradient). */
#include <stdlib.h>

#include "lower_ops.h"

/* The pair lists i < j for n rows: idx [P] values of the first (second) row. */
static void pair_rows(ir_graph *g, int64_t n, tv *ri, tv *rj, int64_t *np) {
  int64_t p = n * (n - 1) / 2;
  *np = p;
  /* row i of pair k: built from iotas would need a search; the lists are
   * static, so constants */
  int64_t *a = malloc((size_t)(p > 0 ? p : 1) * 2 * sizeof *a);
  if (!a) {
    ir_fail(g, "pdist: out of memory");
    *ri = *rj = IR_NONE;
    return;
  }
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = i + 1; j < n; j++) a[k] = i, a[p + k] = j, k++;
  *ri = ir_const_i64s(g, a, (int)p);
  *rj = ir_const_i64s(g, a + p, (int)p);
  free(a);
}

typedef struct {
  tv p, is0, is1, is2, isinf, lt1, lt2; /* rank-0 p and its cases */
} p_cases;

static p_cases cases_of(tpuc_lower_ctx *cx, int arg, tpuc_dtype d) {
  ir_graph *g = cx->g;
  p_cases c;
  c.p = lx_scalar(cx, arg, d);
  if (c.p == IR_NONE) c.p = lo_const(g, d, 2.0);
#define P_CMP(dir, v) ir_compare(g, dir, c.p, lo_const(g, d, (v)))
  c.is0 = P_CMP(IR_EQ, 0.0), c.is1 = P_CMP(IR_EQ, 1.0), c.is2 = P_CMP(IR_EQ, 2.0);
  c.isinf = P_CMP(IR_EQ, INFINITY), c.lt1 = P_CMP(IR_LT, 1.0), c.lt2 = P_CMP(IR_LT, 2.0);
#undef P_CMP
  return c;
}

/* A rank-0 pred or value broadcast to t. */
static tv bc(ir_graph *g, tv s, ir_type t) { return ir_broadcast_in_dim(g, s, ir_with_dtype(t, ir_type_of(g, s).dtype), NULL); }

/* diff [P, M] of the pair rows of x [N, M]. */
static tv pair_diff(ir_graph *g, tv x, tv ri, tv rj) {
  return ir_binary(g, IR_SUB, lo_take_dim(g, x, 0, ri), lo_take_dim(g, x, 0, rj));
}

/* The p-norms of the rows of diff [P, M] -> [P]. */
static tv row_norms(ir_graph *g, tv diff, const p_cases *c) {
  ir_type t = ir_type_of(g, diff);
  tv a = ir_unary(g, IR_ABS, diff);
  tv powed = ir_binary(g, IR_POW, a, bc(g, c->p, t));
  tv nz = ir_convert(g, ir_compare(g, IR_NE, a, lx_splat_like(g, a, 0.0)), t.dtype);
  tv terms = ir_select(g, bc(g, c->is2, t), ir_binary(g, IR_MUL, a, a),
                       ir_select(g, bc(g, c->is1, t), a, ir_select(g, bc(g, c->is0, t), nz, powed)));
  int64_t one = 1;
  tv s = lo_sum(g, terms, &one, 1, false);
  ir_type st = ir_type_of(g, s);
  tv inv = ir_binary(g, IR_DIV, lo_const(g, t.dtype, 1.0), c->p);
  tv general = ir_binary(g, IR_POW, s, bc(g, inv, st));
  tv r = ir_select(g, bc(g, c->is2, st), ir_unary(g, IR_SQRT, s),
                   ir_select(g, bc(g, ir_binary(g, IR_OR, c->is1, c->is0), st), s, general));
  return ir_select(g, bc(g, c->isinf, st), lo_reduce(g, a, IR_RED_MAX, &one, 1, false), r);
}

/* _pdist_forward(self, p=2). */
static tpuc_status *l_pdist(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim != 2 || (ot.dtype != TPUC_F32 && ot.dtype != TPUC_F64)) return lx_unimplemented(cx, "pdist: 2-D f32/f64");
  tv ri, rj;
  int64_t np;
  pair_rows(g, xt.dims[0], &ri, &rj, &np);
  if (np == 0 || xt.dims[1] == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  p_cases c = cases_of(cx, 1, ot.dtype);
  cx->results[0] = lo_fit(g, row_norms(g, pair_diff(g, ir_convert(g, x, ot.dtype), ri, rj), &c), ot);
  return NULL;
}

/* _pdist_backward(grad, self, p, pdist). */
static tpuc_status *l_pdist_bw(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  if (ot.ndim != 2 || (ot.dtype != TPUC_F32 && ot.dtype != TPUC_F64)) return lx_unimplemented(cx, "pdist: 2-D f32/f64");
  tv ri, rj;
  int64_t np;
  pair_rows(g, ot.dims[0], &ri, &rj, &np);
  if (np == 0 || ot.dims[1] == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  tpuc_dtype d = ot.dtype;
  p_cases c = cases_of(cx, 2, d);
  tv diff = pair_diff(g, ir_convert(g, lx_tensor(cx, 1), d), ri, rj);
  ir_type t = ir_type_of(g, diff);
  int64_t b0 = 0;
  tv gr = ir_broadcast_in_dim(g, ir_convert(g, ir_reshape(g, lx_tensor(cx, 0), 1, &np), d), t, &b0);
  tv dist = ir_broadcast_in_dim(g, ir_convert(g, ir_reshape(g, lx_tensor(cx, 3), 1, &np), d), t, &b0);
  tv zero = lx_splat_like(g, diff, 0.0), a = ir_unary(g, IR_ABS, diff), sg = ir_unary(g, IR_SIGN, diff);
  tv dist0 = ir_compare(g, IR_EQ, dist, zero);
  tv pm1 = ir_binary(g, IR_SUB, c.p, lo_const(g, d, 1.0)), pm2 = ir_binary(g, IR_SUB, c.p, lo_const(g, d, 2.0));
  tv dpow = ir_binary(g, IR_POW, dist, bc(g, pm1, t));
  /* 1 < p < 2 and p < 1 (lttdist): sign(d) |d|^(p-1) / dist^(p-1), 0 where d = 0 and p < 1 */
  tv lt = ir_binary(g, IR_DIV, ir_binary(g, IR_MUL, sg, ir_binary(g, IR_POW, a, bc(g, pm1, t))), dpow);
  lt = ir_select(g, ir_binary(g, IR_AND, ir_compare(g, IR_EQ, diff, zero), bc(g, c.lt1, t)), zero, lt);
  /* p > 2: d |d|^(p-2) / dist^(p-1) */
  tv gen = ir_binary(g, IR_DIV, ir_binary(g, IR_MUL, diff, ir_binary(g, IR_POW, a, bc(g, pm2, t))), dpow);
  tv two = ir_binary(g, IR_DIV, diff, dist);
  tv inf = ir_binary(g, IR_MUL, sg, ir_convert(g, ir_compare(g, IR_EQ, a, dist), d));
  tv v = ir_select(g, bc(g, c.lt2, t), lt, gen);
  v = ir_select(g, dist0, zero, v);
  v = ir_select(g, bc(g, c.is2, t), ir_select(g, dist0, zero, two), v);
  v = ir_select(g, bc(g, c.isinf, t), inf, v);
  v = ir_select(g, bc(g, c.is1, t), sg, v);
  v = ir_select(g, bc(g, c.is0, t), zero, v);
  v = ir_binary(g, IR_MUL, v, gr);
  tv acc = lo_put_dim(g, ir_splat(g, ot, 0.0), 0, ri, v, IR_RED_SUM);
  acc = lo_put_dim(g, acc, 0, rj, ir_unary(g, IR_NEG, v), IR_RED_SUM);
  cx->results[0] = acc;
  return NULL;
}

extern const tpuc_lowering tpuc_lowerings_distance[];
const tpuc_lowering tpuc_lowerings_distance[] = {
    {"aten::_pdist_forward", l_pdist, 0},
    {"aten::_pdist_forward.out", l_pdist, 0},
    {"aten::_pdist_backward", l_pdist_bw, 0},
    {"aten::_pdist_backward.out", l_pdist_bw, 0},
    {NULL, NULL, 0},
};
