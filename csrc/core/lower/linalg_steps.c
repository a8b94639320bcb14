/* linalg_steps.c — the column-step driver of the factorizations (LU in
 * linalg_lu.c, Householder QR in linalg_qr.c) and the dynamic matrix slices
 * their steps use.
 *
 * A step works on whole matrices under masks built from the step index j, a
 * rank-0 s32 value, and reads single rows/columns with dynamic_slice at j.
 * lo_run_steps runs k steps either unrolled, j a constant in each (XLA folds
 * the dynamic slices into static ones; the program grows with k), or as one
 * counted ir_loop (stablehlo.while), j the loop counter: a program of
 * constant size, so any k compiles in about the same time. */
#include "lower_ops.h"

tv lo_s32_like(ir_graph *g, tv j, ir_type t) {
  int64_t none = 0;
  return ir_broadcast_in_dim(g, j, ir_with_dtype(t, TPUC_S32), &none);
}

tv lo_mat_dslice(ir_graph *g, tv x, tv r, tv c, int64_t h, int64_t w) {
  ir_type t = ir_type_of(g, x);
  tv st[TPUC_MAX_DIMS];
  int64_t sz[TPUC_MAX_DIMS];
  tv z = ir_s32(g, 0);
  for (int i = 0; i < t.ndim; i++) st[i] = z, sz[i] = t.dims[i];
  st[t.ndim - 2] = r, st[t.ndim - 1] = c;
  sz[t.ndim - 2] = h, sz[t.ndim - 1] = w;
  return ir_dynamic_slice(g, x, st, sz);
}

tv lo_mat_dput(ir_graph *g, tv x, tv u, tv r, tv c) {
  ir_type t = ir_type_of(g, x);
  tv st[TPUC_MAX_DIMS];
  tv z = ir_s32(g, 0);
  for (int i = 0; i < t.ndim; i++) st[i] = z;
  st[t.ndim - 2] = r, st[t.ndim - 1] = c;
  return ir_dynamic_update_slice(g, x, u, st);
}

void lo_run_steps(ir_graph *g, tv *st, int n, int64_t k, int64_t unroll_max, lo_step_fn step) {
  if (k <= unroll_max) {
    for (int64_t j = 0; j < k; j++) step(g, st, ir_s32(g, j));
    return;
  }
  ir_loop l;
  if (!ir_loop_begin(g, &l, st, n)) return;
  tv next[IR_LOOP_MAX];
  for (int i = 0; i < n; i++) next[i] = l.vals[i];
  step(l.body, next, l.counter);
  ir_loop_end(g, &l, k, next, st);
}
