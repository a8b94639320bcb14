/* elementwise.c — lowerings of PyTorch's binary and ternary elementwise ops:
 * arithmetic (add, sub, mul, div and its rounding modes, remainder, fmod,
 * pow, atan2, maximum, minimum, hypot, logaddexp, xlogy, copysign),
 * comparisons, logical and bitwise ops, where, masked_fill, lerp,
 * addcmul/addcdiv, fill_/zero_; the helpers declared in elementwise.h; and the
 * elementwise family's table (the unary ops and activations it lists live in
 * elementwise_unary.c).
 *
 * Every op is lowered once for its functional, in-place and out= overloads:
 * arguments are read by schema position and the engine writes results[0]
 * wherever the overload's output lives. Operands that are Python scalars are
 * runtime values, so a changed scalar never recompiles. The dtype to compute
 * in follows PyTorch's type promotion; float16/bfloat16 compute in float32 as
 * PyTorch's CPU kernels do, and the result is converted to the output's
 * dtype. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "elementwise.h"

/* ---- type promotion ---- */

/* 0 bool, 1 integer, 2 floating, 3 complex; -1 undefined */
static int category(tpuc_dtype d) {
  if ((int)d < 0) return -1;
  if (d == TPUC_PRED) return 0;
  if (ir_is_int(d)) return 1;
  if (ir_is_float(d)) return 2;
  return 3;
}

tpuc_dtype ew_promote(tpuc_dtype a, tpuc_dtype b) {
  if (a == EW_UNDEFINED) return b;
  if (b == EW_UNDEFINED || a == b) return a;
  int ca = category(a), cb = category(b);
  if (ca < cb || (ca == cb && tpuc_dtype_size(a) < tpuc_dtype_size(b))) {
    tpuc_dtype t = a; /* make a the higher one */
    a = b;
    b = t;
    int c = ca;
    ca = cb;
    cb = c;
  }
  if (ca == 3) return (a == TPUC_C128 || b == TPUC_F64) ? TPUC_C128 : TPUC_C64;
  if (ca != cb) return a;
  if (ca == 2) return tpuc_dtype_size(a) == tpuc_dtype_size(b) ? TPUC_F32 : a; /* f16 + bf16 */
  /* integers: same signedness keeps the wider; else a signed type holding both */
  if (ir_is_unsigned(a) == ir_is_unsigned(b)) return a;
  tpuc_dtype s = ir_is_unsigned(a) ? b : a, u = ir_is_unsigned(a) ? a : b;
  if (tpuc_dtype_size(s) > tpuc_dtype_size(u)) return s;
  switch (tpuc_dtype_size(u)) {
  case 1: return TPUC_S16;
  case 2: return TPUC_S32;
  default: return TPUC_S64;
  }
}

tpuc_dtype ew_arg_dtype(const tpuc_lower_ctx *cx, int i) {
  const tpuc_arg *a = lx_arg(cx, i);
  if (!a) return EW_UNDEFINED;
  if (a->kind == TPUC_ARG_TENSOR) return lx_tensor_desc(cx, i)->dtype;
  if (a->kind != TPUC_ARG_SCALAR) return EW_UNDEFINED;
  switch (a->scalar.kind) {
  case TPUC_SCALAR_BOOL: return TPUC_PRED;
  case TPUC_SCALAR_INT: return TPUC_S64;
  case TPUC_SCALAR_FLOAT: return TPUC_F32;
  default: return TPUC_C64;
  }
}

/* c10's combine_categories: `lo` only matters if of a higher category. */
static tpuc_dtype combine(tpuc_dtype hi, tpuc_dtype lo) {
  int ch = category(hi), cl = category(lo);
  if (ch == 3) return hi;
  if (cl == 3) return ch == 2 ? (hi == TPUC_F64 ? TPUC_C128 : TPUC_C64) : lo;
  if (ch == 2) return hi;
  if (hi == TPUC_PRED || cl == 2) return ew_promote(hi, lo);
  return hi != EW_UNDEFINED ? hi : lo;
}

tpuc_dtype ew_result_type(const tpuc_lower_ctx *cx, const int *idx, int n) {
  tpuc_dtype dim = EW_UNDEFINED, zero = EW_UNDEFINED, wrapped = EW_UNDEFINED;
  for (int k = 0; k < n; k++) {
    const tpuc_arg *a = lx_arg(cx, idx[k]);
    if (!a) continue;
    if (a->kind == TPUC_ARG_TENSOR) {
      const tpuc_tensor *t = lx_tensor_desc(cx, idx[k]);
      if (t->ndim > 0) dim = ew_promote(dim, t->dtype);
      else zero = ew_promote(zero, t->dtype);
    } else if (a->kind == TPUC_ARG_SCALAR) {
      wrapped = ew_promote(wrapped, ew_arg_dtype(cx, idx[k]));
    }
  }
  return combine(dim, combine(zero, wrapped));
}

tpuc_dtype ew_float_of(const tpuc_lower_ctx *cx, tpuc_dtype d) {
  if (ir_is_float(d) || ir_is_complex(d)) return d;
  tpuc_dtype o = cx->out_types[0].dtype;
  return ir_is_float(o) ? o : TPUC_F32;
}

/* ---- operands ---- */

tv ew_operand(const tpuc_lower_ctx *cx, int i, ir_type t) {
  const tpuc_arg *a = lx_arg(cx, i);
  if (a && a->kind == TPUC_ARG_TENSOR) return lx_coerce(cx->g, lx_tensor(cx, i), t);
  if (a && a->kind == TPUC_ARG_SCALAR) return lx_coerce(cx->g, lx_scalar(cx, i, t.dtype), t);
  ir_fail(cx->g, "elementwise: argument %d is neither a tensor nor a scalar", i);
  return IR_NONE;
}

ir_type ew_out_as(const tpuc_lower_ctx *cx, tpuc_dtype d) {
  return ir_with_dtype(cx->out_types[0], d);
}

tpuc_status *ew_finish(tpuc_lower_ctx *cx, tv r) {
  ir_graph *g = cx->g;
  if (r != IR_NONE && ir_is_complex(ir_type_of(g, r).dtype) &&
      !ir_is_complex(cx->out_types[0].dtype))
    r = ir_unary(g, IR_REAL, r); /* as PyTorch's copy: the imaginary part is dropped */
  cx->results[0] = lx_coerce(g, r, cx->out_types[0]);
  return NULL;
}

/* ---- building blocks ---- */

tv ew_splat(ir_graph *g, tv x, double v) {
  ir_type t = ir_type_of(g, x);
  if (!ir_is_complex(t.dtype)) return ir_splat(g, t, v);
  /* built from its real part: complex literals are spelled differently */
  tv re = ir_splat(g, ir_with_dtype(t, t.dtype == TPUC_C64 ? TPUC_F32 : TPUC_F64), v);
  return ir_convert(g, re, t.dtype);
}

static tv splat_pred(ir_graph *g, tv like, bool v) {
  return ir_splat(g, ir_with_dtype(ir_type_of(g, like), TPUC_PRED), v ? 1.0 : 0.0);
}

tv ew_isnan(ir_graph *g, tv x) {
  tpuc_dtype d = ir_type_of(g, x).dtype;
  if (!ir_is_float(d) && !ir_is_complex(d)) return splat_pred(g, x, false);
  return ir_compare(g, IR_NE, x, x);
}

tv ew_isinf(ir_graph *g, tv x) {
  if (!ir_is_float(ir_type_of(g, x).dtype)) return splat_pred(g, x, false);
  return ir_compare(g, IR_EQ, ir_unary(g, IR_ABS, x), ew_splat(g, x, INFINITY));
}

static tv nan_aware(ir_graph *g, ir_binary_op op, tv a, tv b) {
  tv r = ir_binary(g, op, a, b);
  if (!ir_is_float(ir_type_of(g, a).dtype)) return r;
  r = ir_select(g, ew_isnan(g, a), a, r);
  return ir_select(g, ew_isnan(g, b), b, r);
}

tv ew_max(ir_graph *g, tv a, tv b) { return nan_aware(g, IR_MAX, a, b); }
tv ew_min(ir_graph *g, tv a, tv b) { return nan_aware(g, IR_MIN, a, b); }

tv ew_trunc(ir_graph *g, tv x) {
  if (!ir_is_float(ir_type_of(g, x).dtype)) return x;
  tv neg = ir_compare(g, IR_LT, x, ew_splat(g, x, 0.0));
  return ir_select(g, neg, ir_unary(g, IR_CEIL, x), ir_unary(g, IR_FLOOR, x));
}

static tv lt0(ir_graph *g, tv x) { return ir_compare(g, IR_LT, x, ew_splat(g, x, 0.0)); }
static tv ne0(ir_graph *g, tv x) { return ir_compare(g, IR_NE, x, ew_splat(g, x, 0.0)); }

tv ew_remainder(ir_graph *g, tv a, tv b) {
  /* fmod, then moved into the divisor's sign (both ints and floats) */
  tv mod = ir_binary(g, IR_REM, a, b);
  tv fix = ir_binary(g, IR_AND, ne0(g, mod), ir_compare(g, IR_NE, lt0(g, b), lt0(g, mod)));
  return ir_select(g, fix, ir_binary(g, IR_ADD, mod, b), mod);
}

static tv copysign_v(ir_graph *g, tv mag, tv sgn);

tv ew_floor_div(ir_graph *g, tv a, tv b) {
  tpuc_dtype d = ir_type_of(g, a).dtype;
  tv q = ir_binary(g, IR_DIV, a, b);
  tv one = ew_splat(g, a, 1.0);
  if (!ir_is_float(d)) { /* truncating division, one less when signs differ and inexact */
    if (ir_is_unsigned(d) || d == TPUC_PRED) return q;
    tv inexact = ne0(g, ir_binary(g, IR_REM, a, b));
    tv fix = ir_binary(g, IR_AND, inexact, ir_compare(g, IR_NE, lt0(g, a), lt0(g, b)));
    return ir_select(g, fix, ir_binary(g, IR_SUB, q, one), q);
  }
  /* PyTorch's div_floor_floating: exact for every representable quotient */
  tv mod = ir_binary(g, IR_REM, a, b);
  tv div = ir_binary(g, IR_DIV, ir_binary(g, IR_SUB, a, mod), b);
  tv fix = ir_binary(g, IR_AND, ne0(g, mod), ir_compare(g, IR_NE, lt0(g, b), lt0(g, mod)));
  div = ir_select(g, fix, ir_binary(g, IR_SUB, div, one), div);
  tv fl = ir_unary(g, IR_FLOOR, div);
  tv up = ir_compare(g, IR_GT, ir_binary(g, IR_SUB, div, fl), ew_splat(g, a, 0.5));
  fl = ir_select(g, up, ir_binary(g, IR_ADD, fl, one), fl);
  tv r = ir_select(g, ne0(g, div), fl, copysign_v(g, ew_splat(g, a, 0.0), q));
  return ir_select(g, ne0(g, b), r, q);
}

double ew_finite_max(tpuc_dtype d) {
  switch (d) {
  case TPUC_F16: return 65504.0;
  case TPUC_BF16: return 3.3895313892515355e38;
  case TPUC_F32: return FLT_MAX;
  case TPUC_F64: return DBL_MAX;
  default: return (double)ew_int_max(d);
  }
}

int64_t ew_int_max(tpuc_dtype d) {
  switch (d) {
  case TPUC_PRED: return 1;
  case TPUC_S8: return INT8_MAX;
  case TPUC_S16: return INT16_MAX;
  case TPUC_S32: return INT32_MAX;
  case TPUC_U8: return UINT8_MAX;
  case TPUC_U16: return UINT16_MAX;
  case TPUC_U32: return UINT32_MAX;
  default: return INT64_MAX; /* s64; u64 is capped */
  }
}

int64_t ew_int_min(tpuc_dtype d) {
  switch (d) {
  case TPUC_S8: return INT8_MIN;
  case TPUC_S16: return INT16_MIN;
  case TPUC_S32: return INT32_MIN;
  case TPUC_S64: return INT64_MIN;
  default: return 0;
  }
}

tv ew_reduce_init(ir_graph *g, tpuc_dtype d, ir_reducer r) {
  ir_type t = ir_scalar_type(d);
  bool fl = ir_is_float(d) || ir_is_complex(d);
  tv like = ir_splat(g, ir_scalar_type(TPUC_F32), 0.0);
  if (ir_is_complex(d)) like = ir_convert(g, like, d);
  switch (r) {
  case IR_RED_SUM:
  case IR_RED_OR: return ir_is_complex(d) ? like : ir_splat(g, t, 0.0);
  case IR_RED_PROD:
  case IR_RED_AND: return ir_is_complex(d) ? ew_splat(g, like, 1.0) : ir_splat(g, t, 1.0);
  case IR_RED_MAX: return fl ? ir_splat(g, t, -INFINITY) : ir_splat_i64(g, t, ew_int_min(d));
  default: return fl ? ir_splat(g, t, INFINITY) : ir_splat_i64(g, t, ew_int_max(d));
  }
}

/* ---- drivers ---- */

const char *ew_arg_string(const tpuc_lower_ctx *cx, int i) {
  const tpuc_arg *a = lx_arg(cx, i);
  return a && a->kind == TPUC_ARG_STRING ? a->s : NULL;
}

tpuc_dtype ew_compute_dtype(const tpuc_lower_ctx *cx, const int *idx, int n, unsigned flags) {
  tpuc_dtype d = ew_result_type(cx, idx, n);
  if (d == EW_UNDEFINED) return d;
  if (!(flags & EW_COMPLEX) && ir_is_complex(d)) return EW_UNDEFINED;
  if ((flags & EW_INTEGER) && !ir_is_int(d) && d != TPUC_PRED) return EW_UNDEFINED;
  if ((flags & EW_FLOAT) && !ir_is_float(d) && !ir_is_complex(d)) d = ew_float_of(cx, d);
  return (flags & EW_EXACT) ? d : lx_compute_dtype(d);
}

tpuc_status *ew_binary(tpuc_lower_ctx *cx, int a, int b, unsigned flags, ew_build2 fn) {
  int idx[2] = {a, b};
  tpuc_dtype d = ew_compute_dtype(cx, idx, 2, flags);
  if (d == EW_UNDEFINED) return lx_unimplemented(cx, "operand dtypes");
  ir_type t = ew_out_as(cx, d);
  return ew_finish(cx, fn(cx->g, ew_operand(cx, a, t), ew_operand(cx, b, t)));
}

#define BUILD2(name, op) \
  static tv name(ir_graph *g, tv a, tv b) { return ir_binary(g, op, a, b); }
BUILD2(b_mul, IR_MUL)
BUILD2(b_div, IR_DIV)
BUILD2(b_rem, IR_REM)
BUILD2(b_atan2, IR_ATAN2)
BUILD2(b_and, IR_AND)
BUILD2(b_or, IR_OR)
BUILD2(b_xor, IR_XOR)

/* bool ** bool (the CPU's pow with a bool Scalar exponent: b ** True is b,
 * b ** False is True): a | !e; otherwise stablehlo.power. */
static tv b_pow(ir_graph *g, tv a, tv b) {
  if (ir_type_of(g, a).dtype == TPUC_PRED)
    return ir_binary(g, IR_OR, a, ir_unary(g, IR_NOT, b));
  return ir_binary(g, IR_POW, a, b);
}

static tv b_div_trunc(ir_graph *g, tv a, tv b) { return ew_trunc(g, ir_binary(g, IR_DIV, a, b)); }

static tv b_hypot(ir_graph *g, tv a, tv b) {
  /* max * sqrt(1 + (min/max)^2): no overflow for large operands */
  tv x = ir_unary(g, IR_ABS, a), y = ir_unary(g, IR_ABS, b);
  tv hi = ew_max(g, x, y), lo = ew_min(g, x, y);
  tv q = ir_binary(g, IR_DIV, lo, hi);
  tv one = ew_splat(g, a, 1.0);
  tv r = ir_binary(g, IR_MUL, hi, ir_unary(g, IR_SQRT, ir_binary(g, IR_ADD, one, ir_binary(g, IR_MUL, q, q))));
  r = ir_select(g, ne0(g, hi), r, hi);
  tv inf = ir_binary(g, IR_OR, ew_isinf(g, a), ew_isinf(g, b));
  return ir_select(g, inf, ew_splat(g, a, INFINITY), r);
}

static tv b_logaddexp(ir_graph *g, tv a, tv b) {
  tv m = ew_max(g, a, b);
  tv d = ir_unary(g, IR_NEG, ir_unary(g, IR_ABS, ir_binary(g, IR_SUB, a, b)));
  tv r = ir_binary(g, IR_ADD, m, ir_unary(g, IR_LOG1P, ir_unary(g, IR_EXP, d)));
  tv same_inf = ir_binary(g, IR_AND, ew_isinf(g, a), ir_compare(g, IR_EQ, a, b));
  return ir_select(g, same_inf, a, r);
}

static tv b_xlogy(ir_graph *g, tv x, tv y) {
  tv r = ir_binary(g, IR_MUL, x, ir_unary(g, IR_LOG, y));
  r = ir_select(g, ne0(g, x), r, ew_splat(g, x, 0.0));
  return ir_select(g, ew_isnan(g, y), y, r);
}

tv ew_signbit(ir_graph *g, tv x) {
  ir_type t = ir_type_of(g, x);
  if (!ir_is_float(t.dtype)) return t.dtype == TPUC_PRED ? splat_pred(g, x, false) : lt0(g, x);
  size_t sz = tpuc_dtype_size(t.dtype);
  ir_type ti = ir_with_dtype(t, sz == 8 ? TPUC_S64 : sz == 4 ? TPUC_S32 : TPUC_S16);
  return lt0(g, ir_bitcast(g, x, ti));
}

static tv copysign_v(ir_graph *g, tv mag, tv sgn) {
  tv m = ir_unary(g, IR_ABS, mag);
  return ir_select(g, ew_signbit(g, sgn), ir_unary(g, IR_NEG, m), m);
}

/* ---- arithmetic ---- */

static tpuc_status *add_sub(tpuc_lower_ctx *cx, ir_binary_op op) {
  int idx[2] = {0, 1};
  tpuc_dtype d = ew_compute_dtype(cx, idx, 2, EW_COMPLEX);
  if (d == EW_UNDEFINED) return lx_unimplemented(cx, "operand dtypes");
  ir_type t = ew_out_as(cx, d);
  ir_graph *g = cx->g;
  tv b = ew_operand(cx, 1, t);
  if (!lx_is_none(cx, 2)) b = ir_binary(g, IR_MUL, b, ew_operand(cx, 2, t)); /* alpha */
  return ew_finish(cx, ir_binary(g, op, ew_operand(cx, 0, t), b));
}

static tpuc_status *ew_add(tpuc_lower_ctx *cx) { return add_sub(cx, IR_ADD); }
static tpuc_status *ew_sub(tpuc_lower_ctx *cx) { return add_sub(cx, IR_SUB); }
static tpuc_status *ew_mul(tpuc_lower_ctx *cx) { return ew_binary(cx, 0, 1, EW_COMPLEX, b_mul); }
static tpuc_status *ew_div(tpuc_lower_ctx *cx) { return ew_binary(cx, 0, 1, EW_FLOAT | EW_COMPLEX, b_div); }
static tpuc_status *ew_floor_divide(tpuc_lower_ctx *cx) {
  return ew_binary(cx, 0, 1, 0, ew_floor_div);
}

static tpuc_status *ew_div_mode(tpuc_lower_ctx *cx) {
  const char *mode = ew_arg_string(cx, 2);
  if (!mode) return ew_div(cx);
  if (!strcmp(mode, "trunc")) return ew_binary(cx, 0, 1, 0, b_div_trunc);
  if (!strcmp(mode, "floor")) return ew_floor_divide(cx);
  return lx_unimplemented(cx, "rounding_mode");
}

static tpuc_status *ew_remainder_op(tpuc_lower_ctx *cx) {
  return ew_binary(cx, 0, 1, 0, ew_remainder);
}
static tpuc_status *ew_fmod(tpuc_lower_ctx *cx) { return ew_binary(cx, 0, 1, 0, b_rem); }
/* x ** e with e a constant (a static Scalar): the products and roots
 * PyTorch's CPU kernel uses for these exponents, far cheaper than pow. */
static tv pow_special(ir_graph *g, tv x, double e) {
  if (e == 1) return x;
  if (e == 2) return ir_binary(g, IR_MUL, x, x);
  if (e == 3) return ir_binary(g, IR_MUL, ir_binary(g, IR_MUL, x, x), x);
  if (e == 0.5) return ir_unary(g, IR_SQRT, x);
  if (e == -0.5) return ir_unary(g, IR_RSQRT, x);
  if (e == -1) return ir_binary(g, IR_DIV, ew_splat(g, x, 1.0), x);
  if (e == -2) return ir_binary(g, IR_DIV, ew_splat(g, x, 1.0), ir_binary(g, IR_MUL, x, x));
  return IR_NONE;
}

static tpuc_status *ew_pow(tpuc_lower_ctx *cx) {
  double e;
  const tpuc_arg *b = lx_arg(cx, 1);
  if (b && b->kind == TPUC_ARG_SCALAR && ir_splat_value(cx->g, cx->scalar_vals[1], &e) &&
      ir_is_float(cx->out_types[0].dtype) && e != 0) {
    tpuc_dtype d = lx_compute_dtype(cx->out_types[0].dtype);
    tv r = pow_special(cx->g, ew_operand(cx, 0, ew_out_as(cx, d)), e);
    if (r != IR_NONE) return ew_finish(cx, r);
  }
  return ew_binary(cx, 0, 1, EW_COMPLEX, b_pow);
}
static tpuc_status *ew_atan2(tpuc_lower_ctx *cx) {
  return ew_binary(cx, 0, 1, EW_FLOAT, b_atan2);
}
static tpuc_status *ew_maximum(tpuc_lower_ctx *cx) {
  return ew_binary(cx, 0, 1, EW_EXACT, ew_max);
}
static tpuc_status *ew_minimum(tpuc_lower_ctx *cx) {
  return ew_binary(cx, 0, 1, EW_EXACT, ew_min);
}
static tpuc_status *ew_hypot(tpuc_lower_ctx *cx) {
  return ew_binary(cx, 0, 1, EW_FLOAT, b_hypot);
}
static tpuc_status *ew_logaddexp(tpuc_lower_ctx *cx) {
  return ew_binary(cx, 0, 1, EW_FLOAT, b_logaddexp);
}
static tpuc_status *ew_xlogy(tpuc_lower_ctx *cx) {
  return ew_binary(cx, 0, 1, EW_FLOAT, b_xlogy);
}
static tpuc_status *ew_copysign(tpuc_lower_ctx *cx) {
  return ew_binary(cx, 0, 1, EW_FLOAT, copysign_v);
}

/* ---- comparisons, logical and bitwise ops ---- */

static tpuc_status *compare(tpuc_lower_ctx *cx, ir_cmp dir) {
  int idx[2] = {0, 1};
  unsigned flags = EW_EXACT | (dir == IR_EQ || dir == IR_NE ? EW_COMPLEX : 0);
  tpuc_dtype d = ew_compute_dtype(cx, idx, 2, flags);
  if (d == EW_UNDEFINED) return lx_unimplemented(cx, "operand dtypes");
  ir_type t = ew_out_as(cx, d);
  return ew_finish(cx, ir_compare(cx->g, dir, ew_operand(cx, 0, t), ew_operand(cx, 1, t)));
}

static tpuc_status *ew_eq(tpuc_lower_ctx *cx) { return compare(cx, IR_EQ); }
static tpuc_status *ew_ne(tpuc_lower_ctx *cx) { return compare(cx, IR_NE); }
static tpuc_status *ew_lt(tpuc_lower_ctx *cx) { return compare(cx, IR_LT); }
static tpuc_status *ew_le(tpuc_lower_ctx *cx) { return compare(cx, IR_LE); }
static tpuc_status *ew_gt(tpuc_lower_ctx *cx) { return compare(cx, IR_GT); }
static tpuc_status *ew_ge(tpuc_lower_ctx *cx) { return compare(cx, IR_GE); }

static tpuc_status *logical(tpuc_lower_ctx *cx, ir_binary_op op) {
  ir_type t = ew_out_as(cx, TPUC_PRED); /* operands become x != 0 */
  return ew_finish(cx, ir_binary(cx->g, op, ew_operand(cx, 0, t), ew_operand(cx, 1, t)));
}

static tpuc_status *ew_logical_and(tpuc_lower_ctx *cx) { return logical(cx, IR_AND); }
static tpuc_status *ew_logical_or(tpuc_lower_ctx *cx) { return logical(cx, IR_OR); }
static tpuc_status *ew_logical_xor(tpuc_lower_ctx *cx) { return logical(cx, IR_XOR); }
static tpuc_status *ew_bitwise_and(tpuc_lower_ctx *cx) {
  return ew_binary(cx, 0, 1, EW_EXACT | EW_INTEGER, b_and);
}
static tpuc_status *ew_bitwise_or(tpuc_lower_ctx *cx) {
  return ew_binary(cx, 0, 1, EW_EXACT | EW_INTEGER, b_or);
}
static tpuc_status *ew_bitwise_xor(tpuc_lower_ctx *cx) {
  return ew_binary(cx, 0, 1, EW_EXACT | EW_INTEGER, b_xor);
}

/* ---- selection and filling ---- */

static tpuc_status *ew_where(tpuc_lower_ctx *cx) { /* (condition, self, other) */
  int idx[2] = {1, 2};
  tpuc_dtype d = ew_compute_dtype(cx, idx, 2, EW_EXACT | EW_COMPLEX);
  if (d == EW_UNDEFINED) return lx_unimplemented(cx, "operand dtypes");
  ir_type t = ew_out_as(cx, d);
  tv c = ew_operand(cx, 0, ew_out_as(cx, TPUC_PRED));
  return ew_finish(cx, ir_select(cx->g, c, ew_operand(cx, 1, t), ew_operand(cx, 2, t)));
}

static tpuc_status *ew_masked_fill(tpuc_lower_ctx *cx) { /* (self, mask, value) */
  ir_type t = cx->out_types[0];
  tv c = ew_operand(cx, 1, ew_out_as(cx, TPUC_PRED));
  return ew_finish(cx, ir_select(cx->g, c, ew_operand(cx, 2, t), ew_operand(cx, 0, t)));
}

static tpuc_status *ew_fill(tpuc_lower_ctx *cx) { /* (self, value) */
  return ew_finish(cx, ew_operand(cx, 1, cx->out_types[0]));
}

static tpuc_status *ew_zero(tpuc_lower_ctx *cx) {
  return ew_finish(cx, ir_splat(cx->g, cx->out_types[0], 0.0));
}

/* ---- ternary arithmetic ---- */

/* The dtype a ternary op over args 0..2 computes in; the output's shape. */
static ir_type ternary_type(const tpuc_lower_ctx *cx, unsigned flags, bool *ok) {
  int idx[3] = {0, 1, 2};
  tpuc_dtype d = ew_compute_dtype(cx, idx, 3, flags);
  *ok = d != EW_UNDEFINED;
  return ew_out_as(cx, *ok ? d : TPUC_F32);
}

static tpuc_status *ew_lerp(tpuc_lower_ctx *cx) { /* (self, end, weight) */
  bool ok;
  ir_type t = ternary_type(cx, EW_FLOAT, &ok);
  if (!ok) return lx_unimplemented(cx, "operand dtypes");
  ir_graph *g = cx->g;
  tv s = ew_operand(cx, 0, t), e = ew_operand(cx, 1, t), w = ew_operand(cx, 2, t);
  tv diff = ir_binary(g, IR_SUB, e, s);
  tv lo = ir_binary(g, IR_ADD, s, ir_binary(g, IR_MUL, w, diff));
  tv one_minus_w = ir_binary(g, IR_SUB, ew_splat(g, w, 1.0), w);
  tv hi = ir_binary(g, IR_SUB, e, ir_binary(g, IR_MUL, diff, one_minus_w));
  tv small = ir_compare(g, IR_LT, ir_unary(g, IR_ABS, w), ew_splat(g, w, 0.5));
  return ew_finish(cx, ir_select(g, small, lo, hi));
}

/* self + value * t1 (op) t2, evaluated as PyTorch's CPU kernel does. */
static tpuc_status *addc(tpuc_lower_ctx *cx, ir_binary_op op) {
  bool ok;
  ir_type t = ternary_type(cx, EW_COMPLEX | (op == IR_DIV ? EW_FLOAT : 0), &ok);
  if (!ok) return lx_unimplemented(cx, "operand dtypes");
  ir_graph *g = cx->g;
  tv t1 = ew_operand(cx, 1, t);
  if (!lx_is_none(cx, 3)) t1 = ir_binary(g, IR_MUL, ew_operand(cx, 3, t), t1);
  tv r = ir_binary(g, op, t1, ew_operand(cx, 2, t));
  return ew_finish(cx, ir_binary(g, IR_ADD, ew_operand(cx, 0, t), r));
}

static tpuc_status *ew_addcmul(tpuc_lower_ctx *cx) { return addc(cx, IR_MUL); }
static tpuc_status *ew_addcdiv(tpuc_lower_ctx *cx) { return addc(cx, IR_DIV); }

/* ---- the table ---- */

#define E(name, fn) {"aten::" name, fn}
/* functional, in-place and out= overloads of one lowering */
#define E3(f, i, o, fn) E(f, fn), E(i, fn), E(o, fn)
/* an op's Tensor and Scalar overloads, each functional, in-place and out= */
#define TS(op, fn)                                                                          \
  E3(op ".Tensor", op "_.Tensor", op ".out", fn), E3(op ".Scalar", op "_.Scalar", op ".Scalar_out", fn)
#define CMP(op, fn)                                                                         \
  E3(op ".Tensor", op "_.Tensor", op ".Tensor_out", fn),                                    \
      E3(op ".Scalar", op "_.Scalar", op ".Scalar_out", fn)
#define BITWISE(op, fn) CMP(op, fn), E(op ".Scalar_Tensor", fn), E(op ".Scalar_Tensor_out", fn)
#define UNARY3(op, fn) E3(op, op "_", op ".out", fn)
#define SHIFT(op, fn)                                                                   \
  E3(op ".Tensor", op "_.Tensor", op ".Tensor_out", fn),                                \
      E3(op ".Tensor_Scalar", op "_.Tensor_Scalar", op ".Tensor_Scalar_out", fn),       \
      E(op ".Scalar_Tensor", fn), E(op ".Scalar_Tensor_out", fn)

const tpuc_lowering tpuc_lowerings_elementwise[] = {
    TS("add", ew_add),
    TS("sub", ew_sub),
    TS("mul", ew_mul),
    TS("div", ew_div),
    E3("div.Tensor_mode", "div_.Tensor_mode", "div.out_mode", ew_div_mode),
    E3("div.Scalar_mode", "div_.Scalar_mode", "div.Scalar_mode_out", ew_div_mode),
    E3("floor_divide", "floor_divide_.Tensor", "floor_divide.out", ew_floor_divide),
    E3("floor_divide.Scalar", "floor_divide_.Scalar", "floor_divide.Scalar_out", ew_floor_divide),
    CMP("remainder", ew_remainder_op),
    E("remainder.Scalar_Tensor", ew_remainder_op),
    E("remainder.Scalar_Tensor_out", ew_remainder_op),
    CMP("fmod", ew_fmod),
    E3("pow.Tensor_Tensor", "pow_.Tensor", "pow.Tensor_Tensor_out", ew_pow),
    {"aten::pow.Tensor_Scalar", ew_pow, 1u << 1},
    {"aten::pow_.Scalar", ew_pow, 1u << 1},
    {"aten::pow.Tensor_Scalar_out", ew_pow, 1u << 1},
    E("pow.Scalar", ew_pow),
    E("pow.Scalar_out", ew_pow),
    UNARY3("atan2", ew_atan2),
    E("maximum", ew_maximum),
    E("maximum.out", ew_maximum),
    E("minimum", ew_minimum),
    E("minimum.out", ew_minimum),
    UNARY3("hypot", ew_hypot),
    E("logaddexp", ew_logaddexp),
    E("logaddexp.out", ew_logaddexp),
    E3("xlogy.Tensor", "xlogy_.Tensor", "xlogy.OutTensor", ew_xlogy),
    E3("xlogy.Scalar_Other", "xlogy_.Scalar_Other", "xlogy.OutScalar_Other", ew_xlogy),
    E("xlogy.Scalar_Self", ew_xlogy),
    E("xlogy.OutScalar_Self", ew_xlogy),
    TS("copysign", ew_copysign),
    CMP("eq", ew_eq),
    CMP("ne", ew_ne),
    CMP("lt", ew_lt),
    CMP("le", ew_le),
    CMP("gt", ew_gt),
    CMP("ge", ew_ge),
    UNARY3("logical_and", ew_logical_and),
    UNARY3("logical_or", ew_logical_or),
    UNARY3("logical_xor", ew_logical_xor),
    BITWISE("bitwise_and", ew_bitwise_and),
    BITWISE("bitwise_or", ew_bitwise_or),
    BITWISE("bitwise_xor", ew_bitwise_xor),
    E("where.self", ew_where),
    E("where.self_out", ew_where),
    E3("masked_fill.Scalar", "masked_fill_.Scalar", "masked_fill.Scalar_out", ew_masked_fill),
    E3("masked_fill.Tensor", "masked_fill_.Tensor", "masked_fill.Tensor_out", ew_masked_fill),
    E3("lerp.Scalar", "lerp_.Scalar", "lerp.Scalar_out", ew_lerp),
    E3("lerp.Tensor", "lerp_.Tensor", "lerp.Tensor_out", ew_lerp),
    UNARY3("addcmul", ew_addcmul),
    UNARY3("addcdiv", ew_addcdiv),
    E3("fill.Scalar", "fill_.Scalar", "fill.Scalar_out", ew_fill),
    E3("fill.Tensor", "fill_.Tensor", "fill.Tensor_out", ew_fill),
    E3("zero", "zero_", "zero.out", ew_zero),
    /* elementwise_unary.c */
    UNARY3("neg", ew_neg),
    UNARY3("abs", ew_abs),
    UNARY3("sign", ew_sign),
    UNARY3("sgn", ew_sgn),
    UNARY3("exp", ew_exp),
    UNARY3("exp2", ew_exp2),
    UNARY3("expm1", ew_expm1),
    UNARY3("log", ew_log),
    UNARY3("log2", ew_log2),
    UNARY3("log10", ew_log10),
    UNARY3("log1p", ew_log1p),
    UNARY3("sqrt", ew_sqrt),
    UNARY3("rsqrt", ew_rsqrt),
    UNARY3("reciprocal", ew_reciprocal),
    UNARY3("sin", ew_sin),
    UNARY3("cos", ew_cos),
    UNARY3("tan", ew_tan),
    UNARY3("asin", ew_asin),
    UNARY3("acos", ew_acos),
    UNARY3("atan", ew_atan),
    UNARY3("sinh", ew_sinh),
    UNARY3("cosh", ew_cosh),
    UNARY3("tanh", ew_tanh),
    UNARY3("asinh", ew_asinh),
    UNARY3("acosh", ew_acosh),
    UNARY3("atanh", ew_atanh),
    UNARY3("sigmoid", ew_sigmoid),
    UNARY3("erf", ew_erf),
    UNARY3("erfc", ew_erfc),
    UNARY3("erfinv", ew_erfinv),
    UNARY3("floor", ew_floor),
    UNARY3("ceil", ew_ceil),
    UNARY3("round", ew_round),
    E3("round.decimals", "round_.decimals", "round.decimals_out", ew_round_decimals),
    UNARY3("trunc", ew_trunc_op),
    UNARY3("frac", ew_frac),
    UNARY3("bitwise_not", ew_bitwise_not),
    UNARY3("logical_not", ew_logical_not),
    E("isnan", ew_isnan_op),
    E("isnan.out", ew_isnan_op),
    E("isinf", ew_isinf_op),
    E("isinf.out", ew_isinf_op),
    E("isfinite", ew_isfinite),
    UNARY3("nan_to_num", ew_nan_to_num),
    E3("clamp", "clamp_", "clamp.out", ew_clamp),
    E3("clamp.Tensor", "clamp_.Tensor", "clamp.Tensor_out", ew_clamp),
    E3("clamp_min", "clamp_min_", "clamp_min.out", ew_clamp_min),
    E3("clamp_min.Tensor", "clamp_min_.Tensor", "clamp_min.Tensor_out", ew_clamp_min),
    E3("clamp_max", "clamp_max_", "clamp_max.out", ew_clamp_max),
    E3("clamp_max.Tensor", "clamp_max_.Tensor", "clamp_max.Tensor_out", ew_clamp_max),
    UNARY3("relu", ew_relu),
    UNARY3("leaky_relu", ew_leaky_relu),
    UNARY3("hardtanh", ew_hardtanh),
    UNARY3("elu", ew_elu),
    E("softplus", ew_softplus),
    E("softplus.out", ew_softplus),
    UNARY3("gelu", ew_gelu),
    E("gelu_backward", ew_gelu_backward),
    E("gelu_backward.grad_input", ew_gelu_backward),
    UNARY3("silu", ew_silu),
    E("silu_backward", ew_silu_backward),
    E("silu_backward.grad_input", ew_silu_backward),
    E("sigmoid_backward", ew_sigmoid_backward),
    E("sigmoid_backward.grad_input", ew_sigmoid_backward),
    E("tanh_backward", ew_tanh_backward),
    E("tanh_backward.grad_input", ew_tanh_backward),
    UNARY3("threshold", ew_threshold),
    E("leaky_relu_backward", ew_leaky_relu_backward),
    E("leaky_relu_backward.grad_input", ew_leaky_relu_backward),
    E("hardtanh_backward", ew_hardtanh_backward),
    E("hardtanh_backward.grad_input", ew_hardtanh_backward),
    E("elu_backward", ew_elu_backward),
    E("elu_backward.grad_input", ew_elu_backward),
    E("softplus_backward", ew_softplus_backward),
    E("softplus_backward.grad_input", ew_softplus_backward),
    E("hardsigmoid_backward", ew_hardsigmoid_backward),
    E("hardsigmoid_backward.grad_input", ew_hardsigmoid_backward),
    E("hardswish_backward", ew_hardswish_backward),
    E("hardswish_backward.out", ew_hardswish_backward),
    E("threshold_backward", ew_threshold_backward),
    E("threshold_backward.grad_input", ew_threshold_backward),
    UNARY3("hardsigmoid", ew_hardsigmoid),
    UNARY3("hardswish", ew_hardswish),
    UNARY3("mish", ew_mish),
    /* elementwise_special.c */
    UNARY3("lgamma", ew_lgamma),
    UNARY3("digamma", ew_digamma),
    UNARY3("sinc", ew_sinc),
    UNARY3("deg2rad", ew_deg2rad),
    UNARY3("rad2deg", ew_rad2deg),
    E("signbit", ew_signbit_op),
    E("signbit.out", ew_signbit_op),
    E("isposinf", ew_isposinf),
    E("isposinf.out", ew_isposinf),
    E("isneginf", ew_isneginf),
    E("isneginf.out", ew_isneginf),
    E("conj_physical.out", ew_conj_physical),
    E("conj_physical_", ew_conj_physical),
    E("_conj_physical", ew_conj_physical),
    E("_conj_physical.out", ew_conj_physical),
    E("angle", ew_angle),
    E("angle.out", ew_angle),
    E("complex", ew_complex),
    E("complex.out", ew_complex),
    E("polar", ew_polar),
    E("polar.out", ew_polar),
    UNARY3("logit", ew_logit),
    E("logit_backward", ew_logit_backward),
    E("logit_backward.grad_input", ew_logit_backward),
    UNARY3("celu", ew_celu),
    E("softshrink", ew_softshrink),
    E("softshrink.out", ew_softshrink),
    E("hardshrink", ew_hardshrink),
    E("hardshrink.out", ew_hardshrink),
    E("softshrink_backward", ew_shrink_backward),
    E("softshrink_backward.grad_input", ew_shrink_backward),
    E("hardshrink_backward", ew_shrink_backward),
    E("hardshrink_backward.grad_input", ew_shrink_backward),
    E("log_sigmoid_forward", ew_log_sigmoid_forward),
    E("log_sigmoid_forward.output", ew_log_sigmoid_forward),
    E("log_sigmoid_backward", ew_log_sigmoid_backward),
    E("log_sigmoid_backward.grad_input", ew_log_sigmoid_backward),
    E("fmax", ew_fmax),
    E("fmax.out", ew_fmax),
    E("fmin", ew_fmin),
    E("fmin.out", ew_fmin),
    UNARY3("heaviside", ew_heaviside),
    E("logaddexp2", ew_logaddexp2),
    E("logaddexp2.out", ew_logaddexp2),
    E3("ldexp.Tensor", "ldexp_", "ldexp.out", ew_ldexp),
    SHIFT("bitwise_left_shift", ew_shift_left),
    SHIFT("bitwise_right_shift", ew_shift_right),
    E3("__lshift__.Tensor", "__ilshift__.Tensor", "__lshift__.Tensor_out", ew_shift_left),
    E3("__lshift__.Scalar", "__ilshift__.Scalar", "__lshift__.Scalar_out", ew_shift_left),
    E3("__rshift__.Tensor", "__irshift__.Tensor", "__rshift__.Tensor_out", ew_shift_right),
    E3("__rshift__.Scalar", "__irshift__.Scalar", "__rshift__.Scalar_out", ew_shift_right),
    E3("rsub.Tensor", "rsub.Tensor_out", "rsub.Scalar", ew_rsub),
    E("rsub.Scalar_out", ew_rsub),
    {NULL, NULL},
};
