/* linalg.c — IR builders for the spectral and factorisation primitives of
 * StableHLO: fft (FFT/IFFT/RFFT/IRFFT over the trailing 1-3 dims), cholesky
 * and triangular_solve. Type inference and checks only; emit/emit.c prints
 * them. Attributes: fft [n, lengths...] with the kind in `sub`; cholesky
 * `sub` = lower; triangular_solve `sub` = left | lower << 1 | unit << 2 |
 * transpose_a << 3 (IR_TRANSPOSE_*). */
#include "ir_internal.h"

static bool operand(ir_graph *g, tv x, ir_type *t) {
  if (ir_error(g) || x < 0) return false;
  *t = *ir_typeof(g, x);
  return true;
}

static tpuc_dtype complex_of(tpuc_dtype d) { return d == TPUC_F64 ? TPUC_C128 : TPUC_C64; }
static tpuc_dtype real_of(tpuc_dtype d) { return d == TPUC_C128 ? TPUC_F64 : TPUC_F32; }

tv ir_fft(ir_graph *g, tv x, ir_fft_kind kind, const int64_t *lengths, int n) {
  ir_type t;
  if (!operand(g, x, &t)) return IR_NONE;
  if (n < 1 || n > 3 || n > t.ndim) {
    ir_fail(g, "IR fft: %d transformed dims (1 to 3, at most the rank %d)", n, t.ndim);
    return IR_NONE;
  }
  bool real_in = kind == IR_FFT_RFFT;
  if (real_in ? !(t.dtype == TPUC_F32 || t.dtype == TPUC_F64) : !ir_is_complex(t.dtype)) {
    ir_fail(g, "IR fft: operand of the wrong element type for this fft kind");
    return IR_NONE;
  }
  ir_type r = t;
  int first = t.ndim - n;
  for (int i = 0; i < n; i++) {
    int64_t have = t.dims[first + i], want = lengths[i];
    if (want < 1) {
      ir_fail(g, "IR fft: fft length %lld", (long long)want);
      return IR_NONE;
    }
    /* IRFFT reads lengths[-1] / 2 + 1 values of its last dim; the others match. */
    if (kind == IR_FFT_IRFFT && i == n - 1) want = want / 2 + 1;
    if (have != want) {
      ir_fail(g, "IR fft: dim %d has %lld elements, the fft length asks %lld", first + i,
              (long long)have, (long long)want);
      return IR_NONE;
    }
  }
  if (kind == IR_FFT_RFFT) {
    r.dtype = complex_of(t.dtype);
    r.dims[t.ndim - 1] = lengths[n - 1] / 2 + 1;
  } else if (kind == IR_FFT_IRFFT) {
    r.dtype = real_of(t.dtype);
    r.dims[t.ndim - 1] = lengths[n - 1];
  }
  int64_t a[4] = {n, 0, 0, 0};
  for (int i = 0; i < n; i++) a[1 + i] = lengths[i];
  return ir_node_add(g, N_FFT, kind, r, &x, 1, a, 1 + n);
}

static bool float_or_complex(tpuc_dtype d) {
  return d == TPUC_F32 || d == TPUC_F64 || ir_is_complex(d);
}

tv ir_cholesky(ir_graph *g, tv a, bool lower) {
  ir_type t;
  if (!operand(g, a, &t)) return IR_NONE;
  if (t.ndim < 2 || t.dims[t.ndim - 1] != t.dims[t.ndim - 2] || !float_or_complex(t.dtype)) {
    ir_fail(g, "IR cholesky: operand is not a batch of square f32/f64/complex matrices");
    return IR_NONE;
  }
  return ir_node_add(g, N_CHOLESKY, lower, t, &a, 1, NULL, 0);
}

tv ir_triangular_solve(ir_graph *g, tv a, tv b, bool left, bool lower, bool unit_diagonal,
                       ir_transpose_kind transpose_a) {
  ir_type ta, tb;
  if (!operand(g, a, &ta) || !operand(g, b, &tb)) return IR_NONE;
  int r = ta.ndim;
  bool ok = r >= 2 && tb.ndim == r && ta.dtype == tb.dtype && float_or_complex(ta.dtype) &&
            ta.dims[r - 1] == ta.dims[r - 2];
  for (int i = 0; ok && i < r - 2; i++) ok = ta.dims[i] == tb.dims[i];
  if (ok) ok = ta.dims[r - 1] == tb.dims[left ? r - 2 : r - 1];
  if (!ok) {
    ir_fail(g, "IR triangular_solve: a [..., M, M] and b [..., M, N] (left) or [..., N, M] "
               "of the same batch dims and element type (f32/f64/complex) expected");
    return IR_NONE;
  }
  int sub = (left ? 1 : 0) | (lower ? 2 : 0) | (unit_diagonal ? 4 : 0) | (int)transpose_a << 3;
  tv ops[2] = {a, b};
  return ir_node_add(g, N_TRIANGULAR_SOLVE, sub, tb, ops, 2, NULL, 0);
}
