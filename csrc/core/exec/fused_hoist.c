/* fused_hoist.c — a fused chunk's fills of new storages that outlive it run
 * before it, outside its program.
 *
 * An optimizer's first step makes its state (AdamW's two moments per
 * parameter: zeros_like, i.e. an empty storage and a zero_) inside the same
 * chunk as the forward, backward and update; from the second step on the
 * state is read from its storages. Recorded as they come, the first step's
 * chunk and the steady one are two programs, each the size of a whole step
 * (on a GPU plugin a compile of a minute each for a 100M model). With the
 * fills run first, the first step's chunk reads the zeroed storages as every
 * later step does, and both are one program.
 *
 * A recorded call is hoisted when it is a constant fill (zero_, fill_.Scalar)
 * of a whole storage that has no buffer yet (never written), that no earlier
 * call of the chunk touches, and that is still alive when the chunk runs
 * (a temporary such as a loss's gradient seed stays in the chunk, where XLA
 * folds the constant) and that no chunk queued ahead of its compile writes
 * (fused_ahead.c). It runs as strict mode runs it: an upload when
 * fill.c takes it (TPUC_HOST_FILL_MAX_KB), else its own small program. The
 * values are the fill's either way. TPUC_FUSED_HOIST_FILLS=0 turns it off.
 * The caller holds pd->lock. */
#include <pthread.h>
#include <stdlib.h>

#include "fused.h"

static bool g_on; /* read once: a switch for the process */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void read_switch(void) {
  const char *v = getenv("TPUC_FUSED_HOIST_FILLS");
  g_on = !(v && !strcmp(v, "0"));
}

static bool hoist_on(void) {
  pthread_once(&g_once, read_switch);
  return g_on;
}

/* Whether one of the calls kept so far (recs[0..kept), the chunk's calls
 * before this one but the fills already run, which only wrote their own
 * storages) uses storage st. */
static bool used_before(const pending *pd, int kept, const tpuc_storage *st) {
  for (int j = 0; j < kept; j++) {
    const tpuc_op_call *c = &pd->recs[j].call;
    for (int t = 0; t < c->ntensors; t++)
      if (c->tensors[t].storage == st) return true;
    for (int t = 0; t < c->noutputs; t++)
      if (c->outputs[t].storage == st) return true;
  }
  return false;
}

static bool hoistable(const pending *pd, int i, int kept) {
  const tpuc_op_call *c = &pd->recs[i].call;
  if (!tpuc_fill_whole(c)) return false;
  tpuc_storage *st = c->outputs[0].storage;
  if (!atomic_load(&st->alive) || st->ahead) return false; /* (ahead: a queued chunk writes it) */
  tpuc_buffer *b = tpuc_storage_peek_buffer(st);
  if (b) {
    tpuc_buffer_release(b);
    return false;
  }
  return !used_before(pd, kept, st);
}

tpuc_status *fused_hoist_fills(tpuc_runtime *rt, pending *pd) {
  if (!hoist_on() || pd->chunk_has_graph) return NULL;
  int kept = 0;
  tpuc_status *st = NULL;
  for (int i = 0; i < pd->n; i++) {
    if (!st && hoistable(pd, i, kept)) {
      st = tpuc_fill_run(rt, &pd->recs[i].call);
      if (!st) {
        rec_free(&pd->recs[i]);
        pthread_mutex_lock(&rt->fast_lock);
        rt->hoisted_fills++;
        pthread_mutex_unlock(&rt->fast_lock);
        continue;
      }
    }
    if (kept != i) pd->recs[kept] = pd->recs[i];
    kept++;
  }
  pd->n = kept;
  return st;
}
