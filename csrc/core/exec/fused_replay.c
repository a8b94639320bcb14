/* fused_replay.c — a fused chunk that repeats a chunk run before (a training
 * loop's step between two host reads, or a recognised period) is launched
 * from that chunk's cached executable without signing, checking and
 * re-keying each op again.
 *
 * The last few chunks flushed the ordinary way are kept as templates: their
 * whole signature with the end of each op's part, each op's own signature,
 * and each slot's size, device and initial buffer type. While ops come in,
 * each is signed once into the running chunk signature (with the chunk's
 * slots) and compared with the template's bytes at the same place; a slot
 * seen for the first time is compared with the template's slot. Equal bytes
 * mean the same op, geometry, static arguments and storage aliasing, so the
 * op's own check (tpuc_op_check) would give the template's answer and its
 * signature is the template's: the op is recorded as it is. When the chunk
 * is flushed with all of the template's ops and nothing else, the slots'
 * liveness and read buffers are appended and the cache entry is looked up
 * by that signature (exactly what the ordinary flush would compute) and
 * launched. Anything else — an op that differs, a chunk that is shorter or
 * longer, liveness that differs — falls back to the ordinary path (the ops
 * are recorded in full all along), counted with a reason. The cutting state
 * of fused.c is restored as the ordinary path would have left it, so the
 * chunks are cut at the same places either way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fused.h"

static void note(pending *pd, const char *msg) {
  char *r = pd->reasons[pd->reasons_noted % FUSED_REASONS];
  snprintf(r, FUSED_REASON_LEN, "%s", msg);
  pd->reasons_noted++;
  pd->fallbacks++;
}

static bool same_state(const cut_state *a, const pending *pd) {
  return a->anchored == pd->anchored && a->anchor == pd->anchor && a->period == pd->period;
}

/* A slot's guard: what the ordinary path's op check and signature read of it. */
static void slot_guard(keybuf *k, const tpuc_storage *st, const tpuc_buffer *b) {
  int64_t v[3] = {(int64_t)st->nbytes, st->device, b ? (int64_t)b->dtype : -1};
  key_put(k, v, sizeof v);
  if (b) {
    int64_t nd = b->ndim;
    key_put(k, &nd, sizeof nd);
    key_put(k, b->dims, (size_t)b->ndim * sizeof(int64_t));
  }
}

static bool slot_matches(const fused_tmpl *t, int i, const slot_set *s) {
  if (i >= t->nslots) return false;
  unsigned char stack[128];
  keybuf k = {stack, 0, sizeof stack, false, false};
  slot_guard(&k, s->storage[i], s->buffer[i]);
  size_t lo = i ? t->slot_end[i - 1] : 0;
  bool eq = !k.oom && k.len == t->slot_end[i] - lo && !memcmp(k.b, t->slot_key + lo, k.len);
  key_free(&k);
  return eq;
}

/* Signs c into the running chunk signature; true when it equals template
 * t's op at position pos, its new slots included. */
static bool op_matches(pending *pd, const fused_tmpl *t, int pos, const tpuc_op_call *c) {
  if (pos >= t->n || t->ops[pos] != c->op) return false;
  int tsmall[32], osmall[16];
  int *ts = c->ntensors < 32 ? tsmall : malloc((size_t)(c->ntensors + 1) * sizeof *ts);
  int *os = c->noutputs < 16 ? osmall : malloc((size_t)(c->noutputs + 1) * sizeof *os);
  bool ok = ts && os;
  size_t at = pd->mk.len;
  int slots_before = pd->ms.n;
  if (ok) {
    tpuc_status *st = key_call(&pd->mk, c, &pd->ms, ts, os);
    ok = !st && !pd->mk.oom;
    tpuc_status_destroy(st);
  }
  size_t lo = pos ? t->op_end[pos - 1] : 1;
  ok = ok && pd->mk.len - at == t->op_end[pos] - lo && !memcmp(pd->mk.b + at, t->key + lo, pd->mk.len - at);
  for (int i = slots_before; ok && i < pd->ms.n; i++) ok = slot_matches(t, i, &pd->ms);
  if (ts != tsmall) free(ts);
  if (os != osmall) free(os);
  return ok;
}

bool fused_replay_match(tpuc_runtime *rt, pending *pd, const tpuc_op_call *c, uint64_t *sig) {
  if (atomic_load(&rt->fused_replay_off) || tpuc_checks_wanted(rt, false)) return false;
  if (pd->n == 0) {
    fused_replay_reset(pd);
    pd->tried = true;
    int any = 0;
    for (int i = 0; i < FUSED_TMPLS; i++) {
      const fused_tmpl *t = &pd->tmpl[i];
      if (!t->valid || !same_state(&t->start, pd)) continue;
      any++;
      slots_release(&pd->ms);
      pd->mk.len = 0;
      key_put(&pd->mk, "F", 1);
      if (op_matches(pd, t, 0, c)) {
        pd->match = i;
        pd->matching = true;
        break;
      }
    }
    if (!pd->matching) {
      slots_release(&pd->ms);
      if (any) {
        char why[FUSED_REASON_LEN];
        snprintf(why, sizeof why, "fused chunk: recorded: its first op %s matches no recorded chunk",
                 tpuc_op_name_of(c->op));
        note(pd, why);
      }
      return false;
    }
  } else if (!pd->matching) {
    return false;
  } else {
    const fused_tmpl *t = &pd->tmpl[pd->match];
    if (pd->n >= t->n) {
      fused_replay_leave(pd, NULL); /* the chunk goes on: a cut may still end it here */
      return false;
    }
    if (!op_matches(pd, t, pd->n, c)) {
      char why[FUSED_REASON_LEN];
      snprintf(why, sizeof why, "fused chunk: recorded: op %d %s differs from the recorded chunk's %s",
               pd->n, tpuc_op_name_of(c->op), tpuc_op_name_of(t->ops[pd->n]));
      fused_replay_leave(pd, why);
      return false;
    }
  }
  if (pd->n == pd->tmpl[pd->match].n - 1) pd->complete = true;
  *sig = pd->tmpl[pd->match].sig[pd->n];
  pd->replayed_ops++;
  return true;
}

/* The cutting state after the first n ops of template t. */
static void state_after(pending *pd, const fused_tmpl *t, int n) {
  pd->anchored = t->start.anchored;
  pd->anchor = t->start.anchor;
  pd->period = t->start.period;
  if (t->reset_at >= 0 && t->reset_at < n) {
    pd->anchored = false;
    pd->period = 0;
    pd->chunk_reset_at = t->reset_at;
  }
}

void fused_replay_leave(pending *pd, const char *why) {
  if (!pd->matching) return;
  pd->matching = false;
  state_after(pd, &pd->tmpl[pd->match], pd->n);
  fused_seen_rebuild(pd);
  if (why) note(pd, why);
}

void fused_replay_reset(pending *pd) {
  pd->matching = false;
  pd->tried = false;
  pd->complete = false;
  pd->match = -1;
  slots_release(&pd->ms);
  pd->mk.len = 0;
}

tpuc_status *fused_replay_flush(tpuc_runtime *rt, int device, pending *pd, bool *done) {
  *done = false;
  if (pd->match < 0) return NULL;
  const fused_tmpl *t = &pd->tmpl[pd->match];
  bool was_matching = pd->matching;
  if (pd->matching) { /* the ordinary path's cutting state after these ops */
    state_after(pd, t, pd->n);
    pd->matching = false;
  }
  if (!pd->complete || pd->n != t->n) {
    char why[FUSED_REASON_LEN];
    if (pd->complete) /* matched to the end, then more ops came */
      snprintf(why, sizeof why, "fused chunk: recorded: %d ops, the recorded chunk had %d", pd->n,
               t->n);
    else
      snprintf(why, sizeof why, "fused chunk: recorded: flushed after %d of the recorded chunk's %d ops",
               pd->n, t->n);
    if (pd->complete || was_matching) note(pd, why);
    return NULL;
  }
  tpuc_status *st = NULL;
  bool *live = malloc((size_t)pd->ms.n + 1);
  const tpuc_op_call **calls = malloc((size_t)pd->n * sizeof *calls);
  if (!live || !calls) {
    free(live);
    free(calls);
    return NULL; /* the ordinary path reports it */
  }
  /* the buffers as the ordinary flush takes them: now, not when each op came
     (donation reads who else holds them), checked again against the template */
  bool same = true;
  for (int i = 0; i < pd->ms.n; i++) {
    tpuc_buffer_release(pd->ms.buffer[i]);
    pd->ms.buffer[i] = tpuc_storage_peek_buffer(pd->ms.storage[i]);
    same = same && slot_matches(t, i, &pd->ms);
    live[i] = atomic_load(&pd->ms.storage[i]->alive);
  }
  if (!same) {
    free(live);
    free(calls);
    note(pd, "fused chunk: recorded: a storage's buffer changed before the flush");
    return NULL;
  }
  for (int i = 0; i < pd->n; i++) calls[i] = &pd->recs[i].call;
  size_t calls_len = pd->mk.len;
  key_slots(&pd->mk, &pd->ms, t->read, live);
  fast_entry *e = NULL;
  if (!pd->mk.oom) {
    uint64_t h = key_hash(&pd->mk);
    pthread_mutex_lock(&rt->fast_lock);
    e = cache_find(rt, h, &pd->mk);
    if (e && e->exe) {
      rt->flushes++;
      rt->chunk_hits++;
    }
    pthread_mutex_unlock(&rt->fast_lock);
  }
  if (e && e->exe) {
    st = plan_launch(rt, device, e, &pd->ms, calls, false);
    *done = true;
    pd->replays++;
  } else {
    pd->mk.len = calls_len;
    char why[FUSED_REASON_LEN];
    snprintf(why, sizeof why,
             "fused chunk: recorded: its %d ops as recorded, but which of its %d storages are live differs",
             pd->n, pd->ms.n);
    note(pd, why);
  }
  free(live);
  free(calls);
  return st;
}

static void tmpl_free(fused_tmpl *t) {
  free(t->key);
  free(t->op_end);
  free(t->sig);
  free(t->ops);
  free(t->read);
  free(t->slot_key);
  free(t->slot_end);
  memset(t, 0, sizeof *t);
}

void fused_replay_keep(pending *pd, const keybuf *k, const size_t *op_end, const slot_set *s,
                       const bool *read) {
  fused_tmpl *t = &pd->tmpl[pd->tmpl_next];
  pd->tmpl_next = (pd->tmpl_next + 1) % FUSED_TMPLS;
  tmpl_free(t);
  int n = pd->n;
  t->key = malloc(k->len + 1);
  t->op_end = malloc((size_t)n * sizeof *t->op_end);
  t->sig = malloc((size_t)n * sizeof *t->sig);
  t->ops = malloc((size_t)n * sizeof *t->ops);
  t->read = malloc((size_t)s->n + 1);
  t->slot_end = malloc(((size_t)s->n + 1) * sizeof *t->slot_end);
  keybuf sk = {NULL, 0, 0, true, false};
  for (int i = 0; i < s->n && t->slot_end; i++) {
    slot_guard(&sk, s->storage[i], s->buffer[i]);
    t->slot_end[i] = sk.len;
  }
  if (!t->key || !t->op_end || !t->sig || !t->ops || !t->read || !t->slot_end || sk.oom) {
    key_free(&sk);
    tmpl_free(t); /* not kept: the next chunk is recorded */
    return;
  }
  memcpy(t->key, k->b, k->len);
  t->key_len = k->len;
  memcpy(t->op_end, op_end, (size_t)n * sizeof *op_end);
  for (int i = 0; i < n; i++) {
    t->sig[i] = pd->recs[i].sig;
    t->ops[i] = pd->recs[i].call.op;
  }
  memcpy(t->read, read, (size_t)s->n);
  t->slot_key = sk.b;
  t->nslots = s->n;
  t->n = n;
  t->start = pd->chunk_start;
  t->reset_at = pd->chunk_reset_at;
  t->valid = n > 0;
}

void fused_replay_destroy(pending *pd) {
  fused_replay_reset(pd);
  key_free(&pd->mk);
  for (int i = 0; i < FUSED_TMPLS; i++) tmpl_free(&pd->tmpl[i]);
}

void tpuc_set_fused_replay(tpuc_runtime *rt, bool on) { atomic_store(&rt->fused_replay_off, !on); }

void tpuc_fused_replay_stats(tpuc_runtime *rt, int64_t out[4]) {
  memset(out, 0, 4 * sizeof *out);
  if (!rt->pending) return;
  for (int d = 0; d < rt->device_count; d++) {
    pending *pd = &rt->pending[d];
    pthread_mutex_lock(&pd->lock);
    out[0] += pd->replays;
    out[1] += pd->replayed_ops;
    out[2] += pd->fallbacks;
    out[3] += pd->reasons_noted;
    pthread_mutex_unlock(&pd->lock);
  }
}

size_t tpuc_fused_replay_reasons(tpuc_runtime *rt, char *buf, size_t n) {
  size_t len = 0;
  if (buf && n) buf[0] = 0;
  if (!rt->pending) return 0;
  for (int d = 0; d < rt->device_count; d++) {
    pending *pd = &rt->pending[d];
    pthread_mutex_lock(&pd->lock);
    len = tpuc_reason_lines(&pd->reasons[0][0], FUSED_REASON_LEN, FUSED_REASONS, pd->reasons_noted,
                            buf, n, len);
    pthread_mutex_unlock(&pd->lock);
  }
  return len;
}
