/* replay.c — a recorded program launched again without recording its ops.
 *
 * tpuc_flush_capture runs a device's pending ops as one program (exactly as
 * tpuc_flush does) and keeps what launching that program again needs: the
 * executable, each parameter's source (a storage slot, a scalar argument, a
 * generator state), the type each storage parameter had, and the slot each
 * result binds to. tpuc_replay_launch then takes one storage per slot (the
 * caller maps its new arguments onto the captured slots), checks that every
 * storage the program reads still has a buffer of the captured type, and
 * runs the executable with those buffers: no op is recorded, no signature is
 * built, nothing is compiled. Scalars are the captured values (device
 * buffers made once); generator states are the caller's. The program's
 * run-time checks (torch._assert_async) are kept and read at the next
 * synchronisation point, as after any launch. Donation follows
 * the same rule as plan_launch: an aliased parameter is donated when its
 * storage (rebound to the result) and this launch are the buffer's only
 * holders. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

typedef struct {
  int slot;     /* >= 0: the slot's buffer (unless the slot is a constant) */
  int rng;      /* >= 0: generator state number `rng` */
  tpuc_buffer *value; /* else: a scalar, made at capture */
  tpuc_dtype dtype;   /* a slot parameter: the buffer type it was compiled for */
  int ndim;
  int64_t dims[TPUC_MAX_DIMS];
} replay_param;

struct tpuc_replay {
  tpuc_runtime *rt;
  int device;
  tpuc_executable *exe;
  int nslots;
  tpuc_storage **slot_storage; /* at capture (identity only, never dereferenced later) */
  size_t *slot_nbytes;
  bool *slot_read;   /* the program reads the slot's initial value */
  bool *slot_param;  /* ... from its buffer (a parameter) */
  bool *slot_result; /* the program binds a new buffer to it */
  tpuc_buffer **slot_const; /* read from a storage freed by the end of the recording: the
                             * buffer it held (an uploaded CPU scalar, a constant) */
  tpuc_storage **slot_hold; /* a constant still alive: replay checks it holds that buffer */
  int nparams;
  replay_param *params;
  bool *aliased;
  int nresults;
  int *result_slot;
  check_set *checks; /* the program's run-time checks (its last result), or NULL */
  int nrng;
  uint64_t *rng; /* captured (seed, offset) pairs */
};

static tpuc_status *oom(void) { return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory"); }

void tpuc_replay_destroy(tpuc_replay *r) {
  if (!r) return;
  for (int i = 0; r->params && i < r->nparams; i++) tpuc_buffer_release(r->params[i].value);
  tpuc_executable_release(r->exe);
  free(r->slot_storage);
  free(r->slot_nbytes);
  free(r->slot_read);
  free(r->slot_param);
  free(r->slot_result);
  for (int i = 0; r->slot_const && i < r->nslots; i++) tpuc_buffer_release(r->slot_const[i]);
  free(r->slot_const);
  for (int i = 0; r->slot_hold && i < r->nslots; i++) tpuc_storage_release(r->slot_hold[i]);
  free(r->slot_hold);
  free(r->params);
  free(r->aliased);
  free(r->result_slot);
  check_set_release(r->checks);
  free(r->rng);
  free(r);
}

tpuc_status *replay_from_plan(tpuc_runtime *rt, int device, const fast_entry *e,
                              const slot_set *s, const bool *read, const bool *live,
                              const tpuc_op_call *const *calls, tpuc_replay **out) {
  *out = NULL;
  if (!e->exe)
    return tpuc_status_make(TPUC_ERR_INTERNAL, "capturing a program that was not compiled");
  tpuc_replay *r = calloc(1, sizeof *r);
  if (!r) return oom();
  r->rt = rt;
  r->device = device;
  r->exe = tpuc_executable_retain(e->exe);
  r->nslots = s->n;
  r->nparams = e->nparams;
  r->nresults = e->nresults;
  r->checks = check_set_retain(e->checks);
  size_t ns = (size_t)s->n + 1, np = (size_t)e->nparams + 1;
  r->slot_storage = malloc(ns * sizeof *r->slot_storage);
  r->slot_nbytes = malloc(ns * sizeof *r->slot_nbytes);
  r->slot_read = calloc(ns, sizeof *r->slot_read);
  r->slot_param = calloc(ns, sizeof *r->slot_param);
  r->slot_result = calloc(ns, sizeof *r->slot_result);
  r->slot_const = calloc(ns, sizeof *r->slot_const);
  r->slot_hold = calloc(ns, sizeof *r->slot_hold);
  r->params = calloc(np, sizeof *r->params);
  r->aliased = calloc(np, sizeof *r->aliased);
  r->result_slot = malloc(((size_t)e->nresults + 1) * sizeof *r->result_slot);
  r->rng = malloc(2 * np * sizeof *r->rng);
  if (!r->slot_storage || !r->slot_nbytes || !r->slot_read || !r->slot_param ||
      !r->slot_result || !r->slot_const || !r->slot_hold || !r->params || !r->aliased || !r->result_slot || !r->rng) {
    tpuc_replay_destroy(r);
    return oom();
  }
  for (int i = 0; i < s->n; i++) {
    r->slot_storage[i] = s->storage[i];
    r->slot_nbytes[i] = s->storage[i]->nbytes;
    r->slot_read[i] = read[i];
  }
  tpuc_status *st = NULL;
  for (int i = 0; i < e->nparams && !st; i++) {
    const param_src *p = &e->params[i];
    replay_param *q = &r->params[i];
    q->slot = q->rng = -1;
    r->aliased[i] = e->aliased && e->aliased[i];
    if (p->slot >= 0) {
      const tpuc_buffer *b = s->buffer[p->slot];
      q->slot = p->slot;
      q->dtype = b->dtype;
      q->ndim = b->ndim;
      memcpy(q->dims, b->dims, sizeof q->dims);
      r->slot_param[p->slot] = true;
      /* a storage read but no longer alive: its value was made outside the
       * recorded ops (the glue uploads a CPU scalar operand, a graph
       * constant) and nothing else can name it; replay reads the same buffer */
      if (!live[p->slot]) r->slot_const[p->slot] = tpuc_buffer_retain(s->buffer[p->slot]);
      continue;
    }
    const tpuc_arg *a = &calls[p->op]->args[p->arg];
    if (a->kind == TPUC_ARG_RNG) {
      q->rng = r->nrng;
      r->rng[2 * r->nrng] = a->rng.seed;
      r->rng[2 * r->nrng + 1] = a->rng.offset;
      r->nrng++;
    } else {
      st = plan_arg_buffer(rt, device, a, &q->value);
    }
  }
  for (int i = 0; i < e->nresults; i++) {
    r->result_slot[i] = e->result_slot[i];
    r->slot_result[e->result_slot[i]] = true;
  }
  if (st) {
    tpuc_replay_destroy(r);
    return st;
  }
  *out = r;
  return NULL;
}

int tpuc_replay_slot_count(const tpuc_replay *r) { return r->nslots; }

void tpuc_replay_slot_info(const tpuc_replay *r, int i, tpuc_replay_slot *out) {
  out->storage = r->slot_storage[i];
  out->nbytes = r->slot_nbytes[i];
  out->read = r->slot_read[i];
  out->param = r->slot_param[i];
  out->result = r->slot_result[i];
  out->constant = r->slot_const[i] != NULL;
}

tpuc_status *tpuc_replay_hold_constant(tpuc_replay *r, int slot) {
  if (slot < 0 || slot >= r->nslots || !r->slot_param[slot] || r->slot_result[slot])
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                            "slot %d is not a storage the program only reads", slot);
  if (r->slot_const[slot]) return NULL;
  tpuc_storage *s = r->slot_storage[slot];
  r->slot_const[slot] = tpuc_storage_peek_buffer(s);
  if (!r->slot_const[slot])
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "slot %d holds no buffer", slot);
  r->slot_hold[slot] = tpuc_storage_retain(s);
  return NULL;
}

int tpuc_replay_rng_count(const tpuc_replay *r) { return r->nrng; }

void tpuc_replay_rng(const tpuc_replay *r, int i, uint64_t *seed, uint64_t *offset) {
  *seed = r->rng[2 * i];
  *offset = r->rng[2 * i + 1];
}

static bool same_type(const replay_param *q, const tpuc_buffer *b) {
  if (b->dtype != q->dtype || b->ndim != q->ndim) return false;
  for (int d = 0; d < q->ndim; d++)
    if (b->dims[d] != q->dims[d]) return false;
  return true;
}

tpuc_status *tpuc_replay_launch(tpuc_replay *r, tpuc_storage *const *slots,
                                const uint64_t *rng, bool *mismatch) {
  *mismatch = false;
  int np = r->nparams, nr = r->nresults + (r->checks ? 1 : 0);
  if (nr == 0) nr = 1; /* the dummy result */
  tpuc_status *st = NULL;
  for (int i = 0; i < r->nslots; i++) {
    tpuc_storage *s = slots[i];
    if (r->slot_hold[i]) {
      /* a held constant: unchanged since the capture, or the ops record again */
      if (atomic_load(&r->slot_hold[i]->pending) &&
          (st = tpuc_fused_flush_for(r->slot_hold[i])))
        return st;
      tpuc_buffer *b = tpuc_storage_peek_buffer(r->slot_hold[i]);
      bool same = b == r->slot_const[i];
      tpuc_buffer_release(b);
      if (!same) {
        *mismatch = true;
        return NULL;
      }
    }
    if (r->slot_const[i]) continue;
    bool needed = r->slot_param[i] || r->slot_result[i];
    if (!s) {
      if (needed)
        return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                                "replaying a program: no storage for slot %d", i);
      continue;
    }
    if (s->nbytes != r->slot_nbytes[i] || s->device != r->device) {
      *mismatch = true;
      return NULL;
    }
    /* what it reads or writes must not be waiting in a chunk */
    if (atomic_load(&s->pending) && (st = tpuc_fused_flush_for(s))) return st;
  }
  tpuc_buffer **args = calloc((size_t)np + 1, sizeof *args);
  bool *donate = calloc((size_t)np + 1, sizeof *donate);
  bool *peeked = calloc((size_t)np + 1, sizeof *peeked);
  tpuc_buffer **outs = calloc((size_t)nr, sizeof *outs);
  tpuc_buffer **rngb = calloc((size_t)r->nrng + 1, sizeof *rngb);
  if (!args || !donate || !peeked || !outs || !rngb) {
    st = oom();
    goto done;
  }
  /* a slot read without a parameter held no buffer when captured (it read
   * as zeros): it must still hold none (NULL: a constant the caller cannot
   * name, zeros in the program itself) */
  for (int i = 0; i < r->nslots; i++)
    if (slots[i] && r->slot_read[i] && !r->slot_param[i]) {
      tpuc_buffer *b = tpuc_storage_peek_buffer(slots[i]);
      bool has = b != NULL;
      tpuc_buffer_release(b);
      if (has) {
        *mismatch = true;
        goto done;
      }
    }
  for (int i = 0; i < r->nrng && !st; i++) {
    int64_t two = 2;
    st = tpuc_buffer_from_host(r->rt, r->device, TPUC_U64, &two, 1, rng + 2 * i, &rngb[i]);
  }
  bool donating = atomic_load(&r->rt->donate);
  for (int i = 0; i < np && !st; i++) {
    const replay_param *q = &r->params[i];
    if (q->slot >= 0 && r->slot_const[q->slot]) {
      args[i] = r->slot_const[q->slot];
    } else if (q->slot >= 0) {
      args[i] = tpuc_storage_peek_buffer(slots[q->slot]);
      peeked[i] = true;
      if (!args[i] || !same_type(q, args[i])) {
        *mismatch = true;
        goto done;
      }
      donate[i] = donating && r->aliased[i] && atomic_load(&args[i]->refs) == 2;
    } else {
      args[i] = q->rng >= 0 ? rngb[q->rng] : q->value;
    }
  }
  if (st) goto done;
  st = tpuc_execute_donating(r->exe, r->device, args, donate, np, outs, false);
  /* its run-time checks (asserts): kept, read at the next synchronisation */
  if (!st && r->checks) st = tpuc_checks_after_launch(r->rt, r->checks, outs[r->nresults], false);
  if (!st)
    for (int i = 0; i < r->nresults; i++) {
      tpuc_status *bs = tpuc_storage_bind(slots[r->result_slot[i]], outs[i]);
      if (bs && !st) st = bs;
      else tpuc_status_destroy(bs);
    }
  for (int i = 0; i < nr; i++) tpuc_buffer_release(outs[i]);
done:
  for (int i = 0; args && peeked && i < np; i++)
    if (peeked[i]) tpuc_buffer_release(args[i]);
  for (int i = 0; rngb && i < r->nrng; i++) tpuc_buffer_release(rngb[i]);
  free(args);
  free(donate);
  free(peeked);
  free(outs);
  free(rngb);
  return st;
}
