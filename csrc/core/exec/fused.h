/* fused.h — what fused.c (recording, cutting chunks), fused_replay.c (a
 * chunk that repeats the last chunks' ops, launched without signing its ops
 * again), fused_seen.c (the signatures' last positions) and fused_hoist.c
 * (fills run before their chunk) share: the per-device pending state. */
#ifndef TPUC_FUSED_H
#define TPUC_FUSED_H

#include "plan.h"

typedef struct {
  tpuc_op_call call; /* points into the arrays below */
  tpuc_arg *args;
  tpuc_tensor *tensors; /* inputs, then outputs */
  void *pool;           /* int lists and strings of the arguments */
  uint64_t sig;
} rec;

/* fused.c: a call copied with its arguments; the copy holds a reference to
 * each storage and counts as a pending use of it (tpuc_storage.pending), so
 * that reading the storage runs it first. rec_free lets go of both. */
tpuc_status *rec_copy(rec *r, const tpuc_op_call *c);
void rec_free(rec *r);

/* The chunk-cutting state that decides where a chunk ends (fused.c). */
typedef struct {
  bool anchored;
  uint64_t anchor;
  int period;
} cut_state;

/* A chunk recorded and launched the ordinary way, kept so that a later chunk
 * with the same ops can be matched against it (fused_replay.c). */
typedef struct {
  bool valid;
  unsigned char *key; /* the chunk's whole signature, as flush built it */
  size_t key_len;
  size_t *op_end;   /* key offset after each op's part */
  uint64_t *sig;    /* each op's own signature (tpuc_op_check) */
  const tpuc_op **ops;
  int n;
  bool *read;             /* per slot: the chunk reads its initial buffer */
  unsigned char *slot_key; /* per slot: size, device, initial buffer's type */
  size_t *slot_end;
  int nslots;
  cut_state start; /* the cutting state when its first op was recorded */
  int reset_at;    /* the op at which the loop was forgotten (-1: none) */
} fused_tmpl;

#define FUSED_TMPLS 4
#define FUSED_REASONS 16
#define FUSED_REASON_LEN 200

typedef struct tpuc_pending {
  pthread_mutex_t lock;
  rec *recs;
  int n, cap;
  /* open-addressing map: signature (0: empty) -> its last position */
  uint64_t *seen;
  int *seen_pos;
  int seen_cap, seen_n;
  int min_period; /* shortest loop recognised (TPUC_FUSED_MIN_PERIOD) */
  bool anchored;
  uint64_t anchor;
  int period; /* ops in the last chunk cut at the anchor; 0: not known */
  /* ---- replay (fused_replay.c) ---- */
  cut_state chunk_start; /* the state when the pending chunk's first op came */
  int chunk_reset_at;
  bool chunk_has_graph; /* a compiled graph's ops are pending: no template */
  fused_tmpl tmpl[FUSED_TMPLS];
  int tmpl_next;   /* the template replaced next */
  int match;       /* the template the pending ops match so far; -1: none */
  bool matching;   /* ops are still being matched (not recorded) */
  bool tried;      /* the pending chunk's first op was compared */
  bool complete;   /* all of the template's ops matched */
  slot_set ms;     /* the matched ops' slots */
  keybuf mk;       /* their signature so far */
  int64_t replays, replayed_ops, fallbacks, reasons_noted;
  char reasons[FUSED_REASONS][FUSED_REASON_LEN];
  /* ---- chunks cut while their programs compile (fused_ahead.c) ---- */
  struct queued_chunk *queued;
  int nqueued, qcap, queued_ops;
} pending;

/* fused_seen.c: the pending chunk's signature -> last position map */
/* Records that `sig` is at position `pos`; returns its previous position in
 * the chunk, or -1. */
int fused_seen_put(pending *pd, uint64_t sig, int pos);
void fused_seen_clear(pending *pd);
/* The map of the pending ops pd->recs[0..n-1], anew. */
void fused_seen_rebuild(pending *pd);
void fused_seen_free(pending *pd);

/* fused_replay.c (the caller holds pd->lock) */
/* Matches call c at position pd->n against the templates; true: it matched,
 * *sig is its signature and it needs no check (it is recorded as it is). */
bool fused_replay_match(tpuc_runtime *rt, pending *pd, const tpuc_op_call *c, uint64_t *sig);
/* Stops matching before an op that is not matched (it is checked and recorded
 * the ordinary way); restores the cutting state and the seen map. */
void fused_replay_leave(pending *pd, const char *why);
/* Launches the pending chunk from its template when it is one; *done: it
 * was launched (or failed: the status). */
tpuc_status *fused_replay_flush(tpuc_runtime *rt, int device, pending *pd, bool *done);
/* Keeps a chunk flushed the ordinary way as a template. */
void fused_replay_keep(pending *pd, const keybuf *k, const size_t *op_end, const slot_set *s,
                       const bool *read);
/* Ends the pending chunk's matching (its ops are being freed). */
void fused_replay_reset(pending *pd);
void fused_replay_destroy(pending *pd);

/* ahead.c: drops the predicted buffer types (tpuc_storage.ahead) of the
 * storages a record uses: it runs now, or what it predicted is known. */
void ahead_forget(const rec *r);

/* fused_ahead.c (the caller holds pd->lock): compile-ahead for chunks. */
/* Whether a chunk cut at a loop boundary may wait in the queue for its
 * program (TPUC_COMPILE_AHEAD; nothing is read yet). */
bool fused_ahead_wanted(tpuc_runtime *rt, const pending *pd);
/* Takes the chunk's n records over (the caller forgets them) and queues
 * them; e is its plan (compiled or in the compile pool), over slot set s
 * with the slots' liveness `live` (kept: its program's). */
tpuc_status *fused_ahead_push(tpuc_runtime *rt, int device, pending *pd, const fast_entry *e,
                              const slot_set *s, const bool *live, rec *recs, int n);
/* Runs the queued chunks in order (fused.c's fused_run_queued), each formed
 * again from the real buffers; after a failure the rest are dropped. */
tpuc_status *fused_ahead_drain(tpuc_runtime *rt, int device, pending *pd);
void fused_ahead_free(pending *pd);
/* fused.c: runs a queued chunk's records as a flush would, with the slots'
 * liveness of when it was cut, and frees them. */
tpuc_status *fused_run_queued(tpuc_runtime *rt, int device, pending *pd, rec *recs, int n,
                              const bool *live, int nslots);

/* fused_hoist.c: runs the pending chunk's fills of new storages that outlive
 * it first and takes them out of it (its top comment). */
tpuc_status *fused_hoist_fills(tpuc_runtime *rt, pending *pd);

#endif
