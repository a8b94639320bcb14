/* registry.c — the table of lowerings, by ATen op name. Immutable: each
 * family file defines its table; a family not built yet is an empty table
 * (weak definition), so families land independently. */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "lower.h"

#define EMPTY_FAMILY(name) \
  __attribute__((weak)) const tpuc_lowering name[] = {{NULL, NULL}}

EMPTY_FAMILY(tpuc_lowerings_elementwise);
EMPTY_FAMILY(tpuc_lowerings_reduce);
EMPTY_FAMILY(tpuc_lowerings_linalg);
EMPTY_FAMILY(tpuc_lowerings_shape);
EMPTY_FAMILY(tpuc_lowerings_index);
EMPTY_FAMILY(tpuc_lowerings_nn);
EMPTY_FAMILY(tpuc_lowerings_random);
EMPTY_FAMILY(tpuc_lowerings_copy);
EMPTY_FAMILY(tpuc_lowerings_nn_extra);
EMPTY_FAMILY(tpuc_lowerings_nn_pool_nd);
EMPTY_FAMILY(tpuc_lowerings_upsample);
EMPTY_FAMILY(tpuc_lowerings_sort);
EMPTY_FAMILY(tpuc_lowerings_grouped_mm);
EMPTY_FAMILY(tpuc_lowerings_count);
EMPTY_FAMILY(tpuc_lowerings_assert);
EMPTY_FAMILY(tpuc_lowerings_fft);
EMPTY_FAMILY(tpuc_lowerings_special);
EMPTY_FAMILY(tpuc_lowerings_special_poly);
EMPTY_FAMILY(tpuc_lowerings_special_misc);
EMPTY_FAMILY(tpuc_lowerings_special_bessel);
EMPTY_FAMILY(tpuc_lowerings_vector);
EMPTY_FAMILY(tpuc_lowerings_nn_margin);
EMPTY_FAMILY(tpuc_lowerings_linalg_lu);
EMPTY_FAMILY(tpuc_lowerings_linalg_qr);
EMPTY_FAMILY(tpuc_lowerings_linalg_eig);
EMPTY_FAMILY(tpuc_lowerings_distance);
EMPTY_FAMILY(tpuc_lowerings_segment);
EMPTY_FAMILY(tpuc_lowerings_nn_pool_frac);
EMPTY_FAMILY(tpuc_lowerings_nn_grid);
EMPTY_FAMILY(tpuc_lowerings_nn_ctc);

static const tpuc_lowering *const k_families[] = {
    tpuc_lowerings_elementwise, tpuc_lowerings_reduce, tpuc_lowerings_linalg,
    tpuc_lowerings_shape,       tpuc_lowerings_index,  tpuc_lowerings_nn,
    tpuc_lowerings_random,      tpuc_lowerings_copy,   tpuc_lowerings_sort,
    tpuc_lowerings_nn_extra,    tpuc_lowerings_nn_pool_nd, tpuc_lowerings_upsample,
    tpuc_lowerings_grouped_mm,
    tpuc_lowerings_count,       tpuc_lowerings_assert, tpuc_lowerings_fft,
    tpuc_lowerings_special,     tpuc_lowerings_special_poly, tpuc_lowerings_special_misc,
    tpuc_lowerings_special_bessel,    tpuc_lowerings_vector, tpuc_lowerings_nn_margin,
    tpuc_lowerings_linalg_lu,   tpuc_lowerings_linalg_qr,   tpuc_lowerings_linalg_eig,
    tpuc_lowerings_distance,    tpuc_lowerings_segment,     tpuc_lowerings_nn_pool_frac,
    tpuc_lowerings_nn_grid,     tpuc_lowerings_nn_ctc,
};
#define NFAMILIES ((int)(sizeof k_families / sizeof k_families[0]))

/* Called once per operator by the glue, so a linear scan is enough. */
const tpuc_op *tpuc_op_find(tpuc_runtime *rt, const char *name) {
  (void)rt;
  if (!name) return NULL;
  for (int f = 0; f < NFAMILIES; f++)
    for (const tpuc_lowering *l = k_families[f]; l->name; l++)
      if (!strcmp(l->name, name)) return (const tpuc_op *)l;
  return NULL;
}

int tpuc_op_count(tpuc_runtime *rt) {
  (void)rt;
  int n = 0;
  for (int f = 0; f < NFAMILIES; f++)
    for (const tpuc_lowering *l = k_families[f]; l->name; l++) n++;
  return n;
}

const char *tpuc_op_name(tpuc_runtime *rt, int i) {
  (void)rt;
  for (int f = 0; f < NFAMILIES; f++)
    for (const tpuc_lowering *l = k_families[f]; l->name; l++)
      if (i-- == 0) return l->name;
  return NULL;
}

const char *tpuc_op_name_of(const tpuc_op *op) { return ((const tpuc_lowering *)op)->name; }

bool tpuc_scalar_is_static(const tpuc_op_call *c, int i) {
  const tpuc_lowering *l = (const tpuc_lowering *)c->op;
  if (i >= 32 || !(l->static_scalars >> i & 1u)) return false;
  const tpuc_arg *a = &c->args[i];
  if (a->kind != TPUC_ARG_SCALAR || a->scalar.kind == TPUC_SCALAR_COMPLEX) return false;
  /* the exponents PyTorch's own kernels special-case; others stay runtime */
  static const double special[] = {-2, -1, -0.5, 0, 0.5, 1, 2, 3};
  for (size_t k = 0; k < sizeof special / sizeof special[0]; k++)
    if (a->scalar.re == special[k]) return true;
  return false;
}

tpuc_lower_fn tpuc_op_lowering(const tpuc_op *op) { return ((const tpuc_lowering *)op)->fn; }

bool tpuc_op_is_pointwise(const tpuc_op *op) {
  static _Atomic size_t count; /* the family's entries; counted once (a race counts twice) */
  size_t n = atomic_load_explicit(&count, memory_order_relaxed);
  if (!n) {
    /* (read through a volatile pointer: GCC folds reads of the weak empty table above) */
    const tpuc_lowering *volatile table = tpuc_lowerings_elementwise;
    while (table[n].name) n++;
    atomic_store_explicit(&count, n, memory_order_relaxed);
  }
  uintptr_t p = (uintptr_t)op, lo = (uintptr_t)tpuc_lowerings_elementwise;
  return p >= lo && p < lo + n * sizeof(tpuc_lowering);
}
