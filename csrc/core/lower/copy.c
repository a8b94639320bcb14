/* copy.c — lowerings of copies and of the factories that fill an out=
 * tensor: copy_ (dtype conversion and broadcast into self's view),
 * _to_copy, clone, _copy_from; arange, linspace, logspace, eye, full/zeros/ones.
 *
 * A copy converts its source to the destination's dtype and broadcasts it to
 * the destination's shape; the engine writes the result through the
 * destination's view (strides, offset) into its storage. Factory bounds
 * (start, end, step, fill value) are runtime scalars; the number of elements
 * comes from the output's sizes. */
#include "elementwise.h"

/* ---- copies ---- */

static tpuc_status *cp_copy_(tpuc_lower_ctx *cx) { /* (self, src, non_blocking) */
  return ew_finish(cx, lx_tensor(cx, 1));
}

/* _to_copy, clone, _copy_from: the result is arg 0 in the output's dtype. */
static tpuc_status *cp_self(tpuc_lower_ctx *cx) { return ew_finish(cx, lx_tensor(cx, 0)); }

/* ---- factories ---- */

static tpuc_status *cp_full(tpuc_lower_ctx *cx) { /* (size, fill_value, *, out) */
  return ew_finish(cx, ew_operand(cx, 1, cx->out_types[0]));
}

static tpuc_status *cp_zeros(tpuc_lower_ctx *cx) {
  return ew_finish(cx, ir_splat(cx->g, cx->out_types[0], 0.0));
}

static tpuc_status *cp_ones(tpuc_lower_ctx *cx) {
  return ew_finish(cx, ir_splat(cx->g, cx->out_types[0], 1.0));
}

/* Rank-0 value of arg i (a scalar or a 0-dim tensor) in dtype d. */
static tv scalar_of(const tpuc_lower_ctx *cx, int i, tpuc_dtype d) {
  return ew_operand(cx, i, ir_scalar_type(d));
}

static tv broadcast_out(const tpuc_lower_ctx *cx, tv v) {
  return lx_broadcast_to(cx->g, v, cx->out_types[0].ndim, cx->out_types[0].dims);
}

/* start + step * i, in double for floating outputs and in int64 for
 * integers (bounds truncated first), as PyTorch's CPU kernel. */
static tpuc_status *arange(tpuc_lower_ctx *cx, int start_arg, int step_arg) {
  ir_graph *g = cx->g;
  ir_type o = cx->out_types[0];
  if (ir_is_complex(o.dtype) || o.ndim != 1) return lx_unimplemented(cx, "output");
  tpuc_dtype acc = ir_is_float(o.dtype) ? TPUC_F64 : TPUC_S64;
  ir_type t = ir_with_dtype(o, acc);
  tv start = start_arg < 0 ? ir_splat(g, ir_scalar_type(acc), 0) : scalar_of(cx, start_arg, acc);
  tv step = step_arg < 0 ? ir_splat(g, ir_scalar_type(acc), 1) : scalar_of(cx, step_arg, acc);
  tv r = ir_binary(g, IR_MUL, broadcast_out(cx, step), ir_iota(g, t, 0));
  return ew_finish(cx, ir_binary(g, IR_ADD, broadcast_out(cx, start), r));
}

static tpuc_status *cp_arange_start(tpuc_lower_ctx *cx) { return arange(cx, 0, 2); }
static tpuc_status *cp_arange_end(tpuc_lower_ctx *cx) { return arange(cx, -1, -1); }

/* v rounded to the output's dtype when that is floating (float16/bfloat16
 * arithmetic emulated in float32), kept in v's dtype. */
static tv in_out_dtype(const tpuc_lower_ctx *cx, tv v) {
  tpuc_dtype o = cx->out_types[0].dtype;
  if (!ir_is_float(o)) return v;
  return ir_convert(cx->g, ir_convert(cx->g, v, o), ir_type_of(cx->g, v).dtype);
}

/* (start, end, steps, *, out): the first half counts up from start, the
 * second half down from end, as PyTorch's CPU kernel (which computes in the
 * output's dtype, rounding each step for float16/bfloat16). */
static tpuc_status *cp_linspace(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type o = cx->out_types[0];
  if (ir_is_complex(o.dtype) || o.ndim != 1) return lx_unimplemented(cx, "output");
  int64_t n = o.dims[0];
  bool integral = !ir_is_float(o.dtype);
  tpuc_dtype acc = integral ? TPUC_F64 : lx_compute_dtype(o.dtype);
  /* the bounds are rounded to the output's dtype first, and so is a floating
   * step (PyTorch computes them in the output's dtype) */
  tv start = ir_convert(g, scalar_of(cx, 0, o.dtype), acc);
  tv end = ir_convert(g, scalar_of(cx, 1, o.dtype), acc);
  if (n <= 1) return ew_finish(cx, broadcast_out(cx, start));
  ir_type t = ir_with_dtype(o, acc);
  tv step = ir_binary(g, IR_DIV, ir_binary(g, IR_SUB, end, start),
                      ir_splat(g, ir_scalar_type(acc), (double)(n - 1)));
  if (!integral) step = in_out_dtype(cx, step);
  step = broadcast_out(cx, step);
  tv i = ir_iota(g, t, 0);
  tv up = ir_binary(g, IR_ADD, broadcast_out(cx, start), in_out_dtype(cx, ir_binary(g, IR_MUL, step, i)));
  tv back = ir_binary(g, IR_SUB, ir_splat(g, t, (double)(n - 1)), i);
  tv down = ir_binary(g, IR_SUB, broadcast_out(cx, end), in_out_dtype(cx, ir_binary(g, IR_MUL, step, back)));
  tv first_half = ir_compare(g, IR_LT, i, ir_splat(g, t, (double)(n / 2)));
  return ew_finish(cx, ir_select(g, first_half, up, down));
}

/* logspace(start, end, steps, base, *, out): base ** linspace, all in
 * float64 as PyTorch's CPU kernel (bounds rounded to the output's dtype,
 * their difference taken in it — float for float16/bfloat16 — then the
 * first half counting up from start, the second down from end; one step:
 * base ** start unrounded). Integer outputs stay on the CPU (below). The XLA CPU
 * plugin runs the float64 math; a TPU has no float64, so there this program
 * needs a float32 variant (not built: untested without a TPU). */
static tpuc_status *cp_logspace(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type o = cx->out_types[0];
  if (ir_is_complex(o.dtype) || o.dtype == TPUC_PRED || o.ndim != 1) return lx_unimplemented(cx, "output");
  /* XLA's CPU compiler contracts end - step * k into one fused multiply-add,
   * so an exponent the CPU computes as exactly 0 can come out -5e-17; a float
   * result differs by an ulp of float64, an integer one (pow truncated) by 1 */
  if (!ir_is_float(o.dtype)) return lx_unimplemented(cx, "logspace: integer output");
  int64_t n = o.dims[0];
  tv base = scalar_of(cx, 3, TPUC_F64);
  if (n == 1) return ew_finish(cx, broadcast_out(cx, ir_binary(g, IR_POW, base, scalar_of(cx, 0, TPUC_F64))));
  tpuc_dtype diff = ir_is_float(o.dtype) ? lx_compute_dtype(o.dtype) : o.dtype;
  tv s0 = scalar_of(cx, 0, o.dtype), e0 = scalar_of(cx, 1, o.dtype);
  tv span = ir_convert(g, ir_binary(g, IR_SUB, ir_convert(g, e0, diff), ir_convert(g, s0, diff)), TPUC_F64);
  tv step = ir_binary(g, IR_DIV, span, ir_splat(g, ir_scalar_type(TPUC_F64), (double)(n > 1 ? n - 1 : 1)));
  ir_type t = ir_with_dtype(o, TPUC_F64);
  tv start = broadcast_out(cx, ir_convert(g, s0, TPUC_F64)), end = broadcast_out(cx, ir_convert(g, e0, TPUC_F64));
  step = broadcast_out(cx, step);
  tv i = ir_iota(g, t, 0);
  tv up = ir_binary(g, IR_ADD, start, ir_binary(g, IR_MUL, step, i));
  tv back = ir_binary(g, IR_SUB, ir_splat(g, t, (double)(n - 1)), i);
  tv down = ir_binary(g, IR_SUB, end, ir_binary(g, IR_MUL, step, back));
  tv first_half = ir_compare(g, IR_LT, i, ir_splat(g, t, (double)(n / 2)));
  tv e = ir_select(g, first_half, up, down);
  return ew_finish(cx, ir_binary(g, IR_POW, broadcast_out(cx, base), e));
}

static tpuc_status *cp_eye(tpuc_lower_ctx *cx) { /* (n, [m,] *, out) */
  ir_graph *g = cx->g;
  ir_type o = cx->out_types[0];
  if (o.ndim != 2) return lx_unimplemented(cx, "output rank");
  ir_type t = ir_with_dtype(o, TPUC_S64);
  return ew_finish(cx, ir_compare(g, IR_EQ, ir_iota(g, t, 0), ir_iota(g, t, 1)));
}

/* ---- the table ---- */

#define E(name, fn) {"aten::" name, fn}

const tpuc_lowering tpuc_lowerings_copy[] = {
    E("copy_", cp_copy_),
    E("copy", cp_copy_),
    E("copy.out", cp_copy_),
    E("_to_copy", cp_self),
    E("_to_copy.out", cp_self),
    E("clone", cp_self),
    E("clone.out", cp_self),
    E("_copy_from", cp_self),
    E("_copy_from.out", cp_self),
    E("arange.start_out", cp_arange_start),
    E("arange.out", cp_arange_end),
    E("linspace.out", cp_linspace),
    E("linspace.Tensor_Tensor_out", cp_linspace),
    E("linspace.Tensor_Scalar_out", cp_linspace),
    E("linspace.Scalar_Tensor_out", cp_linspace),
    E("logspace.out", cp_logspace),
    E("logspace.Tensor_Tensor_out", cp_logspace),
    E("logspace.Tensor_Scalar_out", cp_logspace),
    E("logspace.Scalar_Tensor_out", cp_logspace),
    E("eye.out", cp_eye),
    E("eye.m_out", cp_eye),
    E("full.out", cp_full),
    E("zeros.out", cp_zeros),
    /* autograd's zero gradients (sgn's, for one): PyTorch makes a ZeroTensor,
     * which has no storage; here a tensor of zeros, the same values */
    E("_efficientzerotensor", cp_zeros),
    E("_efficientzerotensor.out", cp_zeros),
    E("ones.out", cp_ones),
    {NULL, NULL},
};
