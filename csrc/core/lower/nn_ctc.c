/* nn_ctc.c — the CTC loss (aten::_ctc_loss.Tensor) and its gradient
 * (aten::_ctc_loss_backward.Tensor) as PyTorch's CPU kernels compute them:
 * Graves' forward-backward recursion in log space over the extended label
 * sequence l' = (blank, l1, blank, l2, ..., blank) of S' = 2S + 1 states.
 * The recursion over time is one stablehlo.while (ir/loop.c), so the program
 * has the same size for any T; the lengths are tensors (run-time values), so
 * batches of other lengths reuse the program. Targets come padded [N, S]
 * (python/tpuc/ctc.py pads concatenated ones, and turns the int-list
 * lengths of aten::_ctc_loss into tensors). float32 / float64, as the CPU. */
#include <math.h>

#include "lower_ops.h"

typedef struct {
  tv ext;      /* [T, N, S'] log_probs at the extended labels */
  tv lab;      /* [N, S'] s64 extended labels */
  tv skip;     /* [N, S'] pred: state s may also come from s - 2 */
  tv valid;    /* [N, S'] pred: s < 2 tl + 1 */
  tv il, tl;   /* [N] s64 */
  int64_t t, n, c, s; /* s: S' */
  tpuc_dtype d;
} ctc_parts;

static tv neg_inf(ir_graph *g, ir_type t) { return ir_splat(g, t, -INFINITY); }

/* x [N, S'] shifted along s by k (> 0: towards larger s), filled with `fill`. */
static tv shift(ir_graph *g, tv x, int64_t k, tv fill) {
  ir_type t = ir_type_of(g, x);
  int64_t lo[2] = {0, k > 0 ? k : 0}, hi[2] = {0, k < 0 ? -k : 0};
  tv p = ir_pad(g, x, fill, lo, hi, NULL);
  int64_t start[2] = {0, k < 0 ? -k : 0}, limit[2] = {t.dims[0], start[1] + t.dims[1]};
  return ir_slice(g, p, start, limit, NULL);
}

/* log(exp(a) + exp(b) + exp(c)) as the CPU computes it: the largest term
 * taken out (0 when all are -inf). c may be IR_NONE. */
static tv log_add(ir_graph *g, tv a, tv b, tv c) {
  ir_type t = ir_type_of(g, a);
  tv m = ir_binary(g, IR_MAX, a, b);
  if (c != IR_NONE) m = ir_binary(g, IR_MAX, m, c);
  m = ir_select(g, ir_compare(g, IR_EQ, m, neg_inf(g, t)), ir_splat(g, t, 0.0), m);
  tv s = ir_binary(g, IR_ADD, ir_unary(g, IR_EXP, ir_binary(g, IR_SUB, a, m)),
                   ir_unary(g, IR_EXP, ir_binary(g, IR_SUB, b, m)));
  if (c != IR_NONE) s = ir_binary(g, IR_ADD, s, ir_unary(g, IR_EXP, ir_binary(g, IR_SUB, c, m)));
  return ir_binary(g, IR_ADD, ir_unary(g, IR_LOG, s), m);
}

/* v [N] broadcast over the states: [N, S']. */
static tv per_row(ir_graph *g, tv v, ir_type t) {
  int64_t b0 = 0;
  return ir_broadcast_in_dim(g, v, ir_with_dtype(t, ir_type_of(g, v).dtype), &b0);
}

/* The pieces both directions need; args from `a`: log_probs, targets,
 * input_lengths, target_lengths. false: not a form lowered here. */
static bool prepare(tpuc_lower_ctx *cx, int a, int64_t blank, ctc_parts *p) {
  ir_graph *g = cx->g;
  tv lp = lx_tensor(cx, a), tg = lx_tensor(cx, a + 1);
  if (lp == IR_NONE || tg == IR_NONE || lx_is_none(cx, a + 2) || lx_is_none(cx, a + 3))
    return false;
  ir_type lt = ir_type_of(g, lp), tt = ir_type_of(g, tg);
  if ((lt.dtype != TPUC_F32 && lt.dtype != TPUC_F64) || lt.ndim != 3 || tt.ndim != 2 ||
      ir_is_float(tt.dtype) || tt.dims[0] != lt.dims[1] || ir_numel(&lt) == 0)
    return false;
  p->d = lt.dtype;
  p->t = lt.dims[0];
  p->n = lt.dims[1];
  p->c = lt.dims[2];
  int64_t S = tt.dims[1];
  p->s = 2 * S + 1;
  int64_t ns[2] = {p->n, p->s};
  ir_type it = ir_make_type(TPUC_S64, 2, ns);
  /* l': blank, then (label, blank) per target position */
  tv blank_col = ir_splat_i64(g, ir_make_type(TPUC_S64, 2, (int64_t[]){p->n, 1}), blank);
  tv lab = blank_col;
  if (S > 0) {
    int64_t ns1[3] = {p->n, S, 1}, ns2[2] = {p->n, 2 * S};
    tv t3 = ir_reshape(g, ir_convert(g, tg, TPUC_S64), 3, ns1);
    tv pair[2] = {t3, ir_splat_i64(g, ir_make_type(TPUC_S64, 3, ns1), blank)};
    tv both[2] = {blank_col, ir_reshape(g, ir_concat(g, pair, 2, 2), 2, ns2)};
    lab = ir_concat(g, both, 2, 1);
  }
  p->lab = lab;
  int64_t tns[3] = {p->t, p->n, p->s}, b12[2] = {1, 2};
  tv idx = ir_broadcast_in_dim(g, lab, ir_make_type(TPUC_S64, 3, tns), b12);
  p->ext = lo_take_along(g, lp, 2, idx);
  tv pos = ir_iota(g, it, 1);
  tv two_back = shift(g, lab, 2, ir_splat_i64(g, ir_scalar_type(TPUC_S64), blank));
  p->skip = ir_binary(g, IR_AND, ir_compare(g, IR_GE, pos, ir_splat_i64(g, it, 2)),
                      ir_compare(g, IR_NE, lab, two_back));
  p->il = ir_convert(g, lx_tensor(cx, a + 2), TPUC_S64);
  p->tl = ir_convert(g, lx_tensor(cx, a + 3), TPUC_S64);
  p->il = ir_reshape(g, p->il, 1, &p->n);
  p->tl = ir_reshape(g, p->tl, 1, &p->n);
  tv twice = ir_binary(g, IR_MUL, per_row(g, p->tl, it), ir_splat_i64(g, it, 2));
  tv last = ir_binary(g, IR_ADD, twice, ir_splat_i64(g, it, 1));
  p->valid = ir_compare(g, IR_LT, pos, last);
  return !ir_error(g);
}

/* Row t of x [T, N, S'] (t a rank-0 s32 value): [N, S']. */
static tv row_at(ir_graph *g, tv x, tv t) {
  ir_type xt = ir_type_of(g, x);
  tv zero = ir_s32(g, 0), starts[3] = {t, zero, zero};
  int64_t sizes[3] = {1, xt.dims[1], xt.dims[2]};
  return ir_reshape(g, ir_dynamic_slice(g, x, starts, sizes), 2, xt.dims + 1);
}

static tv put_row(ir_graph *g, tv x, tv row, tv t) {
  ir_type rt = ir_type_of(g, row);
  int64_t d3[3] = {1, rt.dims[0], rt.dims[1]};
  tv zero = ir_s32(g, 0), starts[3] = {t, zero, zero};
  return ir_dynamic_update_slice(g, x, ir_reshape(g, row, 3, d3), starts);
}

/* t (rank-0 s32) as s64 [N, S'] and compared with il (+ off) per row. */
static tv time_cmp(ir_graph *g, ir_cmp c, tv t, tv il, int64_t off, ir_type rows) {
  ir_type it = ir_with_dtype(rows, TPUC_S64);
  tv tt = ir_broadcast_in_dim(g, ir_convert(g, t, TPUC_S64), it, NULL);
  tv lim = ir_binary(g, IR_ADD, per_row(g, il, it), ir_splat_i64(g, it, off));
  return ir_compare(g, c, tt, lim);
}

enum { C_CUR, C_ALL, C_EXT, C_SKIP, C_VALID, C_IL, C_TL, C_N };

/* The recursion over time: forward (alpha, t = 1 .. T-1 from `first` at t = 0)
 * or backward (beta, t = T-1 .. 0). All states of every step in [T, N, S'];
 * rows past a sequence's input length are -inf. *cur: forward, alpha at
 * t = il - 1 (the last step of each sequence). */
static tv recurse(ir_graph *g, const ctc_parts *p, bool forward, tv first, tv *cur) {
  ir_type rows = ir_type_of(g, p->ext);
  rows = ir_make_type(p->d, 2, rows.dims + 1);
  int64_t tns[3] = {p->t, p->n, p->s};
  tv all = neg_inf(g, ir_make_type(p->d, 3, tns));
  tv skip = forward ? p->skip : shift(g, p->skip, -2, ir_splat(g, ir_scalar_type(TPUC_PRED), 0.0));
  tv init[C_N] = {first, all, p->ext, skip, p->valid, p->il, p->tl};
  int64_t trips = p->t;
  if (forward) {
    init[C_ALL] = put_row(g, all, first, ir_s32(g, 0));
    trips = p->t - 1;
  } else {
    init[C_CUR] = neg_inf(g, rows);
  }
  ir_loop l;
  if (!ir_loop_begin(g, &l, init, C_N)) return IR_NONE;
  ir_graph *b = l.body;
  const tv *v = l.vals;
  tv t = forward ? ir_binary(b, IR_ADD, l.counter, ir_s32(b, 1))
                 : ir_binary(b, IR_SUB, ir_s32(b, p->t - 1), l.counter);
  tv ext_t = row_at(b, v[C_EXT], t);
  tv ninf = neg_inf(b, rows), prev = v[C_CUR];
  tv fill = ir_splat(b, ir_scalar_type(p->d), -INFINITY);
  tv step = log_add(b, prev, shift(b, prev, forward ? 1 : -1, fill),
                    ir_select(b, v[C_SKIP], shift(b, prev, forward ? 2 : -2, fill), ninf));
  step = ir_select(b, v[C_VALID], ir_binary(b, IR_ADD, step, ext_t), ninf);
  tv next[C_N];
  for (int i = 0; i < C_N; i++) next[i] = v[i];
  if (forward) {
    tv active = time_cmp(b, IR_LT, t, v[C_IL], 0, rows);
    next[C_ALL] = put_row(b, v[C_ALL], ir_select(b, active, step, ninf), t);
    next[C_CUR] = ir_select(b, active, step, prev);
  } else {
    /* at t = il - 1 the two final states start it: s = 2 tl and 2 tl - 1 */
    ir_type it = ir_with_dtype(rows, TPUC_S64);
    tv pos = ir_iota(b, it, 1);
    tv end = ir_binary(b, IR_MUL, per_row(b, v[C_TL], it), ir_splat_i64(b, it, 2));
    tv before_end = ir_binary(b, IR_SUB, end, ir_splat_i64(b, it, 1));
    tv is_end = ir_binary(b, IR_OR, ir_compare(b, IR_EQ, pos, end),
                          ir_compare(b, IR_EQ, pos, before_end));
    tv start = ir_select(b, is_end, ext_t, ninf);
    tv row = ir_select(b, time_cmp(b, IR_EQ, t, v[C_IL], -1, rows), start,
                       ir_select(b, time_cmp(b, IR_LT, t, v[C_IL], -1, rows), step, ninf));
    next[C_ALL] = put_row(b, v[C_ALL], row, t);
    next[C_CUR] = row;
  }
  tv res[C_N];
  ir_loop_end(g, &l, trips, next, res);
  if (cur) *cur = res[C_CUR];
  return res[C_ALL];
}

/* x [N, S'] at state idx [N] (s64), -inf where idx is out of range. */
static tv state_at(ir_graph *g, tv x, tv idx) {
  ir_type t = ir_type_of(g, x), it = ir_with_dtype(t, TPUC_S64);
  tv hit = ir_compare(g, IR_EQ, ir_iota(g, it, 1), per_row(g, idx, it));
  int64_t d1 = 1;
  return lo_reduce(g, ir_select(g, hit, x, neg_inf(g, t)), IR_RED_MAX, &d1, 1, false);
}

/* _ctc_loss.Tensor(log_probs, targets, input_lengths, target_lengths, blank,
 * zero_infinity) -> (neg_log_likelihood [N], log_alpha [N, T, S']). */
static tpuc_status *l_ctc(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ctc_parts p;
  if (!prepare(cx, 0, lx_int(cx, 4, 0), &p)) return lx_unimplemented(cx, "this form of ctc_loss");
  ir_type rows = ir_make_type(p.d, 2, (int64_t[]){p.n, p.s}), it = ir_with_dtype(rows, TPUC_S64);
  tv pos = ir_iota(g, it, 1);
  tv e0 = row_at(g, p.ext, ir_s32(g, 0));
  tv second = ir_binary(g, IR_AND, ir_compare(g, IR_EQ, pos, ir_splat_i64(g, it, 1)),
                        ir_compare(g, IR_GT, per_row(g, p.tl, it), ir_splat_i64(g, it, 0)));
  tv first_two = ir_binary(g, IR_OR, ir_compare(g, IR_EQ, pos, ir_splat_i64(g, it, 0)), second);
  tv alpha0 = ir_select(g, first_two, e0, neg_inf(g, rows));
  tv last;
  tv all = recurse(g, &p, true, alpha0, &last);
  ir_type vt = ir_make_type(TPUC_S64, 1, &p.n);
  tv end = ir_binary(g, IR_MUL, p.tl, ir_splat_i64(g, vt, 2));
  tv l1 = state_at(g, last, end);
  tv l2 = state_at(g, last, ir_binary(g, IR_SUB, end, ir_splat_i64(g, vt, 1)));
  tv nll = ir_unary(g, IR_NEG, log_add(g, l1, l2, IR_NONE));
  cx->results[0] = lo_fit(g, nll, lx_out(cx, 0));
  int64_t perm[3] = {1, 0, 2};
  cx->results[1] = lo_fit(g, ir_transpose(g, all, perm), lx_out(cx, 1));
  return NULL;
}

/* _ctc_loss_backward.Tensor(grad, log_probs, targets, input_lengths,
 * target_lengths, neg_log_likelihood, log_alpha, blank, zero_infinity):
 * d loss / d log_probs[t, n, c] = (exp(lp) - exp(lcab + nll - lp)) * grad[n],
 * lcab the log of sum over the states s with l'_s = c of alpha beta; 0 past a
 * sequence's input length, and for an infinite loss with zero_infinity. */
static tpuc_status *l_ctc_bw(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  ctc_parts p;
  if (!prepare(cx, 1, lx_int(cx, 7, 0), &p)) return lx_unimplemented(cx, "this form of ctc_loss");
  tv lp = lx_tensor(cx, 1);
  int64_t perm[3] = {1, 0, 2};
  tv la = ir_transpose(g, ir_convert(g, lx_tensor(cx, 6), p.d), perm); /* [T, N, S'] */
  tv beta = recurse(g, &p, false, IR_NONE, NULL);
  tv ab = ir_binary(g, IR_ADD, la, beta);
  int64_t d2 = 2;
  tv m = lo_reduce(g, ab, IR_RED_MAX, &d2, 1, true); /* [T, N, 1] */
  ir_type mt = ir_type_of(g, m);
  m = ir_select(g, ir_compare(g, IR_EQ, m, neg_inf(g, mt)), ir_splat(g, mt, 0.0), m);
  tv e = ir_unary(g, IR_EXP, lo_bin(g, IR_SUB, ab, m));
  /* the sum over states per class: [N, T, S'] @ onehot [N, S', C] */
  int64_t nsc[3] = {p.n, p.s, p.c}, b01[2] = {0, 1};
  ir_type ot = ir_make_type(TPUC_S64, 3, nsc);
  tv labels = ir_broadcast_in_dim(g, p.lab, ot, b01);
  tv hot = ir_convert(g, ir_compare(g, IR_EQ, labels, ir_iota(g, ot, 2)), p.d);
  tv sums = ir_transpose(g, lo_matmul(g, ir_transpose(g, e, perm), hot, 1, false, false), perm);
  tv lcab = lo_bin(g, IR_ADD, ir_unary(g, IR_LOG, sums), m); /* [T, N, C] */
  ir_type tnc = ir_type_of(g, lp);
  tv lpd = ir_convert(g, lp, p.d);
  tv nll = ir_reshape(g, ir_convert(g, lx_tensor(cx, 5), p.d), 1, &p.n);
  tv gout = ir_reshape(g, ir_convert(g, lx_tensor(cx, 0), p.d), 1, &p.n);
  int64_t b1 = 1;
  ir_type full = ir_with_dtype(tnc, p.d);
  tv nllb = ir_broadcast_in_dim(g, nll, full, &b1);
  tv post = ir_unary(g, IR_EXP, ir_binary(g, IR_SUB, ir_binary(g, IR_ADD, lcab, nllb), lpd));
  tv grad = ir_binary(g, IR_MUL, ir_binary(g, IR_SUB, ir_unary(g, IR_EXP, lpd), post),
                      ir_broadcast_in_dim(g, gout, full, &b1));
  ir_type it = ir_with_dtype(tnc, TPUC_S64);
  tv keep = ir_compare(g, IR_LT, ir_iota(g, it, 0), ir_broadcast_in_dim(g, p.il, it, &b1));
  if (lx_bool(cx, 8, false)) {
    ir_type vt = ir_make_type(p.d, 1, &p.n);
    tv finite = ir_compare(g, IR_NE, nll, ir_splat(g, vt, INFINITY));
    tv finite_b = ir_broadcast_in_dim(g, finite, ir_with_dtype(tnc, TPUC_PRED), &b1);
    keep = ir_binary(g, IR_AND, keep, finite_b);
  }
  grad = ir_select(g, keep, grad, ir_splat(g, full, 0.0));
  cx->results[0] = lo_fit(g, grad, lx_out(cx, 0));
  return NULL;
}

extern const tpuc_lowering tpuc_lowerings_nn_ctc[];
const tpuc_lowering tpuc_lowerings_nn_ctc[] = {
    {"aten::_ctc_loss.Tensor", l_ctc, 0},
    {"aten::_ctc_loss_backward.Tensor", l_ctc_bw, 0},
    {NULL, NULL, 0},
};
