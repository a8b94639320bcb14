/* nn_extra.c — nn ops that small transformer and vision models still sent to
 * the CPU (ranked by tests/conformance/model_usage.py): glu, prelu, the
 * huber and smooth-L1 losses (each with its backward), embedding_renorm_,
 * repeat_interleave, bucketize/searchsorted and multinomial. Pooling beyond
 * 2-D and im2col/col2im are in nn_pool_nd.c. f16/bf16 compute in f32 like
 * PyTorch's CPU kernels. */
#include <stdlib.h>

#include "lower_ops.h"

/* ---- helpers ---- */


/* x summed down to t's shape (numpy broadcasting in reverse: leading dims
 * and dims where t has 1), converted to t's dtype. */
static tv ex_sum_to(ir_graph *g, tv x, ir_type t) {
  ir_type xt = ir_type_of(g, x);
  int64_t dims[TPUC_MAX_DIMS];
  int n = 0, lead = xt.ndim - t.ndim;
  if (lead < 0) return lo_fit(g, x, t);
  for (int i = 0; i < xt.ndim; i++)
    if (i < lead || (t.dims[i - lead] == 1 && xt.dims[i] != 1)) dims[n++] = i;
  if (n) x = lo_sum(g, x, dims, n, false);
  return lo_fit(g, x, t);
}


/* ---- glu ---- */

/* The halves of x along dim (a: first, b: second). */
static void glu_halves(ir_graph *g, tv x, int dim, tv *a, tv *b) {
  ir_type t = ir_type_of(g, x);
  int64_t s[TPUC_MAX_DIMS] = {0}, l[TPUC_MAX_DIMS], st[TPUC_MAX_DIMS];
  for (int i = 0; i < t.ndim; i++) {
    l[i] = t.dims[i];
    st[i] = 1;
  }
  int64_t h = t.dims[dim] / 2;
  l[dim] = h;
  *a = ir_slice(g, x, s, l, st);
  s[dim] = h;
  l[dim] = 2 * h;
  *b = ir_slice(g, x, s, l, st);
}

/* glu(self, dim=-1) = a * sigmoid(b). */
static tpuc_status *l_glu(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv x = ir_convert(g, lx_tensor(cx, 0), lx_compute_dtype(ot.dtype));
  int dim = (int)lx_dim(lx_int(cx, 1, -1), lo_rank(g, x));
  tv a, b;
  glu_halves(g, x, dim, &a, &b);
  cx->results[0] = lo_fit(g, ir_binary(g, IR_MUL, a, ir_unary(g, IR_LOGISTIC, b)), ot);
  return NULL;
}

/* glu_backward(grad_output, self, dim): [go * s(b), go * a * s(b) (1 - s(b))]. */
static tpuc_status *l_glu_bw(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  tv go = ir_convert(g, lx_tensor(cx, 0), cd), x = ir_convert(g, lx_tensor(cx, 1), cd);
  int dim = (int)lx_dim(lx_int(cx, 2, -1), lo_rank(g, x));
  tv a, b;
  glu_halves(g, x, dim, &a, &b);
  tv sb = ir_unary(g, IR_LOGISTIC, b);
  tv ga = ir_binary(g, IR_MUL, go, sb);
  tv gb = ir_binary(g, IR_MUL, ir_binary(g, IR_MUL, ga, a),
                    ir_binary(g, IR_SUB, lx_splat_like(g, sb, 1.0), sb));
  tv parts[2] = {ga, gb};
  cx->results[0] = lo_fit(g, ir_concat(g, parts, 2, dim), ot);
  return NULL;
}

/* ---- prelu ---- */

/* _prelu_kernel(self, weight): weight broadcasts against self (prelu
 * reshapes it to [1, C, 1, ...] first). */
static tpuc_status *l_prelu(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  tv x = lx_coerce(g, lx_tensor(cx, 0), ir_with_dtype(ot, cd));
  tv w = lx_coerce(g, lx_tensor(cx, 1), ir_with_dtype(ot, cd));
  tv pos = ir_compare(g, IR_GT, x, lx_splat_like(g, x, 0.0));
  cx->results[0] = lo_fit(g, ir_select(g, pos, x, ir_binary(g, IR_MUL, w, x)), ot);
  return NULL;
}

/* _prelu_kernel_backward(grad_output, self, weight) -> (grad_self,
 * grad_weight), each of the shape the meta kernel gives (the broadcast
 * shape; autograd sums it down to the weight's). */
static tpuc_status *l_prelu_bw(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv go = lx_tensor(cx, 0), x = lx_tensor(cx, 1), w = lx_tensor(cx, 2);
  ir_type bt;
  if (!lo_bshape(g, x, w, &bt) || !lo_bshape_t(g, bt, ir_type_of(g, go), &bt))
    return lx_unimplemented(cx, "prelu shapes");
  bt.dtype = lx_compute_dtype(lo_dtype(g, x));
  go = lx_coerce(g, go, bt);
  x = lx_coerce(g, x, bt);
  w = lx_coerce(g, w, bt);
  tv zero = lx_splat_like(g, x, 0.0);
  tv pos = ir_compare(g, IR_GT, x, zero);
  tv gx = ir_select(g, pos, go, ir_binary(g, IR_MUL, w, go));
  tv gw = ir_select(g, pos, zero, ir_binary(g, IR_MUL, x, go));
  tv vals[2] = {gx, gw};
  for (int i = 0; i < 2 && i < cx->noutputs; i++) {
    cx->results[i] = ex_sum_to(g, vals[i], lx_out(cx, i));
  }
  return NULL;
}

/* ---- huber / smooth L1 ---- */

/* huber_loss(self, target, reduction, delta) and smooth_l1_loss(self,
 * target, reduction, beta): per element z = |x - t|,
 *   huber:     z < d ? z^2 / 2     : d (z - d / 2)
 *   smooth L1: z < b ? z^2 / 2 / b : z - b / 2. */
static tpuc_status *lower_huber(tpuc_lower_ctx *cx, bool smooth) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  tv d = lo_bin(g, IR_SUB, ir_convert(g, lx_tensor(cx, 0), cd), lx_tensor(cx, 1));
  tv z = ir_unary(g, IR_ABS, d);
  ir_type zt = ir_type_of(g, z);
  tv p = lx_scalar(cx, 3, cd);
  if (p == IR_NONE) p = lo_const(g, cd, 1.0);
  p = lx_coerce(g, p, zt);
  tv half = lx_splat_like(g, z, 0.5);
  tv quad = ir_binary(g, IR_MUL, ir_binary(g, IR_MUL, half, z), z);
  tv lin = ir_binary(g, IR_SUB, z, ir_binary(g, IR_MUL, half, p));
  if (smooth)
    quad = ir_binary(g, IR_DIV, quad, p);
  else
    lin = ir_binary(g, IR_MUL, p, lin);
  tv l = ir_select(g, ir_compare(g, IR_LT, z, p), quad, lin);
  cx->results[0] = lo_fit(g, lo_reduce_loss(g, l, lx_int(cx, 2, RED_MEAN)), ot);
  return NULL;
}
static tpuc_status *l_huber(tpuc_lower_ctx *cx) { return lower_huber(cx, false); }
static tpuc_status *l_smooth_l1(tpuc_lower_ctx *cx) { return lower_huber(cx, true); }

/* huber_loss_backward(grad_output, self, target, reduction, delta) and
 * smooth_l1_loss_backward(grad_output, self, target, reduction, beta),
 * as PyTorch's CPU kernels (x = self - target, n = 1/numel for mean):
 *   huber:     x <= -d ? -n go d : x >= d ? n go d : n x go
 *   smooth L1: x <= -b ? -n go   : x >= b ? n go   : n x go / b. */
static tpuc_status *lower_huber_bw(tpuc_lower_ctx *cx, bool smooth) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  tv x = lo_bin(g, IR_SUB, ir_convert(g, lx_tensor(cx, 1), cd), lx_tensor(cx, 2));
  ir_type xt = ir_type_of(g, x);
  if (!lo_bshape_t(g, xt, ir_with_dtype(ot, cd), &xt)) return lx_unimplemented(cx, "loss shapes");
  x = lx_coerce(g, x, xt);
  tv go = lx_coerce(g, ir_convert(g, lx_tensor(cx, 0), cd), xt);
  if (lx_int(cx, 3, RED_MEAN) == RED_MEAN) go = lo_binc(g, IR_DIV, go, (double)ir_numel(&xt));
  tv p = lx_scalar(cx, 4, cd);
  if (p == IR_NONE) p = lo_const(g, cd, 1.0);
  p = lx_coerce(g, p, xt);
  tv hi = smooth ? go : ir_binary(g, IR_MUL, go, p);
  tv mid = ir_binary(g, IR_MUL, x, go);
  if (smooth) mid = ir_binary(g, IR_DIV, mid, p);
  tv r = ir_select(g, ir_compare(g, IR_GE, x, p), hi, mid);
  r = ir_select(g, ir_compare(g, IR_LE, x, ir_unary(g, IR_NEG, p)), ir_unary(g, IR_NEG, hi), r);
  cx->results[0] = lo_fit(g, r, ot);
  return NULL;
}
static tpuc_status *l_huber_bw(tpuc_lower_ctx *cx) { return lower_huber_bw(cx, false); }
static tpuc_status *l_smooth_l1_bw(tpuc_lower_ctx *cx) { return lower_huber_bw(cx, true); }

/* ---- embedding_renorm_, repeat_interleave, bucketize, searchsorted ---- */

/* embedding_renorm_(self, indices, max_norm, norm_type): each row named by
 * indices whose norm exceeds max_norm is scaled by max_norm / (norm + 1e-7).
 * norm_type is a runtime value: 2, 1, inf, -inf, 0 and any other p. */
static tpuc_status *l_embedding_renorm(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv w = lx_tensor(cx, 0), idx = lx_tensor(cx, 1);
  ir_type wt = ir_type_of(g, w), it = ir_type_of(g, idx);
  if (wt.ndim != 2 || !ir_is_float(wt.dtype)) return lx_unimplemented(cx, "embedding_renorm_ weight");
  int64_t v = wt.dims[0], n = ir_numel(&it);
  if (n == 0 || v == 0) {
    cx->results[0] = lo_out(g, w, ot);
    return NULL;
  }
  tpuc_dtype cd = lx_compute_dtype(wt.dtype);
  tv wc = ir_convert(g, w, cd);
  /* the rows named: a scatter of ones */
  int64_t two[2] = {n, 1};
  tv iv = ir_reshape(g, lo_wrap_index(g, ir_reshape(g, idx, 1, &n), v), 2, two);
  ir_scatter_dims d;
  memset(&d, 0, sizeof d);
  d.inserted_window_dims[d.n_inserted++] = 0;
  d.scatter_dims_to_operand_dims[d.n_scatter_dims++] = 0;
  d.index_vector_dim = 1;
  tv hit = ir_scatter(g, ir_splat(g, ir_make_type(TPUC_S32, 1, &v), 0.0), iv,
                      ir_splat(g, ir_make_type(TPUC_S32, 1, &n), 1.0), &d, IR_SCATTER_REPLACE);
  int64_t last = 1;
  tv a = ir_unary(g, IR_ABS, wc);
  tv p = lx_scalar(cx, 3, cd);
  ir_type nt = ir_make_type(cd, 1, &v);
  tv pv = ir_broadcast_in_dim(g, p, nt, NULL);
  tv n2 = ir_unary(g, IR_SQRT, lo_sum(g, ir_binary(g, IR_MUL, a, a), &last, 1, false));
  tv n1 = lo_sum(g, a, &last, 1, false);
  tv nmax = lo_reduce(g, a, IR_RED_MAX, &last, 1, false);
  tv nmin = lo_reduce(g, a, IR_RED_MIN, &last, 1, false);
  tv n0 = lo_sum(g, ir_convert(g, ir_compare(g, IR_NE, a, lx_splat_like(g, a, 0.0)), cd), &last, 1, false);
  tv pb = ir_broadcast_in_dim(g, p, ir_type_of(g, a), NULL);
  tv np = ir_binary(g, IR_POW, lo_sum(g, ir_binary(g, IR_POW, a, pb), &last, 1, false),
                    ir_binary(g, IR_DIV, ir_splat(g, nt, 1.0), pv));
  tv inf = ir_splat(g, nt, INFINITY);
  tv norm = np;
  norm = ir_select(g, ir_compare(g, IR_EQ, pv, ir_splat(g, nt, 0.0)), n0, norm);
  norm = ir_select(g, ir_compare(g, IR_EQ, pv, ir_unary(g, IR_NEG, inf)), nmin, norm);
  norm = ir_select(g, ir_compare(g, IR_EQ, pv, inf), nmax, norm);
  norm = ir_select(g, ir_compare(g, IR_EQ, pv, ir_splat(g, nt, 1.0)), n1, norm);
  norm = ir_select(g, ir_compare(g, IR_EQ, pv, ir_splat(g, nt, 2.0)), n2, norm);
  /* scale in f64 as PyTorch (norm.item<double>()), applied in cd */
  ir_type n64 = ir_make_type(TPUC_F64, 1, &v);
  tv maxn = ir_broadcast_in_dim(g, lx_scalar(cx, 2, TPUC_F64), n64, NULL);
  tv norm64 = ir_convert(g, norm, TPUC_F64);
  tv scale = ir_binary(g, IR_DIV, maxn, ir_binary(g, IR_ADD, norm64, ir_splat(g, n64, 1e-7)));
  tv apply = ir_binary(g, IR_AND, ir_compare(g, IR_GT, norm64, maxn),
                       ir_compare(g, IR_NE, hit, ir_splat(g, ir_make_type(TPUC_S32, 1, &v), 0.0)));
  int64_t zero = 0;
  ir_type wct = ir_type_of(g, wc);
  tv scaled = ir_binary(g, IR_MUL, wc, ir_broadcast_in_dim(g, ir_convert(g, scale, cd), wct, &zero));
  tv r = ir_select(g, ir_broadcast_in_dim(g, apply, ir_with_dtype(wct, TPUC_PRED), &zero), scaled, wc);
  cx->results[0] = lo_fit(g, r, ot);
  return NULL;
}

/* repeat_interleave.Tensor(repeats, *, output_size): out[j] = the i with
 * cumsum[i-1] <= j < cumsum[i] (output_size given, else no Meta result). */
static tpuc_status *l_repeat_interleave(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv r = lx_tensor(cx, 0);
  ir_type rt = ir_type_of(g, r);
  if (rt.ndim > 1 || ot.ndim != 1) return lx_unimplemented(cx, "repeat_interleave repeats rank");
  int64_t n = ir_numel(&rt), m = ot.dims[0];
  if (m == 0 || n == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  r = ir_convert(g, ir_reshape(g, r, 1, &n), TPUC_S64);
  int64_t win = n, one = 1, pad[2] = {n - 1, 0};
  tv cs = ir_reduce_window(g, r, lo_const(g, TPUC_S64, 0.0), IR_RED_SUM, &win, &one, pad);
  int64_t md[2] = {m, n}, b1 = 1;
  ir_type mt = ir_make_type(TPUC_S64, 2, md);
  tv le = ir_compare(g, IR_LE, ir_broadcast_in_dim(g, cs, mt, &b1), ir_iota(g, mt, 0));
  int64_t red = 1;
  cx->results[0] = lo_fit(g, lo_sum(g, ir_convert(g, le, TPUC_S64), &red, 1, false), ot);
  return NULL;
}

/* How many of the sorted values seq[..., M] lie before each value v, as
 * PyTorch's binary search: left counts !(s >= v), right !(s > v). seq is
 * 1-D, or v's leading dims + [M]. */
static tv count_before(ir_graph *g, tv seq, tv v, bool right) {
  ir_type st = ir_type_of(g, seq), vt = ir_type_of(g, v);
  if (st.dtype != vt.dtype) {
    tpuc_dtype c = ir_is_float(st.dtype) || ir_is_float(vt.dtype) ? TPUC_F64 : TPUC_S64;
    seq = ir_convert(g, seq, c);
    v = ir_convert(g, v, c);
    st.dtype = vt.dtype = c;
  }
  ir_type ct = vt;
  ct.dims[ct.ndim++] = st.dims[st.ndim - 1];
  int64_t bs[TPUC_MAX_DIMS], bv[TPUC_MAX_DIMS];
  for (int i = 0; i < vt.ndim; i++) bv[i] = i;
  if (st.ndim == 1) {
    bs[0] = vt.ndim;
  } else {
    for (int i = 0; i < st.ndim - 1; i++) bs[i] = i;
    bs[st.ndim - 1] = vt.ndim;
  }
  tv sb = ir_broadcast_in_dim(g, seq, ct, bs), vb = ir_broadcast_in_dim(g, v, ct, bv);
  tv after = ir_compare(g, right ? IR_GT : IR_GE, sb, vb);
  tv before = ir_convert(g, ir_unary(g, IR_NOT, after), TPUC_S64);
  int64_t last = vt.ndim;
  return lo_sum(g, before, &last, 1, false);
}

/* bucketize.Tensor / .Scalar (self, boundaries, *, out_int32, right). */
static tpuc_status *l_bucketize(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  const tpuc_tensor *bd = lx_tensor_desc(cx, 1);
  if (!bd || bd->ndim != 1) return lx_unimplemented(cx, "bucketize boundaries rank");
  tv b = lx_tensor(cx, 1);
  const tpuc_arg *a0 = lx_arg(cx, 0);
  tv v = a0 && a0->kind == TPUC_ARG_SCALAR ? lx_scalar(cx, 0, lo_dtype(g, b)) : lx_tensor(cx, 0);
  if (ir_numel(&ot) == 0 || bd->sizes[0] == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  cx->results[0] = lo_fit(g, count_before(g, b, v, lx_bool(cx, 3, false)), ot);
  return NULL;
}

/* searchsorted.Tensor / .Scalar (sorted_sequence, self, *, out_int32,
 * right, side, sorter). */
static tpuc_status *l_searchsorted(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv seq = lx_tensor(cx, 0);
  ir_type st = ir_type_of(g, seq);
  if (st.ndim < 1) return lx_unimplemented(cx, "searchsorted sequence rank");
  const tpuc_arg *a1 = lx_arg(cx, 1);
  tv v = a1 && a1->kind == TPUC_ARG_SCALAR ? lx_scalar(cx, 1, st.dtype) : lx_tensor(cx, 1);
  ir_type vt = ir_type_of(g, v);
  if (st.ndim > 1 && (vt.ndim != st.ndim)) return lx_unimplemented(cx, "searchsorted shapes");
  bool right = lx_bool(cx, 3, false);
  const tpuc_arg *side = lx_arg(cx, 4);
  if (side && side->kind == TPUC_ARG_STRING) right = strcmp(side->s, "right") == 0;
  /* nothing to search (an empty sequence: every position is 0) */
  if (ir_numel(&ot) == 0 || st.dims[st.ndim - 1] == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  if (!lx_is_none(cx, 5)) {
    if (st.ndim != 1) return lx_unimplemented(cx, "searchsorted sorter of a batched sequence");
    int64_t m = st.dims[0];
    ir_gather_dims d;
    memset(&d, 0, sizeof d);
    int64_t two[2] = {m, 1};
    d.collapsed_slice_dims[d.n_collapsed++] = 0;
    d.start_index_map[d.n_start_index_map++] = 0;
    d.index_vector_dim = 1;
    d.slice_sizes[0] = 1;
    tv s = ir_reshape(g, lo_wrap_index(g, lx_tensor(cx, 5), m), 2, two);
    seq = ir_gather(g, seq, s, &d, st);
  }

  cx->results[0] = lo_fit(g, count_before(g, seq, v, right), ot);
  return NULL;
}

/* ---- multinomial ---- */

/* multinomial(self, num_samples, replacement=False, *, generator): inverse
 * CDF sampling, one uniform per sample from the device generator: the
 * first category whose cumulative weight exceeds u * total (never one of
 * weight 0). Without replacement only num_samples == 1 (the same thing);
 * PyTorch's checks of the weights' values (negative, all zero) are not
 * made on the device. */
static tpuc_status *l_multinomial(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  tv p = lx_tensor(cx, 0);
  ir_type pt = ir_type_of(g, p);
  int64_t ns = lx_int(cx, 1, 1);
  if (!lx_bool(cx, 2, false) && ns > 1) return lx_unimplemented(cx, "multinomial without replacement");
  if (pt.ndim < 1 || pt.ndim > 2 || !ir_is_float(pt.dtype)) return lx_unimplemented(cx, "multinomial weights");
  tv state = lo_rng_state(cx);
  if (state == IR_NONE) return lx_unimplemented(cx, "multinomial without a generator state");
  int64_t n = pt.ndim == 2 ? pt.dims[0] : 1, k = pt.dims[pt.ndim - 1];
  if (n * ns == 0 || k == 0) {
    cx->results[0] = ir_splat(g, ot, 0.0);
    return NULL;
  }
  bool dbl = pt.dtype == TPUC_F64;
  tpuc_dtype cd = dbl ? TPUC_F64 : TPUC_F32;
  int64_t nk[2] = {n, k};
  p = ir_reshape(g, ir_convert(g, p, cd), 2, nk);
  int64_t win[2] = {1, k}, one[2] = {1, 1}, pad[4] = {0, 0, k - 1, 0};
  tv cdf = ir_reduce_window(g, p, lo_const(g, cd, 0.0), IR_RED_SUM, win, one, pad);
  int64_t st[2] = {0, k - 1}, lim[2] = {n, k};
  tv total = ir_slice(g, cdf, st, lim, one); /* [n, 1] */
  /* uniforms in [0, 1): a random mantissa under the exponent of 1.0, minus 1 */
  int64_t m = n * ns, sd[2] = {n, ns};
  ir_type bt = ir_make_type(dbl ? TPUC_U64 : TPUC_U32, 1, &m);
  tv bits, next;
  ir_rng_bits(g, state, bt, &bits, &next);
  ir_type bs = ir_with_dtype(bt, TPUC_S64);
  tv shift = dbl ? ir_bitcast(g, ir_splat_i64(g, bs, 12), bt) : ir_splat_i64(g, bt, 9);
  tv onebits = dbl ? ir_bitcast(g, ir_splat_i64(g, bs, 0x3FF0000000000000LL), bt) : ir_splat_i64(g, bt, 0x3F800000);
  tv u = ir_bitcast(g, ir_binary(g, IR_OR, ir_binary(g, IR_SHR_LOGICAL, bits, shift), onebits), ir_with_dtype(bt, cd));
  u = ir_reshape(g, ir_binary(g, IR_SUB, u, ir_splat(g, ir_with_dtype(bt, cd), 1.0)), 2, sd);
  int64_t b01[2] = {0, 1}, b02[2] = {0, 2};
  tv target = ir_binary(g, IR_MUL, u, ir_broadcast_in_dim(g, total, ir_make_type(cd, 2, sd), b01));
  int64_t cdims[3] = {n, ns, k};
  ir_type ct = ir_make_type(cd, 3, cdims);
  tv le = ir_compare(g, IR_LE, ir_broadcast_in_dim(g, cdf, ct, b02), ir_broadcast_in_dim(g, target, ct, b01));
  int64_t last = 2, kd = 1;
  tv count = lo_sum(g, ir_convert(g, le, TPUC_S64), &last, 1, false); /* [n, ns] */
  ir_type it = ir_make_type(TPUC_S64, 2, nk);
  tv nz = ir_select(g, ir_compare(g, IR_GT, p, lx_splat_like(g, p, 0.0)), ir_iota(g, it, 1), ir_splat_i64(g, it, 0));
  tv lastnz = lo_reduce(g, nz, IR_RED_MAX, &kd, 1, true); /* [n, 1] */
  tv idx = ir_binary(g, IR_MIN, count, ir_broadcast_in_dim(g, lastnz, ir_make_type(TPUC_S64, 2, sd), b01));
  cx->results[0] = lo_fit(g, idx, ot);
  return NULL;
}

/* ---- the family's table ---- */

extern const tpuc_lowering tpuc_lowerings_nn_extra[];
const tpuc_lowering tpuc_lowerings_nn_extra[] = {
    {"aten::glu", l_glu},
    {"aten::glu.out", l_glu},
    {"aten::glu_backward", l_glu_bw},
    {"aten::glu_backward.grad_input", l_glu_bw},
    {"aten::_prelu_kernel", l_prelu},
    {"aten::_prelu_kernel_backward", l_prelu_bw},
    {"aten::huber_loss", l_huber},
    {"aten::huber_loss.out", l_huber},
    {"aten::huber_loss_backward", l_huber_bw},
    {"aten::huber_loss_backward.out", l_huber_bw},
    {"aten::smooth_l1_loss", l_smooth_l1},
    {"aten::smooth_l1_loss.out", l_smooth_l1},
    {"aten::smooth_l1_loss_backward", l_smooth_l1_bw},
    {"aten::smooth_l1_loss_backward.grad_input", l_smooth_l1_bw},
    {"aten::embedding_renorm_", l_embedding_renorm},
    {"aten::embedding_renorm", l_embedding_renorm},
    {"aten::embedding_renorm.out", l_embedding_renorm},
    {"aten::repeat_interleave.Tensor", l_repeat_interleave},
    {"aten::repeat_interleave.Tensor_out", l_repeat_interleave},
    {"aten::bucketize.Tensor", l_bucketize},
    {"aten::bucketize.Tensor_out", l_bucketize},
    {"aten::bucketize.Scalar", l_bucketize},
    {"aten::bucketize.Scalar_out", l_bucketize},
    {"aten::searchsorted.Tensor", l_searchsorted},
    {"aten::searchsorted.Tensor_out", l_searchsorted},
    {"aten::searchsorted.Scalar", l_searchsorted},
    {"aten::searchsorted.Scalar_out", l_searchsorted},
    {"aten::multinomial", l_multinomial},
    {"aten::multinomial.out", l_multinomial},
    {NULL, NULL},
};
