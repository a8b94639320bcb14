/* plan.h — what strict and fused execution share (plan.c): the storages a
 * program touches, signatures, the signature cache, building a program out
 * of one or more op calls, and launching it. */
#ifndef TPUC_PLAN_H
#define TPUC_PLAN_H

#include <string.h>

#include "../lower/lower.h"
#include "checks.h"
#include "exec.h"
#include "view.h"

/* The storages a program touches, in order of first use, with the buffer
 * each held when the program was formed (one reference each). */
#define SLOTS_INLINE 16

typedef struct {
  tpuc_storage **storage;
  tpuc_buffer **buffer;
  int n, cap;
  /* the common case (a single op) needs no allocation */
  tpuc_storage *inline_storage[SLOTS_INLINE];
  tpuc_buffer *inline_buffer[SLOTS_INLINE];
  /* past SLOTS_INLINE slots: an open-addressing index storage -> slot + 1
   * (0: empty), so that a chunk of many ops finds its slots in O(1) instead
   * of searching every slot for every tensor (quadratic in the chunk) */
  int *index;
  int index_cap;
  /* forming the program of an op recorded ahead of its run (ahead.c): a
   * storage an earlier recorded op writes counts with its predicted buffer */
  bool predict;
} slot_set;

void slots_init(slot_set *s);
int slots_add(slot_set *s, tpuc_storage *st); /* index, or -1 when out of memory */
void slots_release(slot_set *s);

/* A growable byte string: the signature. */
typedef struct {
  unsigned char *b;
  size_t len, cap;
  bool heap, oom;
} keybuf;

/* Appends n bytes. A signature is ~50 puts per op: the common case (room
 * left) is inline, growing is key_grow_put's. */
void key_grow_put(keybuf *k, const void *p, size_t n);
static inline void key_put(keybuf *k, const void *p, size_t n) {
  if (k->len + n > k->cap) {
    key_grow_put(k, p, n);
    return;
  }
  memcpy(k->b + k->len, p, n);
  k->len += n;
}
void key_free(keybuf *k);
/* Appends a call: op, tensor geometry with slot numbers, static arguments,
 * scalar kinds. Fills tslot/oslot (slot of each tensor / output). */
tpuc_status *key_call(keybuf *k, const tpuc_op_call *c, slot_set *s, int *tslot, int *oslot);
/* Marks the slots whose initial buffer a sequence of calls reads: the first
 * access is an input view or a partial write (a full overwrite is not). */
void slots_read(const tpuc_op_call *c, const int *tslot, const int *oslot, bool *read,
                bool *seen);
/* Appends each slot's size, device, whether it is read (and then its buffer
 * type) and whether it is live (its results are kept). */
void key_slots(keybuf *k, const slot_set *s, const bool *read, const bool *live);

/* Where a program parameter comes from. */
typedef struct {
  int slot; /* >= 0: the slot's initial buffer */
  int op;   /* else: argument `arg` of call `op` (a scalar or a generator state) */
  int arg;
} param_src;

typedef struct tpuc_fast_entry {
  uint64_t hash;
  unsigned char *key;
  size_t key_len;
  tpuc_executable *exe; /* NULL: not compiled (declined, or only validated) */
  char *declined;       /* the lowering's refusal, or NULL */
  int nparams;
  param_src *params;
  int nresults;
  int *result_slot; /* slot each program result is bound to */
  ir_type *result_types; /* each result's type (the buffer its slot gets) */
  bool prefetched;       /* its program was handed to the compile pool (ahead.c) */
  char *pending;         /* host-first: its program's text while it compiles (op_run.c) */
  size_t pending_len;
  bool pending_op;       /* ... a per-op program's (else a chunk's) */
  bool *aliased;    /* per parameter: an output may reuse its buffer (donation) */
  check_set *checks; /* the run-time checks, returned as one more result; NULL: none */
  const char *name; /* static: the op's name or "fused chunk" (events) */
  /* per parameter: the device buffer of the scalar it was last launched
   * with (NULL: none kept, or the parameter is no scalar); plan.c */
  struct scalar_cache *_Atomic *scalars;
  struct tpuc_fast_entry *next;
} fast_entry;

fast_entry *entry_new(const keybuf *k, uint64_t hash);
void entry_free(fast_entry *e);
uint64_t key_hash(const keybuf *k);
/* Lookup and insert under rt->fast_lock (the caller holds it). Insert
 * returns the entry to use (an equal one may have raced in: then the caller
 * frees its own). */
fast_entry *cache_find(tpuc_runtime *rt, uint64_t h, const keybuf *k);
fast_entry *cache_insert(tpuc_runtime *rt, fast_entry *e);

/* plan_build's `compile`: validate only; compile now; or emit the program
 * and hand it to the compile pool (no executable in e: ahead.c). */
enum { PLAN_VALIDATE = 0, PLAN_COMPILE = 1, PLAN_PREFETCH = 2, PLAN_RUN_QUEUED = 3,
       PLAN_HOST_FIRST = 4 };
/* (PLAN_RUN_QUEUED: compile, for an op queued ahead that runs now; its call
 * was counted in the statistics when it was queued. PLAN_HOST_FIRST: the
 * executable if it is at hand, else the program goes to the compile pool
 * and e keeps its text in `pending`: op_run.c) */

/* plan_build's compile of `*text` into e as `compile` says (op_run.c); a
 * host-first program still compiling takes the text over (*text = NULL). */
tpuc_status *plan_compile(tpuc_runtime *rt, fast_entry *e, char **text, size_t len, int compile,
                          bool per_op);
/* Host-first: whether e's program (its `pending` text, in the compile pool)
 * is still to come; once compiled e gets its executable and drops the text.
 * False: no compile will bring it (failed, dropped): the caller compiles.
 * Under rt->fast_lock (the compile cache's lock nests inside it). */
bool host_first_poll(tpuc_runtime *rt, fast_entry *e);

/* Builds one program from calls[0..n-1] over slot set s and fills e's plan
 * (and, with `compile`, its executable). `live[i]` says whether slot i's
 * final value is a result. The lowerings' run-time checks become one more
 * result: torch._assert_async's always, index bounds checks only with
 * `checks`. A lowering's refusal is TPUC_ERR_UNIMPLEMENTED. */
tpuc_status *plan_build(tpuc_runtime *rt, const tpuc_op_call *const *calls,
                        int *const *tslots, int *const *oslots, int n, slot_set *s,
                        const bool *read, const bool *live, int compile, bool checks,
                        fast_entry *e, const char *name);

/* op_run.c: finds or makes the plan of one call over s (filled here):
 * validated only, compiled, or handed to the compile pool, as `compile` says
 * (an entry that has what is asked is used as it is). *owned: an entry to
 * free after use (one that lost a race). A lowering's refusal is in
 * (*out)->declined. */
tpuc_status *plan_single(tpuc_runtime *rt, const tpuc_op_call *c, slot_set *s, int compile,
                         bool checks, fast_entry **out, fast_entry **owned, uint64_t *call_hash);

/* canon.c: a pointwise call rewritten over merged dims (TPUC_CANONICAL), so
 * that calls computing the same elements share a signature and a program. */
#define CANON_MAX_TENSORS 6
#define CANON_MAX_OUTPUTS 3
typedef struct {
  tpuc_op_call call; /* refers to the arrays below */
  tpuc_tensor tensors[CANON_MAX_TENSORS];
  tpuc_tensor outputs[CANON_MAX_OUTPUTS];
} canon_call;
/* Fills cc and returns true when c has a canonical form other than itself. */
bool canon_call_make(const tpuc_runtime *rt, const tpuc_op_call *c, canon_call *cc);

/* Runs e with the slots' initial buffers and the calls' scalars, and binds
 * each result to its storage. With `wait`, a failed run-time check is
 * returned and nothing is bound; otherwise it is reported later. */
/* A launch argument's buffer from a scalar or generator-state argument (a 0-d
 * scalar of the argument's kind; a u64[2] (seed, offset) for TPUC_ARG_RNG). */
tpuc_status *plan_arg_buffer(tpuc_runtime *rt, int device, const tpuc_arg *a,
                             tpuc_buffer **out);

tpuc_status *plan_launch(tpuc_runtime *rt, int device, const fast_entry *e, const slot_set *s,
                         const tpuc_op_call *const *calls, bool wait);

/* ahead.c: leaves in each storage e writes (its results over slot set s) a
 * shape-only buffer of the type it will hold after e runs (tpuc_storage.ahead),
 * for the programs formed behind it (slot_set.predict). */
tpuc_status *tpuc_ahead_predict(tpuc_runtime *rt, const fast_entry *e, const slot_set *s,
                                int device);

/* replay.c: what launching e again over the same slots needs (before
 * plan_launch, while s holds the initial buffers). */
tpuc_status *replay_from_plan(tpuc_runtime *rt, int device, const fast_entry *e,
                              const slot_set *s, const bool *read, const bool *live,
                              const tpuc_op_call *const *calls, tpuc_replay **out);

#endif
