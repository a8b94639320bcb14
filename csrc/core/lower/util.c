/* util.c — what every lowering uses: argument access by schema position,
 * broadcasting, dtype coercion. */
#include <stdint.h>
#include <string.h>

#include "../base/base.h"
#include "lower.h"

const tpuc_arg *lx_arg(const tpuc_lower_ctx *cx, int i) {
  return (i >= 0 && i < cx->call->nargs) ? &cx->call->args[i] : NULL;
}

bool lx_is_none(const tpuc_lower_ctx *cx, int i) {
  const tpuc_arg *a = lx_arg(cx, i);
  return !a || a->kind == TPUC_ARG_NONE;
}

tv lx_tensor(const tpuc_lower_ctx *cx, int i) {
  const tpuc_arg *a = lx_arg(cx, i);
  if (!a || a->kind != TPUC_ARG_TENSOR) {
    ir_fail(cx->g, "argument %d is not a tensor", i);
    return IR_NONE;
  }
  return cx->tensor_vals[a->tensors.first];
}

int lx_tensors(const tpuc_lower_ctx *cx, int i, tv *out, int max) {
  const tpuc_arg *a = lx_arg(cx, i);
  if (!a || (a->kind != TPUC_ARG_TENSORS && a->kind != TPUC_ARG_TENSOR)) {
    ir_fail(cx->g, "argument %d is not a tensor list", i);
    return 0;
  }
  int n = a->kind == TPUC_ARG_TENSOR ? 1 : a->tensors.count;
  for (int k = 0; k < n && k < max; k++) out[k] = cx->tensor_vals[a->tensors.first + k];
  return n;
}

const tpuc_tensor *lx_tensor_desc(const tpuc_lower_ctx *cx, int i) {
  const tpuc_arg *a = lx_arg(cx, i);
  if (!a || a->kind != TPUC_ARG_TENSOR) return NULL;
  return &cx->call->tensors[a->tensors.first];
}

int64_t lx_int(const tpuc_lower_ctx *cx, int i, int64_t dflt) {
  const tpuc_arg *a = lx_arg(cx, i);
  if (!a || a->kind == TPUC_ARG_NONE) return dflt;
  if (a->kind == TPUC_ARG_INT || a->kind == TPUC_ARG_BOOL) return a->i;
  if (a->kind == TPUC_ARG_INTS && a->ints.n == 1) return a->ints.v[0];
  ir_fail(cx->g, "argument %d is not an int", i);
  return dflt;
}

int lx_ints(const tpuc_lower_ctx *cx, int i, const int64_t **v) {
  const tpuc_arg *a = lx_arg(cx, i);
  *v = NULL;
  if (!a || a->kind == TPUC_ARG_NONE) return -1;
  if (a->kind == TPUC_ARG_INT) {
    *v = &a->i;
    return 1;
  }
  if (a->kind != TPUC_ARG_INTS && a->kind != TPUC_ARG_BOOLS) {
    ir_fail(cx->g, "argument %d is not an int list", i);
    return -1;
  }
  *v = a->ints.v;
  return a->ints.n;
}

bool lx_bool(const tpuc_lower_ctx *cx, int i, bool dflt) { return lx_int(cx, i, dflt) != 0; }

tv lx_scalar(const tpuc_lower_ctx *cx, int i, tpuc_dtype dtype) {
  const tpuc_arg *a = lx_arg(cx, i);
  if (!a || a->kind == TPUC_ARG_NONE) return IR_NONE;
  if (a->kind != TPUC_ARG_SCALAR) {
    ir_fail(cx->g, "argument %d is not a scalar", i);
    return IR_NONE;
  }
  tv v = cx->scalar_vals[i];
  /* complex -> real keeps the real part, as PyTorch does */
  if (ir_is_complex(ir_typeof(cx->g, v)->dtype) && !ir_is_complex(dtype))
    v = ir_unary(cx->g, IR_REAL, v);
  return ir_convert(cx->g, v, dtype);
}

ir_type lx_out(const tpuc_lower_ctx *cx, int i) { return cx->out_types[i]; }

ir_type ir_type_of(const ir_graph *g, tv v) { return *ir_typeof(g, v); }

ir_type ir_with_dtype(ir_type t, tpuc_dtype d) {
  t.dtype = d;
  return t;
}

ir_type ir_scalar_type(tpuc_dtype d) { return ir_make_type(d, 0, NULL); }

tv lx_convert(ir_graph *g, tv x, tpuc_dtype d) { return ir_convert(g, x, d); }

tv lx_broadcast_to(ir_graph *g, tv x, int ndim, const int64_t *dims) {
  if (x == IR_NONE) return IR_NONE;
  ir_type tx = ir_type_of(g, x);
  if (tx.ndim > ndim) {
    ir_fail(g, "cannot broadcast rank %d to rank %d", tx.ndim, ndim);
    return IR_NONE;
  }
  int64_t bdims[TPUC_MAX_DIMS];
  int lead = ndim - tx.ndim;
  for (int i = 0; i < tx.ndim; i++) bdims[i] = lead + i;
  ir_type t = ir_make_type(tx.dtype, ndim, dims);
  /* size-1 dims that broadcast must be reshaped away only if sizes differ;
   * broadcast_in_dim accepts size 1 -> n directly. */
  return ir_broadcast_in_dim(g, x, t, bdims);
}

/* A float converted to uint8, int8 or int16 as PyTorch's CPU converts it
 * (C leaves an out-of-range conversion undefined; XLA's convert saturates):
 * through int32 (int64 for float64 -> uint8), keeping the low bits, so
 * -8.2 -> 248 and 300 -> 44 as uint8. In the wider type NaN, +-inf and values
 * out of its range become its minimum, x86-64's "integer indefinite" (so 0
 * after the truncation), which is what PyTorch's x86-64 build gives. */
static tv float_to_small_int(ir_graph *g, tv x, tpuc_dtype to) {
  tpuc_dtype from = ir_type_of(g, x).dtype;
  bool wide = from == TPUC_F64 && to == TPUC_U8;
  tpuc_dtype mid = wide ? TPUC_S64 : TPUC_S32;
  double lim = wide ? 9223372036854775808.0 : 2147483648.0; /* 2^63, 2^31 */
  if (from == TPUC_F16 || from == TPUC_BF16) x = ir_convert(g, x, TPUC_F32);
  ir_type t = ir_type_of(g, x);
  tv in_range = ir_binary(g, IR_AND, ir_compare(g, IR_GE, x, ir_splat(g, t, -lim)),
                          ir_compare(g, IR_LT, x, ir_splat(g, t, lim)));
  ir_type ti = ir_with_dtype(t, mid);
  tv indefinite = wide ? ir_splat_i64(g, ti, INT64_MIN) : ir_splat(g, ti, -lim);
  tv wrapped = ir_select(g, in_range, ir_convert(g, x, mid), indefinite);
  return ir_convert(g, wrapped, to);
}

tv lx_convert_cpu(ir_graph *g, tv x, tpuc_dtype to) {
  if (x == IR_NONE) return IR_NONE;
  if (ir_is_float(ir_type_of(g, x).dtype) && (to == TPUC_U8 || to == TPUC_S8 || to == TPUC_S16))
    return float_to_small_int(g, x, to);
  return ir_convert(g, x, to);
}

tv lx_coerce(ir_graph *g, tv x, ir_type t) {
  if (x == IR_NONE) return IR_NONE;
  return lx_broadcast_to(g, lx_convert_cpu(g, x, t.dtype), t.ndim, t.dims);
}

tv lx_splat_like(ir_graph *g, tv like, double value) {
  return ir_splat(g, ir_type_of(g, like), value);
}

int64_t lx_dim(int64_t dim, int ndim) {
  int n = ndim > 0 ? ndim : 1;
  return dim < 0 ? dim + n : dim;
}

tpuc_dtype lx_compute_dtype(tpuc_dtype d) {
  return (d == TPUC_F16 || d == TPUC_BF16) ? TPUC_F32 : d;
}

tpuc_status *lx_unimplemented(const tpuc_lower_ctx *cx, const char *why) {
  return tpuc_status_make(TPUC_ERR_UNIMPLEMENTED, "%s: %s",
                          cx && cx->call && cx->call->op ? tpuc_op_name_of(cx->call->op) : "op",
                          why);
}
