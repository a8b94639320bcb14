/* dtype.c — the element types' sizes and StableHLO names, the vocabulary the
 * IR, the lowerings, the printer and the runtime share. */
#include "base.h"

static const struct {
  size_t size;
  const char *mlir;
} k_dtypes[TPUC_DTYPE_COUNT] = {
    [TPUC_PRED] = {1, "i1"},
    [TPUC_S8] = {1, "i8"},
    [TPUC_S16] = {2, "i16"},
    [TPUC_S32] = {4, "i32"},
    [TPUC_S64] = {8, "i64"},
    [TPUC_U8] = {1, "ui8"},
    [TPUC_U16] = {2, "ui16"},
    [TPUC_U32] = {4, "ui32"},
    [TPUC_U64] = {8, "ui64"},
    [TPUC_F16] = {2, "f16"},
    [TPUC_BF16] = {2, "bf16"},
    [TPUC_F32] = {4, "f32"},
    [TPUC_F64] = {8, "f64"},
    [TPUC_C64] = {8, "complex<f32>"},
    [TPUC_C128] = {16, "complex<f64>"},
};

size_t tpuc_dtype_size(tpuc_dtype t) {
  return (unsigned)t < TPUC_DTYPE_COUNT ? k_dtypes[t].size : 0;
}

const char *tpuc_dtype_mlir_name(tpuc_dtype t) {
  return (unsigned)t < TPUC_DTYPE_COUNT ? k_dtypes[t].mlir : "?";
}
