/* upsample.c — nearest, nearest-exact, (bi/tri)linear and bicubic
 * upsampling over 1, 2 or 3 spatial dims (bicubic: 2), antialiased bilinear
 * and bicubic (2; below), and their backward. Separable: each spatial dim
 * is resampled on its own with source indices (and linear weights) that
 * are computed in the graph exactly as PyTorch's CPU kernels do, in f32
 * (f64 for f64 data): the optional `float?` scales are runtime scalars, so
 * a new scale factor with the same sizes never recompiles. Forward is a
 * gather per dim; backward a scatter-add per dim. */
#include "lower_ops.h"

typedef enum { UP_NEAREST, UP_NEAREST_EXACT, UP_LINEAR, UP_CUBIC } up_mode;



/* Where output positions 0..out-1 of one dim read from (in: the input
 * size): i0 (and for linear i1 with weights l0, l1, [out] in ct).
 * scale: the op's `float?` scale for this dim (f64 rank 0) or IR_NONE. */
typedef struct {
  tv i0, i1, l0, l1;
  tv ci[4], cw[4]; /* bicubic: the 4 taps' indices and weights */
} up_axis;

/* PyTorch's cubic convolution weights (A = -0.75) of the 4 taps around a
 * source position with fraction t, and their indices floor - 1 .. floor + 2
 * clamped to the input (upsample_get_value_bounded). */
static void up_cubic(ir_graph *g, up_axis *a, tv real, tv last, tpuc_dtype ct) {
  ir_type vt = ir_type_of(g, real), it = ir_with_dtype(vt, TPUC_S64);
  tv fl = ir_unary(g, IR_FLOOR, real), t = ir_binary(g, IR_SUB, real, fl);
  tv base = ir_convert(g, fl, TPUC_S64);
  const double A = -0.75;
#define C(v) ir_splat(g, vt, (v))
#define MUL(x, y) ir_binary(g, IR_MUL, x, y)
#define ADD(x, y) ir_binary(g, IR_ADD, x, y)
#define SUB(x, y) ir_binary(g, IR_SUB, x, y)
  /* conv1(x) = ((A + 2) x - (A + 3)) x x + 1;  conv2(x) = ((A x - 5A) x + 8A) x - 4A */
#define CONV1(x) ADD(MUL(MUL(SUB(MUL(C(A + 2), x), C(A + 3)), x), x), C(1.0))
#define CONV2(x) SUB(MUL(ADD(MUL(SUB(MUL(C(A), x), C(5 * A)), x), C(8 * A)), x), C(4 * A))
  tv x2 = SUB(C(1.0), t);
  a->cw[0] = CONV2(ADD(t, C(1.0)));
  a->cw[1] = CONV1(t);
  a->cw[2] = CONV1(x2);
  a->cw[3] = CONV2(ADD(x2, C(1.0)));
#undef CONV1
#undef CONV2
#undef C
#undef MUL
#undef ADD
#undef SUB
  (void)ct;
  for (int k = 0; k < 4; k++)
    a->ci[k] = ir_clamp(g, ir_splat_i64(g, it, 0), ir_binary(g, IR_ADD, base, ir_splat_i64(g, it, k - 1)), last);
}

/* The ratio in / out as area_pixel_compute_scale computes it in ct (rank 0):
 * with align_corners (in - 1) / (out - 1); else 1 / scale for a given
 * scale > 0 (the op's `float?`, f64 rank 0, or IR_NONE), else in / out. */
static tv up_ratio(ir_graph *g, bool align_corners, int64_t in, int64_t out, tv scale,
                   tpuc_dtype ct) {
  if (align_corners) {
    double r = 0.0;
    if (out > 1) r = ct == TPUC_F64 ? (double)(in - 1) / (double)(out - 1)
                                    : (double)((float)(in - 1) / (float)(out - 1));
    return lo_const(g, ct, r);
  }
  double r = ct == TPUC_F64 ? (double)in / (double)out : (double)((float)in / (float)out);
  tv ratio = lo_const(g, ct, r);
  if (scale != IR_NONE) { /* scale > 0 ? (ct)(1.0 / scale) : in / out */
    tv inv = ir_convert(g, ir_binary(g, IR_DIV, lo_const(g, TPUC_F64, 1.0), scale), ct);
    tv pos = ir_compare(g, IR_GT, scale, lo_const(g, TPUC_F64, 0.0));
    ratio = ir_select(g, pos, inv, ratio);
  }
  return ratio;
}

static up_axis up_source(ir_graph *g, up_mode mode, bool align_corners, int64_t in, int64_t out,
                         tv scale, tpuc_dtype ct) {
  up_axis a;
  a.i0 = a.i1 = a.l0 = a.l1 = IR_NONE;
  int64_t od = out;
  ir_type vt = ir_make_type(ct, 1, &od);
  tv ratio = ir_broadcast_in_dim(
      g, up_ratio(g, (mode == UP_LINEAR || mode == UP_CUBIC) && align_corners, in, out, scale, ct),
      vt, NULL);
  tv i = ir_convert(g, ir_iota(g, ir_make_type(TPUC_S64, 1, &od), 0), ct);
  ir_type it = ir_make_type(TPUC_S64, 1, &od);
  tv last = ir_splat_i64(g, it, in - 1);
  if (mode == UP_NEAREST || mode == UP_NEAREST_EXACT) {
    if (mode == UP_NEAREST_EXACT) i = ir_binary(g, IR_ADD, i, ir_splat(g, vt, 0.5));
    tv src = ir_convert(g, ir_unary(g, IR_FLOOR, ir_binary(g, IR_MUL, i, ratio)), TPUC_S64);
    a.i0 = ir_binary(g, IR_MIN, src, last);
    return a;
  }
  tv real;
  if (align_corners) {
    real = ir_binary(g, IR_MUL, ratio, i);
  } else {
    real = ir_binary(g, IR_SUB,
                     ir_binary(g, IR_MUL, ratio, ir_binary(g, IR_ADD, i, ir_splat(g, vt, 0.5))),
                     ir_splat(g, vt, 0.5));
    if (mode != UP_CUBIC) real = ir_binary(g, IR_MAX, real, ir_splat(g, vt, 0.0)); /* cubic: no clamp */
  }
  if (mode == UP_CUBIC) {
    up_cubic(g, &a, real, last, ct);
    return a;
  }
  a.i0 = ir_binary(g, IR_MIN, ir_convert(g, ir_unary(g, IR_FLOOR, real), TPUC_S64), last);
  tv step = ir_convert(g, ir_compare(g, IR_LT, a.i0, last), TPUC_S64);
  a.i1 = ir_binary(g, IR_ADD, a.i0, step);
  a.l1 = ir_clamp(g, lo_const(g, ct, 0.0), ir_binary(g, IR_SUB, real, ir_convert(g, a.i0, ct)),
                  lo_const(g, ct, 1.0));
  a.l0 = ir_binary(g, IR_SUB, ir_splat(g, vt, 1.0), a.l1);
  return a;
}

/* A [n] weight vector along `dim` of type t. */
static tv up_along(ir_graph *g, tv w, int dim, ir_type t) {
  int64_t bd = dim;
  t.dtype = lo_dtype(g, w);
  return ir_broadcast_in_dim(g, w, t, &bd);
}

/* Arguments: forward (self, output_size, [align_corners,] scales...);
 * backward (grad_output, output_size, input_size, [align_corners,]
 * scales...). nsp spatial dims (the last ones). */
static tpuc_status *lower_upsample(tpuc_lower_ctx *cx, up_mode mode, int nsp, bool backward) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim != nsp + 2 || ot.ndim != nsp + 2) return lx_unimplemented(cx, "upsample rank");
  bool interp = mode == UP_LINEAR || mode == UP_CUBIC;
  if (interp && !ir_is_float(xt.dtype)) return lx_unimplemented(cx, "linear upsample of integers");
  if (mode == UP_CUBIC && xt.dtype != TPUC_F32 && xt.dtype != TPUC_F64) /* the CPU sums its 16 taps in them */
    return lx_unimplemented(cx, "bicubic upsample of float16/bfloat16");
  int a = backward ? 3 : 2;
  bool ac = false;
  if (interp) ac = lx_bool(cx, a++, false);
  /* in: the op's input sizes; out: its output sizes */
  const int64_t *in = backward ? ot.dims : xt.dims, *out = backward ? xt.dims : ot.dims;
  tpuc_dtype ct = xt.dtype == TPUC_F64 ? TPUC_F64 : TPUC_F32;
  if (ir_numel(&ot) == 0 || ir_numel(&xt) == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  tpuc_dtype dd = ir_is_float(xt.dtype) ? lx_compute_dtype(xt.dtype) : xt.dtype;
  tv v = ir_convert(g, x, dd);
  for (int s = 0; s < nsp; s++) {
    int dim = 2 + s;
    int64_t i_n = in[dim], o_n = out[dim];
    up_axis ax = up_source(g, mode, ac, i_n, o_n, lx_scalar(cx, a + s, TPUC_F64), ct);
    ir_type vt = ir_type_of(g, v);
    if (mode == UP_CUBIC && !backward) {
      vt.dims[dim] = o_n;
      tv acc = IR_NONE;
      for (int k = 0; k < 4; k++) {
        tv term = ir_binary(g, IR_MUL, lo_take_dim(g, v, dim, ax.ci[k]), up_along(g, ir_convert(g, ax.cw[k], dd), dim, vt));
        acc = acc == IR_NONE ? term : ir_binary(g, IR_ADD, acc, term);
      }
      v = acc;
    } else if (mode == UP_CUBIC) {
      ir_type rt = vt;
      rt.dims[dim] = i_n;
      tv upd[4];
      for (int k = 0; k < 4; k++) upd[k] = ir_binary(g, IR_MUL, v, up_along(g, ir_convert(g, ax.cw[k], dd), dim, vt));
      v = lo_put_dim(g, ir_splat(g, rt, 0.0), dim, ir_concat(g, ax.ci, 4, 0), ir_concat(g, upd, 4, dim), IR_RED_SUM);
    } else if (!backward) {
      if (mode != UP_LINEAR) {
        v = lo_take_dim(g, v, dim, ax.i0);
      } else {
        vt.dims[dim] = o_n;
        tv w0 = up_along(g, ir_convert(g, ax.l0, dd), dim, vt);
        tv w1 = up_along(g, ir_convert(g, ax.l1, dd), dim, vt);
        v = ir_binary(g, IR_ADD, ir_binary(g, IR_MUL, lo_take_dim(g, v, dim, ax.i0), w0),
                      ir_binary(g, IR_MUL, lo_take_dim(g, v, dim, ax.i1), w1));
      }
    } else {
      ir_type rt = vt;
      rt.dims[dim] = i_n;
      tv zero = ir_splat(g, rt, 0.0);
      if (mode != UP_LINEAR) {
        v = lo_put_dim(g, zero, dim, ax.i0, v, IR_RED_SUM);
      } else {
        tv w0 = up_along(g, ir_convert(g, ax.l0, dd), dim, vt);
        tv w1 = up_along(g, ir_convert(g, ax.l1, dd), dim, vt);
        tv upd[2] = {ir_binary(g, IR_MUL, v, w0), ir_binary(g, IR_MUL, v, w1)};
        tv idx[2] = {ax.i0, ax.i1};
        v = lo_put_dim(g, zero, dim, ir_concat(g, idx, 2, 0), ir_concat(g, upd, 2, dim), IR_RED_SUM);
      }
    }
  }
  cx->results[0] = lo_fit(g, v, ot);
  return NULL;
}

/* ---- antialiased bilinear and bicubic (_upsample_*2d_aa) ----
 * PyTorch's CPU kernel (as Pillow) gives output position o of a dim the
 * input window [xmin, xmin + xsize) around center = ratio (o + 0.5), of
 * half-width support = taps/2 * max(ratio, 1), each input p weighted by
 * filter((p - center + 0.5) / max(ratio, 1)), normalized to sum 1 (taps 2:
 * the triangle; 4: the cubic with A = -0.5). Here each resized dim is one
 * dot with the dense [out, in] matrix of those weights (zero outside the
 * window), built in the graph: the window ends are computed in the CPU's own
 * mix of float and double (they decide which inputs count), the weights in
 * f64 (closer to exact than the CPU's float ones). The last dim is resampled
 * first, as on the CPU; the backward applies the transposed matrices. */

static tv aa_filter(ir_graph *g, tv x, int taps) {
  ir_type t = ir_type_of(g, x);
#define C(v) ir_splat(g, t, (v))
#define MUL(a, b) ir_binary(g, IR_MUL, a, b)
#define ADD(a, b) ir_binary(g, IR_ADD, a, b)
#define SUB(a, b) ir_binary(g, IR_SUB, a, b)
  x = ir_unary(g, IR_ABS, x);
  if (taps == 2) return ir_binary(g, IR_MAX, SUB(C(1.0), x), C(0.0));
  const double A = -0.5;
  tv near = ADD(MUL(MUL(SUB(MUL(C(A + 2), x), C(A + 3)), x), x), C(1.0));
  tv far = SUB(MUL(ADD(MUL(SUB(MUL(C(A), x), C(5 * A)), x), C(8 * A)), x), C(4 * A));
  tv r = ir_select(g, ir_compare(g, IR_LT, x, C(2.0)), far, C(0.0));
  return ir_select(g, ir_compare(g, IR_LT, x, C(1.0)), near, r);
#undef C
#undef MUL
#undef ADD
#undef SUB
}

/* The [out, in] weights of one dim, in the data's dtype ct. */
static tv aa_weights(ir_graph *g, int taps, bool align_corners, int64_t in, int64_t out,
                     tv scale, tpuc_dtype ct) {
  const tpuc_dtype D = TPUC_F64;
  int64_t dims[2] = {out, in};
  ir_type mt = ir_make_type(ct, 2, dims), m64 = ir_with_dtype(mt, D), mi = ir_with_dtype(mt, TPUC_S64);
  tv ratio = up_ratio(g, align_corners, in, out, scale, ct), r64 = ir_convert(g, ratio, D);
  tv ge1 = ir_compare(g, IR_GE, ratio, lo_const(g, ct, 1.0));
  /* support and invscale in ct, from double products as on the CPU */
  tv support = ir_convert(g, ir_select(g, ge1, ir_binary(g, IR_MUL, lo_const(g, D, taps * 0.5), r64),
                                       lo_const(g, D, taps * 0.5)), ct);
  tv inv = ir_convert(g, ir_select(g, ge1, ir_binary(g, IR_DIV, lo_const(g, D, 1.0), r64),
                                   lo_const(g, D, 1.0)), ct);
  tv o = ir_convert(g, ir_iota(g, ir_with_dtype(m64, TPUC_S64), 0), D);
  tv center = ir_convert(g, ir_binary(g, IR_MUL, ir_broadcast_in_dim(g, r64, m64, NULL),
                                      ir_binary(g, IR_ADD, o, ir_splat(g, m64, 0.5))), ct);
  tv sup = ir_broadcast_in_dim(g, support, mt, NULL);
  /* (int64)(center -+ support + 0.5): the float difference, then + 0.5 in double */
  tv lo = ir_convert(g, ir_binary(g, IR_ADD, ir_convert(g, ir_binary(g, IR_SUB, center, sup), D),
                                  ir_splat(g, m64, 0.5)), TPUC_S64);
  tv hi = ir_convert(g, ir_binary(g, IR_ADD, ir_convert(g, ir_binary(g, IR_ADD, center, sup), D),
                                  ir_splat(g, m64, 0.5)), TPUC_S64);
  tv xmin = ir_binary(g, IR_MAX, lo, ir_splat_i64(g, mi, 0));
  tv xmax = ir_binary(g, IR_MIN, hi, ir_splat_i64(g, mi, in));
  /* xsize at most ceil(support) * 2 + 1 */
  tv cap = ir_convert(g, ir_binary(g, IR_ADD, ir_binary(g, IR_MUL, ir_unary(g, IR_CEIL, sup),
                                                        ir_splat(g, mt, 2.0)), ir_splat(g, mt, 1.0)), TPUC_S64);
  tv xend = ir_binary(g, IR_ADD, xmin, ir_clamp(g, ir_splat_i64(g, mi, 0), ir_binary(g, IR_SUB, xmax, xmin), cap));
  tv p = ir_iota(g, mi, 1);
  tv inside = ir_binary(g, IR_AND, ir_compare(g, IR_GE, p, xmin), ir_compare(g, IR_LT, p, xend));
  /* filter argument ((p - center) + 0.5) * invscale: the float difference, the rest in double */
  tv arg = ir_binary(g, IR_MUL, ir_binary(g, IR_ADD, ir_convert(g, ir_binary(g, IR_SUB, ir_convert(g, p, ct), center), D),
                                          ir_splat(g, m64, 0.5)),
                     ir_broadcast_in_dim(g, ir_convert(g, inv, D), m64, NULL));
  tv w = ir_select(g, inside, aa_filter(g, arg, taps), ir_splat(g, m64, 0.0));
  int64_t one = 1, zero = 0;
  tv total = ir_broadcast_in_dim(g, lo_sum(g, w, &one, 1, false), m64, &zero);
  tv nz = ir_compare(g, IR_NE, total, ir_splat(g, m64, 0.0));
  w = ir_select(g, nz, ir_binary(g, IR_DIV, w, ir_select(g, nz, total, ir_splat(g, m64, 1.0))), w);
  return ir_convert(g, w, ct);
}

/* v with dim `dim` mapped through m ([to, from] when !transposed, applied as
 * [from, to] when transposed): a dot, its new dim moved back into place. */
static tv aa_apply(ir_graph *g, tv v, int dim, tv m, bool transposed) {
  ir_type t = ir_type_of(g, v);
  int64_t ca = dim, cb = transposed ? 0 : 1;
  tv r = ir_dot_general(g, v, m, NULL, NULL, 0, &ca, &cb, 1, t.dtype); /* [..rest.., new] */
  int64_t perm[TPUC_MAX_DIMS];
  for (int i = 0, k = 0; i < t.ndim; i++) perm[i] = i == dim ? t.ndim - 1 : k++;
  return ir_transpose(g, r, perm);
}

/* (self, output_size, align_corners, scales_h, scales_w); backward
 * (grad_output, output_size, input_size, align_corners, scales_h, scales_w). */
static tpuc_status *lower_upsample_aa(tpuc_lower_ctx *cx, int taps, bool backward) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = lx_tensor(cx, 0);
  ir_type xt = ir_type_of(g, x);
  if (xt.ndim != 4 || ot.ndim != 4) return lx_unimplemented(cx, "antialiased upsample rank");
  if (xt.dtype != TPUC_F32 && xt.dtype != TPUC_F64) /* the CPU's kernel has these two */
    return lx_unimplemented(cx, "antialiased upsample of other than float32/float64");
  if (ir_numel(&ot) == 0 || ir_numel(&xt) == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  int a = backward ? 3 : 2;
  bool ac = lx_bool(cx, a, false);
  const int64_t *in = backward ? ot.dims : xt.dims, *out = backward ? xt.dims : ot.dims;
  tpuc_dtype ct = xt.dtype;
  tv v = x;
  for (int k = 0; k < 2; k++) {
    int dim = backward ? 2 + k : 3 - k; /* forward: width, then height */
    if (in[dim] == out[dim]) continue;  /* the CPU skips a dim of equal sizes */
    tv m = aa_weights(g, taps, ac, in[dim], out[dim], lx_scalar(cx, a + 1 + (dim - 2), TPUC_F64), ct);
    v = aa_apply(g, v, dim, m, backward);
  }
  cx->results[0] = lo_fit(g, v, ot);
  return NULL;
}

static tpuc_status *l_bilinear2d_aa(tpuc_lower_ctx *cx) { return lower_upsample_aa(cx, 2, false); }
static tpuc_status *l_bilinear2d_aa_bw(tpuc_lower_ctx *cx) { return lower_upsample_aa(cx, 2, true); }
static tpuc_status *l_bicubic2d_aa(tpuc_lower_ctx *cx) { return lower_upsample_aa(cx, 4, false); }
static tpuc_status *l_bicubic2d_aa_bw(tpuc_lower_ctx *cx) { return lower_upsample_aa(cx, 4, true); }

#define UP_FNS(name, mode, nsp)                                                                 \
  static tpuc_status *l_##name(tpuc_lower_ctx *cx) { return lower_upsample(cx, mode, nsp, false); } \
  static tpuc_status *l_##name##_bw(tpuc_lower_ctx *cx) { return lower_upsample(cx, mode, nsp, true); }

UP_FNS(nearest1d, UP_NEAREST, 1)
UP_FNS(nearest2d, UP_NEAREST, 2)
UP_FNS(nearest3d, UP_NEAREST, 3)
UP_FNS(nearest_exact1d, UP_NEAREST_EXACT, 1)
UP_FNS(nearest_exact2d, UP_NEAREST_EXACT, 2)
UP_FNS(nearest_exact3d, UP_NEAREST_EXACT, 3)
UP_FNS(linear1d, UP_LINEAR, 1)
UP_FNS(bilinear2d, UP_LINEAR, 2)
UP_FNS(trilinear3d, UP_LINEAR, 3)
UP_FNS(bicubic2d, UP_CUBIC, 2)

#define UP_ENTRIES(op, fn)                                                   \
  {"aten::" op, l_##fn}, {"aten::" op ".out", l_##fn},                       \
      {"aten::" op "_backward", l_##fn##_bw}, {"aten::" op "_backward.grad_input", l_##fn##_bw}

extern const tpuc_lowering tpuc_lowerings_upsample[];
const tpuc_lowering tpuc_lowerings_upsample[] = {
    UP_ENTRIES("upsample_nearest1d", nearest1d),
    UP_ENTRIES("upsample_nearest2d", nearest2d),
    UP_ENTRIES("upsample_nearest3d", nearest3d),
    UP_ENTRIES("_upsample_nearest_exact1d", nearest_exact1d),
    UP_ENTRIES("_upsample_nearest_exact2d", nearest_exact2d),
    UP_ENTRIES("_upsample_nearest_exact3d", nearest_exact3d),
    UP_ENTRIES("upsample_linear1d", linear1d),
    UP_ENTRIES("upsample_bilinear2d", bilinear2d),
    UP_ENTRIES("upsample_trilinear3d", trilinear3d),
    UP_ENTRIES("upsample_bicubic2d", bicubic2d),
    UP_ENTRIES("_upsample_bilinear2d_aa", bilinear2d_aa),
    UP_ENTRIES("_upsample_bicubic2d_aa", bicubic2d_aa),
    {NULL, NULL},
};
