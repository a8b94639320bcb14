/* fused_ahead.c — compile-ahead for fused chunks: a chunk cut at a loop
 * boundary (nothing has asked for its results yet) whose program is not
 * compiled does not wait for its compile. Its program goes to the compile
 * pool and the chunk to a queue; recording goes on, and the chunks cut after
 * it queue behind it (each program formed against the buffer types the
 * queued chunks will leave: tpuc_storage.ahead, slot_set.predict, as strict
 * mode's queue does in ahead.c). So a first step's chunks (a model's head, a
 * layer, the backward's layers, ...) compile side by side while Python
 * records, instead of one after another at each cut.
 *
 * The queue runs, in order, at every flush that is not such a cut (a read of
 * a storage a queued chunk uses: its records count as pending uses; a host
 * write, tpuc_flush / tpuc_synchronize, a mode switch), when the pool has
 * finished every compile (nothing left to overlap), and past QUEUE_CAP
 * chunks or QUEUE_OPS ops. Each queued chunk is then formed again from the
 * real buffers and runs exactly as a flush without the queue runs it (the
 * compile joins the pool's): a wrong prediction only wastes a compile.
 * While chunks are queued, no chunk is replayed (fused_replay.c: a template's
 * buffers would be read before the queued chunks wrote them) and no fill is
 * hoisted (fused_hoist.c). On with TPUC_COMPILE_AHEAD (default on for GPU and
 * TPU plugins, off on the XLA CPU plugin); debug mode and run-time checks
 * never queue. The caller holds pd->lock. */
#include <stdlib.h>

#include "fused.h"

#define QUEUE_CAP 64
#define QUEUE_OPS 16384

typedef struct queued_chunk {
  rec *recs;
  int n;
  bool *live; /* per slot, when it was cut */
  int nslots;
} queued_chunk;

bool fused_ahead_wanted(tpuc_runtime *rt, const pending *pd) {
  if (!rt->compile_ahead || rt->host_first) return false;
  if (pd->nqueued >= QUEUE_CAP || pd->queued_ops >= QUEUE_OPS) return false;
  /* nothing compiling: the queue would only delay the chunks */
  return pd->nqueued == 0 || tpuc_compile_pool_busy(rt) > 0;
}

tpuc_status *fused_ahead_push(tpuc_runtime *rt, int device, pending *pd, const fast_entry *e,
                              const slot_set *s, const bool *live, rec *recs, int n) {
  if (pd->nqueued == pd->qcap) {
    int cap = pd->qcap ? 2 * pd->qcap : 8;
    queued_chunk *nq = realloc(pd->queued, (size_t)cap * sizeof *nq);
    if (!nq) return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    pd->queued = nq;
    pd->qcap = cap;
  }
  rec *mine = malloc((size_t)n * sizeof *mine);
  bool *lv = malloc((size_t)s->n + 1);
  tpuc_status *st = !mine || !lv ? tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory")
                                 : tpuc_ahead_predict(rt, e, s, device);
  if (st) {
    free(mine);
    free(lv);
    return st;
  }
  memcpy(mine, recs, (size_t)n * sizeof *mine);
  memcpy(lv, live, (size_t)s->n);
  pd->queued[pd->nqueued++] = (queued_chunk){mine, n, lv, s->n};
  pd->queued_ops += n;
  pthread_mutex_lock(&rt->fast_lock);
  rt->ahead_chunks++;
  pthread_mutex_unlock(&rt->fast_lock);
  return NULL;
}

tpuc_status *fused_ahead_drain(tpuc_runtime *rt, int device, pending *pd) {
  tpuc_status *first = NULL;
  for (int i = 0; i < pd->nqueued; i++) {
    queued_chunk *q = &pd->queued[i];
    /* formed from the real buffers now */
    for (int j = 0; j < q->n; j++) ahead_forget(&q->recs[j]);
    if (!first) {
      first = fused_run_queued(rt, device, pd, q->recs, q->n, q->live, q->nslots);
    } else { /* dropped: they may read what the failed chunk did not write */
      for (int j = 0; j < q->n; j++) rec_free(&q->recs[j]);
    }
    free(q->recs);
    free(q->live);
  }
  pd->nqueued = 0;
  pd->queued_ops = 0;
  return first;
}

void fused_ahead_free(pending *pd) {
  free(pd->queued);
  pd->queued = NULL;
  pd->qcap = 0;
}
