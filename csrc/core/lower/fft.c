/* fft.c — lowerings of PyTorch's three FFT primitives, _fft_r2c, _fft_c2r and
 * _fft_c2c (every torch.fft function and their autograd formulas reduce to
 * them), onto StableHLO's fft.
 *
 * PyTorch transforms any list of dims, in any order; StableHLO's fft
 * transforms the trailing 1-3 dims. So the transformed dims are moved last
 * (in `dim`'s order: the last one is the halved one of r2c/c2r), transformed
 * in chunks of at most 3 (a multi-dim DFT is separable), and moved back.
 * r2c: one RFFT over the last chunk, FFT over the others (onesided=false: the
 * real input made complex and a full FFT). c2r: IFFT over the leading
 * chunks, then one IRFFT over the last chunk; the input's last dim is cut or
 * zero-padded to last_dim_size / 2 + 1 first, as PyTorch's c2r reads it.
 *
 * Normalization (PyTorch's fft_norm_mode: 0 none, 1 by 1/sqrt(n), 2 by 1/n,
 * n the product of the signal sizes) is applied whatever the direction;
 * StableHLO's IFFT/IRFFT already divide by n, so an inverse is multiplied
 * back by n (none) or sqrt(n) (by_root_n).
 *
 * Platforms: XLA's CPU compiler runs fft through its own FFT library (any
 * length, f32/f64); a TPU compiler accepts fft over up to 3 trailing dims in
 * f32/complex64 (a TPU has no f64; whether its compiler emulates or refuses a
 * float64 fft is its business, not declined here: untested, no TPU at hand).
 * No custom call is used. f16/bf16 are declined (the CPU
 * has no half-precision FFT either): they run on the CPU fallback. */
#include "lower_ops.h"

enum { NORM_NONE = 0, NORM_ROOT_N = 1, NORM_N = 2 };

static tpuc_dtype real_part_dtype(tpuc_dtype d) { return d == TPUC_C128 ? TPUC_F64 : TPUC_F32; }
static tpuc_dtype complex_dtype(tpuc_dtype d) { return d == TPUC_F64 ? TPUC_C128 : TPUC_C64; }

/* x (real) as a complex value with zero imaginary part. */
static tv to_complex(ir_graph *g, tv x) {
  return ir_binary(g, IR_COMPLEX, x, lx_splat_like(g, x, 0.0));
}

/* x times the real constant s (x real or complex). */
static tv scale_by(ir_graph *g, tv x, double s) {
  if (s == 1.0) return x;
  return ir_binary(g, IR_MUL, x, lx_splat_like(g, x, s));
}

/* The dims of `dim` (normalised, distinct) for a rank-r input, in order, in
 * d[]; their count, or -1 when invalid. */
static int fft_dims(const tpuc_lower_ctx *cx, int r, int64_t *d) {
  const int64_t *v;
  int n = lx_ints(cx, 1, &v);
  if (n < 0 || n > r) return -1;
  for (int i = 0; i < n; i++) {
    if (v[i] < -r || v[i] >= r) return -1;
    d[i] = lx_dim(v[i], r);
    for (int j = 0; j < i; j++)
      if (d[j] == d[i]) return -1;
  }
  return n;
}

/* The permutation moving the k dims d[] last (others first, in order), and
 * its inverse. */
static void perms(int r, const int64_t *d, int k, int64_t *perm, int64_t *inv) {
  int n = 0;
  for (int i = 0; i < r; i++) {
    bool in = false;
    for (int j = 0; j < k; j++) in |= d[j] == i;
    if (!in) perm[n++] = i;
  }
  for (int j = 0; j < k; j++) perm[n++] = d[j];
  for (int i = 0; i < r; i++) inv[perm[i]] = i;
}

/* A complex FFT/IFFT of x (transformed dims last) over its trailing dims
 * [from, to) (rank r), in chunks of at most 3: a chunk not at the end is
 * moved there and back. */
static tv fft_range(ir_graph *g, tv x, ir_fft_kind kind, int from, int to) {
  for (int hi = to; hi > from && x != IR_NONE; hi -= 3) {
    int lo = hi - 3 > from ? hi - 3 : from, n = hi - lo;
    ir_type t = ir_type_of(g, x);
    int r = t.ndim;
    int64_t perm[TPUC_MAX_DIMS], inv[TPUC_MAX_DIMS], lens[3];
    int m = 0;
    for (int i = 0; i < r; i++)
      if (i < lo || i >= hi) perm[m++] = i;
    for (int i = lo; i < hi; i++) perm[m++] = i;
    for (int i = 0; i < r; i++) inv[perm[i]] = i;
    for (int i = 0; i < n; i++) lens[i] = t.dims[lo + i];
    bool moved = hi != r;
    tv y = moved ? ir_transpose(g, x, perm) : x;
    y = ir_fft(g, y, kind, lens, n);
    x = moved ? ir_transpose(g, y, inv) : y;
  }
  return x;
}

/* The factor that turns StableHLO's result into PyTorch's for norm mode
 * `norm` and signal size n; `inverse`: the result is an IFFT/IRFFT's. */
static double norm_factor(int64_t norm, double n, bool inverse) {
  double want = norm == NORM_N ? 1.0 / n : norm == NORM_ROOT_N ? 1.0 / sqrt(n) : 1.0;
  return inverse ? want * n : want;
}

typedef enum { K_R2C, K_C2R, K_C2C } fft_op;

static tpuc_status *lower_fft(tpuc_lower_ctx *cx, fft_op op) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  int r = xt.ndim;
  int64_t d[TPUC_MAX_DIMS], perm[TPUC_MAX_DIMS], inv[TPUC_MAX_DIMS];
  int k = fft_dims(cx, r, d);
  if (k < 0 || (k == 0 && op != K_C2C)) return lx_unimplemented(cx, "fft: dim list not understood");
  if (k == 0 && ir_is_complex(xt.dtype) && ot.dtype == xt.dtype) { /* fftn(x, dim=()): a copy */
    cx->results[0] = lo_out(g, x, ot);
    return NULL;
  }
  int64_t norm = lx_int(cx, 2, NORM_NONE);
  if (norm < NORM_NONE || norm > NORM_N) return lx_unimplemented(cx, "fft: unknown normalization");
  bool real_in = op == K_R2C;
  if (real_in ? !(xt.dtype == TPUC_F32 || xt.dtype == TPUC_F64) : !ir_is_complex(xt.dtype))
    return lx_unimplemented(cx, "fft: element type (f32/f64 real, complex64/128 complex)");
  for (int i = 0; i < r; i++)
    if (xt.dims[i] == 0) return lx_unimplemented(cx, "fft: empty input");
  perms(r, d, k, perm, inv);
  x = ir_transpose(g, x, perm);
  int first = r - k; /* the transformed dims are [first, r) */
  double n = 1;
  tv y = IR_NONE;
  if (op == K_C2C) {
    bool forward = lx_bool(cx, 3, true);
    for (int i = first; i < r; i++) n *= (double)ir_type_of(g, x).dims[i];
    y = fft_range(g, x, forward ? IR_FFT_FFT : IR_FFT_IFFT, first, r);
    y = scale_by(g, y, norm_factor(norm, n, !forward));
  } else if (op == K_R2C) {
    bool onesided = lx_bool(cx, 3, true);
    for (int i = first; i < r; i++) n *= (double)ir_type_of(g, x).dims[i];
    if (!onesided) {
      y = fft_range(g, to_complex(g, x), IR_FFT_FFT, first, r);
    } else {
      int lo = r - 3 > first ? r - 3 : first;
      int64_t lens[3];
      for (int i = lo; i < r; i++) lens[i - lo] = xt.dims[perm[i]];
      y = ir_fft(g, x, IR_FFT_RFFT, lens, r - lo);
      y = fft_range(g, y, IR_FFT_FFT, first, lo);
    }
    y = scale_by(g, y, norm_factor(norm, n, false));
  } else { /* c2r */
    int64_t last = lx_int(cx, 3, -1);
    if (last < 1) return lx_unimplemented(cx, "fft c2r: last_dim_size < 1");
    ir_type t = ir_type_of(g, x);
    int64_t half = last / 2 + 1, have = t.dims[r - 1];
    if (have > half) {
      int64_t st[TPUC_MAX_DIMS] = {0}, lim[TPUC_MAX_DIMS], step[TPUC_MAX_DIMS];
      for (int i = 0; i < r; i++) lim[i] = t.dims[i], step[i] = 1;
      lim[r - 1] = half;
      x = ir_slice(g, x, st, lim, step);
    } else if (have < half) {
      int64_t lo[TPUC_MAX_DIMS] = {0}, hi[TPUC_MAX_DIMS] = {0}, in[TPUC_MAX_DIMS] = {0};
      hi[r - 1] = half - have;
      x = ir_pad(g, x, lo_const(g, t.dtype, 0.0), lo, hi, in);
    }
    for (int i = first; i < r - 1; i++) n *= (double)t.dims[i];
    n *= (double)last;
    int lo = r - 3 > first ? r - 3 : first;
    x = fft_range(g, x, IR_FFT_IFFT, first, lo);
    int64_t lens[3];
    for (int i = lo; i < r; i++) lens[i - lo] = i == r - 1 ? last : t.dims[i];
    y = ir_fft(g, x, IR_FFT_IRFFT, lens, r - lo);
    /* the leading chunks' IFFT divided by their sizes too: undo all of n */
    y = scale_by(g, y, norm_factor(norm, n, true));
  }
  y = ir_transpose(g, y, inv);
  tpuc_dtype want = op == K_C2R ? real_part_dtype(xt.dtype) : op == K_R2C ? complex_dtype(xt.dtype)
                                                                           : xt.dtype;
  if (ot.dtype != want) return lx_unimplemented(cx, "fft: output dtype differs from the input's");
  cx->results[0] = lo_out(g, y, ot);
  return NULL;
}

static tpuc_status *l_r2c(tpuc_lower_ctx *cx) { return lower_fft(cx, K_R2C); }
static tpuc_status *l_c2r(tpuc_lower_ctx *cx) { return lower_fft(cx, K_C2R); }
static tpuc_status *l_c2c(tpuc_lower_ctx *cx) { return lower_fft(cx, K_C2C); }

extern const tpuc_lowering tpuc_lowerings_fft[];
const tpuc_lowering tpuc_lowerings_fft[] = {
    {"aten::_fft_r2c", l_r2c},
    {"aten::_fft_r2c.out", l_r2c},
    {"aten::_fft_c2r", l_c2r},
    {"aten::_fft_c2r.out", l_c2r},
    {"aten::_fft_c2c", l_c2c},
    {"aten::_fft_c2c.out", l_c2c},
    {NULL, NULL},
};
