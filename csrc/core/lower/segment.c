/* segment.c — _segment_reduce and its backward (torch.segment_reduce) over
 * lengths or offsets, as PyTorch's CPU kernels (SegmentReduce.cpp), plain
 * StableHLO. data [O, N, I] (O the dims before axis, I those after) is cut
 * into S consecutive segments per outer index; the segment bounds are
 * runtime values (a cumulative sum of the lengths), so membership is a
 * [O, S, N] mask and each reduction a masked reduce that XLA fuses.
 * Forward: sum, mean, max, min, prod from `initial` (else 0, -inf, inf, 1;
 * NaN wins max/min); mean divides by the length, an empty segment without
 * initial is NaN. Backward: sum/mean spread the gradient, max/min give it
 * to the elements equal to the result (or NaN), divided by their count
 * when several and the value is positive (the CPU's rule); prod uses
 * output / x, or the product of the others where x is 0 or NaN. f16/bf16
 * compute in f32, as the float32 that each of their steps rounds to. */
#include "lower_ops.h"

typedef enum { SEG_SUM, SEG_MEAN, SEG_MAX, SEG_MIN, SEG_PROD } seg_red;

static bool seg_red_of(const tpuc_lower_ctx *cx, int i, seg_red *r) {
  const tpuc_arg *a = lx_arg(cx, i);
  const char *s = a && a->kind == TPUC_ARG_STRING ? a->s : NULL;
  if (!s) return false;
  if (!strcmp(s, "sum")) *r = SEG_SUM;
  else if (!strcmp(s, "mean")) *r = SEG_MEAN;
  else if (!strcmp(s, "max")) *r = SEG_MAX;
  else if (!strcmp(s, "min")) *r = SEG_MIN;
  else if (!strcmp(s, "prod")) *r = SEG_PROD;
  else return false;
  return true;
}

typedef struct {
  int64_t o, n, i, s;
  tv x;        /* [O, N, I] in cd */
  tv len;      /* [O, S] s64 */
  tv mask;     /* [O, S, N] pred */
  tpuc_dtype cd;
} seg_view;

/* data (arg d) viewed as [O, N, I] around axis; the lengths (arg l) or the
 * offsets (arg off) as [O, S] lengths, and the membership mask. */
static bool seg_view_of(tpuc_lower_ctx *cx, int d, int l, int off, int axis_arg, seg_view *v) {
  ir_graph *g = cx->g;
  tv x = lx_tensor(cx, d);
  ir_type t = ir_type_of(g, x);
  if (!ir_is_float(t.dtype) || t.ndim == 0) return false;
  int axis = (int)lx_dim(lx_int(cx, axis_arg, 0), t.ndim);
  v->o = 1, v->i = 1, v->n = t.dims[axis];
  for (int k = 0; k < axis; k++) v->o *= t.dims[k];
  for (int k = axis + 1; k < t.ndim; k++) v->i *= t.dims[k];
  v->cd = lx_compute_dtype(t.dtype);
  int64_t oni[3] = {v->o, v->n, v->i};
  v->x = ir_reshape(g, ir_convert(g, x, v->cd), 3, oni);
  tv len;
  if (!lx_is_none(cx, l)) {
    len = ir_convert(g, lx_tensor(cx, l), TPUC_S64);
    ir_type lt = ir_type_of(g, len);
    if (lt.ndim != axis + 1) return false;
    v->s = lt.dims[axis];
  } else if (!lx_is_none(cx, off)) {
    tv of = ir_convert(g, lx_tensor(cx, off), TPUC_S64);
    ir_type ft = ir_type_of(g, of);
    if (ft.ndim != axis + 1 || ft.dims[axis] < 1) return false;
    v->s = ft.dims[axis] - 1;
    int64_t st[TPUC_MAX_DIMS] = {0}, hi[TPUC_MAX_DIMS];
    memcpy(hi, ft.dims, sizeof hi);
    hi[axis] = v->s;
    tv a = ir_slice(g, of, st, hi, NULL);
    st[axis] = 1, hi[axis] = v->s + 1;
    len = ir_binary(g, IR_SUB, ir_slice(g, of, st, hi, NULL), a);
  } else {
    return false;
  }
  if (v->s == 0 || v->o * v->n * v->i == 0) return false;
  int64_t os[2] = {v->o, v->s}, osn[3] = {v->o, v->s, v->n}, b01[2] = {0, 1};
  len = ir_reshape(g, len, 2, os);
  /* end[o, s] = lengths[o, 0..s] summed: a masked [O, S, S] sum */
  int64_t oss[3] = {v->o, v->s, v->s}, b02[2] = {0, 2}, two = 2;
  ir_type sst = ir_make_type(TPUC_S64, 3, oss);
  tv upto = ir_compare(g, IR_LE, ir_iota(g, sst, 2), ir_iota(g, sst, 1));
  tv end = lo_sum(g, ir_select(g, upto, ir_broadcast_in_dim(g, len, sst, b02), ir_splat(g, sst, 0.0)), &two, 1, false);
  tv start = ir_binary(g, IR_SUB, end, len);
  ir_type mt = ir_make_type(TPUC_S64, 3, osn);
  tv j = ir_iota(g, mt, 2);
  v->mask = ir_binary(g, IR_AND, ir_compare(g, IR_GE, j, ir_broadcast_in_dim(g, start, mt, b01)),
                      ir_compare(g, IR_LT, j, ir_broadcast_in_dim(g, end, mt, b01)));
  v->len = len;
  return true;
}

/* x [O, N, I] and mask [O, S, N] as [O, S, N, I] (x broadcast over S). */
static tv seg_spread(ir_graph *g, const seg_view *v, tv x, ir_type *t4) {
  int64_t d4[4] = {v->o, v->s, v->n, v->i}, bx[3] = {0, 2, 3};
  *t4 = ir_make_type(ir_type_of(g, x).dtype, 4, d4);
  return ir_broadcast_in_dim(g, x, *t4, bx);
}
static tv seg_mask4(ir_graph *g, const seg_view *v) {
  int64_t d4[4] = {v->o, v->s, v->n, v->i}, bm[3] = {0, 1, 2};
  return ir_broadcast_in_dim(g, v->mask, ir_make_type(TPUC_PRED, 4, d4), bm);
}

/* _segment_reduce(data, reduce, *, lengths?, indices?, offsets?, axis, unsafe, initial?). */
static tpuc_status *l_segment_reduce(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  seg_red r;
  seg_view v;
  if (!seg_red_of(cx, 1, &r) || !seg_view_of(cx, 0, 2, 4, 5, &v)) return lx_unimplemented(cx, "segment_reduce: arguments");
  tpuc_dtype cd = v.cd;
  ir_type t4;
  tv x4 = seg_spread(g, &v, v.x, &t4), m4 = seg_mask4(g, &v);
  bool has_init = !lx_is_none(cx, 7);
  double ident = r == SEG_MAX ? -INFINITY : r == SEG_MIN ? INFINITY : r == SEG_PROD ? 1.0 : 0.0;
  tv init = has_init ? lx_scalar(cx, 7, ot.dtype) : lo_const(g, cd, ident);
  init = ir_convert(g, init, cd); /* the Scalar as the data's dtype, as the CPU's to<scalar_t>() */
  int64_t two = 2;
  ir_reducer red = r == SEG_MAX ? IR_RED_MAX : r == SEG_MIN ? IR_RED_MIN : r == SEG_PROD ? IR_RED_PROD : IR_RED_SUM;
  tv id = lo_const(g, cd, red == IR_RED_PROD ? 1.0 : red == IR_RED_MAX ? -INFINITY : red == IR_RED_MIN ? INFINITY : 0.0);
  tv vals = ir_select(g, m4, x4, ir_broadcast_in_dim(g, id, t4, NULL));
  tv y = ir_reduce(g, vals, id, red, &two, 1); /* [O, S, I] */
  ir_type yt = ir_type_of(g, y);
  tv initb = ir_broadcast_in_dim(g, init, yt, NULL);
  if (red == IR_RED_SUM) y = ir_binary(g, IR_ADD, initb, y);
  else if (red == IR_RED_PROD) y = ir_binary(g, IR_MUL, initb, y);
  else {
    tv nan = lo_reduce(g, ir_binary(g, IR_AND, m4, ir_compare(g, IR_NE, x4, x4)), IR_RED_OR, &two, 1, false);
    tv ext = ir_binary(g, red == IR_RED_MAX ? IR_MAX : IR_MIN, initb, y);
    y = ir_select(g, nan, ir_broadcast_in_dim(g, lo_const(g, cd, NAN), yt, NULL), ext);
  }
  if (r == SEG_MEAN) {
    int64_t b01[2] = {0, 1};
    tv lenf = ir_broadcast_in_dim(g, ir_convert(g, v.len, cd), yt, b01);
    tv pos = ir_compare(g, IR_GT, lenf, ir_splat(g, yt, 0.0));
    tv div = ir_select(g, ir_binary(g, IR_AND, pos, ir_compare(g, IR_EQ, y, y)), ir_binary(g, IR_DIV, y, lenf), y);
    y = has_init ? div : ir_select(g, pos, div, ir_splat(g, yt, NAN));
  }
  cx->results[0] = lo_fit(g, y, ot);
  return NULL;
}

/* _segment_reduce_backward(grad, output, data, reduce, *, lengths?, offsets?, axis, initial?). */
static tpuc_status *l_segment_reduce_bw(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  seg_red r;
  seg_view v;
  if (!seg_red_of(cx, 3, &r) || !seg_view_of(cx, 2, 4, 5, 6, &v)) return lx_unimplemented(cx, "segment_reduce: arguments");
  tpuc_dtype cd = v.cd;
  int64_t osi[3] = {v.o, v.s, v.i}, b013[3] = {0, 1, 3}, one = 1;
  tv gy = ir_reshape(g, ir_convert(g, lx_tensor(cx, 0), cd), 3, osi);
  tv y = ir_reshape(g, ir_convert(g, lx_tensor(cx, 1), cd), 3, osi);
  ir_type t4;
  tv x4 = seg_spread(g, &v, v.x, &t4), m4 = seg_mask4(g, &v);
  tv g4 = ir_broadcast_in_dim(g, gy, t4, b013), y4 = ir_broadcast_in_dim(g, y, t4, b013);
  tv zero4 = ir_splat(g, t4, 0.0);
  tv gi4; /* [O, S, N, I]: each element's gradient from its segment (0 elsewhere) */
  if (r == SEG_SUM) {
    gi4 = g4;
  } else if (r == SEG_MEAN) {
    int64_t b01[2] = {0, 1};
    gi4 = ir_binary(g, IR_DIV, g4, ir_broadcast_in_dim(g, ir_convert(g, v.len, cd), t4, b01));
  } else if (r == SEG_MAX || r == SEG_MIN) {
    tv hit = ir_binary(g, IR_AND, m4, ir_binary(g, IR_OR, ir_compare(g, IR_NE, x4, x4), ir_compare(g, IR_EQ, x4, y4)));
    int64_t two = 2;
    tv cnt = lo_sum(g, ir_convert(g, hit, cd), &two, 1, true); /* [O, S, 1, I] */
    cnt = lx_coerce(g, cnt, t4);
    tv gh = ir_select(g, hit, g4, zero4);
    tv share = ir_binary(g, IR_AND, ir_compare(g, IR_GE, cnt, ir_splat(g, t4, 2.0)), ir_compare(g, IR_GT, gh, zero4));
    gi4 = ir_select(g, share, ir_binary(g, IR_DIV, gh, cnt), gh);
  } else { /* prod */
    tv init = lx_is_none(cx, 7) ? lo_const(g, cd, 1.0) : ir_convert(g, ir_convert(g, lx_scalar(cx, 7, ot.dtype), ot.dtype), cd);
    tv quot = ir_binary(g, IR_DIV, ir_binary(g, IR_MUL, g4, y4), x4);
    /* the product of the others: [O, S, N(j), N(k), I] with x_k, 1 at k = j or outside */
    int64_t d5[5] = {v.o, v.s, v.n, v.n, v.i}, bx[3] = {0, 3, 4}, bm[3] = {0, 1, 3};
    ir_type t5 = ir_make_type(cd, 5, d5), p5 = ir_with_dtype(t5, TPUC_PRED), i5 = ir_with_dtype(t5, TPUC_S64);
    tv xk = ir_broadcast_in_dim(g, v.x, t5, bx);
    tv in = ir_binary(g, IR_AND, ir_broadcast_in_dim(g, v.mask, p5, bm),
                      ir_compare(g, IR_NE, ir_iota(g, i5, 2), ir_iota(g, i5, 3)));
    int64_t three = 3;
    tv excl = lo_reduce(g, ir_select(g, in, xk, ir_splat(g, t5, 1.0)), IR_RED_PROD, &three, 1, false);
    excl = ir_binary(g, IR_MUL, ir_broadcast_in_dim(g, init, t4, NULL), excl);
    tv special = ir_binary(g, IR_OR, ir_compare(g, IR_NE, x4, x4), ir_compare(g, IR_EQ, x4, zero4));
    gi4 = ir_select(g, special, ir_binary(g, IR_MUL, g4, excl), quot);
  }
  gi4 = ir_select(g, m4, gi4, zero4);
  tv gi = lo_sum(g, gi4, &one, 1, false); /* [O, N, I]: each element is in one segment at most */
  cx->results[0] = lo_fit(g, gi, ot);
  return NULL;
}

extern const tpuc_lowering tpuc_lowerings_segment[];
const tpuc_lowering tpuc_lowerings_segment[] = {
    {"aten::_segment_reduce", l_segment_reduce, 0},
    {"aten::_segment_reduce.out", l_segment_reduce, 0},
    {"aten::segment_reduce", l_segment_reduce, 0},
    {"aten::segment_reduce.out", l_segment_reduce, 0},
    {"aten::_segment_reduce_backward", l_segment_reduce_bw, 0},
    {"aten::_segment_reduce_backward.out", l_segment_reduce_bw, 0},
    {NULL, NULL, 0},
};
