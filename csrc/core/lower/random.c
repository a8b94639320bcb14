/* random.c — lowerings of PyTorch's random ops: uniform_, normal_ and the
 * normal(mean, std) overloads, bernoulli (float p, tensor p, p = self),
 * random_ (from/to), exponential_, geometric_, log_normal_, cauchy_,
 * randperm, multinomial and rrelu_with_noise.
 *
 * Bits come from ir_rng_bits (Philox) on the generator argument's
 * (seed, offset) state, a runtime value: the same state gives the same
 * numbers, and the caller advances the offset between calls. Floats in
 * [0, 1) use the mantissa trick (random mantissa under the exponent of 1.0,
 * minus 1); normals use Box-Muller. Streams differ from PyTorch's CPU
 * generator; distributions match. float16/bfloat16 are drawn in float32,
 * float64 from 64-bit draws. */
#include <math.h>

#include "elementwise.h"

#define TWO_PI 6.28318530717958647693
#define PI 3.14159265358979323846

/* The generator's (seed, offset) state, arg i. */
static tv rng_state(const tpuc_lower_ctx *cx, int i) {
  const tpuc_arg *a = lx_arg(cx, i);
  return a && a->kind == TPUC_ARG_RNG ? cx->scalar_vals[i] : IR_NONE;
}

/* A u64 constant of type t (built as s64: any 64-bit pattern). */
static tv u64_const(ir_graph *g, ir_type t, uint64_t v) {
  return ir_bitcast(g, ir_splat_i64(g, ir_with_dtype(t, TPUC_S64), (int64_t)v), t);
}

/* k independent draws of uniform [0, 1) values of t's shape, in f64 when
 * t.dtype is f64 and f32 otherwise. For float16/bfloat16 results
 * (`target`), multiples of 2^-digits: still below 1 once rounded. */
static void uniforms(ir_graph *g, tv state, ir_type t, int k, tv *out, tpuc_dtype target) {
  bool dbl = t.dtype == TPUC_F64;
  tpuc_dtype fd = dbl ? TPUC_F64 : TPUC_F32;
  int64_t n = ir_numel(&t), total = n * k;
  if (n == 0) {
    for (int j = 0; j < k; j++) out[j] = ir_splat(g, ir_with_dtype(t, fd), 0.0);
    return;
  }
  ir_type bt = ir_make_type(dbl ? TPUC_U64 : TPUC_U32, 1, &total);
  tv bits, next;
  ir_rng_bits(g, state, bt, &bits, &next);
  tv f;
  if (target == TPUC_F16 || target == TPUC_BF16) {
    int digits = target == TPUC_F16 ? 11 : 8;
    tv top = ir_binary(g, IR_SHR_LOGICAL, bits, ir_splat_i64(g, bt, 32 - digits));
    f = ir_binary(g, IR_MUL, ir_convert(g, top, fd), ir_splat(g, ir_with_dtype(bt, fd), ldexp(1.0, -digits)));
  } else { /* a random mantissa under the exponent of 1.0, minus 1 */
    tv shift = dbl ? u64_const(g, bt, 12) : ir_splat_i64(g, bt, 9);
    tv one = dbl ? u64_const(g, bt, 0x3FF0000000000000ull) : ir_splat_i64(g, bt, 0x3F800000);
    tv m = ir_binary(g, IR_OR, ir_binary(g, IR_SHR_LOGICAL, bits, shift), one);
    f = ir_bitcast(g, m, ir_with_dtype(bt, fd));
    f = ir_binary(g, IR_SUB, f, ir_splat(g, ir_with_dtype(bt, fd), 1.0));
  }
  for (int j = 0; j < k; j++) {
    int64_t lo = j * n, hi = (j + 1) * n, st = 1;
    tv part = k == 1 ? f : ir_slice(g, f, &lo, &hi, &st);
    out[j] = ir_reshape(g, part, t.ndim, t.dims);
  }
}

/* Standard normal values of t's shape (f32 or f64, as uniforms). */
static tv normals(ir_graph *g, tv state, ir_type t) {
  tv u[2];
  uniforms(g, state, t, 2, u, TPUC_F32);
  tv one = ew_splat(g, u[0], 1.0);
  tv u1 = ir_binary(g, IR_SUB, one, u[0]); /* (0, 1]: log is finite */
  tv r = ir_unary(g, IR_SQRT, ir_binary(g, IR_MUL, ew_splat(g, u1, -2.0), ir_unary(g, IR_LOG, u1)));
  tv theta = ir_binary(g, IR_MUL, ew_splat(g, u[1], TWO_PI), u[1]);
  return ir_binary(g, IR_MUL, r, ir_unary(g, IR_COS, theta));
}

/* The type random values are computed in: the output's shape in f32 (f64
 * for 64-bit outputs); for a complex output, its real and imaginary parts
 * as one flat array of twice its elements. */
static ir_type draw_type(const tpuc_lower_ctx *cx) {
  ir_type o = cx->out_types[0];
  bool wide = o.dtype == TPUC_F64 || o.dtype == TPUC_C128;
  if (ir_is_complex(o.dtype)) {
    int64_t n = 2 * ir_numel(&o);
    return ir_make_type(wide ? TPUC_F64 : TPUC_F32, 1, &n);
  }
  return ew_out_as(cx, wide ? TPUC_F64 : TPUC_F32);
}

/* A value of draw_type as the output's values: pairs become re + i im. */
static tv as_output(const tpuc_lower_ctx *cx, tv v) {
  ir_graph *g = cx->g;
  ir_type o = cx->out_types[0];
  if (!ir_is_complex(o.dtype)) return v;
  int64_t n = ir_numel(&o), st = 1, lo[2] = {0, n}, hi[2] = {n, 2 * n};
  tv re = ir_reshape(g, ir_slice(g, v, &lo[0], &hi[0], &st), o.ndim, o.dims);
  tv im = ir_reshape(g, ir_slice(g, v, &lo[1], &hi[1], &st), o.ndim, o.dims);
  return ir_binary(g, IR_COMPLEX, re, im);
}

/* The generator state arg; complex outputs only where `complex_ok`. */
#define STATE(arg, complex_ok)                                                   \
  ir_graph *g = cx->g;                                                           \
  tv state = rng_state(cx, (arg));                                               \
  if (state == IR_NONE) return lx_unimplemented(cx, "no generator state");       \
  if (!(complex_ok) && ir_is_complex(cx->out_types[0].dtype))                    \
    return lx_unimplemented(cx, "complex output");
#define NEED_STATE(arg) STATE(arg, false)

/* arg i as a value of type t, or the constant dflt when absent. */
static tv arg_or(const tpuc_lower_ctx *cx, int i, ir_type t, double dflt) {
  return lx_is_none(cx, i) ? ir_splat(cx->g, t, dflt) : ew_operand(cx, i, t);
}

/* ---- continuous distributions ---- */

/* (self, from=0, to=1, *, gen); complex: both parts uniform, as PyTorch */
static tpuc_status *rn_uniform(tpuc_lower_ctx *cx) {
  STATE(3, true)
  ir_type t = draw_type(cx);
  tv u;
  uniforms(g, state, t, 1, &u, cx->out_types[0].dtype);
  tv from = arg_or(cx, 1, t, 0.0), to = arg_or(cx, 2, t, 1.0);
  tv r = ir_binary(g, IR_ADD, ir_binary(g, IR_MUL, u, ir_binary(g, IR_SUB, to, from)), from);
  return ew_finish(cx, as_output(cx, r));
}

/* mean + std * N(0, 1): mean and std are args (scalars or tensors). A
 * complex output draws both parts with std / sqrt(2), as PyTorch. */
static tpuc_status *normal_at(tpuc_lower_ctx *cx, int mean_arg, int std_arg, int gen_arg) {
  STATE(gen_arg, true)
  bool cplx = ir_is_complex(cx->out_types[0].dtype);
  if (cplx && (lx_tensor_desc(cx, mean_arg) || lx_tensor_desc(cx, std_arg)))
    return lx_unimplemented(cx, "complex output with tensor mean or std");
  ir_type t = draw_type(cx);
  tv z = normals(g, state, t);
  tv std = arg_or(cx, std_arg, t, 1.0);
  if (cplx) std = ir_binary(g, IR_MUL, std, ir_splat(g, t, 0.70710678118654752440));
  tv r = ir_binary(g, IR_ADD, arg_or(cx, mean_arg, t, 0.0), ir_binary(g, IR_MUL, std, z));
  return ew_finish(cx, as_output(cx, r));
}

static tpuc_status *rn_normal_(tpuc_lower_ctx *cx) { return normal_at(cx, 1, 2, 3); }
static tpuc_status *rn_normal_mean_std(tpuc_lower_ctx *cx) { return normal_at(cx, 0, 1, 2); }
static tpuc_status *rn_normal_float_float(tpuc_lower_ctx *cx) { return normal_at(cx, 0, 1, 3); }

static tpuc_status *rn_log_normal(tpuc_lower_ctx *cx) { /* (self, mean=1, std=2, *, gen) */
  NEED_STATE(3)
  ir_type t = draw_type(cx);
  tv r = ir_binary(g, IR_MUL, arg_or(cx, 2, t, 2.0), normals(g, state, t));
  return ew_finish(cx, ir_unary(g, IR_EXP, ir_binary(g, IR_ADD, arg_or(cx, 1, t, 1.0), r)));
}

static tpuc_status *rn_exponential(tpuc_lower_ctx *cx) { /* (self, lambd=1, *, gen) */
  NEED_STATE(2)
  ir_type t = draw_type(cx);
  tv u;
  uniforms(g, state, t, 1, &u, t.dtype);
  tv e = ir_unary(g, IR_NEG, ir_unary(g, IR_LOG1P, ir_unary(g, IR_NEG, u))); /* -log(1 - u) */
  return ew_finish(cx, ir_binary(g, IR_DIV, e, arg_or(cx, 1, t, 1.0)));
}

static tpuc_status *rn_cauchy(tpuc_lower_ctx *cx) { /* (self, median=0, sigma=1, *, gen) */
  NEED_STATE(3)
  ir_type t = draw_type(cx);
  tv u;
  uniforms(g, state, t, 1, &u, t.dtype);
  tv a = ir_binary(g, IR_MUL, ew_splat(g, u, PI), ir_binary(g, IR_SUB, u, ew_splat(g, u, 0.5)));
  tv r = ir_binary(g, IR_MUL, arg_or(cx, 2, t, 1.0), ir_unary(g, IR_TAN, a));
  return ew_finish(cx, ir_binary(g, IR_ADD, arg_or(cx, 1, t, 0.0), r));
}

static tpuc_status *rn_geometric(tpuc_lower_ctx *cx) { /* (self, p, *, gen): trials to success */
  NEED_STATE(2)
  ir_type t = draw_type(cx);
  tv u;
  uniforms(g, state, t, 1, &u, t.dtype);
  tv u1 = ir_binary(g, IR_SUB, ew_splat(g, u, 1.0), u); /* (0, 1] */
  tv q = ir_unary(g, IR_LOG1P, ir_unary(g, IR_NEG, ew_operand(cx, 1, t)));
  return ew_finish(cx, ir_unary(g, IR_CEIL, ir_binary(g, IR_DIV, ir_unary(g, IR_LOG, u1), q)));
}

/* ---- bernoulli ---- */

/* 1 with probability p (arg p_arg, a float or a tensor), else 0. */
static tpuc_status *bernoulli_at(tpuc_lower_ctx *cx, int p_arg, int gen_arg) {
  NEED_STATE(gen_arg)
  ir_type t = draw_type(cx);
  const tpuc_tensor *pd = lx_tensor_desc(cx, p_arg);
  if (pd && pd->dtype == TPUC_F64) t.dtype = TPUC_F64;
  tv u;
  uniforms(g, state, t, 1, &u, t.dtype);
  return ew_finish(cx, ir_compare(g, IR_LT, u, ew_operand(cx, p_arg, t)));
}

static tpuc_status *rn_bernoulli_p(tpuc_lower_ctx *cx) { return bernoulli_at(cx, 1, 2); }
static tpuc_status *rn_bernoulli_self(tpuc_lower_ctx *cx) { return bernoulli_at(cx, 0, 1); }

/* ---- random_ ---- */

static int mantissa_digits(tpuc_dtype d) {
  switch (d) {
  case TPUC_F16: return 11;
  case TPUC_BF16: return 8;
  case TPUC_F32: return 24;
  default: return 53;
  }
}

/* Integers uniform in [from, to) (to_arg < 0 or absent: up to the dtype's
 * largest value, 2^mantissa for floats, inclusive). */
static tpuc_status *random_range(tpuc_lower_ctx *cx, int from_arg, int to_arg, int gen_arg) {
  NEED_STATE(gen_arg)
  ir_type o = cx->out_types[0];
  int64_t from = from_arg < 0 ? 0 : lx_int(cx, from_arg, 0);
  uint64_t range; /* to - from, modulo 2^64; 0 means 2^64 */
  if (to_arg >= 0 && !lx_is_none(cx, to_arg)) {
    range = (uint64_t)lx_int(cx, to_arg, 0) - (uint64_t)from;
  } else {
    uint64_t to_inc = ir_is_float(o.dtype) ? (uint64_t)1 << mantissa_digits(o.dtype)
                                           : (uint64_t)ew_int_max(o.dtype);
    range = to_inc - (uint64_t)from + 1;
  }
  int64_t n = ir_numel(&o);
  if (n == 0) return ew_finish(cx, ir_splat(g, o, 0.0));
  ir_type bt = ir_make_type(TPUC_U64, 1, &n);
  tv bits, next;
  ir_rng_bits(g, state, bt, &bits, &next);
  if (range) bits = ir_binary(g, IR_REM, bits, u64_const(g, bt, range));
  tv v = ir_bitcast(g, bits, ir_with_dtype(bt, TPUC_S64)); /* wraps, as two's complement */
  v = ir_binary(g, IR_ADD, v, ir_splat_i64(g, ir_with_dtype(bt, TPUC_S64), from));
  return ew_finish(cx, ir_reshape(g, v, o.ndim, o.dims));
}

static tpuc_status *rn_random(tpuc_lower_ctx *cx) { return random_range(cx, -1, -1, 1); }
static tpuc_status *rn_random_from(tpuc_lower_ctx *cx) { return random_range(cx, 1, 2, 3); }
static tpuc_status *rn_random_to(tpuc_lower_ctx *cx) { return random_range(cx, -1, 1, 2); }

/* ---- randperm ---- */

static tpuc_status *rn_randperm(tpuc_lower_ctx *cx) { /* (n, *, gen, out): sort random keys */
  NEED_STATE(1)
  ir_type o = cx->out_types[0];
  if (o.ndim != 1) return lx_unimplemented(cx, "output rank");
  if (o.dims[0] == 0) return ew_finish(cx, ir_splat(g, o, 0.0));
  tv keys, next, sorted, perm;
  ir_rng_bits(g, state, ir_with_dtype(o, TPUC_U64), &keys, &next);
  ir_sort(g, keys, 0, false, &sorted, &perm);
  return ew_finish(cx, perm);
}

/* ---- multinomial ---- */

/* multinomial(self [C] or [D, C], num_samples, replacement=False, *, gen) ->
 * s64 [num_samples] or [D, num_samples]. With replacement: inverse CDF, as
 * PyTorch's CPU kernel (x = (1 - u) * total in (0, total], the first
 * category whose running sum reaches x: never one of probability 0). Without:
 * the num_samples largest keys p / E with E ~ Exp(1) per category (the
 * exponential race, also PyTorch's method), ties to the lower index. The
 * caller reserves a draw per category (csrc/torch/native.cpp). PyTorch's
 * checks on the probabilities (negative, inf/NaN, all zero, fewer non-zero
 * categories than samples without replacement) are not made here. */
static tpuc_status *rn_multinomial(tpuc_lower_ctx *cx) {
  NEED_STATE(3)
  tv p = lx_tensor(cx, 0);
  ir_type pt = ir_type_of(g, p);
  if (pt.ndim < 1 || pt.ndim > 2 || !ir_is_float(pt.dtype))
    return lx_unimplemented(cx, "probabilities of rank 1 or 2, floating");
  int64_t n = lx_int(cx, 1, 1);
  bool repl = lx_bool(cx, 2, false);
  int64_t rows = pt.ndim == 2 ? pt.dims[0] : 1, cats = pt.dims[pt.ndim - 1];
  ir_type o = cx->out_types[0];
  if (ir_numel(&o) == 0) return ew_finish(cx, ir_splat(g, o, 0.0));
  if (n < 1 || cats < 1 || (!repl && n > cats)) return lx_unimplemented(cx, "sample count");
  tpuc_dtype cd = pt.dtype == TPUC_F64 ? TPUC_F64 : TPUC_F32;
  int64_t rc[2] = {rows, cats};
  p = ir_reshape(g, lx_convert(g, p, cd), 2, rc);
  tv idx;
  if (repl) {
    if (rows * n * cats > ((int64_t)1 << 26)) return lx_unimplemented(cx, "samples x categories above 2^26");
    int64_t wnd[2] = {1, cats}, pad[4] = {0, 0, cats - 1, 0};
    tv cdf = ir_reduce_window(g, p, ew_reduce_init(g, cd, IR_RED_SUM), IR_RED_SUM, wnd, NULL, pad);
    int64_t rn[2] = {rows, n}, rnc[3] = {rows, n, cats};
    int64_t lo[2] = {0, cats - 1}, hi[2] = {rows, cats}, st[2] = {1, 1};
    tv total = ir_slice(g, cdf, lo, hi, st); /* [rows, 1] */
    tv u;
    uniforms(g, state, ir_make_type(cd, 2, rn), 1, &u, cd);
    tv x = ir_binary(g, IR_MUL, ir_binary(g, IR_SUB, ew_splat(g, u, 1.0), u),
                     lx_broadcast_to(g, total, 2, rn));
    int64_t bx[3] = {rows, n, 1}, bc[3] = {rows, 1, cats};
    tv below = ir_compare(g, IR_LT, lx_broadcast_to(g, ir_reshape(g, cdf, 3, bc), 3, rnc),
                          lx_broadcast_to(g, ir_reshape(g, x, 3, bx), 3, rnc));
    tv count = ir_reduce(g, ir_convert(g, below, TPUC_S64), ir_splat(g, ir_scalar_type(TPUC_S64), 0),
                         IR_RED_SUM, (int64_t[]){2}, 1);
    idx = ir_binary(g, IR_MIN, count, ir_splat_i64(g, ir_type_of(g, count), cats - 1));
  } else {
    tv u;
    uniforms(g, state, ir_make_type(cd, 2, rc), 1, &u, cd);
    tv e = ir_unary(g, IR_NEG, ir_unary(g, IR_LOG1P, ir_unary(g, IR_NEG, u))); /* Exp(1) */
    tv keys = ir_binary(g, IR_DIV, p, e);
    tv sorted, perm;
    ir_sort(g, keys, 1, true, &sorted, &perm);
    int64_t lo[2] = {0, 0}, hi[2] = {rows, n}, st[2] = {1, 1};
    idx = ir_slice(g, lx_convert(g, perm, TPUC_S64), lo, hi, st);
  }
  return ew_finish(cx, ir_reshape(g, idx, o.ndim, o.dims));
}

/* ---- rrelu_with_noise ---- */

/* rrelu_with_noise(self, noise!, lower=1/8, upper=1/3, training=False, gen)
 * and its in-place form. Training: each negative element times a slope drawn
 * uniformly from [lower, upper), the slopes written to noise (1 where the
 * element is not negative). Not training: leaky_relu with slope
 * (lower + upper) / 2, noise left as it is. */
static tpuc_status *rn_rrelu_with_noise(tpuc_lower_ctx *cx) {
  NEED_STATE(5)
  tv x = lx_tensor(cx, 0), noise = lx_tensor(cx, 1);
  ir_type xt = ir_type_of(g, x);
  if (!ir_is_float(xt.dtype)) return lx_unimplemented(cx, "floating input");
  ir_type t = ir_with_dtype(xt, xt.dtype == TPUC_F64 ? TPUC_F64 : TPUC_F32);
  tv xc = lx_convert(g, x, t.dtype);
  tv lo = lx_scalar(cx, 2, t.dtype), hi = lx_scalar(cx, 3, t.dtype);
  tv neg = ir_compare(g, IR_LT, xc, ir_splat(g, t, 0.0));
  tv slope;
  if (lx_bool(cx, 4, false)) {
    tv u;
    uniforms(g, state, t, 1, &u, xt.dtype);
    tv lob = lx_broadcast_to(g, lo, t.ndim, t.dims), hib = lx_broadcast_to(g, hi, t.ndim, t.dims);
    slope = ir_binary(g, IR_ADD, ir_binary(g, IR_MUL, u, ir_binary(g, IR_SUB, hib, lob)), lob);
    slope = ir_select(g, neg, slope, ir_splat(g, t, 1.0));
    noise = slope;
  } else {
    slope = lx_broadcast_to(g, ir_binary(g, IR_MUL, ir_binary(g, IR_ADD, lo, hi),
                                         ir_splat(g, ir_scalar_type(t.dtype), 0.5)),
                            t.ndim, t.dims);
    slope = ir_select(g, neg, slope, ir_splat(g, t, 1.0));
  }
  cx->results[0] = lx_coerce(g, ir_binary(g, IR_MUL, xc, slope), cx->out_types[0]);
  cx->results[1] = lx_coerce(g, noise, cx->out_types[1]);
  return NULL;
}

/* ---- the table ---- */

#define E(name, fn) {"aten::" name, fn}

const tpuc_lowering tpuc_lowerings_random[] = {
    E("uniform_", rn_uniform),
    E("uniform", rn_uniform),
    E("uniform.out", rn_uniform),
    E("normal_", rn_normal_),
    E("normal.out", rn_normal_),
    E("normal.Tensor_float", rn_normal_mean_std),
    E("normal.Tensor_float_out", rn_normal_mean_std),
    E("normal.float_Tensor", rn_normal_mean_std),
    E("normal.float_Tensor_out", rn_normal_mean_std),
    E("normal.Tensor_Tensor", rn_normal_mean_std),
    E("normal.Tensor_Tensor_out", rn_normal_mean_std),
    E("normal.float_float", rn_normal_float_float),
    E("normal.float_float_out", rn_normal_float_float),
    E("log_normal_", rn_log_normal),
    E("exponential_", rn_exponential),
    E("cauchy_", rn_cauchy),
    E("geometric_", rn_geometric),
    E("bernoulli_.float", rn_bernoulli_p),
    E("bernoulli_.Tensor", rn_bernoulli_p),
    E("bernoulli.p", rn_bernoulli_p),
    E("bernoulli.Tensor", rn_bernoulli_p),
    E("bernoulli.Tensor_out", rn_bernoulli_p),
    E("bernoulli.float_out", rn_bernoulli_p),
    E("bernoulli", rn_bernoulli_self),
    E("bernoulli.out", rn_bernoulli_self),
    E("random_", rn_random),
    E("random_.from", rn_random_from),
    E("random_.to", rn_random_to),
    E("randperm.generator_out", rn_randperm),
    E("multinomial", rn_multinomial),
    E("multinomial.out", rn_multinomial),
    E("rrelu_with_noise", rn_rrelu_with_noise),
    E("rrelu_with_noise_", rn_rrelu_with_noise),
    E("rrelu_with_noise.out", rn_rrelu_with_noise),
    {NULL, NULL},
};
