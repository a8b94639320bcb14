/* recompile.c — why a signature missed. When an op compiles for a signature
 * while an earlier signature of the same op exists, the two calls are
 * compared and the first difference is named ("aten::add.Tensor: input 0
 * shape [4, 8] -> [4, 16]"). The reasons (the last 64) and their count are
 * reported by tpuc_recompile_reasons / tpuc_op_stats; TPUC_LOG_RECOMPILES=1
 * also prints each one as it happens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lower/lower.h"
#include "exec.h"

#pragma GCC diagnostic ignored "-Wformat-truncation" /* reasons are cut to fit, on purpose */

#define SUMMARY_TENSORS 8
#define TABLE 1024
#define KEEP 64
#define REASON 320

typedef struct {
  const tpuc_op *op; /* NULL: empty slot */
  int ntensors;
  struct {
    int dtype, ndim;
    int64_t sizes[TPUC_MAX_DIMS], strides[TPUC_MAX_DIMS], offset;
  } t[SUMMARY_TENSORS];
  uint64_t args_hash;
} summary;

struct tpuc_recompiles {
  pthread_mutex_t lock;
  summary table[TABLE];
  char reasons[KEEP][REASON];
  int64_t count;
  bool log;
};

static uint64_t args_hash(const tpuc_op_call *c) {
  uint64_t h = 0;
  for (int i = 0; i < c->nargs; i++) {
    const tpuc_arg *a = &c->args[i];
    h = tpuc_hash64(&a->kind, sizeof a->kind, h);
    if (a->kind == TPUC_ARG_INT || a->kind == TPUC_ARG_BOOL) h = tpuc_hash64(&a->i, 8, h);
    if (a->kind == TPUC_ARG_INTS || a->kind == TPUC_ARG_BOOLS)
      h = tpuc_hash64(a->ints.v, (size_t)a->ints.n * 8, h);
    if (a->kind == TPUC_ARG_STRING) h = tpuc_hash64(a->s, strlen(a->s), h);
    if (a->kind == TPUC_ARG_SCALAR) h = tpuc_hash64(&a->scalar.kind, sizeof a->scalar.kind, h);
  }
  return h;
}

static void summarize(const tpuc_op_call *c, summary *s) {
  s->op = c->op;
  s->ntensors = c->ntensors;
  for (int i = 0; i < c->ntensors && i < SUMMARY_TENSORS; i++) {
    const tpuc_tensor *t = &c->tensors[i];
    s->t[i].dtype = t->dtype;
    s->t[i].ndim = t->ndim;
    memcpy(s->t[i].sizes, t->sizes, sizeof t->sizes);
    memcpy(s->t[i].strides, t->strides, sizeof t->strides);
    s->t[i].offset = t->offset;
  }
  s->args_hash = args_hash(c);
}

static int dims_text(char *out, size_t n, const int64_t *d, int nd) {
  int p = snprintf(out, n, "[");
  for (int i = 0; i < nd && p < (int)n; i++) p += snprintf(out + p, n - (size_t)p, "%s%lld", i ? ", " : "", (long long)d[i]);
  if (p < (int)n) p += snprintf(out + p, n - (size_t)p, "]");
  return p;
}

static void describe(const summary *a, const summary *b, const char *name, char *out, size_t n) {
  if (a->ntensors != b->ntensors) {
    snprintf(out, n, "%s: %d tensor inputs -> %d", name, a->ntensors, b->ntensors);
    return;
  }
  for (int i = 0; i < a->ntensors && i < SUMMARY_TENSORS; i++) {
    char x[80], y[80];
    if (a->t[i].dtype != b->t[i].dtype) {
      snprintf(out, n, "%s: input %d dtype %s -> %s", name, i,
               tpuc_dtype_mlir_name((tpuc_dtype)a->t[i].dtype),
               tpuc_dtype_mlir_name((tpuc_dtype)b->t[i].dtype));
      return;
    }
    if (a->t[i].ndim != b->t[i].ndim ||
        memcmp(a->t[i].sizes, b->t[i].sizes, (size_t)a->t[i].ndim * 8)) {
      dims_text(x, sizeof x, a->t[i].sizes, a->t[i].ndim);
      dims_text(y, sizeof y, b->t[i].sizes, b->t[i].ndim);
      snprintf(out, n, "%s: input %d shape %s -> %s", name, i, x, y);
      return;
    }
    if (memcmp(a->t[i].strides, b->t[i].strides, (size_t)a->t[i].ndim * 8) ||
        a->t[i].offset != b->t[i].offset) {
      dims_text(x, sizeof x, a->t[i].strides, a->t[i].ndim);
      dims_text(y, sizeof y, b->t[i].strides, b->t[i].ndim);
      snprintf(out, n, "%s: input %d strides %s -> %s (offset %lld -> %lld)", name, i, x, y,
               (long long)a->t[i].offset, (long long)b->t[i].offset);
      return;
    }
  }
  if (a->args_hash != b->args_hash) {
    snprintf(out, n, "%s: a static argument changed (an int, list, bool or string)", name);
    return;
  }
  snprintf(out, n, "%s: outputs, storage sharing or a storage's buffer layout changed", name);
}

static struct tpuc_recompiles *state(tpuc_runtime *rt) {
  if (rt->recompiles) return rt->recompiles;
  pthread_mutex_lock(&rt->fast_lock);
  if (!rt->recompiles) {
    struct tpuc_recompiles *r = calloc(1, sizeof *r);
    if (r) {
      pthread_mutex_init(&r->lock, NULL);
      const char *v = getenv("TPUC_LOG_RECOMPILES");
      r->log = v && *v && strcmp(v, "0");
      rt->recompiles = r;
    }
  }
  pthread_mutex_unlock(&rt->fast_lock);
  return rt->recompiles;
}

void tpuc_recompile_note(tpuc_runtime *rt, const tpuc_op_call *c) {
  struct tpuc_recompiles *r = state(rt);
  if (!r) return;
  summary now;
  summarize(c, &now);
  char reason[REASON];
  reason[0] = 0;
  pthread_mutex_lock(&r->lock);
  size_t h = (size_t)(((uintptr_t)c->op >> 4) % TABLE);
  for (int probe = 0; probe < TABLE; probe++, h = (h + 1) % TABLE) {
    summary *s = &r->table[h];
    if (s->op == c->op) {
      describe(s, &now, tpuc_op_name_of(c->op), reason, sizeof reason);
      memcpy(r->reasons[r->count % KEEP], reason, sizeof reason);
      r->count++;
      *s = now;
      break;
    }
    if (!s->op) { /* the op's first compile: not a recompile */
      *s = now;
      break;
    }
  }
  bool log = r->log;
  pthread_mutex_unlock(&r->lock);
  if (log && reason[0]) fprintf(stderr, "tpuc: recompiling %s\n", reason);
  if (reason[0])
    tpuc_event_emit(rt, TPUC_EVENT_RECOMPILE, TPUC_EVENT_INSTANT, tpuc_op_name_of(c->op), reason,
                    c->device, 0, 0);
}

size_t tpuc_reason_lines(const char *ring, size_t width, int keep, int64_t count, char *buf,
                         size_t n, size_t len) {
  int64_t first = count > keep ? count - keep : 0;
  for (int64_t i = first; i < count; i++) {
    const char *s = ring + (size_t)(i % keep) * width;
    size_t l = strlen(s);
    if (buf && len + l + 2 <= n) {
      memcpy(buf + len, s, l);
      buf[len + l] = '\n';
      buf[len + l + 1] = 0;
    }
    len += l + 1;
  }
  return len;
}

size_t tpuc_recompile_reasons(tpuc_runtime *rt, char *buf, size_t n) {
  struct tpuc_recompiles *r = rt->recompiles;
  if (buf && n) buf[0] = 0;
  if (!r) return 1;
  pthread_mutex_lock(&r->lock);
  size_t need = tpuc_reason_lines(&r->reasons[0][0], REASON, KEEP, r->count, buf, n, 0) + 1;
  pthread_mutex_unlock(&r->lock);
  return need;
}

int64_t tpuc_recompile_count(tpuc_runtime *rt) {
  struct tpuc_recompiles *r = rt->recompiles;
  if (!r) return 0;
  pthread_mutex_lock(&r->lock);
  int64_t n = r->count;
  pthread_mutex_unlock(&r->lock);
  return n;
}

void tpuc_recompiles_destroy(tpuc_runtime *rt) {
  if (!rt->recompiles) return;
  pthread_mutex_destroy(&rt->recompiles->lock);
  free(rt->recompiles);
  rt->recompiles = NULL;
}
