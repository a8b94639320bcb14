/* ir.c — building IR graphs: values, type inference and checks for every
 * primitive. A failed check records the first error in the graph (a bug in a
 * lowering, reported as a status by the engine) and returns IR_NONE. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_internal.h"

ir_graph *ir_graph_create(void) { return calloc(1, sizeof(ir_graph)); }

void ir_graph_set_xla_cpu(ir_graph *g, bool on) { g->xla_cpu = on; }

bool ir_graph_xla_cpu(const ir_graph *g) { return g->xla_cpu; }

void ir_graph_set_sum_block(ir_graph *g, int64_t n) { g->sum_block = n; }

int64_t ir_graph_sum_block(const ir_graph *g) { return g->sum_block; }

void ir_graph_set_guard_dot_rhs(ir_graph *g, bool on) { g->guard_dot_rhs = on; }

void ir_graph_destroy(ir_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->n; i++) {
    free(g->nodes[i].ops);
    free(g->nodes[i].a);
    if (g->nodes[i].kind == N_WHILE) ir_graph_destroy(g->nodes[i].extra);
    else free(g->nodes[i].extra);
  }
  free(g->nodes);
  free(g->outputs);
  free(g->error);
  free(g);
}

const char *ir_error(const ir_graph *g) { return g->error; }

void ir_fail(ir_graph *g, const char *fmt, ...) {
  if (g->error) return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  g->error = strdup(buf);
  if (!g->error) g->error = (char *)NULL;
}

static bool valid(const ir_graph *g, tv v) { return !g->error && v >= 0 && v < g->n; }

const ir_type *ir_typeof(const ir_graph *g, tv v) {
  static const ir_type none = {TPUC_F32, 0, {0}};
  return (v >= 0 && v < g->n) ? &g->nodes[v].type : &none;
}

ir_type ir_make_type(tpuc_dtype dtype, int ndim, const int64_t *dims) {
  ir_type t;
  memset(&t, 0, sizeof t);
  t.dtype = dtype;
  t.ndim = ndim < 0 ? 0 : (ndim > TPUC_MAX_DIMS ? TPUC_MAX_DIMS : ndim);
  if (t.ndim && dims) memcpy(t.dims, dims, (size_t)t.ndim * sizeof *dims);
  return t;
}

int64_t ir_numel(const ir_type *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->dims[i];
  return n;
}

bool ir_is_float(tpuc_dtype t) {
  return t == TPUC_F16 || t == TPUC_BF16 || t == TPUC_F32 || t == TPUC_F64;
}
bool ir_is_complex(tpuc_dtype t) { return t == TPUC_C64 || t == TPUC_C128; }
bool ir_is_unsigned(tpuc_dtype t) {
  return t == TPUC_U8 || t == TPUC_U16 || t == TPUC_U32 || t == TPUC_U64;
}
bool ir_is_int(tpuc_dtype t) {
  return t == TPUC_S8 || t == TPUC_S16 || t == TPUC_S32 || t == TPUC_S64 || ir_is_unsigned(t);
}

static bool same_shape(const ir_type *a, const ir_type *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

static bool same_type(const ir_type *a, const ir_type *b) {
  return a->dtype == b->dtype && same_shape(a, b);
}

static const char *tname(const ir_type *t, char *buf, size_t n) {
  size_t p = 0;
  buf[0] = 0;
  for (int i = 0; i < t->ndim && p < n; i++)
    p += (size_t)snprintf(buf + p, n - p, "%lldx", (long long)t->dims[i]);
  if (p < n) snprintf(buf + p, n - p, "%s", tpuc_dtype_mlir_name(t->dtype));
  return buf;
}

/* Appends a node; copies `nops` operands and `na` attributes. */
static tv add(ir_graph *g, ir_kind kind, int sub, ir_type type, const tv *ops, int nops,
              const int64_t *a, int na) {
  if (g->error) return IR_NONE;
  for (int i = 0; i < nops; i++)
    if (!valid(g, ops[i])) {
      ir_fail(g, "IR: operand %d of a node is not a value", i);
      return IR_NONE;
    }
  if (g->n == g->cap) {
    int cap = g->cap ? g->cap * 2 : 64;
    ir_node *nn = realloc(g->nodes, (size_t)cap * sizeof *nn);
    if (!nn) {
      ir_fail(g, "out of host memory");
      return IR_NONE;
    }
    g->nodes = nn;
    g->cap = cap;
  }
  ir_node *n = &g->nodes[g->n];
  memset(n, 0, sizeof *n);
  n->kind = kind;
  n->sub = sub;
  n->type = type;
  n->nresults = 1;
  if (nops) {
    n->ops = malloc((size_t)nops * sizeof *ops);
    if (!n->ops) {
      ir_fail(g, "out of host memory");
      return IR_NONE;
    }
    memcpy(n->ops, ops, (size_t)nops * sizeof *ops);
  }
  n->nops = nops;
  if (na) {
    n->a = malloc((size_t)na * sizeof *a);
    if (!n->a) {
      free(n->ops);
      ir_fail(g, "out of host memory");
      return IR_NONE;
    }
    memcpy(n->a, a, (size_t)na * sizeof *a);
  }
  n->na = na;
  return g->n++;
}

/* A second result of multi-result node `src`. */
static tv get(ir_graph *g, tv src, int k, ir_type t) {
  tv v = add(g, N_GET, 0, t, &src, 1, NULL, 0);
  if (v != IR_NONE) g->nodes[v].i = k;
  return v;
}

/* ---- leaves ---- */
tv ir_param(ir_graph *g, ir_type t) {
  tv v = add(g, N_PARAM, 0, t, NULL, 0, NULL, 0);
  if (v != IR_NONE) g->nodes[v].i = g->nparams++;
  return v;
}

bool ir_splat_value(const ir_graph *g, tv v, double *out) {
  if (!valid(g, v)) return false;
  const ir_node *n = &g->nodes[v];
  if (n->kind == N_SPLAT) *out = n->f;
  else if (n->kind == N_SPLAT_I64) *out = (double)n->i;
  else return false;
  return true;
}

tv ir_barrier(ir_graph *g, tv x) {
  if (!valid(g, x)) return IR_NONE;
  return add(g, N_BARRIER, 0, g->nodes[x].type, &x, 1, NULL, 0);
}

bool ir_transposed_2d(const ir_graph *g, tv v, tv *src) {
  if (!valid(g, v)) return false;
  const ir_node *n = &g->nodes[v];
  if (n->kind != N_TRANSPOSE || n->type.ndim != 2) return false;
  *src = n->ops[0];
  return true;
}

tv ir_splat(ir_graph *g, ir_type t, double value) {
  tv v = add(g, N_SPLAT, 0, t, NULL, 0, NULL, 0);
  if (v != IR_NONE) g->nodes[v].f = value;
  return v;
}

tv ir_splat_i64(ir_graph *g, ir_type t, int64_t value) {
  if (!ir_is_int(t.dtype) && t.dtype != TPUC_PRED) return ir_splat(g, t, (double)value);
  tv v = add(g, N_SPLAT_I64, 0, t, NULL, 0, NULL, 0);
  if (v != IR_NONE) g->nodes[v].i = value;
  return v;
}

tv ir_const_i64s(ir_graph *g, const int64_t *vals, int n) {
  int64_t d = n;
  return add(g, N_CONST_I64S, 0, ir_make_type(TPUC_S64, 1, &d), NULL, 0, vals, n);
}

tv ir_iota(ir_graph *g, ir_type t, int dim) {
  if (dim < 0 || dim >= t.ndim) {
    ir_fail(g, "IR iota: dim %d out of range for rank %d", dim, t.ndim);
    return IR_NONE;
  }
  tv v = add(g, N_IOTA, 0, t, NULL, 0, NULL, 0);
  if (v != IR_NONE) g->nodes[v].i = dim;
  return v;
}

/* ---- elementwise ---- */
tv ir_unary(ir_graph *g, ir_unary_op op, tv x) {
  if (!valid(g, x)) return IR_NONE;
  ir_type t = g->nodes[x].type;
  if (op == IR_IS_FINITE) t.dtype = TPUC_PRED;
  if (op == IR_REAL || op == IR_IMAG) {
    if (t.dtype == TPUC_C64) t.dtype = TPUC_F32;
    else if (t.dtype == TPUC_C128) t.dtype = TPUC_F64;
  }
  if (op == IR_ABS && ir_is_complex(t.dtype)) t.dtype = t.dtype == TPUC_C64 ? TPUC_F32 : TPUC_F64;
  return add(g, N_UNARY, op, t, &x, 1, NULL, 0);
}

tv ir_binary(ir_graph *g, ir_binary_op op, tv a, tv b) {
  if (!valid(g, a) || !valid(g, b)) return IR_NONE;
  const ir_type *ta = &g->nodes[a].type, *tb = &g->nodes[b].type;
  if (!same_type(ta, tb)) {
    char s1[128], s2[128];
    ir_fail(g, "IR binary op %d: operand types differ (%s vs %s)", (int)op, tname(ta, s1, 128),
            tname(tb, s2, 128));
    return IR_NONE;
  }
  ir_type t = *ta;
  if (op == IR_COMPLEX) t.dtype = ta->dtype == TPUC_F64 ? TPUC_C128 : TPUC_C64;
  tv ops[2] = {a, b};
  return add(g, N_BINARY, op, t, ops, 2, NULL, 0);
}

tv ir_compare(ir_graph *g, ir_cmp dir, tv a, tv b) {
  if (!valid(g, a) || !valid(g, b)) return IR_NONE;
  const ir_type *ta = &g->nodes[a].type, *tb = &g->nodes[b].type;
  if (!same_type(ta, tb)) {
    char s1[128], s2[128];
    ir_fail(g, "IR compare: operand types differ (%s vs %s)", tname(ta, s1, 128),
            tname(tb, s2, 128));
    return IR_NONE;
  }
  ir_type t = *ta;
  t.dtype = TPUC_PRED;
  tv ops[2] = {a, b};
  return add(g, N_COMPARE, dir, t, ops, 2, NULL, 0);
}

tv ir_select(ir_graph *g, tv pred, tv on_true, tv on_false) {
  if (!valid(g, pred) || !valid(g, on_true) || !valid(g, on_false)) return IR_NONE;
  const ir_type *tp = &g->nodes[pred].type, *ta = &g->nodes[on_true].type,
                *tb = &g->nodes[on_false].type;
  if (!same_type(ta, tb) || tp->dtype != TPUC_PRED || (tp->ndim && !same_shape(tp, ta))) {
    char s1[128], s2[128], s3[128];
    ir_fail(g, "IR select: bad operand types (%s, %s, %s)", tname(tp, s1, 128), tname(ta, s2, 128),
            tname(tb, s3, 128));
    return IR_NONE;
  }
  tv ops[3] = {pred, on_true, on_false};
  return add(g, N_SELECT, 0, *ta, ops, 3, NULL, 0);
}

tv ir_clamp(ir_graph *g, tv lo, tv x, tv hi) {
  if (!valid(g, lo) || !valid(g, x) || !valid(g, hi)) return IR_NONE;
  const ir_type *tx = &g->nodes[x].type;
  for (int k = 0; k < 2; k++) {
    const ir_type *tb = &g->nodes[k ? hi : lo].type;
    if (tb->dtype != tx->dtype || (tb->ndim && !same_shape(tb, tx))) {
      ir_fail(g, "IR clamp: bound %d has another type than the operand", k);
      return IR_NONE;
    }
  }
  tv ops[3] = {lo, x, hi};
  return add(g, N_CLAMP, 0, *tx, ops, 3, NULL, 0);
}

/* ---- types and shapes ---- */
tv ir_convert(ir_graph *g, tv x, tpuc_dtype to) {
  if (!valid(g, x)) return IR_NONE;
  ir_type t = g->nodes[x].type;
  if (t.dtype == to) return x;
  if (to == TPUC_PRED && t.dtype != TPUC_PRED) { /* x != 0, explicitly */
    tv zero = ir_splat(g, t, 0.0);
    return ir_compare(g, IR_NE, x, zero);
  }
  t.dtype = to;
  return add(g, N_CONVERT, 0, t, &x, 1, NULL, 0);
}

tv ir_bitcast(ir_graph *g, tv x, ir_type to) {
  if (!valid(g, x)) return IR_NONE;
  const ir_type *tx = &g->nodes[x].type;
  if (tpuc_dtype_size(tx->dtype) != tpuc_dtype_size(to.dtype) || !same_shape(tx, &to)) {
    ir_fail(g, "IR bitcast: only same-size element types of the same shape");
    return IR_NONE;
  }
  return add(g, N_BITCAST, 0, to, &x, 1, NULL, 0);
}

tv ir_reshape(ir_graph *g, tv x, int ndim, const int64_t *dims) {
  if (!valid(g, x)) return IR_NONE;
  ir_type t = ir_make_type(g->nodes[x].type.dtype, ndim, dims);
  if (ir_numel(&t) != ir_numel(&g->nodes[x].type)) {
    ir_fail(g, "IR reshape: %lld elements into %lld", (long long)ir_numel(&g->nodes[x].type),
            (long long)ir_numel(&t));
    return IR_NONE;
  }
  if (same_shape(&t, &g->nodes[x].type)) return x;
  return add(g, N_RESHAPE, 0, t, &x, 1, NULL, 0);
}

tv ir_transpose(ir_graph *g, tv x, const int64_t *perm) {
  if (!valid(g, x)) return IR_NONE;
  const ir_type *tx = &g->nodes[x].type;
  ir_type t = *tx;
  bool seen[TPUC_MAX_DIMS] = {false}, identity = true;
  for (int i = 0; i < tx->ndim; i++) {
    if (perm[i] < 0 || perm[i] >= tx->ndim || seen[perm[i]]) {
      ir_fail(g, "IR transpose: invalid permutation");
      return IR_NONE;
    }
    seen[perm[i]] = true;
    t.dims[i] = tx->dims[perm[i]];
    identity &= perm[i] == i;
  }
  if (identity) return x;
  return add(g, N_TRANSPOSE, 0, t, &x, 1, perm, tx->ndim);
}

tv ir_broadcast_in_dim(ir_graph *g, tv x, ir_type t, const int64_t *bdims) {
  if (!valid(g, x)) return IR_NONE;
  const ir_type *tx = &g->nodes[x].type;
  for (int i = 0; i < tx->ndim; i++)
    if (bdims[i] < 0 || bdims[i] >= t.ndim ||
        (tx->dims[i] != 1 && tx->dims[i] != t.dims[bdims[i]])) {
      char s1[128], s2[128];
      ir_fail(g, "IR broadcast_in_dim: %s cannot broadcast to %s", tname(tx, s1, 128),
              tname(&t, s2, 128));
      return IR_NONE;
    }
  t.dtype = tx->dtype;
  if (same_shape(tx, &t)) {
    bool id = true;
    for (int i = 0; i < tx->ndim; i++) id &= bdims[i] == i;
    if (id) return x;
  }
  return add(g, N_BROADCAST, 0, t, &x, 1, bdims, tx->ndim);
}

tv ir_slice(ir_graph *g, tv x, const int64_t *start, const int64_t *limit, const int64_t *stride) {
  if (!valid(g, x)) return IR_NONE;
  const ir_type *tx = &g->nodes[x].type;
  ir_type t = *tx;
  int64_t a[3 * TPUC_MAX_DIMS];
  bool full = true;
  for (int i = 0; i < tx->ndim; i++) {
    int64_t st = stride ? stride[i] : 1;
    if (start[i] < 0 || limit[i] > tx->dims[i] || start[i] > limit[i] || st < 1) {
      ir_fail(g, "IR slice: bad bounds [%lld:%lld:%lld] for dim %d of size %lld",
              (long long)start[i], (long long)limit[i], (long long)st, i, (long long)tx->dims[i]);
      return IR_NONE;
    }
    t.dims[i] = (limit[i] - start[i] + st - 1) / st;
    a[i] = start[i];
    a[tx->ndim + i] = limit[i];
    a[2 * tx->ndim + i] = st;
    full &= start[i] == 0 && limit[i] == tx->dims[i] && st == 1;
  }
  if (full) return x;
  return add(g, N_SLICE, 0, t, &x, 1, a, 3 * tx->ndim);
}

tv ir_concat(ir_graph *g, const tv *xs, int n, int dim) {
  if (n < 1) {
    ir_fail(g, "IR concat of nothing");
    return IR_NONE;
  }
  if (n == 1) return xs[0];
  for (int i = 0; i < n; i++)
    if (!valid(g, xs[i])) return IR_NONE;
  ir_type t = g->nodes[xs[0]].type;
  if (dim < 0 || dim >= t.ndim) {
    ir_fail(g, "IR concat: dim %d out of range", dim);
    return IR_NONE;
  }
  for (int i = 1; i < n; i++) {
    const ir_type *ti = &g->nodes[xs[i]].type;
    bool ok = ti->dtype == t.dtype && ti->ndim == t.ndim;
    for (int d = 0; ok && d < t.ndim; d++) ok = d == dim || ti->dims[d] == t.dims[d];
    if (!ok) {
      ir_fail(g, "IR concat: operand %d does not match", i);
      return IR_NONE;
    }
    t.dims[dim] += ti->dims[dim];
  }
  int64_t d = dim;
  return add(g, N_CONCAT, 0, t, xs, n, &d, 1);
}

tv ir_pad(ir_graph *g, tv x, tv pad_value, const int64_t *lo, const int64_t *hi,
          const int64_t *interior) {
  if (!valid(g, x) || !valid(g, pad_value)) return IR_NONE;
  const ir_type *tx = &g->nodes[x].type;
  ir_type t = *tx;
  int64_t a[3 * TPUC_MAX_DIMS];
  for (int i = 0; i < tx->ndim; i++) {
    int64_t in = interior ? interior[i] : 0;
    t.dims[i] = lo[i] + hi[i] + tx->dims[i] + (tx->dims[i] > 0 ? (tx->dims[i] - 1) * in : 0);
    if (t.dims[i] < 0 || in < 0) {
      ir_fail(g, "IR pad: negative result size");
      return IR_NONE;
    }
    a[i] = lo[i];
    a[tx->ndim + i] = hi[i];
    a[2 * tx->ndim + i] = in;
  }
  if (g->nodes[pad_value].type.ndim != 0 || g->nodes[pad_value].type.dtype != tx->dtype) {
    ir_fail(g, "IR pad: the padding value must be a rank-0 value of the operand's dtype");
    return IR_NONE;
  }
  tv ops[2] = {x, pad_value};
  return add(g, N_PAD, 0, t, ops, 2, a, 3 * tx->ndim);
}

tv ir_reverse(ir_graph *g, tv x, const int64_t *dims, int ndims) {
  if (!valid(g, x)) return IR_NONE;
  if (ndims == 0) return x;
  return add(g, N_REVERSE, 0, g->nodes[x].type, &x, 1, dims, ndims);
}

tv ir_dynamic_slice(ir_graph *g, tv x, const tv *starts, const int64_t *sizes) {
  if (!valid(g, x)) return IR_NONE;
  ir_type t = g->nodes[x].type;
  tv ops[1 + TPUC_MAX_DIMS];
  ops[0] = x;
  for (int i = 0; i < t.ndim; i++) {
    ops[1 + i] = starts[i];
    t.dims[i] = sizes[i];
  }
  return add(g, N_DSLICE, 0, t, ops, 1 + t.ndim, sizes, t.ndim);
}

tv ir_dynamic_update_slice(ir_graph *g, tv x, tv update, const tv *starts) {
  if (!valid(g, x) || !valid(g, update)) return IR_NONE;
  ir_type t = g->nodes[x].type;
  tv ops[2 + TPUC_MAX_DIMS];
  ops[0] = x;
  ops[1] = update;
  for (int i = 0; i < t.ndim; i++) ops[2 + i] = starts[i];
  return add(g, N_DUS, 0, t, ops, 2 + t.ndim, NULL, 0);
}

/* ---- reductions ---- */
static bool reduced_type(ir_graph *g, const ir_type *tx, const int64_t *dims, int ndims,
                         ir_type *out) {
  bool drop[TPUC_MAX_DIMS] = {false};
  for (int i = 0; i < ndims; i++) {
    if (dims[i] < 0 || dims[i] >= tx->ndim || drop[dims[i]]) {
      ir_fail(g, "IR reduce: bad dimension %lld", (long long)dims[i]);
      return false;
    }
    drop[dims[i]] = true;
  }
  *out = *tx;
  out->ndim = 0;
  for (int i = 0; i < tx->ndim; i++)
    if (!drop[i]) out->dims[out->ndim++] = tx->dims[i];
  return true;
}

tv ir_reduce(ir_graph *g, tv x, tv init, ir_reducer r, const int64_t *dims, int ndims) {
  if (!valid(g, x) || !valid(g, init)) return IR_NONE;
  if (ndims == 0) return x;
  ir_type t;
  if (!reduced_type(g, &g->nodes[x].type, dims, ndims, &t)) return IR_NONE;
  tv ops[2] = {x, init};
  return add(g, N_REDUCE, r, t, ops, 2, dims, ndims);
}

void ir_argreduce(ir_graph *g, tv x, int dim, bool is_max, tpuc_dtype index_dtype, tv *values,
                  tv *indices) {
  *values = *indices = IR_NONE;
  if (!valid(g, x)) return;
  int64_t d = dim;
  ir_type t;
  if (!reduced_type(g, &g->nodes[x].type, &d, 1, &t)) return;
  tv node = add(g, N_ARGREDUCE, is_max, t, &x, 1, &d, 1);
  if (node == IR_NONE) return;
  ir_type ti = t;
  ti.dtype = index_dtype;
  g->nodes[node].nresults = 2;
  g->nodes[node].rtype2 = ti;
  *values = get(g, node, 0, t);
  *indices = get(g, node, 1, ti);
}

tv ir_reduce_window(ir_graph *g, tv x, tv init, ir_reducer r, const int64_t *window,
                    const int64_t *strides, const int64_t *padding) {
  if (!valid(g, x) || !valid(g, init)) return IR_NONE;
  const ir_type *tx = &g->nodes[x].type;
  int n = tx->ndim;
  ir_type t = *tx;
  int64_t a[4 * TPUC_MAX_DIMS];
  for (int i = 0; i < n; i++) {
    int64_t lo = padding ? padding[2 * i] : 0, hi = padding ? padding[2 * i + 1] : 0;
    int64_t st = strides ? strides[i] : 1;
    int64_t span = tx->dims[i] + lo + hi - window[i];
    if (span < 0 || st < 1) {
      ir_fail(g, "IR reduce_window: window larger than the padded input");
      return IR_NONE;
    }
    t.dims[i] = span / st + 1;
    a[i] = window[i];
    a[n + i] = st;
    a[2 * n + 2 * i] = lo;
    a[2 * n + 2 * i + 1] = hi;
  }
  tv ops[2] = {x, init};
  return add(g, N_REDUCE_WINDOW, r, t, ops, 2, a, 4 * n);
}

/* ---- linear algebra ---- */
/* Replica ids count devices, so the select always takes b. */
tv ir_opaque_identity(ir_graph *g, tv b) {
  if (!valid(g, b)) return IR_NONE;
  ir_type u32 = ir_make_type(TPUC_U32, 0, NULL), tb = g->nodes[b].type;
  tv never = ir_compare(g, IR_EQ, ir_replica_id(g), ir_splat_i64(g, u32, UINT32_MAX));
  return ir_select(g, never, ir_splat_i64(g, tb, 0), b);
}

tv ir_source(const ir_graph *g, tv v) {
  while (valid(g, v)) {
    const ir_node *x = &g->nodes[v];
    if (x->nops != 1 || (x->kind != N_RESHAPE && x->kind != N_BITCAST && x->kind != N_CONVERT &&
                         x->kind != N_TRANSPOSE))
      break;
    v = x->ops[0];
  }
  return v;
}

/* Nodes only refer to earlier nodes, so the search stops below `on`. */
bool ir_depends_on(const ir_graph *g, tv v, tv on, const tv *stop, int nstop) {
  if (!valid(g, v) || !valid(g, on) || v < on) return false;
  if (v == on) return true;
  int span = v - on + 1;
  unsigned char *seen = calloc((size_t)span, 1);
  tv *todo = malloc((size_t)span * sizeof *todo);
  bool found = false;
  int n = 0;
  if (!seen || !todo) { /* out of memory: answer yes, the safe side for the caller */
    free(seen);
    free(todo);
    return true;
  }
  todo[n++] = v;
  seen[v - on] = 1;
  while (n > 0 && !found) {
    const ir_node *x = &g->nodes[todo[--n]];
    for (int k = 0; k < x->nops && !found; k++) {
      tv o = x->ops[k];
      if (o < on || seen[o - on]) continue;
      seen[o - on] = 1;
      int kind = g->nodes[o].kind;
      if (o != on && (kind == N_REDUCE || kind == N_ARGREDUCE || kind == N_REDUCE_WINDOW ||
                      kind == N_DOT || kind == N_CONV || kind == N_SORT || kind == N_FFT ||
                      kind == N_CHOLESKY || kind == N_TRIANGULAR_SOLVE ||
                      kind == N_ALL_REDUCE || kind == N_ALL_GATHER ||
                      kind == N_REDUCE_SCATTER || kind == N_ALL_TO_ALL))
        continue;
      bool stopped = false;
      for (int s = 0; s < nstop && !stopped; s++) stopped = stop[s] == o;
      if (stopped) continue;
      if (o == on) found = true;
      else todo[n++] = o;
    }
  }
  free(seen);
  free(todo);
  return found;
}

tv ir_dot_general(ir_graph *g, tv a, tv b, const int64_t *a_batch, const int64_t *b_batch,
                  int nbatch, const int64_t *a_contract, const int64_t *b_contract, int ncontract,
                  tpuc_dtype out_dtype) {
  if (!valid(g, a) || !valid(g, b)) return IR_NONE;
  if (g->guard_dot_rhs && ir_is_float(g->nodes[b].type.dtype)) {
    b = ir_opaque_identity(g, b);
    if (!valid(g, b)) return IR_NONE;
  }
  const ir_type *ta = &g->nodes[a].type, *tb = &g->nodes[b].type;
  if (ta->dtype != tb->dtype) {
    ir_fail(g, "IR dot_general: operand dtypes differ");
    return IR_NONE;
  }
  bool used_a[TPUC_MAX_DIMS] = {false}, used_b[TPUC_MAX_DIMS] = {false};
  ir_type t;
  memset(&t, 0, sizeof t);
  t.dtype = out_dtype;
  for (int i = 0; i < nbatch; i++) {
    if (ta->dims[a_batch[i]] != tb->dims[b_batch[i]]) {
      ir_fail(g, "IR dot_general: batch sizes differ");
      return IR_NONE;
    }
    used_a[a_batch[i]] = used_b[b_batch[i]] = true;
    t.dims[t.ndim++] = ta->dims[a_batch[i]];
  }
  for (int i = 0; i < ncontract; i++) {
    if (ta->dims[a_contract[i]] != tb->dims[b_contract[i]]) {
      ir_fail(g, "IR dot_general: contracting sizes differ (%lld vs %lld)",
              (long long)ta->dims[a_contract[i]], (long long)tb->dims[b_contract[i]]);
      return IR_NONE;
    }
    used_a[a_contract[i]] = used_b[b_contract[i]] = true;
  }
  for (int i = 0; i < ta->ndim; i++)
    if (!used_a[i]) t.dims[t.ndim++] = ta->dims[i];
  for (int i = 0; i < tb->ndim; i++)
    if (!used_b[i]) t.dims[t.ndim++] = tb->dims[i];
  int64_t attrs[4 * TPUC_MAX_DIMS + 2];
  int na = 0;
  attrs[na++] = nbatch;
  attrs[na++] = ncontract;
  for (int i = 0; i < nbatch; i++) attrs[na++] = a_batch[i];
  for (int i = 0; i < nbatch; i++) attrs[na++] = b_batch[i];
  for (int i = 0; i < ncontract; i++) attrs[na++] = a_contract[i];
  for (int i = 0; i < ncontract; i++) attrs[na++] = b_contract[i];
  tv ops[2] = {a, b};
  return add(g, N_DOT, 0, t, ops, 2, attrs, na);
}

tv ir_conv(ir_graph *g, tv input, tv weight, int nsp, const int64_t *stride,
           const int64_t *padding, const int64_t *lhs_dilation, const int64_t *rhs_dilation,
           int64_t groups, tpuc_dtype out_dtype) {
  if (!valid(g, input) || !valid(g, weight)) return IR_NONE;
  const ir_type *ti = &g->nodes[input].type, *tw = &g->nodes[weight].type;
  if (nsp < 2 || nsp > IR_CONV_MAX_SPATIAL || ti->ndim != nsp + 2 || tw->ndim != nsp + 2 ||
      groups < 1 || ti->dims[1] != tw->dims[1] * groups || ti->dtype != tw->dtype) {
    ir_fail(g, "IR conv: expects N C <spatial> input and O I <spatial> weight with matching "
               "channels, 2 or 3 spatial dims");
    return IR_NONE;
  }
  ir_type t = *ti;
  t.dtype = out_dtype;
  t.dims[1] = tw->dims[0];
  /* nsp, stride[nsp], padding[2 nsp], lhs_dilation[nsp], rhs_dilation[nsp], groups */
  int64_t a[2 + 5 * IR_CONV_MAX_SPATIAL];
  int na = 0;
  a[na++] = nsp;
  for (int s = 0; s < nsp; s++) {
    int64_t in = (ti->dims[2 + s] - 1) * lhs_dilation[s] + 1 + padding[2 * s] + padding[2 * s + 1];
    int64_t k = (tw->dims[2 + s] - 1) * rhs_dilation[s] + 1;
    if (in < k || stride[s] < 1) {
      ir_fail(g, "IR conv: kernel larger than the padded input");
      return IR_NONE;
    }
    t.dims[2 + s] = (in - k) / stride[s] + 1;
  }
  for (int s = 0; s < nsp; s++) a[na++] = stride[s];
  for (int s = 0; s < 2 * nsp; s++) a[na++] = padding[s];
  for (int s = 0; s < nsp; s++) a[na++] = lhs_dilation[s];
  for (int s = 0; s < nsp; s++) a[na++] = rhs_dilation[s];
  a[na++] = groups;
  tv ops[2] = {input, weight};
  return add(g, N_CONV, 0, t, ops, 2, a, na);
}

/* ---- indexing ---- */
tv ir_gather(ir_graph *g, tv operand, tv indices, const ir_gather_dims *d, ir_type result) {
  if (!valid(g, operand) || !valid(g, indices)) return IR_NONE;
  result.dtype = g->nodes[operand].type.dtype;
  tv ops[2] = {operand, indices};
  tv v = add(g, N_GATHER, 0, result, ops, 2, NULL, 0);
  if (v == IR_NONE) return v;
  ir_gather_dims *copy = malloc(sizeof *copy);
  if (!copy) {
    ir_fail(g, "out of host memory");
    return IR_NONE;
  }
  *copy = *d;
  g->nodes[v].extra = copy;
  return v;
}

tv ir_scatter(ir_graph *g, tv operand, tv indices, tv updates, const ir_scatter_dims *d,
              ir_reducer combine) {
  if (!valid(g, operand) || !valid(g, indices) || !valid(g, updates)) return IR_NONE;
  if (g->nodes[operand].type.dtype != g->nodes[updates].type.dtype) {
    ir_fail(g, "IR scatter: updates must have the operand's dtype");
    return IR_NONE;
  }
  tv ops[3] = {operand, indices, updates};
  tv v = add(g, N_SCATTER, (int)combine, g->nodes[operand].type, ops, 3, NULL, 0);
  if (v == IR_NONE) return v;
  ir_scatter_dims *copy = malloc(sizeof *copy);
  if (!copy) {
    ir_fail(g, "out of host memory");
    return IR_NONE;
  }
  *copy = *d;
  g->nodes[v].extra = copy;
  return v;
}

void ir_sort(ir_graph *g, tv x, int dim, bool descending, tv *sorted, tv *indices) {
  *sorted = IR_NONE;
  if (indices) *indices = IR_NONE;
  if (!valid(g, x)) return;
  ir_type t = g->nodes[x].type;
  if (dim < 0 || dim >= t.ndim) {
    ir_fail(g, "IR sort: bad dim");
    return;
  }
  ir_type ti = t;
  ti.dtype = TPUC_S64;
  tv iota = ir_iota(g, ti, dim);
  tv ops[2] = {x, iota};
  int64_t d = dim;
  tv node = add(g, N_SORT, descending, t, ops, 2, &d, 1);
  if (node == IR_NONE) return;
  g->nodes[node].nresults = 2;
  g->nodes[node].rtype2 = ti;
  *sorted = get(g, node, 0, t);
  if (indices) *indices = get(g, node, 1, ti);
}

/* ---- random ---- */
void ir_rng_bits(ir_graph *g, tv state, ir_type bits_type, tv *bits, tv *new_state) {
  *bits = IR_NONE;
  if (new_state) *new_state = IR_NONE;
  if (!valid(g, state)) return;
  const ir_type *ts = &g->nodes[state].type;
  if (ts->dtype != TPUC_U64 || ts->ndim != 1 || ts->dims[0] != 2 ||
      (bits_type.dtype != TPUC_U32 && bits_type.dtype != TPUC_U64)) {
    ir_fail(g, "IR rng_bits: state must be u64[2] and bits u32 or u64");
    return;
  }
  tv node = add(g, N_RNG, 0, *ts, &state, 1, NULL, 0);
  if (node == IR_NONE) return;
  g->nodes[node].nresults = 2;
  g->nodes[node].rtype2 = bits_type;
  if (new_state) *new_state = get(g, node, 0, *ts);
  *bits = get(g, node, 1, bits_type);
}

/* ---- the function ---- */
void ir_alias(ir_graph *g, tv param, int output_index) {
  if (!valid(g, param) || g->nodes[param].kind != N_PARAM || output_index < 0) {
    ir_fail(g, "IR alias: not a parameter");
    return;
  }
  g->nodes[param].sub = output_index + 1; /* 0: no alias */
}

void ir_output(ir_graph *g, tv v) {
  if (!valid(g, v)) {
    ir_fail(g, "IR output: not a value");
    return;
  }
  if (g->nout == g->outcap) {
    int cap = g->outcap ? g->outcap * 2 : 8;
    tv *o = realloc(g->outputs, (size_t)cap * sizeof *o);
    if (!o) {
      ir_fail(g, "out of host memory");
      return;
    }
    g->outputs = o;
    g->outcap = cap;
  }
  g->outputs[g->nout++] = v;
}

int ir_num_params(const ir_graph *g) { return g->nparams; }
int ir_num_outputs(const ir_graph *g) { return g->nout; }

/* For builders in other files of ir/ (collective.c). */
tv ir_node_add(ir_graph *g, int kind, int sub, ir_type type, const tv *ops, int nops,
               const int64_t *a, int na) {
  return add(g, (ir_kind)kind, sub, type, ops, nops, a, na);
}
