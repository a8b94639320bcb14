/* op_run.c — the entry point for one ATen op: in strict and debug mode it
 * runs at once as one program (plan.c); in fused mode it is recorded
 * (fused.c) after checking that its lowering accepts the call, so that an
 * op the core cannot run still falls back to the CPU at the op. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

bool host_first_poll(tpuc_runtime *rt, fast_entry *e) {
  tpuc_executable *x = NULL;
  bool pending = false;
  tpuc_status *st = tpuc_compile_op_at_hand(rt, e->pending, e->pending_len, e->pending_op, false,
                                            &x, &pending);
  tpuc_status_destroy(st); /* (only options too long: the compile now will say it) */
  if (!x && pending) return true;
  e->exe = x;
  free(e->pending);
  e->pending = NULL;
  return x != NULL;
}

/* Whether strict mode may answer a call TPUC_ERR_NOT_COMPILED: no generator
 * (a host run would draw other numbers than the program, and a result would
 * then depend on when a compile finished), and at most
 * TPUC_HOST_FIRST_MAX_MB of tensors (a big matmul is better waited for on
 * the device than run on the host). */
static bool host_first_fits(const tpuc_runtime *rt, const tpuc_op_call *c) {
  for (int i = 0; i < c->nargs; i++)
    if (c->args[i].kind == TPUC_ARG_RNG) return false;
  int64_t bytes = 0;
  for (int i = 0; i < c->ntensors + c->noutputs; i++) {
    const tpuc_tensor *t = i < c->ntensors ? &c->tensors[i] : &c->outputs[i - c->ntensors];
    if (t->storage) bytes += (int64_t)tpuc_storage_nbytes(t->storage);
  }
  return bytes <= rt->host_first_max_bytes;
}

/* Finds or makes the plan of a single call. With `compile`, the plan has an
 * executable; otherwise it may be only validated (fused mode). Returns the
 * lowering's refusal as TPUC_ERR_UNIMPLEMENTED. */
tpuc_status *plan_single(tpuc_runtime *rt, const tpuc_op_call *c, slot_set *s, int compile,
                         bool checks, fast_entry **out, fast_entry **owned, uint64_t *call_hash) {
  *out = *owned = NULL;
  const tpuc_op_call *given = c; /* (recompile reasons name the shapes the user gave) */
  canon_call cc;                  /* pointwise calls over merged dims (canon.c) */
  if (canon_call_make(rt, c, &cc)) c = &cc.call;
  /* small calls (nearly all) use the stack: no allocation on a cache hit */
  int tslot_small[32], oslot_small[16];
  bool read_small[SLOTS_INLINE + 1], seen_small[SLOTS_INLINE + 1], live_small[SLOTS_INLINE + 1];
  int *tslot = c->ntensors < 32 ? tslot_small : malloc((size_t)(c->ntensors + 1) * sizeof *tslot);
  int *oslot = c->noutputs < 16 ? oslot_small : malloc((size_t)(c->noutputs + 1) * sizeof *oslot);
  unsigned char stack[512];
  keybuf k = {stack, 0, sizeof stack, false, false};
  bool *read = NULL, *seen = NULL, *live = NULL;
  tpuc_status *st = NULL;
  if (!tslot || !oslot) {
    st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  key_put(&k, "S", 1);
  st = key_call(&k, c, s, tslot, oslot);
  if (st) goto done;
  if (call_hash) *call_hash = key_hash(&k); /* the call alone, not what its storages hold */
  key_put(&k, checks ? "C" : "-", 1);       /* programs with run-time checks differ */
  if (s->n <= SLOTS_INLINE) {
    read = read_small;
    seen = seen_small;
    live = live_small;
    memset(read, 0, sizeof read_small);
    memset(seen, 0, sizeof seen_small);
  } else {
    read = calloc((size_t)s->n + 1, sizeof *read);
    seen = calloc((size_t)s->n + 1, sizeof *seen);
    live = malloc((size_t)s->n + 1);
  }
  if (!read || !seen || !live) {
    st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  memset(live, 1, (size_t)s->n + 1);
  slots_read(c, tslot, oslot, read, seen);
  key_slots(&k, s, read, live);
  if (k.oom) {
    st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  uint64_t h = key_hash(&k);
  pthread_mutex_lock(&rt->fast_lock);
  bool counted = compile == PLAN_VALIDATE || compile == PLAN_COMPILE || compile == PLAN_HOST_FIRST;
  if (counted) rt->op_calls++; /* (the call's first plan_single) */
  fast_entry *e = cache_find(rt, h, &k);
  if (e && e->pending && !e->exe && compile == PLAN_HOST_FIRST && !host_first_poll(rt, e))
    compile = PLAN_COMPILE; /* its compile failed or was dropped: compile it now, say why */
  bool usable = e && (e->declined || e->exe || compile == PLAN_VALIDATE ||
                      (compile == PLAN_PREFETCH && e->prefetched) ||
                      (compile == PLAN_HOST_FIRST && e->pending));
  if (counted && usable) rt->fast_hits++;
  else if (counted) rt->fast_misses++;
  pthread_mutex_unlock(&rt->fast_lock);
  if (usable) {
    *out = e;
    goto done;
  }
  /* noted when first formed: queued ahead (then not again when it runs) or compiled */
  if (compile == PLAN_PREFETCH || (compile != PLAN_VALIDATE && !(e && e->prefetched)))
    tpuc_recompile_note(rt, given);
  /* build (and compile) a fresh entry, then publish it */
  fast_entry *ne = entry_new(&k, h);
  if (!ne) {
    st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  const tpuc_op_call *calls[1] = {c};
  int *ts[1] = {tslot}, *os[1] = {oslot};
  st = plan_build(rt, calls, ts, os, 1, s, read, live, compile, checks, ne,
                  tpuc_op_name_of(c->op));
  ne->prefetched = !st && (compile == PLAN_PREFETCH || ne->pending);
  if (st && tpuc_status_code(st) == TPUC_ERR_UNIMPLEMENTED) {
    ne->declined = strdup(tpuc_status_message(st)); /* later calls fall back at once */
  } else if (st) {
    entry_free(ne);
    goto done;
  }
  pthread_mutex_lock(&rt->fast_lock);
  fast_entry *old = cache_find(rt, h, &k);
  if (old && !old->exe && !old->declined && ne->exe) { /* upgrade a validated entry */
    old->exe = ne->exe;
    ne->exe = NULL;
    *owned = ne;
    e = old;
  } else if (old) {
    old->prefetched = old->prefetched || ne->prefetched;
    *owned = ne;
    e = old;
  } else {
    e = cache_insert(rt, ne);
    if (!e) {
      e = ne;
      *owned = ne;
    }
  }
  pthread_mutex_unlock(&rt->fast_lock);
  *out = e;
done:
  if (tslot != tslot_small) free(tslot);
  if (oslot != oslot_small) free(oslot);
  if (read != read_small) {
    free(read);
    free(seen);
    free(live);
  }
  key_free(&k);
  return st;
}

tpuc_status *plan_compile(tpuc_runtime *rt, fast_entry *e, char **text, size_t len, int compile,
                          bool per_op) {
  if (compile == PLAN_PREFETCH) { /* no exe yet */
    tpuc_compile_submit(rt, *text, len, per_op);
    return NULL;
  }
  if (compile != PLAN_HOST_FIRST)
    return per_op ? tpuc_compile_op(rt, *text, len, &e->exe) : tpuc_compile(rt, *text, len, &e->exe);
  bool pending = false;
  tpuc_status *st = tpuc_compile_op_at_hand(rt, *text, len, per_op, true, &e->exe, &pending);
  if (st || e->exe) return st;
  if (!pending) /* nothing will bring it: compile now */
    return per_op ? tpuc_compile_op(rt, *text, len, &e->exe) : tpuc_compile(rt, *text, len, &e->exe);
  e->pending = *text; /* kept until the pool has compiled it */
  e->pending_len = len;
  e->pending_op = per_op;
  *text = NULL;
  return NULL;
}

tpuc_status *tpuc_op_check(tpuc_runtime *rt, const tpuc_op_call *c, uint64_t *sig) {
  slot_set s;
  slots_init(&s);
  fast_entry *e = NULL, *owned = NULL;
  tpuc_status *st = plan_single(rt, c, &s, false, false, &e, &owned, sig);
  if (!st && e->declined) st = tpuc_status_make(TPUC_ERR_UNIMPLEMENTED, "%s", e->declined);
  entry_free(owned);
  slots_release(&s);
  return st;
}

tpuc_status *tpuc_op_run(tpuc_runtime *rt, const tpuc_op_call *c, bool wait) {
  if (!c || !c->op) return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "tpuc_op_run: no op");
  tpuc_status *bad_device = tpuc_device_check(rt, c->device);
  if (bad_device) return bad_device;
  /* (no output is allowed: torch._assert_async's effect is its run-time check) */
  if (c->noutputs < 0)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "%s: a negative output count",
                            tpuc_op_name_of(c->op));
  if (tpuc_fused_recording(rt)) {
    /* chunks record canonical pointwise calls too: with rank-1 buffers an
     * in-place update's chain then stays rank 1 up to its output (canon.c) */
    canon_call cc;
    if (canon_call_make(rt, c, &cc)) c = &cc.call;
    return tpuc_fused_record(rt, c);
  }
  wait = wait || tpuc_get_mode(rt) == TPUC_MODE_DEBUG;
  bool checks = tpuc_checks_wanted(rt, wait);
  /* host-first (docs/execution.md): an op whose program is compiling runs
   * elsewhere (the caller's CPU kernel) instead of waiting; it excludes
   * compile-ahead */
  bool host_first = rt->host_first && !wait && !checks && host_first_fits(rt, c);
  /* strict mode's compile-ahead (ahead.c): behind queued ops, c queues too */
  bool ahead = rt->compile_ahead && !rt->host_first && !wait && !checks;
  if (ahead && tpuc_ahead_queued(rt, c->device)) {
    bool queued = false;
    tpuc_status *as = tpuc_ahead_record(rt, c, &queued);
    if (as || queued) return as;
  }
  /* strict: what the op reads or writes must not be waiting in a chunk */
  for (int i = 0; i < c->ntensors + c->noutputs; i++) {
    tpuc_storage *s = i < c->ntensors ? c->tensors[i].storage : c->outputs[i - c->ntensors].storage;
    if (s && atomic_load(&s->pending)) {
      tpuc_status *fs = tpuc_fused_flush_for(s);
      if (fs) return fs;
    }
  }
  /* a constant fill of a whole storage: an upload, no program (fill.c) */
  tpuc_status *fill_st = NULL;
  if (!wait && !checks && tpuc_fill_on_host(rt, c, &fill_st))
    return fill_st;
  slot_set s;
  slots_init(&s);
  fast_entry *e = NULL, *owned = NULL;
  int mode = host_first ? PLAN_HOST_FIRST : ahead ? PLAN_VALIDATE : PLAN_COMPILE;
  tpuc_status *st = plan_single(rt, c, &s, mode, checks, &e, &owned, NULL);
  if (!st && host_first && !e->declined && !e->exe) { /* compiling: not here, not now */
    pthread_mutex_lock(&rt->fast_lock);
    rt->host_first_ops++;
    pthread_mutex_unlock(&rt->fast_lock);
    st = tpuc_status_make(TPUC_ERR_NOT_COMPILED, "%s: its program is compiling",
                          tpuc_op_name_of(c->op));
  } else if (!st && !e->declined && !e->exe) { /* not compiled yet: queue it, its compile ahead */
    entry_free(owned);
    slots_release(&s);
    bool queued = false;
    st = tpuc_ahead_record(rt, c, &queued);
    if (st || queued) return st;
    slots_init(&s); /* not queued (fused ops pending): compiled now */
    st = plan_single(rt, c, &s, PLAN_COMPILE, checks, &e, &owned, NULL);
  }
  if (!st) {
    if (e->declined) st = tpuc_status_make(TPUC_ERR_UNIMPLEMENTED, "%s", e->declined);
    else {
      const tpuc_op_call *calls[1] = {c};
      st = plan_launch(rt, c->device, e, &s, calls, wait);
    }
  }
  entry_free(owned);
  slots_release(&s);
  return st;
}

void tpuc_op_stats_get(tpuc_runtime *rt, tpuc_op_stats *out) {
  pthread_mutex_lock(&rt->fast_lock);
  out->op_calls = rt->op_calls;
  out->fast_hits = rt->fast_hits;
  out->fast_misses = rt->fast_misses;
  out->emitted_bytes = rt->emitted_bytes;
  out->recorded_ops = rt->recorded_ops;
  out->flushes = rt->flushes;
  out->chunk_hits = rt->chunk_hits;
  out->chunk_misses = rt->chunk_misses;
  out->ahead_ops = rt->ahead_ops;
  out->host_first_ops = rt->host_first_ops;
  out->hoisted_fills = rt->hoisted_fills;
  out->ahead_chunks = rt->ahead_chunks;
  pthread_mutex_unlock(&rt->fast_lock);
  out->recompiles = tpuc_recompile_count(rt);
}
