/* checks.c — results of the run-time checks programs compute (index bounds,
 * lower/bounds.c; torch._assert_async, lower/assert.c) turned into
 * PyTorch's errors.
 *
 * A program built with checks returns one extra s64[2n] result: per check
 * {failed, first offending value}. In debug mode (and whenever the caller
 * waits) it is read right after the launch and a failure is returned before
 * any result is bound, so the op raises and in-place targets keep their
 * values, as on the CPU. With TPUC_CHECK_BOUNDS=1 (and for every
 * torch._assert_async) in strict, fused and compiled execution nothing
 * waits: the result buffer is kept and read at
 * the next synchronisation point (a host read of a storage,
 * tpuc_synchronize), which then reports the first failure — CUDA's model of
 * device-side asserts. The kept list is bounded: beyond POLL_AT entries the
 * ready ones are read without waiting, beyond KEEP_MAX the oldest is waited
 * for. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"

#define POLL_AT 64
#define KEEP_MAX 1024

typedef struct {
  check_set *cs;
  tpuc_buffer *b;
} kept;

typedef struct tpuc_check_state {
  pthread_mutex_t lock;
  kept *v;
  int n, cap;
  atomic_int count;         /* n, readable without the lock */
  tpuc_status *failure;     /* first failure found and not yet reported */
  atomic_bool has_failure;  /* failure != NULL, readable without the lock */
} check_state;

check_set *check_set_new(const tpuc_check *v, int n) {
  size_t text = 0; /* the messages follow the descriptions */
  for (int i = 0; i < n; i++) text += v[i].msg ? strlen(v[i].msg) + 1 : 0;
  check_set *cs = malloc(sizeof *cs + (size_t)n * sizeof cs->d[0] + text);
  if (!cs) return NULL;
  atomic_init(&cs->refs, 1);
  cs->n = n;
  char *p = (char *)&cs->d[n];
  for (int i = 0; i < n; i++) {
    cs->d[i] = (check_desc){v[i].op ? v[i].op : "an op", v[i].kind, v[i].dim, v[i].size, NULL};
    if (v[i].msg) {
      size_t len = strlen(v[i].msg) + 1;
      memcpy(p, v[i].msg, len);
      cs->d[i].msg = p;
      p += len;
    }
  }
  return cs;
}

check_set *check_set_retain(check_set *cs) {
  if (cs) atomic_fetch_add(&cs->refs, 1);
  return cs;
}

void check_set_release(check_set *cs) {
  if (cs && atomic_fetch_sub(&cs->refs, 1) == 1) free(cs);
}

bool tpuc_checks_wanted(tpuc_runtime *rt, bool wait) {
  return wait || atomic_load(&rt->mode) == TPUC_MODE_DEBUG || atomic_load(&rt->check_bounds);
}

void tpuc_set_check_bounds(tpuc_runtime *rt, bool on) { atomic_store(&rt->check_bounds, on); }
bool tpuc_get_check_bounds(tpuc_runtime *rt) { return atomic_load(&rt->check_bounds); }

/* torch._assert_async's failure: the CPU's words (its message, or the
 * kernel's own when there is none), and where it was found when deferred. */
static tpuc_status *assert_failure(const check_desc *d, bool deferred) {
  const char *what = !d->msg ? "Expected Tensor with single nonzero value, but got zero"
                     : !*d->msg ? "Assertion is failed" : d->msg;
  if (!deferred) return tpuc_status_make(TPUC_ERR_RUNTIME, "%s", what);
  return tpuc_status_make(TPUC_ERR_RUNTIME,
                          "%s (device-side assert triggered: a torch._assert_async launched "
                          "earlier (%s) found its condition false on the device, reported at this "
                          "synchronisation. Run with TPUC_LAUNCH_BLOCKING=1 or "
                          "torch.tpu.set_eager_mode(\"debug\") to raise at the assert itself)",
                          what, d->op);
}

/* PyTorch's words for check d failing at value v. */
static tpuc_status *failure(const check_desc *d, int64_t v, bool deferred) {
  if (d->kind == TPUC_CHECK_ASSERT) return assert_failure(d, deferred);
  char what[256] = "";
  tpuc_code code = TPUC_ERR_INDEX;
  long long vv = (long long)v, n = (long long)d->size;
  switch (d->kind) {
    case TPUC_CHECK_DIM_RUNTIME:
      code = TPUC_ERR_RUNTIME;
      /* fall through */
    case TPUC_CHECK_DIM_INDEX:
      snprintf(what, sizeof what, "index %lld is out of bounds for dimension %d with size %lld", vv,
               d->dim, n);
      break;
    case TPUC_CHECK_IN_SELF:
      snprintf(what, sizeof what,
               "index out of range in self (index %lld, dimension %d with size %lld)", vv, d->dim,
               n);
      break;
    case TPUC_CHECK_FLAT:
      snprintf(what, sizeof what, "out of range: tried to access index %lld on a tensor of %lld elements.",
               vv, n);
      break;
    case TPUC_CHECK_COPY:
      snprintf(what, sizeof what,
               "index_copy_(): index %lld is out of bounds for dimension %d with size %lld", vv,
               d->dim, n);
      break;
    case TPUC_CHECK_TARGET:
      snprintf(what, sizeof what, "Target %lld is out of bounds.", vv);
      break;
    case TPUC_CHECK_ASSERT: /* assert_failure */
      break;
  }
  if (!deferred) return tpuc_status_make(code, "%s: %s", d->op, what);
  return tpuc_status_make(code,
                          "%s: %s (an op launched earlier, found by the device-side bounds check "
                          "of TPUC_CHECK_BOUNDS=1 and reported at this synchronisation; its "
                          "results are wrong. Run with TPUC_LAUNCH_BLOCKING=1 or "
                          "torch.tpu.set_eager_mode(\"debug\") to raise at the op itself)",
                          d->op, what);
}

/* Reads a check result; the first failure, or the error that kept the
 * program from running. */
static tpuc_status *read_result(const check_set *cs, tpuc_buffer *b, bool deferred) {
  int64_t small[16];
  int64_t *v = cs->n <= 8 ? small : malloc((size_t)cs->n * 2 * sizeof *v);
  if (!v) return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  tpuc_status *st = tpuc_buffer_to_host(b, v, (size_t)cs->n * 2 * sizeof *v);
  for (int i = 0; !st && i < cs->n; i++)
    if (v[2 * i]) st = failure(&cs->d[i], v[2 * i + 1], deferred);
  if (v != small) free(v);
  return st;
}

/* Reads entries [0, upto) that are ready (all of them when `wait`), keeping
 * the first failure; compacts the list. Under the lock. */
static void drain_locked(check_state *c, int upto, bool wait) {
  int w = 0;
  for (int i = 0; i < c->n; i++) {
    kept k = c->v[i];
    if (i < upto && (wait || tpuc_buffer_is_ready(k.b))) {
      tpuc_status *st = read_result(k.cs, k.b, true);
      if (st && !c->failure) {
        c->failure = st;
        atomic_store(&c->has_failure, true);
      } else {
        tpuc_status_destroy(st);
      }
      tpuc_buffer_release(k.b);
      check_set_release(k.cs);
    } else {
      c->v[w++] = k;
    }
  }
  c->n = w;
  atomic_store(&c->count, w);
}

tpuc_status *tpuc_checks_after_launch(tpuc_runtime *rt, check_set *cs, tpuc_buffer *b, bool now) {
  if (now) return read_result(cs, b, false);
  check_state *c = rt->checks;
  pthread_mutex_lock(&c->lock);
  if (c->n >= POLL_AT) drain_locked(c, c->n, false);
  if (c->n >= KEEP_MAX) drain_locked(c, 1, true);
  if (c->n == c->cap) {
    int cap = c->cap ? c->cap * 2 : POLL_AT * 2;
    kept *nv = realloc(c->v, (size_t)cap * sizeof *nv);
    if (!nv) { /* cannot keep it: read it now (waits) */
      pthread_mutex_unlock(&c->lock);
      return read_result(cs, b, true);
    }
    c->v = nv;
    c->cap = cap;
  }
  c->v[c->n++] = (kept){check_set_retain(cs), tpuc_buffer_retain(b)};
  atomic_store(&c->count, c->n);
  pthread_mutex_unlock(&c->lock);
  return NULL;
}

tpuc_status *tpuc_checks_report(tpuc_runtime *rt) {
  check_state *c = rt->checks;
  if (!c || (atomic_load(&c->count) == 0 && !atomic_load(&c->has_failure))) return NULL;
  pthread_mutex_lock(&c->lock);
  drain_locked(c, c->n, true);
  tpuc_status *st = c->failure;
  c->failure = NULL;
  atomic_store(&c->has_failure, false);
  pthread_mutex_unlock(&c->lock);
  return st;
}

tpuc_status *tpuc_checks_init(tpuc_runtime *rt) {
  check_state *c = calloc(1, sizeof *c);
  if (!c) return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  pthread_mutex_init(&c->lock, NULL);
  atomic_init(&c->count, 0);
  atomic_init(&c->has_failure, false);
  rt->checks = c;
  const char *v = getenv("TPUC_CHECK_BOUNDS");
  atomic_init(&rt->check_bounds, v && *v && strcmp(v, "0") != 0);
  return NULL;
}

void tpuc_checks_destroy(tpuc_runtime *rt) {
  check_state *c = rt->checks;
  if (!c) return;
  for (int i = 0; i < c->n; i++) {
    tpuc_buffer_release(c->v[i].b);
    check_set_release(c->v[i].cs);
  }
  free(c->v);
  tpuc_status_destroy(c->failure);
  pthread_mutex_destroy(&c->lock);
  free(c);
  rt->checks = NULL;
}
