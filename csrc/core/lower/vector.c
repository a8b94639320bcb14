/* vector.c — products of 3-vectors: linalg_cross (torch.cross and
 * torch.linalg.cross; its backward is two crosses, composite in PyTorch).
 * The operands broadcast to the output's shape; each component is
 * a_i b_j - a_j b_i in the dtype itself, float16/bfloat16 included (c10's
 * Half/BFloat16 operators round each product and the difference, and so
 * does this). Plain
 * StableHLO (slices, multiplies, a concatenate): any backend. */
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

#define E(name, fn) {"aten::" name, fn, 0}
extern const tpuc_lowering tpuc_lowerings_vector[];
const tpuc_lowering tpuc_lowerings_vector[] = {
    E("linalg_cross", vec_cross),
    E("linalg_cross.out", vec_cross),
    {NULL, NULL, 0},
};
