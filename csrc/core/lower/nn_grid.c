/* nn_grid.c — grid_sampler_2d/3d and their backwards (F.grid_sample).
 *
 * Each output point reads T taps per spatial dim (bilinear 2, nearest 1,
 * bicubic 4; bicubic is 2-D only, as in PyTorch), T^S neighbours in all: one
 * gather of channel rows from the input as [N, H*W, C], a neighbour out of
 * the input reading 0 (the CPU's masked gathers, in every padding mode), then
 * a separable weighted sum, innermost dim first. The coordinates follow the
 * CPU: 2-D its vectorized kernel's formulas (cpu/GridSamplerKernel.cpp:
 * (g + 1) * size/2 - 0.5, reflection by trunc of |x - low| / 2span and a
 * min, NaN clipped to 0), 3-D its scalar kernel's (GridSampler.h:
 * ((g + 1) * size - 1) / 2, fmod reflection, NaN clipped to size - 1), so a
 * nearest pick agrees with the CPU's in the same dtype. Nearest rounds half
 * to even; bicubic pads each tap's integer position (the CPU's
 * get_value_bounded) with A = -0.75. f16/bf16 compute in f32.
 *
 * Backward: the input gradient scatter-adds weight * grad_out at the taps;
 * the grid gradient is sum over taps and channels of value * grad_out *
 * d(weight)/d(coordinate), times d(coordinate)/d(grid): size/2 or
 * (size - 1)/2, by the clip's 0/1 (0 on and past the borders) and the
 * reflection's +-1 (bilinear, nearest); bicubic the first factor only, as
 * the CPU; nearest 0. output_mask: an input gradient not asked for is absent
 * (the Meta kernel's); the grid gradient is always an output, and is left
 * zero when output_mask[1] is false (the CPU computes it anyway). */
#include "lower_ops.h"

enum { GS_BILINEAR = 0, GS_NEAREST = 1, GS_BICUBIC = 2 };
enum { GS_ZEROS = 0, GS_BORDER = 1, GS_REFLECTION = 2 };

typedef struct {
  ir_graph *g;
  int s;         /* spatial dims: 2 or 3 */
  int mode, pad;
  bool ac;       /* align_corners */
  bool vec;      /* the CPU's vectorized (2-D) formulas, else its scalar (3-D) ones */
  int64_t n, c, p;
  int64_t in[3]; /* input spatial sizes, outermost first (D, H, W) */
  ir_type pt;    /* [N, P] in the compute dtype */
} gs;

/* The taps of one spatial dim: positions (integer-valued floats, padded),
 * weights, d(weight)/d(coordinate), whether in the input, and the index. */
typedef struct {
  int t;
  tv w[4], dw[4], valid[4], idx[4];
  tv mult; /* d(coordinate)/d(grid value) */
} gs_dim;

static tv K(gs *q, double v) { return ir_splat(q->g, q->pt, v); }
static tv ADD(gs *q, tv a, tv b) { return ir_binary(q->g, IR_ADD, a, b); }
static tv SUB(gs *q, tv a, tv b) { return ir_binary(q->g, IR_SUB, a, b); }
static tv MUL(gs *q, tv a, tv b) { return ir_binary(q->g, IR_MUL, a, b); }
static tv DIV(gs *q, tv a, tv b) { return ir_binary(q->g, IR_DIV, a, b); }
static tv SEL(gs *q, tv p, tv a, tv b) { return ir_select(q->g, p, a, b); }
static tv LT(gs *q, tv a, tv b) { return ir_compare(q->g, IR_LT, a, b); }
static tv GT(gs *q, tv a, tv b) { return ir_compare(q->g, IR_GT, a, b); }
static tv FLOOR(gs *q, tv a) { return ir_unary(q->g, IR_FLOOR, a); }
static tv AND(gs *q, tv a, tv b) {
  return ir_select(q->g, a, b, ir_splat(q->g, ir_with_dtype(q->pt, TPUC_PRED), 0.0));
}

/* Grid value -> pixel coordinate; *scale: its derivative. */
static tv gs_unnorm(gs *q, tv v, int64_t size, double *scale) {
  double sz = (double)size;
  *scale = q->ac ? (sz - 1) / 2 : sz / 2;
  if (q->vec) {
    tv u = MUL(q, ADD(q, v, K(q, 1)), K(q, *scale));
    return q->ac ? u : SUB(q, u, K(q, 0.5));
  }
  if (q->ac) return MUL(q, DIV(q, ADD(q, v, K(q, 1)), K(q, 2)), K(q, sz - 1));
  return DIV(q, SUB(q, MUL(q, ADD(q, v, K(q, 1)), K(q, sz)), K(q, 1)), K(q, 2));
}

/* Clipped to [0, size - 1]; *grad (when asked): 1 strictly inside, else 0. */
static tv gs_clip(gs *q, tv x, int64_t size, tv *grad) {
  tv mx = K(q, (double)(size - 1)), zero = K(q, 0);
  tv lo = q->vec ? SEL(q, GT(q, x, zero), x, zero) /* NaN -> 0 */
                 : SEL(q, LT(q, x, zero), zero, x); /* NaN stays, then -> size - 1 */
  if (grad) *grad = SEL(q, AND(q, GT(q, x, zero), LT(q, x, mx)), K(q, 1), zero);
  return SEL(q, LT(q, lo, mx), lo, mx);
}

/* Reflected into [low, low + span] (low 0 or -0.5); *grad: +-1. */
static tv gs_reflect(gs *q, tv x, int64_t size, tv *grad) {
  if (q->ac && size <= 1) {
    if (grad) *grad = K(q, 0);
    return K(q, 0);
  }
  double low = q->ac ? 0 : -0.5, span = q->ac ? (double)(size - 1) : (double)size;
  tv d = SUB(q, x, K(q, low)), a = ir_unary(q->g, IR_ABS, d);
  tv flip, r;
  if (q->vec) {
    tv ts = K(q, 2 * span);
    tv extra = SUB(q, a, MUL(q, FLOOR(q, DIV(q, a, ts)), ts));
    tv back = SUB(q, ts, extra);
    flip = GT(q, extra, back);
    r = SEL(q, flip, back, extra);
  } else {
    tv sp = K(q, span);
    tv extra = ir_binary(q->g, IR_REM, a, sp);
    tv flips = FLOOR(q, DIV(q, a, sp));
    tv half = MUL(q, FLOOR(q, DIV(q, flips, K(q, 2))), K(q, 2));
    flip = GT(q, SUB(q, flips, half), K(q, 0.5)); /* odd */
    r = SEL(q, flip, SUB(q, sp, extra), extra);
  }
  if (grad) {
    tv one = K(q, 1), neg = K(q, -1);
    *grad = MUL(q, SEL(q, flip, neg, one), SEL(q, LT(q, d, K(q, 0)), neg, one));
  }
  return ADD(q, r, K(q, low));
}

/* The padding mode applied to a pixel coordinate; *grad its derivative. */
static tv gs_pad(gs *q, tv x, int64_t size, tv *grad) {
  if (q->pad == GS_BORDER) return gs_clip(q, x, size, grad);
  if (q->pad == GS_REFLECTION) {
    tv gr = IR_NONE, gc = IR_NONE;
    tv r = gs_clip(q, gs_reflect(q, x, size, grad ? &gr : NULL), size, grad ? &gc : NULL);
    if (grad) *grad = MUL(q, gr, gc);
    return r;
  }
  if (grad) *grad = K(q, 1);
  return x;
}

/* PyTorch's cubic convolution coefficients at fraction t and their derivatives. */
static void gs_cubic(gs *q, tv t, tv *w, tv *dw) {
  const double A = -0.75;
  tv one = K(q, 1), u = SUB(q, one, t);
  tv xs[4] = {ADD(q, t, one), t, u, ADD(q, u, one)};
  for (int i = 0; i < 4; i++) {
    tv x = xs[i], d;
    if (i == 1 || i == 2) { /* |x| <= 1: ((A + 2) x - (A + 3)) x x + 1 */
      w[i] = ADD(q, MUL(q, MUL(q, SUB(q, MUL(q, K(q, A + 2), x), K(q, A + 3)), x), x), one);
      d = MUL(q, SUB(q, MUL(q, K(q, 3 * (A + 2)), x), K(q, 2 * (A + 3))), x);
    } else { /* 1 < |x| < 2: ((A x - 5A) x + 8A) x - 4A */
      w[i] = SUB(q, MUL(q, ADD(q, MUL(q, SUB(q, MUL(q, K(q, A), x), K(q, 5 * A)), x), K(q, 8 * A)), x),
                 K(q, 4 * A));
      d = ADD(q, MUL(q, SUB(q, MUL(q, K(q, 3 * A), x), K(q, 10 * A)), x), K(q, 8 * A));
    }
    dw[i] = i < 2 ? d : ir_unary(q->g, IR_NEG, d); /* x grows with t for taps 0, 1 */
  }
}

/* Whether integer-valued position x is in [0, size) and its s64 index (clamped). */
static void gs_index(gs *q, tv x, int64_t size, tv *valid, tv *idx) {
  tv mx = K(q, (double)(size - 1)), zero = K(q, 0);
  *valid = AND(q, ir_compare(q->g, IR_GE, x, zero), ir_compare(q->g, IR_LE, x, mx));
  tv c = SEL(q, GT(q, x, zero), x, zero);
  *idx = ir_convert(q->g, SEL(q, LT(q, c, mx), c, mx), TPUC_S64);
}

/* The taps of spatial dim k from grid component v [N, P]; `grad`: also the
 * derivatives the backward needs. */
static void gs_taps(gs *q, tv v, int k, bool grad, gs_dim *o) {
  int64_t size = q->in[k];
  double scale;
  tv u = gs_unnorm(q, v, size, &scale), pos[4];
  if (q->mode == GS_BICUBIC) {
    tv fl = FLOOR(q, u);
    gs_cubic(q, SUB(q, u, fl), o->w, o->dw);
    o->t = 4;
    for (int i = 0; i < 4; i++) pos[i] = gs_pad(q, ADD(q, fl, K(q, i - 1)), size, NULL);
    o->mult = K(q, scale);
  } else {
    tv pg = IR_NONE;
    tv x = gs_pad(q, u, size, grad ? &pg : NULL);
    o->mult = grad ? MUL(q, K(q, scale), pg) : IR_NONE;
    if (q->mode == GS_NEAREST) {
      o->t = 1;
      pos[0] = ir_unary(q->g, IR_ROUND_EVEN, x);
      o->w[0] = K(q, 1);
      o->dw[0] = K(q, 0);
    } else {
      o->t = 2;
      tv fl = FLOOR(q, x), frac = SUB(q, x, fl);
      pos[0] = fl;
      pos[1] = ADD(q, fl, K(q, 1));
      o->w[0] = q->vec ? SUB(q, K(q, 1), frac) : SUB(q, pos[1], x);
      o->w[1] = frac;
      o->dw[0] = K(q, -1);
      o->dw[1] = K(q, 1);
    }
  }
  for (int i = 0; i < o->t; i++) gs_index(q, pos[i], size, &o->valid[i], &o->idx[i]);
}

/* vals[0..k) (each [N, P]) stacked as [N, P, k]. */
static tv gs_stack(gs *q, const tv *vals, int k) {
  int64_t d3[3] = {q->n, q->p, 1};
  tv parts[64] = {0};
  for (int i = 0; i < k; i++) parts[i] = ir_reshape(q->g, vals[i], 3, d3);
  return ir_concat(q->g, parts, k, 2);
}

/* Per neighbour (taps of every dim, the innermost dim's fastest): [N, P, K]
 * flat input positions (s64), in-input (pred) and, when asked, the weight
 * product and its derivative by each dim's coordinate. Built as outer
 * products of the dims' [N, P, T] tap vectors, so the graph grows with S*T,
 * not T^S. */
typedef struct {
  int k;
  tv flat, valid, weight, dweight[3];
} gs_nb;

/* Dim d's taps vals[0..t) stacked and broadcast to [N, P, T, ..., T] (S tap dims). */
static tv gs_outer(gs *q, const tv *vals, int t, int d, ir_type full) {
  int64_t bd[3] = {0, 1, 2 + d};
  return ir_broadcast_in_dim(q->g, gs_stack(q, vals, t), ir_with_dtype(full, ir_type_of(q->g, vals[0]).dtype), bd);
}

static void gs_neighbours(gs *q, const gs_dim *dims, bool weight, bool dweight, gs_nb *o) {
  int t = dims[0].t, k = 1;
  int64_t fd[5] = {q->n, q->p, t, t, t};
  for (int d = 0; d < q->s; d++) k *= t;
  ir_type full = ir_make_type(q->pt.dtype, 2 + q->s, fd);
  int64_t nk[3] = {q->n, q->p, k}, stride = 1;
  tv flat = IR_NONE, valid = IR_NONE, w = IR_NONE, dw[3] = {IR_NONE, IR_NONE, IR_NONE};
  for (int d = q->s - 1; d >= 0; d--) {
    const gs_dim *g = &dims[d];
    tv idx = gs_outer(q, g->idx, t, d, full);
    if (stride != 1) idx = ir_binary(q->g, IR_MUL, idx, ir_splat_i64(q->g, ir_type_of(q->g, idx), stride));
    flat = flat == IR_NONE ? idx : ir_binary(q->g, IR_ADD, flat, idx);
    tv ok = gs_outer(q, g->valid, t, d, full);
    valid = valid == IR_NONE ? ok : ir_select(q->g, valid, ok, ir_splat(q->g, ir_type_of(q->g, ok), 0.0));
    stride *= q->in[d];
  }
  for (int d = 0; d < q->s && (weight || dweight); d++) {
    tv wd = gs_outer(q, dims[d].w, t, d, full);
    if (weight) w = w == IR_NONE ? wd : MUL(q, w, wd);
    for (int e = 0; e < q->s && dweight; e++) {
      tv f = d == e ? gs_outer(q, dims[d].dw, t, d, full) : wd;
      dw[e] = dw[e] == IR_NONE ? f : MUL(q, dw[e], f);
    }
  }
  o->k = k;
  o->flat = ir_reshape(q->g, flat, 3, nk);
  o->valid = ir_reshape(q->g, valid, 3, nk);
  o->weight = weight ? ir_reshape(q->g, w, 3, nk) : IR_NONE;
  for (int e = 0; e < 3; e++) o->dweight[e] = dweight && e < q->s ? ir_reshape(q->g, dw[e], 3, nk) : IR_NONE;
}

/* Gather/scatter coordinates [N, P*K, 2]: (batch, flat position). */
static tv gs_coords(gs *q, const gs_nb *nb) {
  ir_type it = ir_make_type(TPUC_S64, 3, (int64_t[]){q->n, q->p, nb->k});
  int64_t d4[4] = {q->n, q->p, nb->k, 1}, d3[3] = {q->n, q->p * nb->k, 2};
  tv parts[2] = {ir_reshape(q->g, ir_iota(q->g, it, 0), 4, d4), ir_reshape(q->g, nb->flat, 4, d4)};
  return ir_reshape(q->g, ir_concat(q->g, parts, 2, 3), 3, d3);
}

/* Input [N, C, spatial...] as channel rows [N, S, C] in dtype cd. */
static tv gs_rows(gs *q, tv x, tpuc_dtype cd, int64_t *plane) {
  *plane = 1;
  for (int d = 0; d < q->s; d++) *plane *= q->in[d];
  int64_t d3[3] = {q->n, q->c, *plane}, perm[3] = {0, 2, 1};
  return ir_transpose(q->g, ir_convert(q->g, ir_reshape(q->g, x, 3, d3), cd), perm);
}

/* The neighbours' values [N, P, K, C], 0 outside the input. */
static tv gs_values(gs *q, tv rows, const gs_nb *nb) {
  ir_gather_dims d;
  memset(&d, 0, sizeof d);
  d.offset_dims[d.n_offset_dims++] = 2;
  d.collapsed_slice_dims[d.n_collapsed++] = 0;
  d.collapsed_slice_dims[d.n_collapsed++] = 1;
  d.start_index_map[d.n_start_index_map++] = 0;
  d.start_index_map[d.n_start_index_map++] = 1;
  d.index_vector_dim = 2;
  d.slice_sizes[0] = 1;
  d.slice_sizes[1] = 1;
  d.slice_sizes[2] = q->c;
  tpuc_dtype cd = q->pt.dtype;
  tv v = ir_gather(q->g, rows, gs_coords(q, nb), &d,
                   ir_make_type(cd, 3, (int64_t[]){q->n, q->p * nb->k, q->c}));
  int64_t d4[4] = {q->n, q->p, nb->k, q->c}, bd[3] = {0, 1, 2};
  ir_type t4 = ir_make_type(cd, 4, d4);
  tv ok = ir_broadcast_in_dim(q->g, nb->valid, ir_with_dtype(t4, TPUC_PRED), bd);
  return ir_select(q->g, ok, ir_reshape(q->g, v, 4, d4), ir_splat(q->g, t4, 0.0));
}

/* [N, P] broadcast to type t along dims 0 and 1. */
static tv gs_bcast(gs *q, tv v, ir_type t) {
  int64_t bd[2] = {0, 1};
  return ir_broadcast_in_dim(q->g, v, t, bd);
}

/* sum_nb value * weight, the innermost dim's taps first: [N, P, C]. */
static tv gs_interpolate(gs *q, tv vals, const gs_dim *dims) {
  int t = dims[0].t;
  int64_t m = 1;
  for (int d = 0; d < q->s; d++) m *= t;
  for (int d = q->s - 1; d >= 0; d--) {
    m /= t;
    int64_t d5[5] = {q->n, q->p, m, t, q->c};
    tv v5 = ir_reshape(q->g, vals, 5, d5);
    int64_t sl[5] = {q->n, q->p, m, 1, q->c};
    ir_type st = ir_make_type(q->pt.dtype, 5, sl);
    tv acc = IR_NONE;
    for (int i = 0; i < t; i++) {
      int64_t lo[5] = {0, 0, 0, i, 0}, hi[5] = {q->n, q->p, m, i + 1, q->c}, one[5] = {1, 1, 1, 1, 1};
      tv term = MUL(q, gs_bcast(q, dims[d].w[i], st), ir_slice(q->g, v5, lo, hi, one));
      acc = acc == IR_NONE ? term : ADD(q, acc, term);
    }
    int64_t d4[4] = {q->n, q->p, m, q->c};
    vals = ir_reshape(q->g, acc, 4, d4);
  }
  int64_t d3[3] = {q->n, q->p, q->c};
  return ir_reshape(q->g, vals, 3, d3);
}

/* Reads the op's sizes into q; false (with *why) for what this does not lower. */
static bool gs_setup(gs *q, tpuc_lower_ctx *cx, int s, tv x, tv grid, int a, const char **why) {
  ir_type xt = ir_type_of(cx->g, x), gt = ir_type_of(cx->g, grid);
  memset(q, 0, sizeof *q);
  q->g = cx->g;
  q->s = s;
  q->vec = s == 2;
  q->mode = (int)lx_int(cx, a, 0);
  q->pad = (int)lx_int(cx, a + 1, 0);
  q->ac = lx_bool(cx, a + 2, false);
  *why = NULL;
  if (xt.ndim != s + 2 || gt.ndim != s + 2 || gt.dims[s + 1] != s || gt.dims[0] != xt.dims[0])
    *why = "grid_sampler: shapes";
  else if (!ir_is_float(xt.dtype) || gt.dtype != xt.dtype)
    *why = "grid_sampler: floating input and grid of one dtype";
  else if (q->mode < 0 || q->mode > (s == 2 ? GS_BICUBIC : GS_NEAREST) || q->pad < 0 || q->pad > GS_REFLECTION)
    *why = "grid_sampler: interpolation or padding mode";
  if (*why) return false;
  q->n = xt.dims[0];
  q->c = xt.dims[1];
  q->p = 1;
  for (int d = 0; d < s; d++) {
    q->in[d] = xt.dims[2 + d];
    q->p *= gt.dims[1 + d];
  }
  int64_t np[2] = {q->n, q->p};
  q->pt = ir_make_type(xt.dtype == TPUC_F64 ? TPUC_F64 : TPUC_F32, 2, np);
  return true;
}

/* The taps of every spatial dim; dim d reads grid component s - 1 - d. */
static void gs_all_taps(gs *q, tv grid, bool grad, gs_dim *dims) {
  int64_t d3[3] = {q->n, q->p, q->s}, np[2] = {q->n, q->p};
  tv gr = ir_convert(q->g, ir_reshape(q->g, grid, 3, d3), q->pt.dtype);
  for (int d = 0; d < q->s; d++) {
    int comp = q->s - 1 - d;
    int64_t lo[3] = {0, 0, comp}, hi[3] = {q->n, q->p, comp + 1}, one[3] = {1, 1, 1};
    tv v = ir_reshape(q->g, ir_slice(q->g, gr, lo, hi, one), 2, np);
    gs_taps(q, v, d, grad, &dims[d]);
  }
}

/* (input, grid, interpolation_mode, padding_mode, align_corners) -> output. */
static tpuc_status *grid_sampler(tpuc_lower_ctx *cx, int s) {
  gs q;
  const char *why;
  tv x = lx_tensor(cx, 0), grid = lx_tensor(cx, 1);
  if (!gs_setup(&q, cx, s, x, grid, 2, &why)) return lx_unimplemented(cx, why);
  ir_type ot = lx_out(cx, 0);
  if (q.n * q.c * q.p == 0) {
    cx->results[0] = ir_splat(cx->g, ot, 0.0);
    return NULL;
  }
  gs_dim dims[3];
  gs_all_taps(&q, grid, false, dims);
  gs_nb nb;
  gs_neighbours(&q, dims, false, false, &nb);
  int64_t plane, perm[3] = {0, 2, 1};
  tv rows = gs_rows(&q, x, q.pt.dtype, &plane);
  tv out = gs_interpolate(&q, gs_values(&q, rows, &nb), dims);
  out = ir_transpose(cx->g, out, perm); /* [N, C, P] */
  cx->results[0] = lo_fit(cx->g, out, ot);
  return NULL;
}

/* (grad_output, input, grid, interpolation_mode, padding_mode, align_corners,
 * output_mask) -> (grad_input?, grad_grid). */
static tpuc_status *grid_sampler_backward(tpuc_lower_ctx *cx, int s) {
  gs q;
  const char *why;
  ir_graph *g = cx->g;
  tv go = lx_tensor(cx, 0), x = lx_tensor(cx, 1), grid = lx_tensor(cx, 2);
  if (!gs_setup(&q, cx, s, x, grid, 3, &why)) return lx_unimplemented(cx, why);
  if (cx->noutputs != 2) return lx_unimplemented(cx, "grid_sampler_backward: outputs");
  const int64_t *mask;
  int nmask = lx_ints(cx, 6, &mask);
  bool want_in = cx->call->outputs[0].storage != NULL;
  bool want_grid = cx->call->outputs[1].storage != NULL && (nmask < 2 || mask[1]) &&
                   q.mode != GS_NEAREST;
  ir_type it = lx_out(cx, 0), gt = lx_out(cx, 1);
  cx->results[0] = ir_splat(g, it, 0.0);
  cx->results[1] = ir_splat(g, gt, 0.0);
  if (q.n * q.c * q.p == 0 || (!want_in && !want_grid)) return NULL;
  gs_dim dims[3];
  gs_all_taps(&q, grid, want_grid, dims);
  gs_nb nb;
  gs_neighbours(&q, dims, want_in, want_grid, &nb);
  tpuc_dtype cd = q.pt.dtype;
  int64_t d3[3] = {q.n, q.c, q.p}, perm[3] = {0, 2, 1};
  tv gop = ir_transpose(g, ir_convert(g, ir_reshape(g, go, 3, d3), cd), perm); /* [N, P, C] */
  int64_t d4[4] = {q.n, q.p, nb.k, q.c}, b013[3] = {0, 1, 3}, b012[3] = {0, 1, 2};
  ir_type t4 = ir_make_type(cd, 4, d4);
  tv go4 = ir_broadcast_in_dim(g, gop, t4, b013);
  int64_t plane;
  tv rows = gs_rows(&q, x, cd, &plane);
  if (want_in) {
    tv upd = MUL(&q, ir_broadcast_in_dim(g, nb.weight, t4, b012), go4);
    tv ok = ir_broadcast_in_dim(g, nb.valid, ir_with_dtype(t4, TPUC_PRED), b012);
    upd = ir_select(g, ok, upd, ir_splat(g, t4, 0.0));
    ir_scatter_dims sd;
    memset(&sd, 0, sizeof sd);
    sd.update_window_dims[sd.n_update_window_dims++] = 2;
    sd.inserted_window_dims[sd.n_inserted++] = 0;
    sd.inserted_window_dims[sd.n_inserted++] = 1;
    sd.scatter_dims_to_operand_dims[sd.n_scatter_dims++] = 0;
    sd.scatter_dims_to_operand_dims[sd.n_scatter_dims++] = 1;
    sd.index_vector_dim = 2;
    int64_t u3[3] = {q.n, q.p * nb.k, q.c};
    tv gi = ir_scatter(g, ir_splat(g, ir_type_of(g, rows), 0.0), gs_coords(&q, &nb),
                       ir_reshape(g, upd, 3, u3), &sd, IR_RED_SUM);
    cx->results[0] = lo_fit(g, ir_transpose(g, gi, perm), it);
  }
  if (want_grid) {
    int64_t c3 = 3, k2 = 2;
    tv u = lo_sum(g, MUL(&q, gs_values(&q, rows, &nb), go4), &c3, 1, false); /* [N, P, K] */
    tv comp[3];
    for (int d = 0; d < s; d++)
      comp[s - 1 - d] = MUL(&q, lo_sum(g, MUL(&q, u, nb.dweight[d]), &k2, 1, false), dims[d].mult);
    cx->results[1] = lo_fit(g, gs_stack(&q, comp, s), gt);
  }
  return NULL;
}

static tpuc_status *l_gs2d(tpuc_lower_ctx *cx) { return grid_sampler(cx, 2); }
static tpuc_status *l_gs3d(tpuc_lower_ctx *cx) { return grid_sampler(cx, 3); }
static tpuc_status *l_gs2d_bw(tpuc_lower_ctx *cx) { return grid_sampler_backward(cx, 2); }
static tpuc_status *l_gs3d_bw(tpuc_lower_ctx *cx) { return grid_sampler_backward(cx, 3); }

extern const tpuc_lowering tpuc_lowerings_nn_grid[];
const tpuc_lowering tpuc_lowerings_nn_grid[] = {
    {"aten::grid_sampler_2d", l_gs2d},
    {"aten::grid_sampler_2d.out", l_gs2d},
    {"aten::grid_sampler_3d", l_gs3d},
    {"aten::grid_sampler_3d.out", l_gs3d},
    {"aten::grid_sampler_2d_backward", l_gs2d_bw},
    {"aten::grid_sampler_2d_backward.out", l_gs2d_bw},
    {"aten::grid_sampler_3d_backward", l_gs3d_bw},
    {"aten::grid_sampler_3d_backward.out", l_gs3d_bw},
    {NULL, NULL},
};
