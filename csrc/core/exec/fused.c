/* fused.c — fused eager execution: ops are recorded per device and run as
 * one program per chunk (plan.c builds it exactly as it builds a single op,
 * with the storages' values threaded from op to op).
 *
 * A chunk runs when its results are needed (a storage it uses is read,
 * written from the host, resized: storage.c calls tpuc_fused_flush_for), on
 * tpuc_flush, when switching mode, at a size cap, and at loop boundaries:
 * the first op of a chunk is its anchor; when the anchor's signature recurs
 * the chunk so far is run, and afterwards chunks are cut where the anchor
 * recurs after as many ops as the previous chunk had. While no period is
 * known, a loop is recognised when the last P ops repeat the P ops before
 * them exactly (P = the distance to the current op's previous occurrence):
 * the chunk is cut there and the current op becomes the anchor with period
 * P. Code before a loop (a prologue) thus does not hide the loop, and ops
 * that merely recur (a layer's ops in the next layer) cut only when whole
 * periods repeat. A steady training
 * loop thus maps onto the same chunks, whose programs come from the
 * signature cache. Storages freed while ops on them are pending keep no
 * results: the program computes them only where other values need them. */
#include <stdlib.h>
#include <string.h>

#include "fused.h"

#define CHUNK_CAP 8192

static pending *pending_of(tpuc_runtime *rt, int device) {
  /* created with the runtime's first recording; devices never change */
  return &rt->pending[device];
}

static tpuc_status *ensure_pending(tpuc_runtime *rt) {
  if (rt->pending) return NULL;
  pthread_mutex_lock(&rt->fast_lock);
  if (!rt->pending) {
    pending *p = calloc((size_t)rt->device_count, sizeof *p);
    if (p) {
      const char *mp = getenv("TPUC_FUSED_MIN_PERIOD");
      /* loops shorter than this are not cut per iteration: a per-parameter
       * optimizer sequence or one layer would make many small chunks */
      int min_period = mp && atoi(mp) > 0 ? atoi(mp) : 16;
      for (int i = 0; i < rt->device_count; i++) {
        pthread_mutex_init(&p[i].lock, NULL);
        p[i].min_period = min_period;
        p[i].match = -1;
        slots_init(&p[i].ms);
        p[i].mk = (keybuf){NULL, 0, 0, true, false};
      }
      const char *fr = getenv("TPUC_FUSED_REPLAY");
      if (fr && !strcmp(fr, "0")) atomic_store(&rt->fused_replay_off, 1);
      rt->pending = p;
    }
  }
  pthread_mutex_unlock(&rt->fast_lock);
  return rt->pending ? NULL : tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
}

bool tpuc_fused_recording(tpuc_runtime *rt) {
  int m = atomic_load(&rt->mode);
  return m == TPUC_MODE_FUSED || m == TPUC_MODE_GRAPH;
}

tpuc_mode tpuc_get_mode(tpuc_runtime *rt) { return (tpuc_mode)atomic_load(&rt->mode); }

/* ---- records ---- */
void rec_free(rec *r) {
  for (int i = 0; i < r->call.ntensors + r->call.noutputs; i++) {
    tpuc_storage *s = r->tensors[i].storage;
    if (!s) continue;
    atomic_fetch_sub(&s->pending, 1);
    tpuc_storage_release(s);
  }
  free(r->args);
  free(r->tensors);
  free(r->pool);
}

tpuc_status *rec_copy(rec *r, const tpuc_op_call *c) {
  memset(r, 0, sizeof *r);
  size_t pool = 0;
  for (int i = 0; i < c->nargs; i++) {
    const tpuc_arg *a = &c->args[i];
    if (a->kind == TPUC_ARG_INTS || a->kind == TPUC_ARG_BOOLS)
      pool += (size_t)a->ints.n * sizeof(int64_t);
    if (a->kind == TPUC_ARG_STRING) pool += strlen(a->s) + 8;
  }
  int nt = c->ntensors + c->noutputs;
  r->args = malloc((size_t)(c->nargs + 1) * sizeof *r->args);
  r->tensors = malloc((size_t)(nt + 1) * sizeof *r->tensors);
  r->pool = malloc(pool + 8);
  if (!r->args || !r->tensors || !r->pool) {
    free(r->args);
    free(r->tensors);
    free(r->pool);
    return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  if (c->nargs) memcpy(r->args, c->args, (size_t)c->nargs * sizeof *r->args);
  char *p = r->pool;
  for (int i = 0; i < c->nargs; i++) {
    tpuc_arg *a = &r->args[i];
    if (a->kind == TPUC_ARG_INTS || a->kind == TPUC_ARG_BOOLS) {
      size_t n = (size_t)a->ints.n * sizeof(int64_t);
      if (n) memcpy(p, a->ints.v, n);
      a->ints.v = (const int64_t *)p;
      p += n;
    } else if (a->kind == TPUC_ARG_STRING) {
      size_t n = strlen(a->s) + 1;
      memcpy(p, a->s, n);
      a->s = p;
      p += (n + 7) & ~(size_t)7;
    }
  }
  if (c->ntensors) memcpy(r->tensors, c->tensors, (size_t)c->ntensors * sizeof *r->tensors);
  if (c->noutputs) memcpy(r->tensors + c->ntensors, c->outputs, (size_t)c->noutputs * sizeof *r->tensors);
  for (int i = 0; i < nt; i++) {
    if (!r->tensors[i].storage) continue;
    tpuc_storage_retain(r->tensors[i].storage);
    atomic_fetch_add(&r->tensors[i].storage->pending, 1);
  }
  r->call = *c;
  r->call.args = r->args;
  r->call.tensors = r->tensors;
  r->call.outputs = r->tensors + c->ntensors;
  return NULL;
}

/* ---- the chunk's signatures ---- */
/* True when the P ops before position n repeat the P ops before them. */
static bool whole_period_repeats(const pending *pd, int n, int p) {
  int period = n - p;
  if (period < pd->min_period || p < period) return false;
  for (int i = 0; i < period; i++)
    if (pd->recs[p - period + i].sig != pd->recs[p + i].sig) return false;
  return true;
}

/* ---- flushing ---- */
/* What a flush is: one that something waits for (a read, tpuc_flush), a cut
 * while recording (nothing waits: the chunk may queue, fused_ahead.c), or the
 * run of a queued chunk (its records are not pd's pending ones). */
enum { FLUSH_WAITED, FLUSH_CUT, FLUSH_QUEUED };

/* host_first: tpuc_flush_host_first's flush (the chunk may be dropped, see there) */
/* cut_live: a queued chunk's slots' liveness when it was cut (its program's) */
static tpuc_status *flush_chunk(tpuc_runtime *rt, int device, pending *pd, tpuc_replay **capture,
                                bool host_first, int kind, rec *recs, int n,
                                const bool *cut_live, int cut_slots) {
  if (n == 0) return NULL;
  bool queued_run = kind == FLUSH_QUEUED, moved = false;
  slot_set s;
  slots_init(&s);
  unsigned char stack[2048];
  keybuf k = {stack, 0, sizeof stack, false, false};
  const tpuc_op_call **calls = malloc((size_t)n * sizeof *calls);
  int **ts = calloc((size_t)n, sizeof *ts), **os = calloc((size_t)n, sizeof *os);
  bool *read = NULL, *seen = NULL, *live = NULL;
  fast_entry *owned = NULL;
  tpuc_status *st = NULL;
  size_t *op_end = NULL;
  /* chunks queued ahead of their compiles run first (fused_ahead.c), unless
     this one is cut while recording and may queue behind them */
  bool may_queue = kind == FLUSH_CUT && !capture && !host_first && fused_ahead_wanted(rt, pd);
  if (!queued_run && pd->nqueued && !may_queue) {
    st = fused_ahead_drain(rt, device, pd);
    if (st) goto done;
  }
  if (!capture && !queued_run) { /* a chunk that repeats a recorded one (fused_replay.c) */
    bool replayed = false;
    st = fused_replay_flush(rt, device, pd, &replayed);
    if (replayed) goto done;
  }
  if (!queued_run) fused_replay_reset(pd); /* its buffer references would stop donation below */
  /* an optimizer's first step: its new state is zeroed before the chunk,
     whose program then is the next steps' (fused_hoist.c) */
  if (!capture && !host_first && !queued_run) {
    st = fused_hoist_fills(rt, pd);
    n = pd->n;
    if (st || n == 0) goto done;
  }
  bool keep = !capture && !queued_run && !pd->chunk_has_graph &&
              !atomic_load(&rt->fused_replay_off);
  if (keep) op_end = malloc((size_t)n * sizeof *op_end);
  if (!calls || !ts || !os) {
    st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  /* in debug mode (a compiled graph run at once) the chunk waits and checks */
  bool wait = tpuc_get_mode(rt) == TPUC_MODE_DEBUG, checks = tpuc_checks_wanted(rt, wait);
  may_queue = may_queue && !wait && !checks;
  key_put(&k, checks ? "G" : "F", 1);
  s.predict = pd->nqueued > 0 && !queued_run; /* behind queued chunks: their results' types */
  for (int i = 0; i < n && !st; i++) {
    const tpuc_op_call *c = &recs[i].call;
    calls[i] = c;
    ts[i] = malloc((size_t)(c->ntensors + 1) * sizeof(int));
    os[i] = malloc((size_t)(c->noutputs + 1) * sizeof(int));
    if (!ts[i] || !os[i]) st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    else st = key_call(&k, c, &s, ts[i], os[i]);
    if (op_end) op_end[i] = k.len;
  }
  if (st) goto done;
  read = calloc((size_t)s.n + 1, sizeof *read);
  seen = calloc((size_t)s.n + 1, sizeof *seen);
  live = calloc((size_t)s.n + 1, sizeof *live);
  if (!read || !seen || !live) {
    st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  for (int i = 0; i < n; i++) slots_read(calls[i], ts[i], os[i], read, seen);
  for (int i = 0; i < s.n; i++) live[i] = atomic_load(&s.storage[i]->alive);
  /* a value freed since its chunk was queued is still computed (its program
     was formed with it; the result is dropped) */
  if (cut_live && cut_slots == s.n) memcpy(live, cut_live, (size_t)s.n * sizeof *live);
  key_slots(&k, &s, read, live);
  if (k.oom) {
    st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  uint64_t h = key_hash(&k);
  host_first = host_first && !wait && !checks && !capture;
  int64_t bytes = 0; /* as for a strict op: a big chunk is better waited for */
  for (int i = 0; host_first && i < s.n; i++) bytes += (int64_t)tpuc_storage_nbytes(s.storage[i]);
  host_first = host_first && bytes <= rt->host_first_max_bytes;
  pthread_mutex_lock(&rt->fast_lock);
  fast_entry *e = cache_find(rt, h, &k);
  if (!queued_run) { /* (a queued chunk was counted when it was cut) */
    rt->flushes++;
    if (e) rt->chunk_hits++;
    else rt->chunk_misses++;
  }
  /* host-first: a chunk whose program is still in the compile pool */
  bool coming = host_first && e && !e->exe && e->pending && host_first_poll(rt, e);
  pthread_mutex_unlock(&rt->fast_lock);
  /* queued: its program is in the compile pool already (an earlier chunk's) */
  bool in_pool = may_queue && e && !e->exe && e->prefetched;
  if (!coming && !in_pool && (!e || !e->exe)) { /* (an entry without one: host-first's, compile failed) */
    fast_entry *ne = entry_new(&k, h);
    if (!ne) {
      st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
      goto done;
    }
    int mode = may_queue ? PLAN_PREFETCH : host_first ? PLAN_HOST_FIRST : PLAN_COMPILE;
    st = plan_build(rt, calls, ts, os, n, &s, read, live, mode, checks, ne, "fused chunk");
    if (st) {
      entry_free(ne);
      goto done;
    }
    ne->prefetched = mode == PLAN_PREFETCH;
    pthread_mutex_lock(&rt->fast_lock);
    fast_entry *old = cache_find(rt, h, &k);
    if (old && !old->exe && ne->exe) { /* its program arrived (or was compiled now) */
      old->exe = ne->exe;
      ne->exe = NULL;
    } else if (old && !old->exe && ne->prefetched) { /* handed to the pool (again) */
      old->prefetched = true;
    } else if (old && !old->exe && !old->pending && ne->pending) { /* it is in the pool */
      old->pending = ne->pending;
      old->pending_len = ne->pending_len;
      old->pending_op = ne->pending_op;
      ne->pending = NULL;
    }
    e = old ? old : cache_insert(rt, ne);
    pthread_mutex_unlock(&rt->fast_lock);
    if (e != ne) owned = ne;
    if (!e) e = ne;
  }
  if (may_queue && (!e->exe || pd->nqueued)) { /* behind its compile: fused_ahead.c */
    st = fused_ahead_push(rt, device, pd, e, &s, live, recs, n);
    moved = !st;
    goto done;
  }
  if (!e->exe) { /* host-first: nothing runs; the recording is dropped below */
    pthread_mutex_lock(&rt->fast_lock);
    rt->host_first_ops++;
    pthread_mutex_unlock(&rt->fast_lock);
    st = tpuc_status_make(TPUC_ERR_NOT_COMPILED, "fused chunk: its program is compiling");
    goto done;
  }
  /* a graph with bounds checks (TPUC_CHECK_BOUNDS) is not captured for replay: it is
     recorded on every call instead, so that switching the checks off takes effect.
     Asserts (torch._assert_async) are the graph's own ops: replay keeps their checks */
  if (checks) capture = NULL; /* *capture stays NULL: the caller records again */
  if (capture) st = replay_from_plan(rt, device, e, &s, read, live, calls, capture);
  if (!st) st = plan_launch(rt, device, e, &s, calls, wait);
  if (!st && keep && op_end && !checks && !k.oom) fused_replay_keep(pd, &k, op_end, &s, read);
  if (st && capture) {
    tpuc_replay_destroy(*capture);
    *capture = NULL;
  }
done:
  for (int i = 0; i < n; i++) {
    if (ts) free(ts[i]);
    if (os) free(os[i]);
    if (!moved) rec_free(&recs[i]); /* (moved: the queue holds them) */
  }
  if (!queued_run) {
    pd->n = 0;
    pd->chunk_has_graph = false;
    fused_seen_clear(pd);
    fused_replay_reset(pd);
  }
  free(op_end);
  entry_free(owned);
  free(calls);
  free(ts);
  free(os);
  free(read);
  free(seen);
  free(live);
  key_free(&k);
  slots_release(&s);
  return st;
}

/* a cut while recording: the chunk may wait for its compile in the queue */
static tpuc_status *flush_cut(tpuc_runtime *rt, int device, pending *pd) {
  return flush_chunk(rt, device, pd, NULL, false, FLUSH_CUT, pd->recs, pd->n, NULL, 0);
}

tpuc_status *fused_run_queued(tpuc_runtime *rt, int device, pending *pd, rec *recs, int n,
                              const bool *live, int nslots) {
  return flush_chunk(rt, device, pd, NULL, false, FLUSH_QUEUED, recs, n, live, nslots);
}

tpuc_status *tpuc_flush_capture(tpuc_runtime *rt, int device, tpuc_replay **out) {
  *out = NULL;
  tpuc_status *bad_device = tpuc_device_check(rt, device);
  if (bad_device) return bad_device;
  tpuc_status *st = tpuc_ahead_drain(rt, device); /* what strict mode queued runs first */
  if (st || !rt->pending) return st;
  pending *pd = pending_of(rt, device);
  pthread_mutex_lock(&pd->lock);
  st = flush_chunk(rt, device, pd, out, false, FLUSH_WAITED, pd->recs, pd->n, NULL, 0);
  pd->anchored = false;
  pthread_mutex_unlock(&pd->lock);
  return st;
}

/* Flushes the pending ops of `device` (-1: every device) as chunks of `kind`
 * (host_first: tpuc_flush_host_first's), strict mode's queue first; returns
 * the first error. `past_drain_error`: flush even when that queue failed. */
static tpuc_status *flush_devices(tpuc_runtime *rt, int device, int kind, bool host_first,
                                  bool past_drain_error) {
  tpuc_status *first = tpuc_ahead_drain(rt, device); /* queued strict ops (ahead.c) first */
  if ((first && !past_drain_error) || !rt->pending) return first;
  for (int d = 0; d < rt->device_count; d++) {
    if (device >= 0 && d != device) continue;
    pending *pd = pending_of(rt, d);
    pthread_mutex_lock(&pd->lock);
    tpuc_status *st = flush_chunk(rt, d, pd, NULL, host_first, kind, pd->recs, pd->n, NULL, 0);
    pd->anchored = false; /* an explicit boundary: the next op anchors anew */
    pthread_mutex_unlock(&pd->lock);
    if (st && !first) first = st;
    else tpuc_status_destroy(st);
  }
  return first;
}

tpuc_status *tpuc_flush(tpuc_runtime *rt, int device) {
  return flush_devices(rt, device, FLUSH_WAITED, false, true);
}

tpuc_status *tpuc_flush_cut(tpuc_runtime *rt, int device) {
  return flush_devices(rt, device, FLUSH_CUT, false, false);
}

tpuc_status *tpuc_flush_host_first(tpuc_runtime *rt, int device) {
  if (!rt->host_first) return tpuc_flush(rt, device);
  return flush_devices(rt, device, FLUSH_WAITED, true, false);
}

int64_t tpuc_pending_ops(tpuc_runtime *rt, int device) {
  if (!rt->pending) return 0;
  int64_t n = 0;
  for (int d = 0; d < rt->device_count; d++) {
    if (device >= 0 && d != device) continue;
    pending *pd = pending_of(rt, d);
    pthread_mutex_lock(&pd->lock);
    n += pd->n + pd->queued_ops;
    pthread_mutex_unlock(&pd->lock);
  }
  return n;
}

/* Whether the pending (recording) chunk uses storage st. */
static bool pending_uses(const pending *pd, const tpuc_storage *st) {
  for (int i = 0; i < pd->n; i++) {
    const rec *r = &pd->recs[i];
    for (int t = 0; t < r->call.ntensors + r->call.noutputs; t++)
      if (r->tensors[t].storage == st) return true;
  }
  return false;
}

tpuc_status *tpuc_fused_flush_for(tpuc_storage *s) {
  tpuc_runtime *rt = s->rt;
  if (rt->pending) {
    /* only queued chunks use it: they run, the recording chunk stays pending
       (as without the queue, where its results would have been there). Strict
       mode's queue is empty while chunks are queued: recording drains it */
    pending *pd = pending_of(rt, s->device);
    pthread_mutex_lock(&pd->lock);
    bool queued_only = pd->nqueued && !pending_uses(pd, s);
    tpuc_status *st = queued_only ? fused_ahead_drain(rt, s->device, pd) : NULL;
    pthread_mutex_unlock(&pd->lock);
    if (queued_only) return st;
  }
  return tpuc_flush(rt, s->device);
}

tpuc_status *tpuc_set_mode(tpuc_runtime *rt, tpuc_mode mode) {
  if ((unsigned)mode > TPUC_MODE_GRAPH)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "unknown execution mode %d", (int)mode);
  int old = atomic_exchange(&rt->mode, (int)mode);
  /* Leaving fused eager mode runs what is pending. GRAPH (a compiled graph
   * being recorded) flushes neither on entry nor on exit: a graph joins what
   * is pending and stays pending after it, so that consecutive graphs (a
   * forward, its backward, an optimizer step) become one program. They run
   * when their results are read, when an eager op touches them, or at
   * tpuc_flush / tpuc_synchronize. */
  if (old == TPUC_MODE_FUSED && mode != TPUC_MODE_FUSED && mode != TPUC_MODE_GRAPH)
    return tpuc_flush(rt, -1);
  return NULL;
}

void tpuc_fused_destroy(tpuc_runtime *rt) {
  tpuc_ahead_destroy(rt); /* runs what is queued */
  if (!rt->pending) return;
  tpuc_status_destroy(tpuc_flush(rt, -1));
  for (int d = 0; d < rt->device_count; d++) {
    fused_replay_destroy(&rt->pending[d]);
    fused_ahead_free(&rt->pending[d]);
    free(rt->pending[d].recs);
    fused_seen_free(&rt->pending[d]);
    pthread_mutex_destroy(&rt->pending[d].lock);
  }
  free(rt->pending);
  rt->pending = NULL;
}

/* ---- recording ---- */
tpuc_status *tpuc_fused_record(tpuc_runtime *rt, const tpuc_op_call *c) {
  uint64_t sig = 0;
  /* strict ops queued ahead of their compiles run before anything is
     recorded: a chunk may be cut (and run) while recording */
  tpuc_status *st = tpuc_ahead_queued(rt, c->device) ? tpuc_ahead_drain(rt, c->device) : NULL;
  if (!st) st = ensure_pending(rt);
  if (st) return st;
  pending *pd = pending_of(rt, c->device);
  pthread_mutex_lock(&pd->lock);
  bool graph = atomic_load(&rt->mode) == TPUC_MODE_GRAPH;
  /* an op of a chunk that repeats a recorded one needs no check: it is that
     chunk's op (fused_replay.c) */
  if (!graph && pd->n > 0 && pd->matching && fused_replay_match(rt, pd, c, &sig)) goto append;
  if (graph) fused_replay_leave(pd, pd->matching ? "fused chunk: recorded: a compiled graph joined it" : NULL);
  st = tpuc_op_check(rt, c, &sig);
  if (st) { /* e.g. unimplemented: the caller falls back at the op */
    pthread_mutex_unlock(&pd->lock);
    return st;
  }
  int prev = graph ? -1 : fused_seen_put(pd, sig, pd->n);
  if (graph) {
    pd->anchored = false; /* only tpuc_flush cuts a graph */
  } else if (pd->n > 0 && pd->anchored && pd->period > 0 && sig == pd->anchor &&
             pd->n == pd->period) {
    st = flush_cut(rt, c->device, pd); /* the next iteration of a known loop */
  } else if (prev >= 0 && (pd->period == 0 || !pd->anchored) &&
             whole_period_repeats(pd, pd->n, prev)) {
    /* a loop recognised: two whole periods ended here */
    int period = pd->n - prev;
    st = flush_cut(rt, c->device, pd);
    pd->anchored = true;
    pd->anchor = sig;
    pd->period = period;
  } else if (pd->n >= CHUNK_CAP) {
    st = flush_cut(rt, c->device, pd);
    pd->anchored = false;
    pd->period = 0;
  } else if (pd->anchored && pd->period && pd->n > 2 * pd->period) {
    pd->period = 0; /* the loop changed: look for it again */
    pd->anchored = false;
    if (pd->chunk_reset_at < 0) pd->chunk_reset_at = pd->n;
  }
  if (st) {
    pthread_mutex_unlock(&pd->lock);
    return st;
  }
  if (pd->n == 0 && !graph) {
    fused_seen_put(pd, sig, 0);
    pd->chunk_start = (cut_state){pd->anchored, pd->anchor, pd->period};
    pd->chunk_reset_at = -1;
    uint64_t same = 0;
    /* starts matching a recorded chunk (not behind queued chunks: a template's
       buffers would be read before they wrote them) */
    if (!pd->nqueued) fused_replay_match(rt, pd, c, &same);
  }
append:
  if (pd->n == pd->cap) {
    int cap = pd->cap ? pd->cap * 2 : 256;
    rec *nr = realloc(pd->recs, (size_t)cap * sizeof *nr);
    if (!nr) {
      fused_replay_leave(pd, NULL);
      pthread_mutex_unlock(&pd->lock);
      return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    pd->recs = nr;
    pd->cap = cap;
  }
  st = rec_copy(&pd->recs[pd->n], c);
  if (!st) {
    pd->recs[pd->n].sig = sig;
    pd->n++;
    if (graph) pd->chunk_has_graph = true;
  } else {
    fused_replay_leave(pd, NULL);
  }
  pthread_mutex_unlock(&pd->lock);
  if (!st) {
    pthread_mutex_lock(&rt->fast_lock);
    rt->recorded_ops++;
    pthread_mutex_unlock(&rt->fast_lock);
  }
  return st;
}
