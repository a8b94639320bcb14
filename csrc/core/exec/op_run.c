/* op_run.c — running one ATen op on the device.
 *
 * A call is reduced to a signature: the op, every tensor's dtype, sizes,
 * strides and offset, which tensors share a storage, each storage's size and
 * the type of the buffer it holds, the static arguments' values and the kinds
 * of the runtime scalars. The signature maps to a plan (a loaded executable,
 * where each program parameter comes from, which storage each result is bound
 * to) in the signature cache: a repeated call builds no IR, emits no text and
 * compiles nothing. Scalars are program parameters, so a new value (a
 * learning rate) never recompiles.
 *
 * On a miss the program is built: one parameter per storage read, views read
 * out of them (view.c), the op's lowering, then each output written back —
 * a result that covers its whole storage becomes the storage's new buffer,
 * any other write updates the storage's buffer (view.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lower/lower.h"
#include "exec.h"
#include "view.h"

#define MAX_SLOTS 64

/* ---- signature ---- */
typedef struct {
  unsigned char *b;
  size_t len, cap;
  bool heap, oom;
} keybuf;

static void kput(keybuf *k, const void *p, size_t n) {
  if (k->oom) return;
  if (k->len + n > k->cap) {
    size_t cap = k->cap ? k->cap * 2 : 512;
    while (cap < k->len + n) cap *= 2;
    unsigned char *nb = k->heap ? realloc(k->b, cap) : malloc(cap);
    if (!nb) {
      k->oom = true;
      return;
    }
    if (!k->heap && k->len) memcpy(nb, k->b, k->len);
    k->b = nb;
    k->cap = cap;
    k->heap = true;
  }
  memcpy(k->b + k->len, p, n);
  k->len += n;
}

static void kput_i64(keybuf *k, int64_t v) { kput(k, &v, sizeof v); }

/* Storage slots: distinct storages in order of first appearance. */
typedef struct {
  tpuc_storage *storage[MAX_SLOTS];
  tpuc_buffer *buffer[MAX_SLOTS]; /* retained for the call */
  int n;
} slots;

static int slot_of(slots *s, tpuc_storage *st) {
  for (int i = 0; i < s->n; i++)
    if (s->storage[i] == st) return i;
  if (s->n == MAX_SLOTS) return -1;
  s->storage[s->n] = st;
  s->buffer[s->n] = tpuc_storage_get_buffer(st);
  return s->n++;
}

static void put_tensor(keybuf *k, const tpuc_tensor *t, int slot) {
  kput_i64(k, slot);
  kput_i64(k, t->dtype);
  kput_i64(k, t->ndim);
  kput(k, t->sizes, (size_t)t->ndim * sizeof(int64_t));
  kput(k, t->strides, (size_t)t->ndim * sizeof(int64_t));
  kput_i64(k, t->offset);
}

static tpuc_status *build_key(const tpuc_op_call *c, slots *s, int *tslot, int *oslot, keybuf *k) {
  kput(k, &c->op, sizeof c->op);
  kput_i64(k, c->ntensors);
  kput_i64(k, c->noutputs);
  for (int i = 0; i < c->ntensors + c->noutputs; i++) {
    const tpuc_tensor *t = i < c->ntensors ? &c->tensors[i] : &c->outputs[i - c->ntensors];
    if (!t->storage)
      return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "tensor %d has no storage", i);
    if (t->ndim < 0 || t->ndim > TPUC_MAX_DIMS || (unsigned)t->dtype >= TPUC_DTYPE_COUNT)
      return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "tensor %d: bad rank or dtype", i);
    int sl = slot_of(s, t->storage);
    if (sl < 0) return tpuc_status_make(TPUC_ERR_UNIMPLEMENTED, "more than %d storages", MAX_SLOTS);
    if (i < c->ntensors) tslot[i] = sl;
    else oslot[i - c->ntensors] = sl;
    put_tensor(k, t, sl);
  }
  /* A storage's current buffer matters only if the program reads it: an
   * input view of it, or an output that writes part of it. A storage that is
   * only overwritten whole (a functional result, out= into a whole tensor)
   * keys the same whatever it held before. */
  bool read[MAX_SLOTS] = {false};
  for (int i = 0; i < c->ntensors; i++) read[tslot[i]] |= tpuc_view_numel(&c->tensors[i]) > 0;
  for (int i = 0; i < c->noutputs; i++) {
    const tpuc_tensor *o = &c->outputs[i];
    read[oslot[i]] |= tpuc_view_numel(o) > 0 && !tpuc_view_covers_storage(o, o->storage->nbytes);
  }
  for (int i = 0; i < s->n; i++) {
    kput_i64(k, (int64_t)s->storage[i]->nbytes);
    kput_i64(k, s->storage[i]->device);
    tpuc_buffer *b = read[i] ? s->buffer[i] : NULL;
    kput_i64(k, b ? (int64_t)b->dtype : -1);
    if (b) {
      kput_i64(k, b->ndim);
      kput(k, b->dims, (size_t)b->ndim * sizeof(int64_t));
    }
  }
  for (int i = 0; i < c->nargs; i++) {
    const tpuc_arg *a = &c->args[i];
    kput_i64(k, a->kind);
    switch (a->kind) {
      case TPUC_ARG_INT:
      case TPUC_ARG_BOOL: kput_i64(k, a->i); break;
      case TPUC_ARG_INTS:
      case TPUC_ARG_BOOLS:
        kput_i64(k, a->ints.n);
        kput(k, a->ints.v, (size_t)a->ints.n * sizeof(int64_t));
        break;
      case TPUC_ARG_TENSOR:
      case TPUC_ARG_TENSORS:
        kput_i64(k, a->tensors.first);
        kput_i64(k, a->tensors.count);
        break;
      case TPUC_ARG_STRING: kput(k, a->s, strlen(a->s) + 1); break;
      case TPUC_ARG_SCALAR: kput_i64(k, a->scalar.kind); break;
      default: break;
    }
  }
  return k->oom ? tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory") : NULL;
}

/* ---- plans and the signature cache ---- */
typedef enum { SRC_SLOT, SRC_SCALAR, SRC_RNG } src_kind;
typedef struct {
  src_kind kind;
  int index; /* slot or argument index */
} param_src;

typedef struct tpuc_fast_entry {
  uint64_t hash;
  unsigned char *key;
  size_t key_len;
  tpuc_executable *exe; /* NULL: the lowering declined (unimplemented) */
  char *declined;       /* its message */
  int nparams;
  param_src *params;
  int nresults;
  int *result_slot; /* slot each program result is bound to */
  struct tpuc_fast_entry *next;
} fast_entry;

static void entry_free(fast_entry *e) {
  if (!e) return;
  tpuc_executable_release(e->exe);
  free(e->declined);
  free(e->params);
  free(e->result_slot);
  free(e->key);
  free(e);
}

void tpuc_fast_cache_clear(tpuc_runtime *rt) {
  pthread_mutex_lock(&rt->fast_lock);
  for (size_t i = 0; i < rt->fast_nbuckets; i++) {
    for (fast_entry *e = rt->fast_buckets[i], *next; e; e = next) {
      next = e->next;
      entry_free(e);
    }
    rt->fast_buckets[i] = NULL;
  }
  rt->fast_count = 0;
  pthread_mutex_unlock(&rt->fast_lock);
}

static fast_entry *fast_find(tpuc_runtime *rt, uint64_t h, const keybuf *k) {
  if (!rt->fast_nbuckets) return NULL;
  for (fast_entry *e = rt->fast_buckets[h % rt->fast_nbuckets]; e; e = e->next)
    if (e->hash == h && e->key_len == k->len && !memcmp(e->key, k->b, k->len)) return e;
  return NULL;
}

/* Inserts e (takes ownership) unless an equal entry raced in; returns the
 * entry to use. Called with fast_lock held. */
static fast_entry *fast_insert(tpuc_runtime *rt, fast_entry *e) {
  if (rt->fast_count >= rt->fast_nbuckets) {
    size_t n = rt->fast_nbuckets ? rt->fast_nbuckets * 2 : 256;
    fast_entry **nb = calloc(n, sizeof *nb);
    if (nb) {
      for (size_t i = 0; i < rt->fast_nbuckets; i++)
        for (fast_entry *x = rt->fast_buckets[i], *next; x; x = next) {
          next = x->next;
          x->next = nb[x->hash % n];
          nb[x->hash % n] = x;
        }
      free(rt->fast_buckets);
      rt->fast_buckets = nb;
      rt->fast_nbuckets = n;
    } else if (!rt->fast_nbuckets) {
      return e; /* not cached: the caller frees it after use */
    }
  }
  e->next = rt->fast_buckets[e->hash % rt->fast_nbuckets];
  rt->fast_buckets[e->hash % rt->fast_nbuckets] = e;
  rt->fast_count++;
  return e;
}

/* ---- building a program ---- */
static ir_type scalar_param_type(const tpuc_arg *a) {
  if (a->kind == TPUC_ARG_RNG) {
    int64_t two = 2;
    return ir_make_type(TPUC_U64, 1, &two);
  }
  switch (a->scalar.kind) {
    case TPUC_SCALAR_BOOL: return ir_make_type(TPUC_PRED, 0, NULL);
    case TPUC_SCALAR_INT: return ir_make_type(TPUC_S64, 0, NULL);
    case TPUC_SCALAR_COMPLEX: return ir_make_type(TPUC_C128, 0, NULL);
    default: return ir_make_type(TPUC_F64, 0, NULL);
  }
}

typedef struct {
  const tpuc_op_call *c;
  slots *s;
  const int *tslot, *oslot;
  ir_graph *g;
  tv slot_val[MAX_SLOTS];     /* current value of each storage's buffer */
  bool slot_read[MAX_SLOTS];  /* a parameter was made for it */
  bool slot_written[MAX_SLOTS];
  param_src params[MAX_SLOTS + 64];
  int nparams;
} builder;

/* The value of slot i's buffer, reading it (a parameter) on first use, or
 * zeros of `as` (a dtype) when the storage was never written. */
static tpuc_status *slot_value(builder *bd, int i, tpuc_dtype as, tv *out) {
  if (bd->slot_val[i] != IR_NONE) {
    *out = bd->slot_val[i];
    return NULL;
  }
  tpuc_buffer *b = bd->s->buffer[i];
  if (b) {
    if (bd->nparams == (int)(sizeof bd->params / sizeof bd->params[0]))
      return tpuc_status_make(TPUC_ERR_UNIMPLEMENTED, "too many program parameters");
    bd->slot_val[i] = ir_param(bd->g, ir_make_type(b->dtype, b->ndim, b->dims));
    bd->params[bd->nparams++] = (param_src){SRC_SLOT, i};
    bd->slot_read[i] = true;
  } else {
    size_t nbytes = bd->s->storage[i]->nbytes, es = tpuc_dtype_size(as);
    if (nbytes % es)
      return tpuc_status_make(TPUC_ERR_UNIMPLEMENTED,
                              "a storage of %zu bytes viewed as %s elements", nbytes,
                              tpuc_dtype_mlir_name(as));
    int64_t n = (int64_t)(nbytes / es);
    bd->slot_val[i] = ir_splat(bd->g, ir_make_type(as, 1, &n), 0);
  }
  *out = bd->slot_val[i];
  return NULL;
}

static tpuc_status *build(builder *bd, ir_type *out_types, tv *results) {
  const tpuc_op_call *c = bd->c;
  ir_graph *g = bd->g;
  tpuc_status *st = NULL;
  tv tensor_vals[256];
  tv scalar_vals[256];
  if (c->ntensors > 256 || c->nargs > 256)
    return tpuc_status_make(TPUC_ERR_UNIMPLEMENTED, "more than 256 tensors or arguments");
  for (int i = 0; i < c->ntensors && !st; i++) {
    const tpuc_tensor *t = &c->tensors[i];
    tv base;
    if (tpuc_view_numel(t) == 0) {
      tensor_vals[i] = ir_splat(g, ir_make_type(t->dtype, t->ndim, t->sizes), 0);
      continue;
    }
    st = slot_value(bd, bd->tslot[i], t->dtype, &base);
    if (!st) st = tpuc_view_read(g, base, t, &tensor_vals[i]);
  }
  for (int i = 0; i < c->nargs && !st; i++) {
    scalar_vals[i] = IR_NONE;
    const tpuc_arg *a = &c->args[i];
    if (a->kind == TPUC_ARG_SCALAR || a->kind == TPUC_ARG_RNG) {
      scalar_vals[i] = ir_param(g, scalar_param_type(a));
      bd->params[bd->nparams++] = (param_src){a->kind == TPUC_ARG_RNG ? SRC_RNG : SRC_SCALAR, i};
    }
  }
  if (st) return st;
  for (int i = 0; i < c->noutputs; i++) {
    const tpuc_tensor *o = &c->outputs[i];
    out_types[i] = ir_make_type(o->dtype, o->ndim, o->sizes);
    results[i] = IR_NONE;
  }
  tpuc_lower_ctx cx = {g, c, tensor_vals, scalar_vals, out_types, results, c->noutputs};
  st = tpuc_op_lowering(c->op)(&cx);
  if (st) return st;
  if (ir_error(g))
    return tpuc_status_make(TPUC_ERR_INTERNAL, "lowering %s: %s", tpuc_op_name_of(c->op),
                            ir_error(g));
  for (int i = 0; i < c->noutputs; i++) {
    const ir_type *rt = ir_typeof(g, results[i]);
    const ir_type *want = &out_types[i];
    bool ok = results[i] != IR_NONE && rt->dtype == want->dtype && rt->ndim == want->ndim;
    for (int d = 0; ok && d < rt->ndim; d++) ok = rt->dims[d] == want->dims[d];
    if (!ok)
      return tpuc_status_make(TPUC_ERR_INTERNAL,
                              "lowering %s: result %d does not have the output's type (%s, rank %d)",
                              tpuc_op_name_of(c->op), i, tpuc_dtype_mlir_name(want->dtype),
                              want->ndim);
  }
  /* write the outputs back into their storages */
  for (int i = 0; i < c->noutputs && !st; i++) {
    const tpuc_tensor *o = &c->outputs[i];
    int sl = bd->oslot[i];
    if (tpuc_view_covers_storage(o, bd->s->storage[sl]->nbytes)) {
      bd->slot_val[sl] = results[i];
    } else if (tpuc_view_numel(o) > 0) {
      tv base;
      st = slot_value(bd, sl, o->dtype, &base);
      if (!st) st = tpuc_view_write(g, base, o, results[i], &bd->slot_val[sl]);
    } else {
      continue;
    }
    bd->slot_written[sl] = true;
  }
  return st;
}

static tpuc_status *plan(tpuc_runtime *rt, const tpuc_op_call *c, slots *s, const int *tslot,
                         const int *oslot, fast_entry *e) {
  builder bd;
  memset(&bd, 0, sizeof bd);
  bd.c = c;
  bd.s = s;
  bd.tslot = tslot;
  bd.oslot = oslot;
  bd.g = ir_graph_create();
  if (!bd.g) return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  for (int i = 0; i < MAX_SLOTS; i++) bd.slot_val[i] = IR_NONE;
  ir_type out_types[64];
  tv results[64];
  tpuc_status *st = c->noutputs > 64
                        ? tpuc_status_make(TPUC_ERR_UNIMPLEMENTED, "more than 64 outputs")
                        : build(&bd, out_types, results);
  int nres = 0;
  int result_slot[MAX_SLOTS];
  for (int i = 0; !st && i < s->n; i++)
    if (bd.slot_written[i]) {
      ir_output(bd.g, bd.slot_val[i]);
      result_slot[nres++] = i;
    }
  char *text = NULL;
  size_t len = 0;
  if (!st && nres == 0) st = tpuc_status_make(TPUC_ERR_INTERNAL, "op writes nothing");
  if (!st) {
    text = ir_emit(bd.g, "tpuc_op", &len);
    if (!text)
      st = tpuc_status_make(TPUC_ERR_INTERNAL, "lowering %s: %s", tpuc_op_name_of(c->op),
                            ir_error(bd.g) ? ir_error(bd.g) : "emit failed");
  }
  if (!st) {
    const char *dump = getenv("TPUC_DUMP_DIR");
    if (dump && *dump) {
      char path[1024];
      snprintf(path, sizeof path, "%s/%s-%016llx.mlir", dump, tpuc_op_name_of(c->op),
               (unsigned long long)e->hash);
      for (char *p = path + strlen(dump) + 1; *p; p++)
        if (*p == ':') *p = '_';
      FILE *f = fopen(path, "w");
      if (f) {
        fwrite(text, 1, len, f);
        fclose(f);
      }
    }
    st = tpuc_compile(rt, text, len, &e->exe);
    if (st) st = tpuc_status_wrap(st, tpuc_op_name_of(c->op));
    pthread_mutex_lock(&rt->fast_lock);
    rt->emitted_bytes += (int64_t)len;
    pthread_mutex_unlock(&rt->fast_lock);
  }
  free(text);
  if (!st) {
    e->nparams = bd.nparams;
    e->params = malloc((size_t)(bd.nparams ? bd.nparams : 1) * sizeof *e->params);
    e->nresults = nres;
    e->result_slot = malloc((size_t)nres * sizeof *e->result_slot);
    if (!e->params || !e->result_slot)
      st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    else {
      memcpy(e->params, bd.params, (size_t)bd.nparams * sizeof *e->params);
      memcpy(e->result_slot, result_slot, (size_t)nres * sizeof *e->result_slot);
    }
  }
  ir_graph_destroy(bd.g);
  return st;
}

/* ---- running ---- */
static tpuc_status *scalar_buffer(tpuc_runtime *rt, int device, const tpuc_arg *a,
                                  tpuc_buffer **out) {
  if (a->kind == TPUC_ARG_RNG) {
    uint64_t st[2] = {a->rng.seed, a->rng.offset};
    int64_t two = 2;
    return tpuc_buffer_from_host(rt, device, TPUC_U64, &two, 1, st, out);
  }
  switch (a->scalar.kind) {
    case TPUC_SCALAR_BOOL: {
      unsigned char v = a->scalar.i != 0;
      return tpuc_buffer_from_host(rt, device, TPUC_PRED, NULL, 0, &v, out);
    }
    case TPUC_SCALAR_INT:
      return tpuc_buffer_from_host(rt, device, TPUC_S64, NULL, 0, &a->scalar.i, out);
    case TPUC_SCALAR_COMPLEX: {
      double v[2] = {a->scalar.re, a->scalar.im};
      return tpuc_buffer_from_host(rt, device, TPUC_C128, NULL, 0, v, out);
    }
    default:
      return tpuc_buffer_from_host(rt, device, TPUC_F64, NULL, 0, &a->scalar.re, out);
  }
}

static tpuc_status *launch(tpuc_runtime *rt, const tpuc_op_call *c, slots *s, const fast_entry *e,
                           bool wait) {
  tpuc_buffer *args[MAX_SLOTS + 64];
  tpuc_buffer *made[MAX_SLOTS + 64];
  int nmade = 0;
  tpuc_status *st = NULL;
  for (int i = 0; i < e->nparams && !st; i++) {
    const param_src *p = &e->params[i];
    if (p->kind == SRC_SLOT) {
      args[i] = s->buffer[p->index];
    } else {
      st = scalar_buffer(rt, c->device, &c->args[p->index], &args[i]);
      if (!st) made[nmade++] = args[i];
    }
  }
  tpuc_buffer *outs[MAX_SLOTS];
  if (!st) st = tpuc_execute(e->exe, c->device, args, e->nparams, outs, wait);
  for (int i = 0; i < nmade; i++) tpuc_buffer_release(made[i]);
  if (st) return st;
  for (int i = 0; i < e->nresults; i++) {
    tpuc_status *bs = tpuc_storage_set_buffer(s->storage[e->result_slot[i]], outs[i]);
    if (bs && !st) st = bs;
    else tpuc_status_destroy(bs);
    tpuc_buffer_release(outs[i]);
  }
  return st;
}

tpuc_status *tpuc_op_run(tpuc_runtime *rt, const tpuc_op_call *c, bool wait) {
  if (!c || !c->op) return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "tpuc_op_run: no op");
  if (c->device < 0 || c->device >= rt->device_count)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                            "device index %d is out of range: %d device(s) available", c->device,
                            rt->device_count);
  if (c->noutputs < 1)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "%s: the call has no output",
                            tpuc_op_name_of(c->op));
  if (c->ntensors > 256 || c->noutputs > 64)
    return tpuc_status_make(TPUC_ERR_UNIMPLEMENTED, "%s: too many tensors",
                            tpuc_op_name_of(c->op));
  slots s;
  s.n = 0;
  int tslot[256], oslot[64];
  unsigned char stack_key[512];
  keybuf k = {stack_key, 0, sizeof stack_key, false, false};
  fast_entry *owned = NULL;
  tpuc_status *st = NULL;
  st = build_key(c, &s, tslot, oslot, &k);
  for (int i = 0; !st && i < c->ntensors + c->noutputs; i++) {
    const tpuc_tensor *t = i < c->ntensors ? &c->tensors[i] : &c->outputs[i - c->ntensors];
    if (t->storage->device != c->device)
      st = tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                            "%s: a tensor is on tpu:%d but the op runs on tpu:%d",
                            tpuc_op_name_of(c->op), t->storage->device, c->device);
  }
  if (st) goto done;
  uint64_t h = tpuc_hash64(k.b, k.len, 0x7475706375ull);

  pthread_mutex_lock(&rt->fast_lock);
  rt->op_calls++;
  fast_entry *e = fast_find(rt, h, &k);
  if (e) rt->fast_hits++;
  else rt->fast_misses++;
  pthread_mutex_unlock(&rt->fast_lock);

  if (!e) {
    fast_entry *ne = calloc(1, sizeof *ne);
    if (!ne) {
      st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
      goto done;
    }
    ne->hash = h;
    ne->key = malloc(k.len);
    if (!ne->key) {
      free(ne);
      st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
      goto done;
    }
    memcpy(ne->key, k.b, k.len);
    ne->key_len = k.len;
    st = plan(rt, c, &s, tslot, oslot, ne);
    if (st && tpuc_status_code(st) == TPUC_ERR_UNIMPLEMENTED) {
      /* remember that this signature is declined: later calls fall back
       * without building anything */
      ne->declined = strdup(tpuc_status_message(st));
      tpuc_executable_release(ne->exe);
      ne->exe = NULL;
    } else if (st) {
      entry_free(ne);
      goto done;
    }
    pthread_mutex_lock(&rt->fast_lock);
    fast_entry *raced = fast_find(rt, h, &k);
    if (raced) {
      owned = ne;
      e = raced;
    } else {
      e = fast_insert(rt, ne);
      if (!rt->fast_nbuckets) owned = ne;
    }
    pthread_mutex_unlock(&rt->fast_lock);
    if (st) goto done;
  }
  if (!e->exe) {
    st = tpuc_status_make(TPUC_ERR_UNIMPLEMENTED, "%s", e->declined ? e->declined : "declined");
  } else {
    st = launch(rt, c, &s, e, wait);
  }
done:
  entry_free(owned);
  for (int i = 0; i < s.n; i++) tpuc_buffer_release(s.buffer[i]);
  if (k.heap) free(k.b);
  return st;
}

void tpuc_op_stats_get(tpuc_runtime *rt, tpuc_op_stats *out) {
  pthread_mutex_lock(&rt->fast_lock);
  out->op_calls = rt->op_calls;
  out->fast_hits = rt->fast_hits;
  out->fast_misses = rt->fast_misses;
  out->emitted_bytes = rt->emitted_bytes;
  pthread_mutex_unlock(&rt->fast_lock);
}
