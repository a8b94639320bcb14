/* bounds.c — the run-time bounds check of index values that the indexing
 * lowerings (index.c) attach when checks are on: XLA clamps out-of-range
 * gather indices and drops out-of-range scatter updates, so without it an
 * out-of-range index is a silent wrong answer. The check is computed inside
 * the op's own program — no extra launch, no host wait — as an s64[2]
 * {failed, first offending value in row-major order}; the engine returns it
 * as an extra result (exec/checks.c). lx_add_check appends any check (the
 * one of torch._assert_async too, lower/assert.c); lx_check_target checks a
 * loss's class targets (nll_loss, lower/nn.c). */
#include <stdlib.h>

#include "lower_ops.h"

bool lx_add_check(tpuc_lower_ctx *cx, tv failed, tv value, tpuc_check_kind kind, int dim,
                  int64_t size, const char *msg) {
  tpuc_checks *ck = cx->checks;
  if (!ck) return false;
  if (ck->n == ck->cap) {
    int cap = ck->cap ? ck->cap * 2 : 8;
    tpuc_check *nv = realloc(ck->v, (size_t)cap * sizeof *nv);
    if (!nv) {
      ck->oom = true;
      return false;
    }
    ck->v = nv;
    ck->cap = cap;
  }
  ir_graph *g = cx->g;
  int64_t one = 1;
  if (value == IR_NONE) value = ir_splat_i64(g, ir_make_type(TPUC_S64, 0, NULL), 0);
  tv parts[2] = {ir_reshape(g, failed, 1, &one), ir_reshape(g, value, 1, &one)};
  ck->v[ck->n++] = (tpuc_check){ir_concat(g, parts, 2, 0), kind, dim, size, NULL, msg};
  return true;
}

/* The check of `idx` against [lo_bound, size), positions equal to `except`
 * (when has_except) allowed. */
static void check_range(tpuc_lower_ctx *cx, tv idx, int64_t lo_bound, int64_t size,
                        bool has_except, int64_t except, tpuc_check_kind kind, int dim) {
  tpuc_checks *ck = cx->checks;
  if (!ck || !ck->bounds || idx == IR_NONE) return;
  ir_graph *g = cx->g;
  ir_type t = ir_type_of(g, idx);
  if (t.dtype == TPUC_PRED || ir_is_float(t.dtype) || ir_is_complex(t.dtype)) return;
  int64_t n = ir_numel(&t);
  if (n == 0) return;
  tv flat = ir_reshape(g, ir_convert(g, idx, TPUC_S64), 1, &n);
  ir_type ft = ir_make_type(TPUC_S64, 1, &n);
  tv lo = ir_compare(g, IR_LT, flat, ir_splat_i64(g, ft, lo_bound));
  tv hi = ir_compare(g, IR_GE, flat, ir_splat_i64(g, ft, size));
  tv bad = ir_binary(g, IR_OR, lo, hi);
  if (has_except)
    bad = ir_binary(g, IR_AND, bad, ir_compare(g, IR_NE, flat, ir_splat_i64(g, ft, except)));
  /* the first bad position (n when none), then the value there */
  tv pos_iota = ir_iota(g, ft, 0);
  int64_t d0 = 0;
  tv first = lo_reduce(g, ir_select(g, bad, pos_iota, ir_splat_i64(g, ft, n)), IR_RED_MIN, &d0, 1,
                       false);
  tv at_first = ir_compare(g, IR_EQ, pos_iota, lx_broadcast_to(g, first, 1, &n));
  tv value = lo_pick_sum(g, ir_select(g, at_first, flat, ir_splat_i64(g, ft, 0)), &d0, 1, false);
  ir_type s = ir_make_type(TPUC_S64, 0, NULL);
  tv failed = ir_convert(g, ir_compare(g, IR_LT, first, ir_splat_i64(g, s, n)), TPUC_S64);
  lx_add_check(cx, failed, value, kind, dim, size, NULL);
}

void lx_check_index(tpuc_lower_ctx *cx, tv idx, int64_t size, bool allow_negative,
                    tpuc_check_kind kind, int dim) {
  check_range(cx, idx, allow_negative ? -size : 0, size, false, 0, kind, dim);
}

void lx_check_target(tpuc_lower_ctx *cx, tv target, int64_t classes, int64_t ignore) {
  check_range(cx, target, 0, classes, true, ignore, TPUC_CHECK_TARGET, 1);
}
