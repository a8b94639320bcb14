/* elementwise.h — private helpers shared by the elementwise, reduction, copy
 * and random lowerings (lower/elementwise*.c, reduce.c, copy.c, random.c):
 * PyTorch's type promotion, operands that may be tensors or runtime scalars,
 * NaN-aware building blocks, the drivers of unary and binary ops, and the
 * lowering functions that elementwise_unary.c and elementwise_special.c
 * contribute to the elementwise table. */
#ifndef TPUC_LOWER_ELEMENTWISE_H
#define TPUC_LOWER_ELEMENTWISE_H

#include "lower.h"

/* ---- type promotion (PyTorch's result_type) ---- */
#define EW_UNDEFINED ((tpuc_dtype)-1)

/* promote_types(a, b); EW_UNDEFINED operands are skipped. */
tpuc_dtype ew_promote(tpuc_dtype a, tpuc_dtype b);
/* The dtype of arg i as result_type sees it: a tensor's dtype, a wrapped
 * Python number's default dtype (bool, s64, f32, c64); EW_UNDEFINED if the
 * arg is absent. */
tpuc_dtype ew_arg_dtype(const tpuc_lower_ctx *cx, int i);
/* result_type over args idx[0..n-1]: dimensioned tensors win over 0-dim
 * tensors, which win over Python scalars, unless the lower priority operand
 * is of a higher category (bool < int < float < complex). */
tpuc_dtype ew_result_type(const tpuc_lower_ctx *cx, const int *idx, int n);
/* Float dtype an integer/bool computation is promoted to: the output's dtype
 * when it is floating (this honours torch.get_default_dtype()), else f32. */
tpuc_dtype ew_float_of(const tpuc_lower_ctx *cx, tpuc_dtype d);

/* ---- operands ---- */
/* Arg i (a tensor or a runtime scalar) converted to t.dtype and broadcast to
 * t's shape. */
tv ew_operand(const tpuc_lower_ctx *cx, int i, ir_type t);
/* out_types[0]'s shape with dtype d. */
ir_type ew_out_as(const tpuc_lower_ctx *cx, tpuc_dtype d);
/* Sets results[0] to r converted to out_types[0] (broadcast if needed). */
tpuc_status *ew_finish(tpuc_lower_ctx *cx, tv r);
/* A constant of x's type with every element v (complex: v + 0i). */
tv ew_splat(ir_graph *g, tv x, double v);

/* ---- drivers ---- */
typedef tv (*ew_build1)(ir_graph *g, tv x);
typedef tv (*ew_build2)(ir_graph *g, tv a, tv b);

enum {
  EW_FLOAT = 1,    /* bool/integer inputs compute in floating point */
  EW_EXACT = 2,    /* compute in the promoted dtype itself, even float16/bfloat16 */
  EW_COMPLEX = 4,  /* complex inputs are supported (else: unimplemented) */
  EW_INTEGER = 8,  /* only bool and integer inputs */
  EW_INT_ID = 16,  /* unary: the identity on bool and integers (rounding) */
};

/* The dtype op(args idx[0..n-1]) computes in (promotion, then the flags),
 * or EW_UNDEFINED when the flags rule the operands out. */
tpuc_dtype ew_compute_dtype(const tpuc_lower_ctx *cx, const int *idx, int n, unsigned flags);
/* results[0] = fn(arg a, arg b) at the output's shape, in the compute dtype. */
tpuc_status *ew_binary(tpuc_lower_ctx *cx, int a, int b, unsigned flags, ew_build2 fn);
/* Self (arg 0) converted to the dtype a unary op computes in; IR_NONE when
 * the flags rule its dtype out. */
tv ew_self_in(tpuc_lower_ctx *cx, unsigned flags);
/* results[0] = fn(self), or the primitive op(self) when fn is NULL. */
tpuc_status *ew_unary(tpuc_lower_ctx *cx, unsigned flags, ir_unary_op op, ew_build1 fn);
/* A scalar arg like x (converted, broadcast), or `dflt` when absent. */
tv ew_scalar_like(tpuc_lower_ctx *cx, int i, tv x, double dflt);
/* The string arg i, or NULL. */
const char *ew_arg_string(const tpuc_lower_ctx *cx, int i);

/* ---- building blocks ---- */
tv ew_isinf(ir_graph *g, tv x);    /* pred; false for non-floats */
tv ew_signbit(ir_graph *g, tv x);  /* pred: sign bit of a float (-0.0 too), x < 0 for ints */
tv ew_isnan(ir_graph *g, tv x); /* pred; false for non-floats */
/* maximum / minimum that return NaN when either operand is NaN. */
tv ew_max(ir_graph *g, tv a, tv b);
tv ew_min(ir_graph *g, tv a, tv b);
tv ew_trunc(ir_graph *g, tv x);
/* Python-style floor division and modulo (ints and floats), as PyTorch. */
tv ew_floor_div(ir_graph *g, tv a, tv b);
tv ew_remainder(ir_graph *g, tv a, tv b);
/* Largest and lowest finite values of a dtype (as doubles; ints exact to
 * 2^53 — use ew_int_max/min for exact integers). */
double ew_finite_max(tpuc_dtype d);
int64_t ew_int_max(tpuc_dtype d);
int64_t ew_int_min(tpuc_dtype d);
/* The identity of a reducer for dtype d, as a rank-0 value. */
tv ew_reduce_init(ir_graph *g, tpuc_dtype d, ir_reducer r);

/* ---- lowerings defined in elementwise_unary.c (listed in elementwise.c) ---- */
#define EW_UNARY_FNS(X)                                                                         \
  X(ew_neg) X(ew_abs) X(ew_sign) X(ew_sgn) X(ew_exp) X(ew_exp2) X(ew_expm1) X(ew_log)          \
  X(ew_log2) X(ew_log10) X(ew_log1p) X(ew_sqrt) X(ew_rsqrt) X(ew_reciprocal) X(ew_sin)         \
  X(ew_cos) X(ew_tan) X(ew_asin) X(ew_acos) X(ew_atan) X(ew_sinh) X(ew_cosh) X(ew_tanh)        \
  X(ew_asinh) X(ew_acosh) X(ew_atanh) X(ew_sigmoid) X(ew_erf) X(ew_erfc)                       \
  X(ew_floor) X(ew_ceil) X(ew_round) X(ew_trunc_op) X(ew_frac) X(ew_bitwise_not)               \
  X(ew_logical_not) X(ew_isnan_op) X(ew_isinf_op) X(ew_isfinite) X(ew_relu) X(ew_hardsigmoid)    \
  X(ew_hardswish) X(ew_mish) X(ew_silu) X(ew_round_decimals) X(ew_nan_to_num)                 \
  X(ew_leaky_relu) X(ew_hardtanh) X(ew_elu) X(ew_softplus) X(ew_gelu) X(ew_gelu_backward)      \
  X(ew_silu_backward) X(ew_sigmoid_backward) X(ew_tanh_backward) X(ew_threshold_backward)      \
  X(ew_clamp) X(ew_clamp_min) X(ew_clamp_max) X(ew_threshold) X(ew_leaky_relu_backward)      \
  X(ew_hardtanh_backward) X(ew_elu_backward) X(ew_softplus_backward)                           \
  X(ew_hardsigmoid_backward) X(ew_hardswish_backward)

/* ---- lowerings defined in elementwise_special.c (listed in elementwise.c) ---- */
#define EW_SPECIAL_FNS(X)                                                                       \
  X(ew_lgamma) X(ew_digamma) X(ew_sinc) X(ew_deg2rad) X(ew_rad2deg) X(ew_signbit_op)           \
  X(ew_logit) X(ew_logit_backward) X(ew_celu) X(ew_softshrink) X(ew_hardshrink)                \
  X(ew_shrink_backward) X(ew_log_sigmoid_forward) X(ew_log_sigmoid_backward) X(ew_fmax)         \
  X(ew_fmin) X(ew_heaviside) X(ew_logaddexp2) X(ew_ldexp) X(ew_shift_left) X(ew_shift_right)    \
  X(ew_rsub) X(ew_isposinf) X(ew_isneginf) X(ew_conj_physical) X(ew_angle) X(ew_complex)       \
  X(ew_polar) X(ew_erfinv)

#define EW_DECLARE(fn) tpuc_status *fn(tpuc_lower_ctx *cx);
EW_UNARY_FNS(EW_DECLARE)
EW_SPECIAL_FNS(EW_DECLARE)

#endif /* TPUC_LOWER_ELEMENTWISE_H */
