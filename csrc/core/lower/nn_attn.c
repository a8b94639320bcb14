/* nn_attn.c — scaled dot-product attention as ATen's CPU "flash" op
 * (_scaled_dot_product_flash_attention_for_cpu) and its backward: scores,
 * causal (top-left aligned) and optional boolean/additive masks, softmax
 * with its log-sum-exp, all in f32 for f16/bf16, the products as
 * dot_generals over (batch, heads). Like PyTorch's CPU kernel, dropout is
 * not supported: a nonzero dropout_p (a runtime value) gives NaN. A fully
 * masked row gives 0, as on the CPU. */
#include "nn.h"

/* Rank-4 q/k/v of equal heads; IR error otherwise. */
static bool attn_shapes_ok(ir_graph *g, tv q, tv k, tv v) {
  ir_type a = ir_type_of(g, q), b = ir_type_of(g, k), c = ir_type_of(g, v);
  return a.ndim == 4 && b.ndim == 4 && c.ndim == 4 && a.dims[0] == b.dims[0] &&
         a.dims[1] == b.dims[1] && b.dims[0] == c.dims[0] && b.dims[1] == c.dims[1] &&
         a.dims[3] == b.dims[3] && b.dims[2] == c.dims[2];
}

/* x @ y over batch dims (0, 1), contracting x's dim cx_ with y's dim cy. */
static tv bmm4(ir_graph *g, tv x, tv y, int64_t cx_, int64_t cy) {
  int64_t b[2] = {0, 1};
  return ir_dot_general(g, x, y, b, b, 2, &cx_, &cy, 1, lo_dtype(g, x));
}

/* The masked, scaled scores [B, H, L, S] in cd. Arguments: causal flag at
 * `causal_arg`, attn_mask at mask_arg, scale at scale_arg. */
static tv attn_scores(tpuc_lower_ctx *cx, tv q, tv k, int causal_arg, int mask_arg, int scale_arg) {
  ir_graph *g = cx->g;
  tpuc_dtype cd = lo_dtype(g, q);
  ir_type qt = ir_type_of(g, q);
  tv s = bmm4(g, q, k, 3, 3);
  ir_type st = ir_type_of(g, s);
  tv scale = lx_scalar(cx, scale_arg, cd);
  if (scale == IR_NONE) scale = lo_const(g, cd, 1.0 / sqrt((double)qt.dims[3]));
  s = lo_bin(g, IR_MUL, s, scale);
  tv ninf = ir_splat(g, st, -INFINITY);
  if (lx_bool(cx, causal_arg, false)) {
    int64_t ls[2] = {st.dims[2], st.dims[3]}, bd[2] = {2, 3};
    ir_type it = ir_make_type(TPUC_S64, 2, ls);
    tv keep = ir_compare(g, IR_LE, ir_iota(g, it, 1), ir_iota(g, it, 0));
    s = ir_select(g, ir_broadcast_in_dim(g, keep, ir_with_dtype(st, TPUC_PRED), bd), s, ninf);
  }
  if (!lx_is_none(cx, mask_arg)) {
    tv m = lx_tensor(cx, mask_arg);
    if (lo_dtype(g, m) == TPUC_PRED)
      s = ir_select(g, lx_broadcast_to(g, m, st.ndim, st.dims), s, ninf);
    else
      s = ir_binary(g, IR_ADD, s, lx_coerce(g, m, st));
  }
  return s;
}

/* NaN where the runtime dropout_p at `arg` is nonzero (not supported). */
static tv refuse_dropout(tpuc_lower_ctx *cx, tv x, int arg) {
  ir_graph *g = cx->g;
  tv p = lx_scalar(cx, arg, TPUC_F64);
  if (p == IR_NONE) return x;
  ir_type t = ir_type_of(g, x);
  tv bad = ir_compare(g, IR_NE, p, lo_const(g, TPUC_F64, 0.0));
  return ir_select(g, lx_broadcast_to(g, bad, t.ndim, t.dims), ir_splat(g, t, NAN), x);
}

/* _scaled_dot_product_flash_attention_for_cpu(query, key, value,
 * dropout_p=0, is_causal=False, *, attn_mask=None, scale=None) ->
 * (output, logsumexp). */
tpuc_status *nn_sdpa_flash_cpu(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv q = lx_tensor(cx, 0), k = lx_tensor(cx, 1), v = lx_tensor(cx, 2);
  if (!attn_shapes_ok(g, q, k, v)) return lx_unimplemented(cx, "attention shapes");
  tpuc_dtype cd = lx_compute_dtype(lx_out(cx, 0).dtype);
  q = ir_convert(g, q, cd);
  k = ir_convert(g, k, cd);
  v = ir_convert(g, v, cd);
  tv s = attn_scores(cx, q, k, 4, 5, 6);
  int64_t last = 3;
  tv m = lo_reduce(g, s, IR_RED_MAX, &last, 1, true);
  tv m_safe = ir_select(g, ir_compare(g, IR_EQ, m, lx_splat_like(g, m, -INFINITY)),
                        lx_splat_like(g, m, 0.0), m);
  tv p = ir_unary(g, IR_EXP, lo_bin(g, IR_SUB, s, m_safe));
  tv l = lo_sum(g, p, &last, 1, true);
  /* A fully masked row (every score -inf: a left-padded query position) has
   * P = 0 and l = 0; PyTorch's CPU kernel returns 0 there, not 0/0 = NaN
   * (NaN would survive a later multiply by a zero loss mask). */
  tv l_safe = ir_select(g, ir_compare(g, IR_EQ, l, lx_splat_like(g, l, 0.0)),
                        lx_splat_like(g, l, 1.0), l);
  tv out = lo_bin(g, IR_DIV, bmm4(g, p, v, 3, 2), l_safe);
  cx->results[0] = lo_out(g, refuse_dropout(cx, out, 3), lx_out(cx, 0));
  if (cx->noutputs > 1) {
    tv lse = ir_binary(g, IR_ADD, ir_unary(g, IR_LOG, l), m_safe);
    cx->results[1] = lo_fit(g, lse, lx_out(cx, 1));
  }
  return NULL;
}

/* _scaled_dot_product_flash_attention_for_cpu_backward(grad_out, query,
 * key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask, scale)
 * -> (grad_query, grad_key, grad_value). */
tpuc_status *nn_sdpa_flash_cpu_backward(tpuc_lower_ctx *cx) {
  ir_graph *g = cx->g;
  tv q = lx_tensor(cx, 1), k = lx_tensor(cx, 2), v = lx_tensor(cx, 3);
  if (!attn_shapes_ok(g, q, k, v)) return lx_unimplemented(cx, "attention shapes");
  tpuc_dtype cd = lx_compute_dtype(lo_dtype(g, q));
  q = ir_convert(g, q, cd);
  k = ir_convert(g, k, cd);
  v = ir_convert(g, v, cd);
  tv dout = ir_convert(g, lx_tensor(cx, 0), cd), out = ir_convert(g, lx_tensor(cx, 4), cd);
  ir_type qt = ir_type_of(g, q);
  int64_t kd[4] = {qt.dims[0], qt.dims[1], qt.dims[2], 1}, last = 3;
  tv lse = ir_reshape(g, ir_convert(g, lx_tensor(cx, 5), cd), 4, kd);
  lse = ir_select(g, ir_compare(g, IR_EQ, lse, lx_splat_like(g, lse, -INFINITY)),
                  lx_splat_like(g, lse, INFINITY), lse); /* fully masked rows: P = 0 */
  tv s = attn_scores(cx, q, k, 7, 8, 9);
  tv p = ir_unary(g, IR_EXP, lo_bin(g, IR_SUB, s, lse));
  tv scale = lx_scalar(cx, 9, cd);
  if (scale == IR_NONE) scale = lo_const(g, cd, 1.0 / sqrt((double)qt.dims[3]));
  tv dv = bmm4(g, p, dout, 2, 2);                                  /* [B,H,S,Ev] */
  tv dp = bmm4(g, dout, v, 3, 3);                                  /* [B,H,L,S] */
  tv dsum = lo_sum(g, ir_binary(g, IR_MUL, dout, out), &last, 1, true);
  tv ds = ir_binary(g, IR_MUL, p, lo_bin(g, IR_SUB, dp, dsum));
  tv dq = lo_bin(g, IR_MUL, bmm4(g, ds, k, 3, 2), scale);          /* [B,H,L,E] */
  tv dk = lo_bin(g, IR_MUL, bmm4(g, ds, q, 2, 2), scale);          /* [B,H,S,E] */
  tv vals[3] = {dq, dk, dv};
  for (int i = 0; i < 3 && i < cx->noutputs; i++)
    cx->results[i] = lo_fit(g, refuse_dropout(cx, vals[i], 6), lx_out(cx, i));
  return NULL;
}
