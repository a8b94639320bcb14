/* count.c — counting and membership: histc (every dtype CUDA or the CPU
 * runs it for) and isin (its three overloads, invert and out= included).
 *
 * histc(self, bins, min, max): equal-width bins over [lo, hi], the last bin
 * closed, values outside (and NaN) not counted. When min == max the data's
 * own min and max are used, widened by one on each side when they are equal
 * too (computed in the program: no host round trip). The bin of a value is
 *   floating point: (v - lo) * bins / (hi - lo), each step rounded in the
 *                   input's dtype, then truncated — the CPU kernel's formula
 *                   (histogramdd's linear interpolation, without its local
 *                   search); lo and hi are min and max rounded to the dtype;
 *   integers:       (v - lo) * bins / (hi - lo) in int64 with integer
 *                   division — CUDA's kernel (the CPU has none); lo and hi
 *                   are min and max truncated to int64 (Scalar::to<int64_t>).
 * A bin index equal to `bins` (v == hi) goes to the last bin. Counts are
 * exact (summed in s64) and converted to the output dtype; the CPU sums
 * f16/bf16 counts in the dtype itself, which stops growing past 2048/256.
 * Small inputs count by a one-hot compare and a sum over the elements (a
 * matrix-friendly form); large ones by a scatter-add into bins + 1 slots,
 * the extra slot taking the values not counted. What PyTorch checks on the
 * host from the data (a non-finite data range) is not checked here.
 *
 * isin(elements, test_elements, assume_unique, invert): both converted to
 * their result_type, as the CPU kernel does, then every element compared
 * with every test element and OR-reduced (NaN is in no set). Declined above
 * 2^26 comparisons (the CPU then sorts). */
#include "elementwise.h"
#include "lower_ops.h"

/* Above this many (elements x bins) pairs histc scatters instead. */
#define HISTC_ONEHOT_MAX ((int64_t)1 << 22)
#define ISIN_PAIRS_MAX ((int64_t)1 << 26)

static const int64_t k_none[1] = {0}; /* broadcast_in_dim of a rank-0 value */

static tv flatten(ir_graph *g, tv x) {
  ir_type t = ir_type_of(g, x);
  int64_t n = ir_numel(&t);
  return ir_reshape(g, x, 1, &n);
}

/* x's min and max over every element (rank 0). */
static void data_range(ir_graph *g, tv flat, tv *mn, tv *mx) {
  int64_t d0 = 0;
  *mn = lo_reduce(g, flat, IR_RED_MIN, &d0, 1, false);
  *mx = lo_reduce(g, flat, IR_RED_MAX, &d0, 1, false);
}

/* histc(self, bins=100, min=0, max=0) [+ out]. */
static tpuc_status *ct_histc(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, 0);
  ir_type t = ir_type_of(g, x);
  ir_type ot = lx_out(cx, 0);
  int64_t nbins = lx_int(cx, 1, 100);
  tpuc_dtype d = t.dtype;
  bool is_float = ir_is_float(d);
  if (!is_float && !ir_is_int(d)) return lx_unimplemented(cx, "histc of bool or complex");
  if (nbins <= 0 || ot.ndim != 1 || ot.dims[0] != nbins) return lx_unimplemented(cx, "bins");
  int64_t n = ir_numel(&t);
  if (n == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  /* the arithmetic type: the dtype itself for floats, int64 for integers */
  tpuc_dtype a = is_float ? d : TPUC_S64;
  tv v = ir_convert(g, flatten(g, x), a);
  tv lo = lx_scalar(cx, 2, a), hi = lx_scalar(cx, 3, a);
  if (lo == IR_NONE) lo = lo_const(g, a, 0.0);
  if (hi == IR_NONE) hi = lo_const(g, a, 0.0);
  /* min == max: the data's range; still equal: widened by one each side */
  tv dmin, dmax;
  data_range(g, v, &dmin, &dmax);
  tv same = ir_compare(g, IR_EQ, lo, hi);
  lo = ir_select(g, same, dmin, lo);
  hi = ir_select(g, same, dmax, hi);
  tv one = lo_const(g, a, 1.0);
  tv flat_range = ir_compare(g, IR_EQ, lo, hi);
  lo = ir_select(g, flat_range, ir_binary(g, IR_SUB, lo, one), lo);
  hi = ir_select(g, flat_range, ir_binary(g, IR_ADD, hi, one), hi);

  ir_type vt = ir_type_of(g, v);
  tv lo_n = ir_broadcast_in_dim(g, lo, vt, k_none), hi_n = ir_broadcast_in_dim(g, hi, vt, k_none);
  tv inside = ir_binary(g, IR_AND, ir_compare(g, IR_GE, v, lo_n), ir_compare(g, IR_LE, v, hi_n));
  tv width = ir_broadcast_in_dim(g, ir_binary(g, IR_SUB, hi, lo), vt, k_none);
  tv scaled = ir_binary(g, IR_MUL, ir_binary(g, IR_SUB, v, lo_n), ir_splat(g, vt, (double)nbins));
  tv q = ir_binary(g, IR_DIV, ir_select(g, inside, scaled, ir_splat(g, vt, 0.0)), width);
  ir_type it = ir_with_dtype(vt, TPUC_S64);
  tv bin = ir_convert(g, q, TPUC_S64); /* truncation toward zero; q >= 0 inside */
  bin = ir_clamp(g, lo_const(g, TPUC_S64, 0.0), bin, lo_const(g, TPUC_S64, (double)(nbins - 1)));

  tv counts;
  if (n * nbins <= HISTC_ONEHOT_MAX) {
    ir_type pt = ir_make_type(TPUC_S64, 2, (int64_t[]){n, nbins});
    tv b2 = ir_broadcast_in_dim(g, bin, pt, (int64_t[]){0});
    tv in2 = ir_broadcast_in_dim(g, inside, ir_with_dtype(pt, TPUC_PRED), (int64_t[]){0});
    tv hit = ir_binary(g, IR_AND, ir_compare(g, IR_EQ, b2, ir_iota(g, pt, 1)), in2);
    int64_t d0 = 0;
    counts = lo_sum(g, ir_convert(g, hit, TPUC_S64), &d0, 1, false);
  } else {
    /* values not counted go to slot `nbins`, dropped after */
    tv slot = ir_select(g, inside, bin, ir_splat(g, it, (double)nbins));
    int64_t nd[2] = {n, 1};
    tv idx = ir_reshape(g, slot, 2, nd);
    ir_scatter_dims sd;
    memset(&sd, 0, sizeof sd);
    sd.inserted_window_dims[sd.n_inserted++] = 0;
    sd.scatter_dims_to_operand_dims[sd.n_scatter_dims++] = 0;
    sd.index_vector_dim = 1;
    int64_t nb1 = nbins + 1;
    tv zeros = ir_splat(g, ir_make_type(TPUC_S64, 1, &nb1), 0.0);
    tv all = ir_scatter(g, zeros, idx, ir_splat(g, it, 1.0), &sd, IR_RED_SUM);
    int64_t s0 = 0, s1 = nbins, st = 1;
    counts = ir_slice(g, all, &s0, &s1, &st);
  }
  cx->results[0] = ir_convert(g, counts, ot.dtype);
  return NULL;
}

/* isin: elements at arg 0 (a tensor, or a Scalar for isin.Scalar_Tensor),
 * test elements at arg 1 (a tensor, or a Scalar for isin.Tensor_Scalar),
 * assume_unique at 2 (unused: the answer is the same), invert at 3. */
static tpuc_status *ct_isin(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  int idx[2] = {0, 1};
  tpuc_dtype d = ew_result_type(cx, idx, 2);
  if (d == EW_UNDEFINED || ir_is_complex(d)) return lx_unimplemented(cx, "isin of complex");
  bool invert = lx_bool(cx, 3, false);
  const tpuc_arg *ta = lx_arg(cx, 1);
  ir_type tt = ir_make_type(d, 0, NULL);
  if (ta && ta->kind == TPUC_ARG_TENSOR) {
    const tpuc_tensor *td = lx_tensor_desc(cx, 1);
    tt = ir_make_type(d, td->ndim, td->sizes);
  }
  int64_t ne = ir_numel(&ot), nt = ir_numel(&tt);
  if (ne == 0 || nt == 0) {
    cx->results[0] = ir_splat(g, ot, invert ? 1.0 : 0.0);
    return NULL;
  }
  if (ne * nt > ISIN_PAIRS_MAX) return lx_unimplemented(cx, "isin: more than 2^26 comparisons");
  tv e = flatten(g, ew_operand(cx, 0, ir_with_dtype(ot, d)));
  tv s = flatten(g, ew_operand(cx, 1, tt));
  ir_type pt = ir_make_type(d, 2, (int64_t[]){ne, nt});
  tv eq = ir_compare(g, IR_EQ, ir_broadcast_in_dim(g, e, pt, (int64_t[]){0}),
                     ir_broadcast_in_dim(g, s, pt, (int64_t[]){1}));
  int64_t d1 = 1;
  tv any = lo_reduce(g, eq, IR_RED_OR, &d1, 1, false);
  if (invert) any = ir_unary(g, IR_NOT, any);
  cx->results[0] = ir_reshape(g, any, ot.ndim, ot.dims);
  return NULL;
}

/* nonzero_static(self, *, size, fill_value=-1) -> s64 [size, ndim]: the
 * coordinates of the first `size` non-zero elements in row-major order, rows
 * past the count filled with fill_value. Keys iota (non-zero) and iota + n
 * (zero) sorted ascending put the non-zero flat indices first, in order. */
static tpuc_status *ct_nonzero_static(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  int64_t size = ot.dims[0], nd = xt.ndim, n = ir_numel(&xt);
  double fill = (double)lx_int(cx, 2, -1);
  if (ir_is_complex(xt.dtype)) return lx_unimplemented(cx, "complex input");
  if (size == 0 || nd == 0 || n == 0) {
    if (nd == 0 && n == 1 && size > 0) { /* a 0-d input: [size, 0], nothing to fill */
      cx->results[0] = ir_splat(g, ot, fill);
      return NULL;
    }
    cx->results[0] = ir_splat(g, ot, fill);
    return NULL;
  }
  tv flat = ir_reshape(g, x, 1, &n);
  tv nz = xt.dtype == TPUC_PRED ? flat : ir_compare(g, IR_NE, flat, ew_splat(g, flat, 0.0));
  ir_type it = ir_make_type(TPUC_S64, 1, &n);
  tv iota = ir_iota(g, it, 0);
  tv keys = ir_select(g, nz, iota, ir_binary(g, IR_ADD, iota, ir_splat(g, it, (double)n)));
  tv sorted, perm;
  ir_sort(g, keys, 0, false, &sorted, &perm);
  if (size > n) {
    int64_t extra = size - n;
    tv parts[2] = {sorted, ir_splat(g, ir_make_type(TPUC_S64, 1, &extra), (double)(2 * n))};
    sorted = ir_concat(g, parts, 2, 0);
  } else if (size < n) {
    int64_t lo = 0, hi = size, st = 1;
    sorted = ir_slice(g, sorted, &lo, &hi, &st);
  }
  ir_type ct = ir_make_type(TPUC_S64, 1, &size);
  tv valid = ir_compare(g, IR_LT, sorted, ir_splat(g, ct, (double)n));
  tv cols[TPUC_MAX_DIMS];
  int64_t stride = 1, one[2] = {size, 1};
  for (int64_t d = nd - 1; d >= 0; d--) {
    tv c = ir_binary(g, IR_DIV, sorted, ir_splat(g, ct, (double)stride));
    c = ir_binary(g, IR_REM, c, ir_splat(g, ct, (double)xt.dims[d]));
    c = ir_select(g, valid, c, ir_splat(g, ct, fill));
    cols[d] = ir_reshape(g, c, 2, one);
    stride *= xt.dims[d];
  }
  cx->results[0] = lo_out(g, ir_concat(g, cols, (int)nd, 1), ot);
  return NULL;
}

/* hash_tensor(self, dim=[], *, keepdim=False, mode=0) -> u64: mode 0 xors
 * the elements' bit patterns as PyTorch's CPU kernel does, floats as float64
 * and integers and bool as int64 (sign-extended). */
static tpuc_status *ct_hash_tensor(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  if (lx_int(cx, 3, 0) != 0) return lx_unimplemented(cx, "hash_tensor: a mode other than 0");
  if (ir_is_complex(xt.dtype)) return lx_unimplemented(cx, "hash_tensor: complex input");
  tv w = ir_convert(g, x, ir_is_float(xt.dtype) ? TPUC_F64 : TPUC_S64);
  tv bits = ir_bitcast(g, w, ir_with_dtype(ir_type_of(g, w), TPUC_U64));
  const int64_t *dv = NULL;
  int nd = lx_ints(cx, 1, &dv);
  int64_t dims[TPUC_MAX_DIMS];
  int n = 0;
  if (nd <= 0 || xt.ndim == 0) { /* all dims (a 0-d input's dim 0 or -1 names itself) */
    for (int d = 0; d < xt.ndim; d++) dims[n++] = d;
  } else {
    for (int i = 0; i < nd && n < TPUC_MAX_DIMS; i++) dims[n++] = lx_dim(dv[i], xt.ndim);
  }
  tv r = ir_reduce(g, bits, ir_splat(g, ir_scalar_type(TPUC_U64), 0.0), IR_RED_XOR, dims, n);
  cx->results[0] = ir_reshape(g, r, ot.ndim, ot.dims);
  return NULL;
}

#define E(name, fn) {"aten::" name, fn, 0}

const tpuc_lowering tpuc_lowerings_count[] = {
    E("nonzero_static", ct_nonzero_static),
    E("hash_tensor", ct_hash_tensor),
    E("hash_tensor.out", ct_hash_tensor),
    E("nonzero_static.out", ct_nonzero_static),
    E("histc", ct_histc),
    E("histc.out", ct_histc),
    E("isin.Tensor_Tensor", ct_isin),
    E("isin.Tensor_Tensor_out", ct_isin),
    E("isin.Tensor_Scalar", ct_isin),
    E("isin.Tensor_Scalar_out", ct_isin),
    E("isin.Scalar_Tensor", ct_isin),
    E("isin.Scalar_Tensor_out", ct_isin),
    {NULL, NULL, 0},
};
