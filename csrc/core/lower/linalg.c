/* linalg.c — lowerings of the matrix-product family: mm, bmm, addmm, addbmm,
 * baddbmm, addmv, mv, dot, vdot. Every product is one dot_general; f16/bf16
 * accumulate in f32 and round once at the end (as PyTorch's CPU kernels do);
 * beta/alpha are runtime scalars, and beta == 0 ignores `self` (NaN
 * included), as PyTorch documents. Functional, in-place and out= overloads
 * share a lowering: arguments are read by schema position. */
#include "lower_ops.h"

typedef enum { P_MM, P_BMM, P_ADDBMM, P_MV, P_DOT, P_VDOT } prod_kind;

/* Complex conjugate (vdot), identity for real values. */
static tv conj_of(ir_graph *g, tv x) {
  if (!ir_is_complex(lo_dtype(g, x))) return x;
  return ir_binary(g, IR_COMPLEX, ir_unary(g, IR_REAL, x),
                   ir_unary(g, IR_NEG, ir_unary(g, IR_IMAG, x)));
}

/* a [M, K] @ b [K, N] where b is the transpose of w [N, K] (a linear layer's
 * x @ W^T) and N > M: computed as (w @ a^T)^T. The same sums; XLA CPU's dot
 * (Eigen's contraction) is ~3x slower with the bigger operand on the right
 * contracted over its minor dimension than with it on the left (x [16, 256]
 * @ W^T for W [4096, 256]: 1.7 ms against 0.58 ms; at 128 rows 7.5 against
 * 3.3), and a linear layer's forward is that case. XLA folds the operand's
 * transpose into the dot's dimension numbers; the barrier keeps its algebraic
 * simplifier from folding the result's transpose back into the slow form
 * (it rewrites transpose(dot(w, a)) as dot(a, w^T)). The transpose is M x N.
 * Only for XLA's CPU compiler: on a TPU or GPU the plain dot is the fast form
 * and a barrier would keep the result from fusing with what uses it. */
static tv mm_of(ir_graph *g, tv a, tv b) {
  tv w;
  ir_type ta = ir_type_of(g, a), tb = ir_type_of(g, b);
  if (ir_graph_xla_cpu(g) && ta.ndim == 2 && tb.ndim == 2 && tb.dims[1] > ta.dims[0] && ir_transposed_2d(g, b, &w)) {
    int64_t c = 1, perm[2] = {1, 0};
    tpuc_dtype d = lo_dtype(g, b);
    tv wa = ir_dot_general(g, w, a, NULL, NULL, 0, &c, &c, 1, lx_compute_dtype(d));
    return ir_transpose(g, ir_barrier(g, wa), perm);
  }
  return lo_matmul(g, a, b, 0, false, false);
}

/* The product of a and b, in lx_compute_dtype of b's dtype. */
static tv product(ir_graph *g, prod_kind k, tv a, tv b) {
  tpuc_dtype d = lo_dtype(g, b);
  tpuc_dtype cd = lx_compute_dtype(d);
  a = ir_convert(g, a, d);
  switch (k) {
    case P_MM:
      return mm_of(g, a, b);
    case P_BMM:
      return lo_matmul(g, a, b, 1, false, false);
    case P_ADDBMM: { /* [B,M,K] x [B,K,N] summed over B: contract B and K */
      int64_t ca[2] = {0, 2}, cb[2] = {0, 1};
      return ir_dot_general(g, a, b, NULL, NULL, 0, ca, cb, 2, cd);
    }
    case P_MV: {
      int64_t ca = 1, cb = 0;
      return ir_dot_general(g, a, b, NULL, NULL, 0, &ca, &cb, 1, cd);
    }
    case P_VDOT:
      a = conj_of(g, a);
      /* fall through */
    case P_DOT: {
      int64_t c = 0;
      return ir_dot_general(g, a, b, NULL, NULL, 0, &c, &c, 1, cd);
    }
  }
  return IR_NONE;
}

/* mm, bmm, mv, dot, vdot: (self, other) -> product. */
static tpuc_status *lower_product(tpuc_lower_ctx *cx, prod_kind k) {
  ir_type ot = lx_out(cx, 0);
  tv p = product(cx->g, k, lx_tensor(cx, 0), lx_tensor(cx, 1));
  cx->results[0] = lo_out(cx->g, p, ot);
  return NULL;
}

/* addmm-like: beta * self + alpha * product(arg1, arg2); beta at arg 3,
 * alpha at arg 4 (keyword-only, schema order). */
static tpuc_status *lower_add_product(tpuc_lower_ctx *cx, prod_kind k) {
  ir_graph *g = cx->g;
  ir_type ot = lx_out(cx, 0);
  if (ot.dtype == TPUC_PRED) return lx_unimplemented(cx, "bool matrix products");
  tpuc_dtype cd = lx_compute_dtype(ot.dtype);
  ir_type ct = ir_with_dtype(ot, cd);
  tv p = ir_convert(g, product(g, k, lx_tensor(cx, 1), lx_tensor(cx, 2)), cd);
  tv alpha = lx_scalar(cx, 4, cd), beta = lx_scalar(cx, 3, cd);
  if (alpha != IR_NONE) p = ir_binary(g, IR_MUL, p, lx_coerce(g, alpha, ct));
  tv self = lx_coerce(g, lx_tensor(cx, 0), ct);
  if (beta != IR_NONE) {
    tv b = lx_coerce(g, beta, ct);
    tv scaled = ir_binary(g, IR_MUL, self, b);
    tv zero = ir_splat(g, ct, 0.0);
    self = ir_select(g, ir_compare(g, IR_EQ, b, zero), zero, scaled);
  }
  cx->results[0] = lo_out(g, ir_binary(g, IR_ADD, self, p), ot);
  return NULL;
}

static tpuc_status *l_mm(tpuc_lower_ctx *cx) { return lower_product(cx, P_MM); }
static tpuc_status *l_bmm(tpuc_lower_ctx *cx) { return lower_product(cx, P_BMM); }
static tpuc_status *l_mv(tpuc_lower_ctx *cx) { return lower_product(cx, P_MV); }
static tpuc_status *l_dot(tpuc_lower_ctx *cx) { return lower_product(cx, P_DOT); }
static tpuc_status *l_vdot(tpuc_lower_ctx *cx) { return lower_product(cx, P_VDOT); }
static tpuc_status *l_addmm(tpuc_lower_ctx *cx) { return lower_add_product(cx, P_MM); }
static tpuc_status *l_baddbmm(tpuc_lower_ctx *cx) { return lower_add_product(cx, P_BMM); }
static tpuc_status *l_addbmm(tpuc_lower_ctx *cx) { return lower_add_product(cx, P_ADDBMM); }
static tpuc_status *l_addmv(tpuc_lower_ctx *cx) { return lower_add_product(cx, P_MV); }

const tpuc_lowering tpuc_lowerings_linalg[] = {
    {"aten::mm", l_mm},
    {"aten::mm.out", l_mm},
    {"aten::bmm", l_bmm},
    {"aten::bmm.out", l_bmm},
    {"aten::mv", l_mv},
    {"aten::mv.out", l_mv},
    {"aten::dot", l_dot},
    {"aten::dot.out", l_dot},
    {"aten::vdot", l_vdot},
    {"aten::vdot.out", l_vdot},
    {"aten::addmm", l_addmm},
    {"aten::addmm.out", l_addmm},
    {"aten::addmm_", l_addmm},
    {"aten::baddbmm", l_baddbmm},
    {"aten::baddbmm.out", l_baddbmm},
    {"aten::baddbmm_", l_baddbmm},
    {"aten::addbmm", l_addbmm},
    {"aten::addbmm.out", l_addbmm},
    {"aten::addbmm_", l_addbmm},
    {"aten::addmv", l_addmv},
    {"aten::addmv.out", l_addmv},
    {"aten::addmv_", l_addmv},
    {NULL, NULL},
};
