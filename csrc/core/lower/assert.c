/* assert.c — torch._assert_async(cond[, msg]) as a device-side assert.
 *
 * The op has no output: its whole effect is one run-time check (bounds.c's
 * lx_add_check, kind TPUC_CHECK_ASSERT) computed inside the program —
 * {cond == 0, 0} — and returned as the program's extra result. Nothing waits:
 * exec/checks.c keeps the result and reads it at the next synchronisation
 * point (a host read of a storage, tpuc_synchronize), which then raises the
 * assert's message, as CUDA reports a device-side assert; in debug mode the
 * op reads it at once and raises like the CPU. In fused and graph modes the
 * check is part of the chunk's or the graph's program, so an assert neither
 * waits nor ends a chunk.
 *
 * The condition is the CPU's `is_nonzero`: a single element, true when it is
 * not zero (NaN is true, -0.0 is zero, a complex value is zero when both
 * parts are). A condition of zero or several elements raises the CPU's error
 * at the op (no device work is needed to know it). */
#include "../base/base.h" /* tpuc_status_make */
#include "lower_ops.h"

static tpuc_status *assert_async(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, 0);
  if (x == IR_NONE) return lx_unimplemented(cx, "no condition tensor");
  ir_type t = ir_type_of(g, x);
  int64_t n = ir_numel(&t);
  if (n == 0)
    return tpuc_status_make(TPUC_ERR_RUNTIME, "Boolean value of Tensor with no values is ambiguous");
  if (n > 1)
    return tpuc_status_make(TPUC_ERR_RUNTIME,
                            "Boolean value of Tensor with more than one value is ambiguous");
  const tpuc_arg *m = lx_arg(cx, 1);
  const char *msg = m && m->kind == TPUC_ARG_STRING ? m->s : NULL;
  tv v = ir_reshape(g, x, 0, NULL);
  tv nz;
  if (t.dtype == TPUC_PRED) {
    nz = v;
  } else if (ir_is_complex(t.dtype)) {
    tv re = ir_unary(g, IR_REAL, v), im = ir_unary(g, IR_IMAG, v);
    nz = ir_binary(g, IR_OR, ir_compare(g, IR_NE, re, lx_splat_like(g, re, 0.0)),
                   ir_compare(g, IR_NE, im, lx_splat_like(g, im, 0.0)));
  } else {
    nz = ir_compare(g, IR_NE, v, lx_splat_like(g, v, 0.0));
  }
  tv failed = ir_select(g, nz, ir_splat_i64(g, ir_make_type(TPUC_S64, 0, NULL), 0),
                        ir_splat_i64(g, ir_make_type(TPUC_S64, 0, NULL), 1));
  if (!lx_add_check(cx, failed, IR_NONE, TPUC_CHECK_ASSERT, 0, 0, msg))
    return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  return NULL;
}

#define E(name, fn) {"aten::" name, fn, 0}
const tpuc_lowering tpuc_lowerings_assert[] = {
    E("_assert_async", assert_async),
    E("_assert_async.msg", assert_async),
    {NULL, NULL, 0},
};
