/* emit.c — printing an IR graph as StableHLO text in MLIR's generic op
 * syntax (the most stable form across plugin versions). Floating constants
 * are written as hexadecimal bit patterns so that every value, NaN and
 * infinities included, round-trips exactly. Loops (N_WHILE) are printed by
 * loop.c, which prints their body graph with this file's node printer. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ir_internal.h"
#include "emit_internal.h"

void emit_printf(sb *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->cap - b->len;
    int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = true;
      return;
    }
    if (b->s && (size_t)n < room) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < b->len + (size_t)n + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->oom = true;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
}

void emit_type(sb *b, const ir_type *t) {
  emit_printf(b, "tensor<");
  for (int i = 0; i < t->ndim; i++) emit_printf(b, "%lldx", (long long)t->dims[i]);
  emit_printf(b, "%s>", tpuc_dtype_mlir_name(t->dtype));
}

static void put_scalar_type(sb *b, tpuc_dtype d) { emit_printf(b, "tensor<%s>", tpuc_dtype_mlir_name(d)); }

void emit_name(sb *b, const ir_graph *g, tv v) {
  const ir_node *n = &g->nodes[v];
  int k = b->ord && b->ord->gate && b->cur >= 0 ? b->ord->gate[b->cur] : -1;
  if (k >= 0 && b->ord->via[k] == v) { /* read after the dependency's tokens */
    emit_printf(b, "%%o%d", k);
    return;
  }
  if (n->kind == N_GET) emit_printf(b, "%%%s%d#%lld", b->pfx, n->ops[0], (long long)n->i);
  else emit_printf(b, "%%%s%d", b->pfx, v);
}

static void put_i64s(sb *b, const int64_t *v, int n) {
  for (int i = 0; i < n; i++) emit_printf(b, "%s%lld", i ? ", " : "", (long long)v[i]);
}

static void put_array(sb *b, const char *name, const int64_t *v, int n) {
  emit_printf(b, "%s = array<i64%s", name, n ? ": " : "");
  put_i64s(b, v, n);
  emit_printf(b, ">");
}

static void put_list(sb *b, const char *name, const int64_t *v, int n) {
  emit_printf(b, "%s = [", name);
  put_i64s(b, v, n);
  emit_printf(b, "]");
}

/* A float value as MLIR's hexadecimal bit pattern of `d`. */
static void put_float_bits(sb *b, tpuc_dtype d, double v) {
  if (d == TPUC_F64) {
    uint64_t u;
    memcpy(&u, &v, 8);
    emit_printf(b, "0x%016llX", (unsigned long long)u);
    return;
  }
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  if (d == TPUC_F32) {
    emit_printf(b, "0x%08X", u);
  } else if (d == TPUC_BF16) {
    uint16_t h;
    if (isnan(f)) h = 0x7FC0;
    else h = (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
    emit_printf(b, "0x%04X", h);
  } else { /* f16 */
    uint16_t h;
    uint32_t sign = (u >> 16) & 0x8000;
    if (isnan(f)) h = 0x7E00;
    else if (isinf(f) || fabsf(f) >= 65520.0f) h = (uint16_t)(sign | 0x7C00);
    else if (fabsf(f) < 6.103515625e-05f) { /* subnormal or zero: multiples of 2^-24 */
      h = (uint16_t)(sign | (uint32_t)lrintf(fabsf(f) * 16777216.0f));
    } else {
      int e;
      float m = frexpf(fabsf(f), &e); /* f = m * 2^e, m in [0.5, 1) */
      uint32_t mant = (uint32_t)lrintf((m * 2.0f - 1.0f) * 1024.0f);
      int exp = e - 1 + 15;
      if (mant == 1024) {
        mant = 0;
        exp++;
      }
      h = exp >= 31 ? (uint16_t)(sign | 0x7C00) : (uint16_t)(sign | (uint32_t)exp << 10 | mant);
    }
    emit_printf(b, "0x%04X", h);
  }
}

static void put_splat_value(sb *b, tpuc_dtype d, double v) {
  if (d == TPUC_PRED) emit_printf(b, "%s", v != 0 ? "true" : "false");
  else if (ir_is_float(d)) put_float_bits(b, d, v);
  else if (ir_is_complex(d)) emit_printf(b, "(%.17e, 0.0)", v); /* always a float literal */
  else if (ir_is_unsigned(d)) emit_printf(b, "%llu", (unsigned long long)(v < 0 ? 0 : v));
  else emit_printf(b, "%lld", (long long)v);
}

static const char *unary_name(int op) {
  static const char *names[IR_UNARY_COUNT] = {
      [IR_ABS] = "stablehlo.abs", [IR_NEG] = "stablehlo.negate",
      [IR_EXP] = "stablehlo.exponential", [IR_EXPM1] = "stablehlo.exponential_minus_one",
      [IR_LOG] = "stablehlo.log", [IR_LOG1P] = "stablehlo.log_plus_one",
      [IR_SQRT] = "stablehlo.sqrt", [IR_RSQRT] = "stablehlo.rsqrt", [IR_CBRT] = "stablehlo.cbrt",
      [IR_TANH] = "stablehlo.tanh", [IR_LOGISTIC] = "stablehlo.logistic",
      [IR_SIN] = "stablehlo.sine", [IR_COS] = "stablehlo.cosine", [IR_TAN] = "chlo.tan",
      [IR_FLOOR] = "stablehlo.floor", [IR_CEIL] = "stablehlo.ceil",
      [IR_ROUND_EVEN] = "stablehlo.round_nearest_even",
      [IR_ROUND_AFZ] = "stablehlo.round_nearest_afz", [IR_SIGN] = "stablehlo.sign",
      [IR_NOT] = "stablehlo.not", [IR_IS_FINITE] = "stablehlo.is_finite",
      [IR_REAL] = "stablehlo.real", [IR_IMAG] = "stablehlo.imag",
      [IR_POPCNT] = "stablehlo.popcnt", [IR_ERF] = "chlo.erf", [IR_ERFC] = "chlo.erfc",
      [IR_ERF_INV] = "chlo.erf_inv", [IR_LGAMMA] = "chlo.lgamma", [IR_DIGAMMA] = "chlo.digamma",
      [IR_ASIN] = "chlo.asin", [IR_ACOS] = "chlo.acos", [IR_ATAN] = "chlo.atan",
      [IR_SINH] = "chlo.sinh", [IR_COSH] = "chlo.cosh", [IR_ASINH] = "chlo.asinh",
      [IR_ACOSH] = "chlo.acosh", [IR_ATANH] = "chlo.atanh"};
  return op >= 0 && op < IR_UNARY_COUNT && names[op] ? names[op] : "stablehlo.unknown";
}

static const char *binary_name(int op) {
  static const char *names[IR_BINARY_COUNT] = {
      [IR_ADD] = "stablehlo.add", [IR_SUB] = "stablehlo.subtract",
      [IR_MUL] = "stablehlo.multiply", [IR_DIV] = "stablehlo.divide",
      [IR_REM] = "stablehlo.remainder", [IR_POW] = "stablehlo.power",
      [IR_MAX] = "stablehlo.maximum", [IR_MIN] = "stablehlo.minimum",
      [IR_ATAN2] = "stablehlo.atan2", [IR_AND] = "stablehlo.and", [IR_OR] = "stablehlo.or",
      [IR_XOR] = "stablehlo.xor", [IR_SHL] = "stablehlo.shift_left",
      [IR_SHR_ARITH] = "stablehlo.shift_right_arithmetic",
      [IR_SHR_LOGICAL] = "stablehlo.shift_right_logical", [IR_COMPLEX] = "stablehlo.complex",
      [IR_POLYGAMMA] = "chlo.polygamma", [IR_ZETA] = "chlo.zeta"};
  return op >= 0 && op < IR_BINARY_COUNT && names[op] ? names[op] : "stablehlo.unknown";
}

static const char *reducer_name(int r) {
  switch (r) {
    case IR_RED_SUM: return "stablehlo.add";
    case IR_RED_PROD: return "stablehlo.multiply";
    case IR_RED_MAX: return "stablehlo.maximum";
    case IR_RED_MIN: return "stablehlo.minimum";
    case IR_RED_AND: return "stablehlo.and";
    case IR_RED_OR: return "stablehlo.or";
    case IR_RED_XOR: return "stablehlo.xor";
    default: return NULL;
  }
}

static const char *cmp_dir(int d) {
  static const char *n[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  return d >= 0 && d < 6 ? n[d] : "EQ";
}

static const char *cmp_type(tpuc_dtype d) {
  if (ir_is_float(d) || ir_is_complex(d)) return "FLOAT";
  if (ir_is_unsigned(d) || d == TPUC_PRED) return "UNSIGNED";
  return "SIGNED";
}

/* A binary combiner region over rank-0 values of `d`: (acc, x) -> acc op x.
 * IR_SCATTER_REPLACE returns x. */
static void put_combiner(sb *b, tpuc_dtype d, int r) {
  emit_printf(b, "({\n    ^bb0(%%a: ");
  put_scalar_type(b, d);
  emit_printf(b, ", %%b: ");
  put_scalar_type(b, d);
  emit_printf(b, "):\n");
  if (r == (int)IR_SCATTER_REPLACE) {
    emit_printf(b, "      \"stablehlo.return\"(%%b) : (");
  } else {
    const char *op = reducer_name(r);
    /* and/or over pred; sum of pred is or, product of pred is and */
    if (d == TPUC_PRED && r == IR_RED_SUM) op = "stablehlo.or";
    if (d == TPUC_PRED && r == IR_RED_PROD) op = "stablehlo.and";
    emit_printf(b, "      %%r = \"%s\"(%%a, %%b) : (", op ? op : "stablehlo.add");
    put_scalar_type(b, d);
    emit_printf(b, ", ");
    put_scalar_type(b, d);
    emit_printf(b, ") -> ");
    put_scalar_type(b, d);
    emit_printf(b, "\n      \"stablehlo.return\"(%%r) : (");
  }
  put_scalar_type(b, d);
  emit_printf(b, ") -> ()\n    })");
}

/* "(T1, T2) -> T" for a node's operands and result. */
static void put_signature(sb *b, const ir_graph *g, const ir_node *n) {
  emit_printf(b, " : (");
  for (int i = 0; i < n->nops; i++) {
    if (i) emit_printf(b, ", ");
    emit_type(b, &g->nodes[n->ops[i]].type);
  }
  emit_printf(b, ") -> ");
  if (n->nresults > 1) {
    emit_printf(b, "(");
    emit_type(b, &n->type);
    emit_printf(b, ", ");
    emit_type(b, &n->rtype2);
    emit_printf(b, ")");
  } else {
    emit_type(b, &n->type);
  }
  emit_printf(b, "\n");
}

static void put_operands(sb *b, const ir_graph *g, const ir_node *n) {
  emit_printf(b, "(");
  for (int i = 0; i < n->nops; i++) {
    if (i) emit_printf(b, ", ");
    emit_name(b, g, n->ops[i]);
  }
  emit_printf(b, ")");
}

/* The comparator region of argmax/argmin: keeps (a, ai) over (b, bi) when a
 * wins, NaN winning (PyTorch propagates NaN), the lower index on ties. */
static void put_argreduce_region(sb *b, tpuc_dtype d, tpuc_dtype id, bool is_max) {
  const char *vt = tpuc_dtype_mlir_name(d), *it = tpuc_dtype_mlir_name(id);
  const char *ct = cmp_type(d);
  emit_printf(b,
            "({\n    ^bb0(%%a: tensor<%s>, %%ai: tensor<%s>, %%b: tensor<%s>, %%bi: tensor<%s>):\n"
            "      %%gt = \"stablehlo.compare\"(%%a, %%b) {comparison_direction = "
            "#stablehlo<comparison_direction %s>, compare_type = #stablehlo<comparison_type %s>} : "
            "(tensor<%s>, tensor<%s>) -> tensor<i1>\n"
            "      %%eq = \"stablehlo.compare\"(%%a, %%b) {comparison_direction = "
            "#stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type %s>} : "
            "(tensor<%s>, tensor<%s>) -> tensor<i1>\n"
            "      %%an = \"stablehlo.compare\"(%%a, %%a) {comparison_direction = "
            "#stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type %s>} : "
            "(tensor<%s>, tensor<%s>) -> tensor<i1>\n"
            "      %%bn = \"stablehlo.compare\"(%%b, %%b) {comparison_direction = "
            "#stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type %s>} : "
            "(tensor<%s>, tensor<%s>) -> tensor<i1>\n"
            "      %%lt = \"stablehlo.compare\"(%%ai, %%bi) {comparison_direction = "
            "#stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>}"
            " : (tensor<%s>, tensor<%s>) -> tensor<i1>\n"
            "      %%nb = \"stablehlo.not\"(%%bn) : (tensor<i1>) -> tensor<i1>\n"
            "      %%c1 = \"stablehlo.and\"(%%an, %%nb) : (tensor<i1>, tensor<i1>) -> tensor<i1>\n"
            "      %%bb = \"stablehlo.and\"(%%an, %%bn) : (tensor<i1>, tensor<i1>) -> tensor<i1>\n"
            "      %%ab = \"stablehlo.or\"(%%eq, %%bb) : (tensor<i1>, tensor<i1>) -> tensor<i1>\n"
            "      %%c2 = \"stablehlo.and\"(%%ab, %%lt) : (tensor<i1>, tensor<i1>) -> tensor<i1>\n"
            "      %%nn = \"stablehlo.not\"(%%an) : (tensor<i1>) -> tensor<i1>\n"
            "      %%c0 = \"stablehlo.and\"(%%gt, %%nb) : (tensor<i1>, tensor<i1>) -> tensor<i1>\n"
            "      %%c3 = \"stablehlo.or\"(%%c0, %%c1) : (tensor<i1>, tensor<i1>) -> tensor<i1>\n"
            "      %%pk = \"stablehlo.or\"(%%c3, %%c2) : (tensor<i1>, tensor<i1>) -> tensor<i1>\n"
            "      %%v = \"stablehlo.select\"(%%pk, %%a, %%b) : (tensor<i1>, tensor<%s>, tensor<%s>) "
            "-> tensor<%s>\n"
            "      %%i = \"stablehlo.select\"(%%pk, %%ai, %%bi) : (tensor<i1>, tensor<%s>, tensor<%s>)"
            " -> tensor<%s>\n"
            "      \"stablehlo.return\"(%%v, %%i) : (tensor<%s>, tensor<%s>) -> ()\n    })",
            vt, it, vt, it, is_max ? "GT" : "LT", ct, vt, vt, ct, vt, vt, ct, vt, vt, ct, vt, vt, it,
            it, vt, vt, vt, it, it, it, vt, it);
  (void)0;
  /* %nn is unused when values are not floats; harmless. */
}

static double init_for_arg(tpuc_dtype d, bool is_max) {
  if (ir_is_float(d)) return is_max ? -INFINITY : INFINITY;
  return 0; /* integers: emitted through the i64 path below */
}

static void put_int_extreme(sb *b, tpuc_dtype d, bool lowest) {
  size_t bits = tpuc_dtype_size(d) * 8;
  if (d == TPUC_PRED) emit_printf(b, "%s", lowest ? "false" : "true");
  else if (ir_is_unsigned(d)) emit_printf(b, "%llu", lowest ? 0ull : (bits == 64 ? ~0ull : (1ull << bits) - 1));
  else if (bits == 64) emit_printf(b, "%s", lowest ? "-9223372036854775808" : "9223372036854775807");
  else emit_printf(b, "%lld", lowest ? -(1ll << (bits - 1)) : (1ll << (bits - 1)) - 1);
}

/* replica_groups (and a channel handle) of a collective node: attributes
 * [ngroups, group_size, channel, dim_a, dim_b, groups...] (ir/collective.c). */
static void put_replica_groups(sb *b, const ir_node *n) {
  int ng = (int)n->a[0], gs = (int)n->a[1];
  emit_printf(b, "replica_groups = dense<[");
  for (int i = 0; i < ng; i++) {
    emit_printf(b, "%s[", i ? ", " : "");
    put_i64s(b, n->a + 5 + i * gs, gs);
    emit_printf(b, "]");
  }
  emit_printf(b, "]> : tensor<%dx%dxi64>", ng, gs);
  if (n->a[2] > 0)
    emit_printf(b, ", channel_handle = #stablehlo.channel_handle<handle = %lld, type = 1>",
              (long long)n->a[2]);
}

static void emit_node(sb *b, const ir_graph *g, tv v) {
  const ir_node *n = &g->nodes[v];
  if (n->kind == N_PARAM || n->kind == N_GET) return;
  const ir_type *t = &n->type;
  const ir_type *t0 = n->nops ? &g->nodes[n->ops[0]].type : t;
  if (n->kind == N_WHILE) {
    emit_while(b, g, v);
    return;
  }
  if (n->kind != N_ARGREDUCE) emit_printf(b, "    %%%s%d%s = ", b->pfx, v, n->nresults > 1 ? ":2" : "");
  switch (n->kind) {
    case N_SPLAT:
    case N_SPLAT_I64:
      emit_printf(b, "\"stablehlo.constant\"() {value = dense<");
      if (n->kind == N_SPLAT_I64) {
        if (t->dtype == TPUC_PRED) emit_printf(b, "%s", n->i ? "true" : "false");
        else if (ir_is_unsigned(t->dtype)) emit_printf(b, "%llu", (unsigned long long)n->i);
        else emit_printf(b, "%lld", (long long)n->i);
      } else {
        put_splat_value(b, t->dtype, n->f);
      }
      emit_printf(b, "> : ");
      emit_type(b, t);
      emit_printf(b, "} : () -> ");
      emit_type(b, t);
      emit_printf(b, "\n");
      return;
    case N_CONST_I64S:
      emit_printf(b, "\"stablehlo.constant\"() {value = dense<[");
      put_i64s(b, n->a, n->na);
      emit_printf(b, "]> : ");
      emit_type(b, t);
      emit_printf(b, "} : () -> ");
      emit_type(b, t);
      emit_printf(b, "\n");
      return;
    case N_IOTA:
      emit_printf(b, "\"stablehlo.iota\"() {iota_dimension = %lld : i64} : () -> ", (long long)n->i);
      emit_type(b, t);
      emit_printf(b, "\n");
      return;
    case N_UNARY:
      emit_printf(b, "\"%s\"", unary_name(n->sub));
      put_operands(b, g, n);
      break;
    case N_BINARY:
      emit_printf(b, "\"%s\"", binary_name(n->sub));
      put_operands(b, g, n);
      break;
    case N_COMPARE:
      emit_printf(b, "\"stablehlo.compare\"");
      put_operands(b, g, n);
      emit_printf(b,
                " {comparison_direction = #stablehlo<comparison_direction %s>, compare_type = "
                "#stablehlo<comparison_type %s>}",
                cmp_dir(n->sub), cmp_type(t0->dtype));
      break;
    case N_SELECT:
      emit_printf(b, "\"stablehlo.select\"");
      put_operands(b, g, n);
      break;
    case N_CLAMP:
      emit_printf(b, "\"stablehlo.clamp\"");
      put_operands(b, g, n);
      break;
    case N_CONVERT:
      emit_printf(b, "\"stablehlo.convert\"");
      put_operands(b, g, n);
      break;
    case N_BITCAST:
      emit_printf(b, "\"stablehlo.bitcast_convert\"");
      put_operands(b, g, n);
      break;
    case N_BARRIER:
      emit_printf(b, "\"stablehlo.optimization_barrier\"");
      put_operands(b, g, n);
      break;
    case N_RESHAPE:
      emit_printf(b, "\"stablehlo.reshape\"");
      put_operands(b, g, n);
      break;
    case N_TRANSPOSE:
      emit_printf(b, "\"stablehlo.transpose\"");
      put_operands(b, g, n);
      emit_printf(b, " {");
      put_array(b, "permutation", n->a, n->na);
      emit_printf(b, "}");
      break;
    case N_BROADCAST:
      emit_printf(b, "\"stablehlo.broadcast_in_dim\"");
      put_operands(b, g, n);
      emit_printf(b, " {");
      put_array(b, "broadcast_dimensions", n->a, n->na);
      emit_printf(b, "}");
      break;
    case N_SLICE: {
      int k = n->na / 3;
      emit_printf(b, "\"stablehlo.slice\"");
      put_operands(b, g, n);
      emit_printf(b, " {");
      put_array(b, "start_indices", n->a, k);
      emit_printf(b, ", ");
      put_array(b, "limit_indices", n->a + k, k);
      emit_printf(b, ", ");
      put_array(b, "strides", n->a + 2 * k, k);
      emit_printf(b, "}");
      break;
    }
    case N_CONCAT:
      emit_printf(b, "\"stablehlo.concatenate\"");
      put_operands(b, g, n);
      emit_printf(b, " {dimension = %lld : i64}", (long long)n->a[0]);
      break;
    case N_PAD: {
      int k = n->na / 3;
      emit_printf(b, "\"stablehlo.pad\"");
      put_operands(b, g, n);
      emit_printf(b, " {");
      put_array(b, "edge_padding_low", n->a, k);
      emit_printf(b, ", ");
      put_array(b, "edge_padding_high", n->a + k, k);
      emit_printf(b, ", ");
      put_array(b, "interior_padding", n->a + 2 * k, k);
      emit_printf(b, "}");
      break;
    }
    case N_REVERSE:
      emit_printf(b, "\"stablehlo.reverse\"");
      put_operands(b, g, n);
      emit_printf(b, " {");
      put_array(b, "dimensions", n->a, n->na);
      emit_printf(b, "}");
      break;
    case N_DSLICE:
      emit_printf(b, "\"stablehlo.dynamic_slice\"");
      put_operands(b, g, n);
      emit_printf(b, " {");
      put_array(b, "slice_sizes", n->a, n->na);
      emit_printf(b, "}");
      break;
    case N_DUS:
      emit_printf(b, "\"stablehlo.dynamic_update_slice\"");
      put_operands(b, g, n);
      break;
    case N_REDUCE:
      emit_printf(b, "\"stablehlo.reduce\"");
      put_operands(b, g, n);
      emit_printf(b, " ");
      put_combiner(b, t0->dtype, n->sub);
      emit_printf(b, " {");
      put_array(b, "dimensions", n->a, n->na);
      emit_printf(b, "}");
      break;
    case N_REDUCE_WINDOW: {
      int k = t0->ndim;
      emit_printf(b, "\"stablehlo.reduce_window\"");
      put_operands(b, g, n);
      emit_printf(b, " ");
      put_combiner(b, t0->dtype, n->sub);
      emit_printf(b, " {");
      put_array(b, "window_dimensions", n->a, k);
      emit_printf(b, ", ");
      put_array(b, "window_strides", n->a + k, k);
      emit_printf(b, ", padding = dense<[");
      for (int i = 0; i < k; i++)
        emit_printf(b, "%s[%lld, %lld]", i ? ", " : "", (long long)n->a[2 * k + 2 * i],
                  (long long)n->a[2 * k + 2 * i + 1]);
      emit_printf(b, "]> : tensor<%dx2xi64>}", k);
      break;
    }
    case N_ARGREDUCE: {
      /* operands: x, iota along dim, then the two inits (constants inline) */
      tpuc_dtype d = t0->dtype, id = n->rtype2.dtype;
      ir_type it = *t0;
      it.dtype = id;
      emit_printf(b, "    %%%s%d_io = \"stablehlo.iota\"() {iota_dimension = %lld : i64} : () -> ",
                b->pfx, v, (long long)n->a[0]);
      emit_type(b, &it);
      emit_printf(b, "\n    %%%s%d_iv = \"stablehlo.constant\"() {value = dense<", b->pfx, v);
      if (ir_is_float(d)) put_float_bits(b, d, init_for_arg(d, n->sub));
      else put_int_extreme(b, d, n->sub);
      emit_printf(b, "> : tensor<%s>} : () -> tensor<%s>\n", tpuc_dtype_mlir_name(d),
                tpuc_dtype_mlir_name(d));
      emit_printf(b, "    %%%s%d_ii = \"stablehlo.constant\"() {value = dense<", b->pfx, v);
      put_int_extreme(b, id, false);
      emit_printf(b, "> : tensor<%s>} : () -> tensor<%s>\n", tpuc_dtype_mlir_name(id),
                tpuc_dtype_mlir_name(id));
      emit_printf(b, "    %%%s%d:2 = \"stablehlo.reduce\"(", b->pfx, v);
      emit_name(b, g, n->ops[0]);
      emit_printf(b, ", %%%s%d_io, %%%s%d_iv, %%%s%d_ii) ", b->pfx, v, b->pfx, v, b->pfx, v);
      put_argreduce_region(b, d, id, n->sub);
      emit_printf(b, " {dimensions = array<i64: %lld>} : (", (long long)n->a[0]);
      emit_type(b, t0);
      emit_printf(b, ", ");
      emit_type(b, &it);
      emit_printf(b, ", tensor<%s>, tensor<%s>) -> (", tpuc_dtype_mlir_name(d), tpuc_dtype_mlir_name(id));
      emit_type(b, t);
      emit_printf(b, ", ");
      emit_type(b, &n->rtype2);
      emit_printf(b, ")\n");
      return;
    }
    case N_DOT: {
      int nb = (int)n->a[0], nc = (int)n->a[1];
      const int64_t *p = n->a + 2;
      emit_printf(b, "\"stablehlo.dot_general\"");
      put_operands(b, g, n);
      emit_printf(b, " {dot_dimension_numbers = #stablehlo.dot<");
      const char *sep = "";
      if (nb) {
        put_list(b, "lhs_batching_dimensions", p, nb);
        emit_printf(b, ", ");
        put_list(b, "rhs_batching_dimensions", p + nb, nb);
        sep = ", ";
      }
      emit_printf(b, "%s", sep);
      put_list(b, "lhs_contracting_dimensions", p + 2 * nb, nc);
      emit_printf(b, ", ");
      put_list(b, "rhs_contracting_dimensions", p + 2 * nb + nc, nc);
      emit_printf(b, ">");
      if (t0->dtype == TPUC_F32 || t0->dtype == TPUC_F64 || t0->dtype == TPUC_C64 ||
          t0->dtype == TPUC_C128)
        emit_printf(b, ", precision_config = [#stablehlo<precision HIGHEST>, "
                     "#stablehlo<precision HIGHEST>]");
      emit_printf(b, "}");
      break;
    }
    case N_CONV: {
      /* attributes: nsp, stride[nsp], padding[2 nsp], lhs_dilation[nsp],
       * rhs_dilation[nsp], groups (ir_conv) */
      const int64_t *a = n->a;
      int nsp = (int)a[0];
      static const char *const dims[IR_CONV_MAX_SPATIAL - 1] = {"0, 1", "0, 1, 2"};
      const char *d = dims[nsp - 2];
      emit_printf(b, "\"stablehlo.convolution\"");
      put_operands(b, g, n);
      emit_printf(b, " {dimension_numbers = #stablehlo.conv<[b, f, %s]x[o, i, %s]->[b, f, %s]>, ",
                  d, d, d);
      put_array(b, "window_strides", a + 1, nsp);
      emit_printf(b, ", padding = dense<[");
      for (int s = 0; s < nsp; s++)
        emit_printf(b, "%s[%lld, %lld]", s ? ", " : "", (long long)a[1 + nsp + 2 * s],
                    (long long)a[2 + nsp + 2 * s]);
      emit_printf(b, "]> : tensor<%dx2xi64>, ", nsp);
      put_array(b, "lhs_dilation", a + 1 + 3 * nsp, nsp);
      emit_printf(b, ", ");
      put_array(b, "rhs_dilation", a + 1 + 4 * nsp, nsp);
      emit_printf(b, ", feature_group_count = %lld : i64, batch_group_count = 1 : i64",
                  (long long)a[1 + 5 * nsp]);
      if (t0->dtype == TPUC_F32 || t0->dtype == TPUC_F64)
        emit_printf(b, ", precision_config = [#stablehlo<precision HIGHEST>, "
                     "#stablehlo<precision HIGHEST>]");
      emit_printf(b, "}");
      break;
    }
    case N_GATHER: {
      const ir_gather_dims *d = n->extra;
      emit_printf(b, "\"stablehlo.gather\"");
      put_operands(b, g, n);
      emit_printf(b, " {dimension_numbers = #stablehlo.gather<");
      put_list(b, "offset_dims", d->offset_dims, d->n_offset_dims);
      emit_printf(b, ", ");
      put_list(b, "collapsed_slice_dims", d->collapsed_slice_dims, d->n_collapsed);
      emit_printf(b, ", ");
      put_list(b, "start_index_map", d->start_index_map, d->n_start_index_map);
      emit_printf(b, ", index_vector_dim = %lld>, ", (long long)d->index_vector_dim);
      put_array(b, "slice_sizes", d->slice_sizes, t0->ndim);
      emit_printf(b, ", indices_are_sorted = false}");
      break;
    }
    case N_SCATTER: {
      const ir_scatter_dims *d = n->extra;
      emit_printf(b, "\"stablehlo.scatter\"");
      put_operands(b, g, n);
      emit_printf(b, " ");
      put_combiner(b, t0->dtype, n->sub);
      emit_printf(b, " {scatter_dimension_numbers = #stablehlo.scatter<");
      put_list(b, "update_window_dims", d->update_window_dims, d->n_update_window_dims);
      emit_printf(b, ", ");
      put_list(b, "inserted_window_dims", d->inserted_window_dims, d->n_inserted);
      emit_printf(b, ", ");
      put_list(b, "scatter_dims_to_operand_dims", d->scatter_dims_to_operand_dims,
               d->n_scatter_dims);
      emit_printf(b, ", index_vector_dim = %lld>, indices_are_sorted = false, unique_indices = false}",
                (long long)d->index_vector_dim);
      break;
    }
    case N_SORT: {
      const char *vt = tpuc_dtype_mlir_name(t0->dtype);
      bool fl = ir_is_float(t0->dtype);
      emit_printf(b, "\"stablehlo.sort\"");
      put_operands(b, g, n);
      emit_printf(b,
                " ({\n    ^bb0(%%a: tensor<%s>, %%b: tensor<%s>, %%ai: tensor<i64>, %%bi: "
                "tensor<i64>):\n      %%c = \"stablehlo.compare\"(%%a, %%b) {comparison_direction = "
                "#stablehlo<comparison_direction %s>, compare_type = #stablehlo<comparison_type "
                "%s>} : (tensor<%s>, tensor<%s>) -> tensor<i1>\n      \"stablehlo.return\"(%%c) : "
                "(tensor<i1>) -> ()\n    }) {dimension = %lld : i64, is_stable = true}",
                vt, vt, n->sub ? "GT" : "LT", fl ? "TOTALORDER" : cmp_type(t0->dtype), vt, vt,
                (long long)n->a[0]);
      break;
    }
    case N_FFT: {
      static const char *kinds[] = {"FFT", "IFFT", "RFFT", "IRFFT"};
      emit_printf(b, "\"stablehlo.fft\"");
      put_operands(b, g, n);
      emit_printf(b, " {fft_type = #stablehlo<fft_type %s>, ", kinds[n->sub & 3]);
      put_array(b, "fft_length", n->a + 1, (int)n->a[0]);
      emit_printf(b, "}");
      break;
    }
    case N_CHOLESKY:
      emit_printf(b, "\"stablehlo.cholesky\"");
      put_operands(b, g, n);
      emit_printf(b, " {lower = %s}", n->sub ? "true" : "false");
      break;
    case N_TRIANGULAR_SOLVE: {
      static const char *tr[] = {"NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"};
      emit_printf(b, "\"stablehlo.triangular_solve\"");
      put_operands(b, g, n);
      emit_printf(b, " {left_side = %s, lower = %s, unit_diagonal = %s, transpose_a = "
                   "#stablehlo<transpose %s>}",
                n->sub & 1 ? "true" : "false", n->sub & 2 ? "true" : "false",
                n->sub & 4 ? "true" : "false", tr[(n->sub >> 3) % 3]);
      break;
    }
    case N_RNG:
      emit_printf(b, "\"stablehlo.rng_bit_generator\"");
      put_operands(b, g, n);
      emit_printf(b, " {rng_algorithm = #stablehlo<rng_algorithm PHILOX>}");
      break;
    case N_ALL_REDUCE:
      emit_printf(b, "\"stablehlo.all_reduce\"");
      put_operands(b, g, n);
      emit_printf(b, " ");
      put_combiner(b, t0->dtype, n->sub);
      emit_printf(b, " {");
      put_replica_groups(b, n);
      emit_printf(b, "}");
      break;
    case N_REDUCE_SCATTER:
      emit_printf(b, "\"stablehlo.reduce_scatter\"");
      put_operands(b, g, n);
      emit_printf(b, " ");
      put_combiner(b, t0->dtype, n->sub);
      emit_printf(b, " {scatter_dimension = %lld : i64, ", (long long)n->a[3]);
      put_replica_groups(b, n);
      emit_printf(b, "}");
      break;
    case N_ALL_GATHER:
      emit_printf(b, "\"stablehlo.all_gather\"");
      put_operands(b, g, n);
      emit_printf(b, " {all_gather_dim = %lld : i64, ", (long long)n->a[3]);
      put_replica_groups(b, n);
      emit_printf(b, "}");
      break;
    case N_ALL_TO_ALL:
      emit_printf(b, "\"stablehlo.all_to_all\"");
      put_operands(b, g, n);
      emit_printf(b, " {split_dimension = %lld : i64, concat_dimension = %lld : i64, split_count = "
                   "%lld : i64, ",
                (long long)n->a[3], (long long)n->a[4], (long long)n->a[1]);
      put_replica_groups(b, n);
      emit_printf(b, "}");
      break;
    case N_PERMUTE: {
      int np = (int)n->a[0];
      emit_printf(b, "\"stablehlo.collective_permute\"");
      put_operands(b, g, n);
      emit_printf(b, " {source_target_pairs = dense<[");
      for (int i = 0; i < np; i++)
        emit_printf(b, "%s[%lld, %lld]", i ? ", " : "", (long long)n->a[2 + 2 * i],
                  (long long)n->a[3 + 2 * i]);
      emit_printf(b, "]> : tensor<%dx2xi64>", np);
      if (n->a[1] > 0)
        emit_printf(b, ", channel_handle = #stablehlo.channel_handle<handle = %lld, type = 1>",
                  (long long)n->a[1]);
      emit_printf(b, "}");
      break;
    }
    case N_REPLICA_ID:
      emit_printf(b, "\"stablehlo.replica_id\"()");
      break;
    default:
      break;
  }
  put_signature(b, g, n);
}

/* Dependency k (order.c): %ok, via[k]'s value computed after its tokens. */
static void emit_dep(sb *b, const ir_graph *g, int k) {
  char *text = ir_order_text(g, b->ord, k);
  if (!text) b->oom = true;
  else emit_printf(b, "%s", text);
  free(text);
}

/* The nodes in order; a dependency's deferred nodes right after it. */
void emit_nodes(sb *b, const ir_graph *g) {
  const ir_order *o = b->ord;
  for (int v = 0; v < g->n; v++) {
    int k = o && o->gate ? o->gate[v] : -1;
    if (k < 0 || v > o->pos[k]) {
      b->cur = v;
      emit_node(b, g, v);
    }
    for (int j = 0; o && j < o->nbar; j++) {
      if (o->pos[j] != v) continue;
      emit_dep(b, g, j);
      for (int w = 0; w <= v; w++)
        if (o->gate[w] == j) {
          b->cur = w;
          emit_node(b, g, w);
        }
    }
  }
  b->cur = -1;
}

char *ir_emit(ir_graph *g, const char *name, size_t *len) {
  if (g->error) return NULL;
  if (g->nout == 0) {
    ir_fail(g, "IR: the graph has no output");
    return NULL;
  }
  ir_order ord;
  if (!ir_order_plan(g, &ord)) {
    ir_fail(g, "out of host memory while ordering in-place updates");
    return NULL;
  }
  sb b = {0};
  b.cur = -1;
  snprintf(b.pfx, sizeof b.pfx, "v");
  b.ord = &ord;
  emit_printf(&b, "module @%s {\n  func.func public @main(", name ? name : "tpuc");
  int k = 0;
  for (int v = 0; v < g->n; v++)
    if (g->nodes[v].kind == N_PARAM) {
      emit_printf(&b, "%s%%v%d: ", k++ ? ", " : "", v); /* b.pfx is "v" */
      emit_type(&b, &g->nodes[v].type);
      if (g->nodes[v].sub) /* the result that may reuse this argument's buffer */
        emit_printf(&b, " {tf.aliasing_output = %d : i32}", g->nodes[v].sub - 1);
    }
  emit_printf(&b, ") -> (");
  for (int i = 0; i < g->nout; i++) {
    if (i) emit_printf(&b, ", ");
    emit_type(&b, &g->nodes[g->outputs[i]].type);
  }
  emit_printf(&b, ") {\n");
  emit_nodes(&b, g);
  emit_printf(&b, "    \"func.return\"(");
  for (int i = 0; i < g->nout; i++) {
    if (i) emit_printf(&b, ", ");
    emit_name(&b, g, g->outputs[i]);
  }
  emit_printf(&b, ") : (");
  for (int i = 0; i < g->nout; i++) {
    if (i) emit_printf(&b, ", ");
    emit_type(&b, &g->nodes[g->outputs[i]].type);
  }
  emit_printf(&b, ") -> ()\n  }\n}\n");
  ir_order_free(&ord);
  if (b.oom) {
    free(b.s);
    ir_fail(g, "out of host memory while emitting StableHLO");
    return NULL;
  }
  if (len) *len = b.len;
  return b.s;
}
