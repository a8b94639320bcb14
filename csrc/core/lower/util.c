/* util.c — what every lowering uses: argument access by schema position,
 * broadcasting, dtype coercion. */
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

tv lx_coerce(ir_graph *g, tv x, ir_type t) {
  if (x == IR_NONE) return IR_NONE;
  return lx_broadcast_to(g, ir_convert(g, x, t.dtype), t.ndim, t.dims);
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
