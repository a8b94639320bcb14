/* ahead.c — strict mode's compile-ahead: an op whose program is not compiled
 * yet does not wait for its compile. Its program is handed to the compile
 * pool (runtime/compile_pool.c) and the op is queued; the ops after it are
 * queued too, each program formed and handed to the pool as it comes, until
 * the queue runs. So a first step's compiles run in parallel, on all cores,
 * while Python goes on recording, instead of one after another in front of
 * each op.
 *
 * The queue runs (in order, each op as strict mode runs it: the same
 * program, the same buffers) when anything reads or replaces a storage a
 * queued op uses (the storage's pending count, as for fused chunks), at
 * tpuc_flush / tpuc_synchronize, before a fused or compiled-graph op is
 * recorded, when the pool has finished every compile handed to it (then
 * nothing is gained by waiting), and past AHEAD_CAP ops. Once the queue is
 * empty and the programs are compiled, ops run at once as before: the queue
 * only exists while compiles are outstanding.
 *
 * Forming an op's program needs the types of the buffers its storages will
 * hold when it runs. A queued op that writes a storage leaves there a
 * shape-only buffer of the type it will bind (tpuc_storage.ahead); forming
 * the next ops' programs reads those instead of the storage's current buffer
 * (slot_set.predict). When the queue runs, every op forms its program again
 * from the real buffers and runs what that gives: a prediction can only
 * waste a compile, never change a result. TPUC_COMPILE_AHEAD: on by default
 * but on the XLA CPU plugin (runtime/compile_pool.c; what it changes beside
 * timing is in docs/execution.md); debug mode, run-time checks and ops that
 * wait never queue. */
#include <stdlib.h>

#include "fused.h"

#define AHEAD_CAP 4096

typedef struct tpuc_ahead {
  pthread_mutex_t lock;
  rec *recs;
  int n, cap;
  atomic_int size; /* n, readable without the lock (the strict path's check) */
} ahead_queue;

static tpuc_status *ensure(tpuc_runtime *rt) {
  pthread_mutex_lock(&rt->fast_lock);
  if (!rt->ahead) {
    ahead_queue *q = calloc((size_t)rt->device_count, sizeof *q);
    if (q)
      for (int d = 0; d < rt->device_count; d++) pthread_mutex_init(&q[d].lock, NULL);
    rt->ahead = q;
  }
  pthread_mutex_unlock(&rt->fast_lock);
  return rt->ahead ? NULL : tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
}

bool tpuc_ahead_queued(tpuc_runtime *rt, int device) {
  return rt->ahead && atomic_load_explicit(&rt->ahead[device].size, memory_order_acquire) > 0;
}

void ahead_forget(const rec *r) {
  for (int t = 0; t < r->call.ntensors + r->call.noutputs; t++) {
    tpuc_storage *st = r->tensors[t].storage;
    if (st && st->ahead) {
      tpuc_buffer_release(st->ahead);
      st->ahead = NULL;
    }
  }
}

/* Runs the queue of one device (the caller holds its lock). After a failed
 * op the rest are dropped: they may read what it did not write. */
static tpuc_status *drain_locked(tpuc_runtime *rt, int device, ahead_queue *q) {
  tpuc_status *first = NULL;
  for (int i = 0; i < q->n; i++) {
    rec *r = &q->recs[i];
    if (!first && !tpuc_fill_on_host(rt, &r->call, &first)) { /* a fill uploads; others run */
      slot_set s;
      slots_init(&s);
      fast_entry *e = NULL, *owned = NULL;
      const tpuc_op_call *c = &r->call;
      first = plan_single(rt, c, &s, PLAN_RUN_QUEUED, false, &e, &owned, NULL);
      if (!first && e->declined) /* formed differently now than when it was queued */
        first = tpuc_status_make(TPUC_ERR_INTERNAL, "%s, recorded ahead of its compile, "
                                 "cannot run: %s", tpuc_op_name_of(c->op), e->declined);
      else if (!first) first = plan_launch(rt, device, e, &s, &c, false);
      entry_free(owned);
      slots_release(&s);
    }
    ahead_forget(r);
    rec_free(r);
  }
  q->n = 0;
  atomic_store(&q->size, 0);
  return first;
}

tpuc_status *tpuc_ahead_drain(tpuc_runtime *rt, int device) {
  if (!rt->ahead) return NULL;
  tpuc_status *first = NULL;
  for (int d = 0; d < rt->device_count; d++) {
    if (device >= 0 && d != device) continue;
    ahead_queue *q = &rt->ahead[d];
    pthread_mutex_lock(&q->lock);
    tpuc_status *st = q->n ? drain_locked(rt, d, q) : NULL;
    pthread_mutex_unlock(&q->lock);
    if (st && !first) first = st;
    else tpuc_status_destroy(st);
  }
  return first;
}

tpuc_status *tpuc_ahead_predict(tpuc_runtime *rt, const fast_entry *e, const slot_set *s,
                                int device) {
  for (int i = 0; i < e->nresults; i++) {
    const ir_type *t = &e->result_types[i];
    tpuc_buffer *b = NULL;
    tpuc_status *st = tpuc_buffer_shape_only(rt, device, t->dtype, t->ndim, t->dims, &b);
    if (st) return st;
    tpuc_storage *target = s->storage[e->result_slot[i]];
    tpuc_buffer_release(target->ahead);
    target->ahead = b;
  }
  return NULL;
}

tpuc_status *tpuc_ahead_record(tpuc_runtime *rt, const tpuc_op_call *c, bool *queued) {
  *queued = false;
  tpuc_status *st = ensure(rt);
  if (st) return st;
  /* a compiled graph's ops pending in fused recording (a graph joins the next
     one: docs/execution.md): c is not queued behind them but runs as strict
     mode runs it; what is queued (nothing, normally: recording a fused op
     runs the queue first) runs before */
  if (tpuc_pending_ops(rt, c->device) > 0) return tpuc_ahead_drain(rt, c->device);
  ahead_queue *q = &rt->ahead[c->device];
  pthread_mutex_lock(&q->lock);
  if (q->n >= AHEAD_CAP || (q->n > 0 && tpuc_compile_pool_busy(rt) == 0)) {
    st = drain_locked(rt, c->device, q); /* nothing left to overlap with */
    if (st) {
      pthread_mutex_unlock(&q->lock);
      return st;
    }
  }
  slot_set s;
  slots_init(&s);
  s.predict = true;
  fast_entry *e = NULL, *owned = NULL;
  bool fill = tpuc_fill_takes(rt, c); /* an upload when it runs (fill.c): no program */
  if (!fill) st = plan_single(rt, c, &s, PLAN_PREFETCH, false, &e, &owned, NULL);
  if (!st && !fill && e->declined) st = tpuc_status_make(TPUC_ERR_UNIMPLEMENTED, "%s", e->declined);
  if (!st && q->n == q->cap) {
    int cap = q->cap ? 2 * q->cap : 64;
    rec *nr = realloc(q->recs, (size_t)cap * sizeof *nr);
    if (!nr) st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    else {
      q->recs = nr;
      q->cap = cap;
    }
  }
  if (!st) st = fill ? tpuc_fill_predict(rt, c) : tpuc_ahead_predict(rt, e, &s, c->device);
  if (!st) st = rec_copy(&q->recs[q->n], c);
  if (!st) {
    q->n++;
    atomic_store(&q->size, q->n);
    *queued = true;
  }
  entry_free(owned);
  slots_release(&s);
  if (st && tpuc_status_code(st) != TPUC_ERR_UNIMPLEMENTED) {
    /* not queued: what is queued runs, and the error stands */
    tpuc_status_destroy(drain_locked(rt, c->device, q));
  }
  pthread_mutex_unlock(&q->lock);
  if (!st) {
    pthread_mutex_lock(&rt->fast_lock);
    rt->ahead_ops++;
    pthread_mutex_unlock(&rt->fast_lock);
  }
  return st;
}

void tpuc_ahead_destroy(tpuc_runtime *rt) {
  if (!rt->ahead) return;
  tpuc_status_destroy(tpuc_ahead_drain(rt, -1));
  for (int d = 0; d < rt->device_count; d++) {
    free(rt->ahead[d].recs);
    pthread_mutex_destroy(&rt->ahead[d].lock);
  }
  free(rt->ahead);
  rt->ahead = NULL;
}
