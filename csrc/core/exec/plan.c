/* plan.c — from op calls to a launched program, shared by strict execution
 * (one call per program) and fused execution (a recorded chunk of calls).
 *
 * A signature describes everything a program depends on: each call's op,
 * tensor geometry and dtypes, which tensors share a storage (slot numbers),
 * static arguments and the kinds of runtime scalars, and each storage's size
 * and, if the program reads it, the type of its buffer. The signature cache
 * maps a signature to a plan: the executable, where each parameter comes
 * from, and which storage each result binds to. On a miss the program is
 * built: one parameter per storage read, views read out of them (view.c),
 * each call's lowering, and each output written back — a result covering its
 * whole storage becomes the storage's value, any other write updates it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

/* ---- slots ---- */
void slots_init(slot_set *s) {
  s->storage = s->inline_storage;
  s->buffer = s->inline_buffer;
  s->n = 0;
  s->cap = SLOTS_INLINE;
  s->index = NULL;
  s->index_cap = 0;
  s->predict = false;
}

static size_t slot_hash(const tpuc_storage *st, int cap) {
  uint64_t h = (uint64_t)(uintptr_t)st * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 32) & (size_t)(cap - 1);
}

static void index_put(slot_set *s, int i) {
  size_t j = slot_hash(s->storage[i], s->index_cap);
  while (s->index[j]) j = (j + 1) & (size_t)(s->index_cap - 1);
  s->index[j] = i + 1;
}

/* Builds or doubles the index; false when out of memory. */
static bool index_grow(slot_set *s) {
  int cap = s->index_cap ? s->index_cap * 2 : 4 * SLOTS_INLINE;
  int *ni = calloc((size_t)cap, sizeof *ni);
  if (!ni) return false;
  free(s->index);
  s->index = ni;
  s->index_cap = cap;
  for (int i = 0; i < s->n; i++) index_put(s, i);
  return true;
}

int slots_add(slot_set *s, tpuc_storage *st) {
  if (s->index) {
    for (size_t j = slot_hash(st, s->index_cap); s->index[j];
         j = (j + 1) & (size_t)(s->index_cap - 1))
      if (s->storage[s->index[j] - 1] == st) return s->index[j] - 1;
  } else {
    for (int i = 0; i < s->n; i++)
      if (s->storage[i] == st) return i;
  }
  if (s->n == s->cap) {
    int cap = s->cap * 2;
    bool heap = s->storage != s->inline_storage;
    tpuc_storage **ns = heap ? realloc(s->storage, (size_t)cap * sizeof *ns)
                             : malloc((size_t)cap * sizeof *ns);
    if (!ns) return -1;
    if (!heap) memcpy(ns, s->inline_storage, sizeof s->inline_storage);
    s->storage = ns;
    tpuc_buffer **nb = heap ? realloc(s->buffer, (size_t)cap * sizeof *nb)
                            : malloc((size_t)cap * sizeof *nb);
    if (!nb) return -1;
    if (!heap) memcpy(nb, s->inline_buffer, sizeof s->inline_buffer);
    s->buffer = nb;
    s->cap = cap;
  }
  s->storage[s->n] = st;
  s->buffer[s->n] = s->predict && st->ahead ? tpuc_buffer_retain(st->ahead)
                                             : tpuc_storage_peek_buffer(st);
  int i = s->n++;
  if (s->n > SLOTS_INLINE && 2 * s->n > s->index_cap) {
    if (!index_grow(s)) return -1;
  } else if (s->index) {
    index_put(s, i);
  }
  return i;
}

void slots_release(slot_set *s) {
  for (int i = 0; i < s->n; i++) tpuc_buffer_release(s->buffer[i]);
  if (s->storage != s->inline_storage) free(s->storage);
  if (s->buffer != s->inline_buffer) free(s->buffer);
  free(s->index);
  slots_init(s);
}

/* ---- signatures ---- */
void key_grow_put(keybuf *k, const void *p, size_t n) {
  if (k->oom) return;
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
  memcpy(k->b + k->len, p, n);
  k->len += n;
}

void key_free(keybuf *k) {
  if (k->heap) free(k->b);
}

static void key_i64(keybuf *k, int64_t v) { key_put(k, &v, sizeof v); }

static void key_tensor(keybuf *k, const tpuc_tensor *t, int slot) {
  key_i64(k, slot);
  key_i64(k, t->dtype);
  key_i64(k, t->ndim);
  key_put(k, t->sizes, (size_t)t->ndim * sizeof(int64_t));
  key_put(k, t->strides, (size_t)t->ndim * sizeof(int64_t));
  key_i64(k, t->offset);
}

tpuc_status *key_call(keybuf *k, const tpuc_op_call *c, slot_set *s, int *tslot, int *oslot) {
  key_put(k, &c->op, sizeof c->op);
  key_i64(k, c->ntensors);
  key_i64(k, c->noutputs);
  for (int i = 0; i < c->ntensors + c->noutputs; i++) {
    const tpuc_tensor *t = i < c->ntensors ? &c->tensors[i] : &c->outputs[i - c->ntensors];
    if (!t->storage) { /* an absent tensor: None in Tensor?[], an output not asked for */
      if (i < c->ntensors) tslot[i] = -1;
      else oslot[i - c->ntensors] = -1;
      key_i64(k, -1);
      continue;
    }
    if (t->ndim < 0 || t->ndim > TPUC_MAX_DIMS || (unsigned)t->dtype >= TPUC_DTYPE_COUNT)
      return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "tensor %d: bad rank or dtype", i);
    if (t->storage->device != c->device)
      return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                              "%s: a tensor is on tpu:%d but the op runs on tpu:%d",
                              tpuc_op_name_of(c->op), t->storage->device, c->device);
    int sl = slots_add(s, t->storage);
    if (sl < 0) return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    if (i < c->ntensors) tslot[i] = sl;
    else oslot[i - c->ntensors] = sl;
    key_tensor(k, t, sl);
  }
  for (int i = 0; i < c->nargs; i++) {
    const tpuc_arg *a = &c->args[i];
    key_i64(k, a->kind);
    switch (a->kind) {
      case TPUC_ARG_INT:
      case TPUC_ARG_BOOL: key_i64(k, a->i); break;
      case TPUC_ARG_INTS:
      case TPUC_ARG_BOOLS:
        key_i64(k, a->ints.n);
        key_put(k, a->ints.v, (size_t)a->ints.n * sizeof(int64_t));
        break;
      case TPUC_ARG_TENSOR:
      case TPUC_ARG_TENSORS:
        key_i64(k, a->tensors.first);
        key_i64(k, a->tensors.count);
        break;
      case TPUC_ARG_STRING: key_put(k, a->s, strlen(a->s) + 1); break;
      case TPUC_ARG_SCALAR:
        key_i64(k, a->scalar.kind);
        if (tpuc_scalar_is_static(c, i)) key_put(k, &a->scalar.re, sizeof a->scalar.re);
        break;
      default: break;
    }
  }
  return k->oom ? tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory") : NULL;
}

void slots_read(const tpuc_op_call *c, const int *tslot, const int *oslot, bool *read,
                bool *seen) {
  for (int i = 0; i < c->ntensors; i++) {
    int sl = tslot[i];
    if (sl < 0) continue;
    if (!seen[sl] && tpuc_view_numel(&c->tensors[i]) > 0) {
      read[sl] = true;
      seen[sl] = true;
    }
  }
  for (int i = 0; i < c->noutputs; i++) {
    const tpuc_tensor *o = &c->outputs[i];
    int sl = oslot[i];
    if (sl < 0 || seen[sl] || tpuc_view_numel(o) == 0) continue;
    read[sl] = !tpuc_view_covers_storage(o, o->storage->nbytes);
    seen[sl] = true;
  }
}

void key_slots(keybuf *k, const slot_set *s, const bool *read, const bool *live) {
  for (int i = 0; i < s->n; i++) {
    key_i64(k, (int64_t)s->storage[i]->nbytes);
    key_i64(k, s->storage[i]->device);
    key_i64(k, live[i]);
    const tpuc_buffer *b = read[i] ? s->buffer[i] : NULL;
    key_i64(k, b ? (int64_t)b->dtype : -1);
    if (b) {
      key_i64(k, b->ndim);
      key_put(k, b->dims, (size_t)b->ndim * sizeof(int64_t));
    }
  }
}

/* The signature cache's hash, eight bytes at a time (a signature is a few
 * hundred bytes, hashed on every op: a byte-wise hash cost more than the
 * lookup). Four independent multiply-xorshift lanes, folded at the end; the
 * cache compares whole keys, so this only has to spread them. */
static inline uint64_t mix64(uint64_t h) {
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  return h;
}

uint64_t key_hash(const keybuf *k) {
  const unsigned char *p = k->b;
  size_t n = k->len;
  uint64_t l[4] = {0x7475706375ull, 0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full,
                   0x165667b19e3779f9ull};
  while (n >= 32) {
    for (int j = 0; j < 4; j++) {
      uint64_t w;
      memcpy(&w, p + 8 * j, 8);
      l[j] = (l[j] ^ w) * 0x9fb21c651e98df25ull;
      l[j] ^= l[j] >> 29;
    }
    p += 32;
    n -= 32;
  }
  uint64_t h = l[0] ^ mix64(l[1]) ^ mix64(mix64(l[2])) ^ (l[3] * 0xff51afd7ed558ccdull);
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = mix64((h ^ w) * 0x9fb21c651e98df25ull);
    p += 8;
    n -= 8;
  }
  uint64_t t = 0;
  memcpy(&t, p, n);
  return mix64((h ^ t ^ ((uint64_t)k->len << 56)) * 0x9fb21c651e98df25ull);
}

/* ---- the signature cache ---- */
fast_entry *entry_new(const keybuf *k, uint64_t hash) {
  fast_entry *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->key = malloc(k->len ? k->len : 1);
  if (!e->key) {
    free(e);
    return NULL;
  }
  memcpy(e->key, k->b, k->len);
  e->key_len = k->len;
  e->hash = hash;
  return e;
}

/* A scalar parameter's buffer kept for the next launch of the same plan: a
 * loop passes the same alpha, eps or learning rate every time, and
 * uploading it cost about as much as the rest of the launch. The buffer is
 * the runtime's (like the executable), so it is not counted as a tensor's
 * memory. */
struct scalar_cache {
  tpuc_arg arg;
  tpuc_buffer *buf;
};

static void scalar_cache_free(struct scalar_cache *c) {
  if (!c) return;
  tpuc_buffer_release(c->buf);
  free(c);
}

static bool same_scalar(const tpuc_arg *a, const tpuc_arg *b) {
  if (a->kind != b->kind || a->kind != TPUC_ARG_SCALAR || a->scalar.kind != b->scalar.kind)
    return false;
  switch (a->scalar.kind) {
    case TPUC_SCALAR_BOOL:
    case TPUC_SCALAR_INT: return a->scalar.i == b->scalar.i;
    case TPUC_SCALAR_COMPLEX:
      return !memcmp(&a->scalar.re, &b->scalar.re, sizeof a->scalar.re) &&
             !memcmp(&a->scalar.im, &b->scalar.im, sizeof a->scalar.im);
    default: return !memcmp(&a->scalar.re, &b->scalar.re, sizeof a->scalar.re); /* bits: -0.0, NaN */
  }
}

static void scalars_free(fast_entry *e) {
  for (int i = 0; e->scalars && i < e->nparams; i++)
    scalar_cache_free(atomic_exchange(&e->scalars[i], NULL));
  free((void *)e->scalars);
  e->scalars = NULL;
}

void entry_free(fast_entry *e) {
  if (!e) return;
  scalars_free(e);
  tpuc_executable_release(e->exe);
  free(e->declined);
  free(e->pending);
  free(e->params);
  free(e->result_slot);
  free(e->result_types);
  free(e->aliased);
  check_set_release(e->checks);
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

fast_entry *cache_find(tpuc_runtime *rt, uint64_t h, const keybuf *k) {
  if (!rt->fast_nbuckets) return NULL;
  for (fast_entry *e = rt->fast_buckets[h % rt->fast_nbuckets]; e; e = e->next)
    if (e->hash == h && e->key_len == k->len && !memcmp(e->key, k->b, k->len)) return e;
  return NULL;
}

fast_entry *cache_insert(tpuc_runtime *rt, fast_entry *e) {
  fast_entry *raced = NULL;
  keybuf k = {e->key, e->key_len, e->key_len, false, false};
  if ((raced = cache_find(rt, e->hash, &k))) return raced;
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
      return NULL; /* cannot cache: the caller uses and frees its entry */
    }
  }
  e->next = rt->fast_buckets[e->hash % rt->fast_nbuckets];
  rt->fast_buckets[e->hash % rt->fast_nbuckets] = e;
  rt->fast_count++;
  return e;
}

/* ---- building ---- */
static ir_type arg_param_type(const tpuc_arg *a) {
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
  ir_graph *g;
  const slot_set *s;
  const bool *read;
  tv *val;       /* current value of each slot */
  tv *param;     /* the parameter holding each slot's initial buffer, or IR_NONE */
  int *param_no; /* its parameter number */
  bool *written; /* the program changed the slot */
  param_src *params;
  int nparams, cap;
  tpuc_checks *checks; /* the run-time checks the lowerings add */
  bool slice_inplace;  /* rt->slice_inplace: read and write a region at one opaque start */
} builder;

static tpuc_status *add_param(builder *bd, param_src p, ir_type t, tv *out) {
  if (bd->nparams == bd->cap) {
    int cap = bd->cap ? bd->cap * 2 : 32;
    param_src *np = realloc(bd->params, (size_t)cap * sizeof *np);
    if (!np) return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    bd->params = np;
    bd->cap = cap;
  }
  bd->params[bd->nparams++] = p;
  *out = ir_param(bd->g, t);
  return NULL;
}

/* The current value of slot i: its initial buffer (a parameter) when the
 * program reads it, else zeros of `as` until the program writes it. */
static tpuc_status *slot_value(builder *bd, int i, tpuc_dtype as, tv *out) {
  if (bd->val[i] == IR_NONE) {
    const tpuc_buffer *b = bd->read[i] ? bd->s->buffer[i] : NULL;
    if (b) {
      tpuc_status *st = add_param(bd, (param_src){i, -1, -1},
                                  ir_make_type(b->dtype, b->ndim, b->dims), &bd->val[i]);
      if (st) return st;
      bd->param[i] = bd->val[i];
      bd->param_no[i] = bd->nparams - 1;
    } else {
      size_t nbytes = bd->s->storage[i]->nbytes, es = tpuc_dtype_size(as);
      if (nbytes % es)
        return tpuc_status_make(TPUC_ERR_UNIMPLEMENTED,
                                "a storage of %zu bytes viewed as %s elements", nbytes,
                                tpuc_dtype_mlir_name(as));
      int64_t n = (int64_t)(nbytes / es);
      bd->val[i] = ir_splat(bd->g, ir_make_type(as, 1, &n), 0);
    }
  }
  *out = bd->val[i];
  return NULL;
}

static tpuc_status *build_call(builder *bd, const tpuc_op_call *c, const int *tslot,
                               const int *oslot, int op_index) {
  ir_graph *g = bd->g;
  tpuc_status *st = NULL;
  int nt = c->ntensors, na = c->nargs, no = c->noutputs;
  tv *tvals = malloc((size_t)(nt + 1) * sizeof *tvals);
  tv *svals = malloc((size_t)(na + 1) * sizeof *svals);
  ir_type *otypes = malloc((size_t)(no + 1) * sizeof *otypes);
  tv *results = malloc((size_t)(no + 1) * sizeof *results);
  tv *t_at = malloc((size_t)(nt + 1) * sizeof *t_at); /* view.h: in-place view updates */
  tv *o_at = malloc((size_t)(no + 1) * sizeof *o_at);
  tv *t_at_reads = malloc((size_t)(nt + 1) * sizeof *t_at_reads); /* reads at a shared start */
  int n_at_reads = 0;
  if (!tvals || !svals || !otypes || !results || !t_at || !o_at || !t_at_reads) {
    st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  for (int i = 0; i < nt; i++) t_at[i] = IR_NONE;
  for (int j = 0; j < no; j++) {
    o_at[j] = IR_NONE;
    const tpuc_tensor *o = &c->outputs[j];
    if (!bd->slice_inplace || oslot[j] < 0 || tpuc_view_covers_storage(o, o->storage->nbytes))
      continue;
    for (int i = 0; i < nt; i++) /* every read of the written region, at one start */
      if (tslot[i] == oslot[j] && tpuc_view_same_region(&c->tensors[i], o)) {
        if (t_at[i] == IR_NONE)
          t_at[i] = o_at[j] != IR_NONE ? o_at[j] : tpuc_view_opaque_start(g, o->offset);
        o_at[j] = t_at[i];
      }
  }
  for (int i = 0; i < nt && !st; i++) {
    const tpuc_tensor *t = &c->tensors[i];
    tv base;
    if (tslot[i] < 0) {
      tvals[i] = IR_NONE;
      continue;
    }
    if (tpuc_view_numel(t) == 0) {
      tvals[i] = ir_splat(g, ir_make_type(t->dtype, t->ndim, t->sizes), 0);
      continue;
    }
    st = slot_value(bd, tslot[i], t->dtype, &base);
    if (!st) st = tpuc_view_read_at(g, base, t, t_at[i], &tvals[i]);
    if (!st && t_at[i] != IR_NONE) t_at_reads[n_at_reads++] = tvals[i];
  }
  for (int i = 0; i < na && !st; i++) {
    svals[i] = IR_NONE;
    const tpuc_arg *a = &c->args[i];
    if (a->kind == TPUC_ARG_SCALAR && tpuc_scalar_is_static(c, i))
      svals[i] = ir_splat(g, arg_param_type(a), a->scalar.re); /* in the signature */
    else if (a->kind == TPUC_ARG_SCALAR || a->kind == TPUC_ARG_RNG)
      st = add_param(bd, (param_src){-1, op_index, i}, arg_param_type(a), &svals[i]);
  }
  if (st) goto done;
  for (int i = 0; i < no; i++) {
    const tpuc_tensor *o = &c->outputs[i];
    otypes[i] = ir_make_type(o->dtype, o->ndim, o->sizes);
    results[i] = IR_NONE;
  }
  tpuc_lower_ctx cx = {g, c, tvals, svals, otypes, results, no, bd->checks};
  int first_check = bd->checks ? bd->checks->n : 0;
  st = tpuc_op_lowering(c->op)(&cx);
  if (st) goto done;
  for (int i = first_check; bd->checks && i < bd->checks->n; i++)
    bd->checks->v[i].op = tpuc_op_name_of(c->op);
  if (ir_error(g)) {
    st = tpuc_status_make(TPUC_ERR_INTERNAL, "lowering %s: %s", tpuc_op_name_of(c->op),
                          ir_error(g));
    goto done;
  }
  for (int i = 0; i < no; i++) {
    if (oslot[i] < 0) continue; /* not asked for: whatever the lowering did */
    const ir_type *rt = ir_typeof(g, results[i]);
    const ir_type *want = &otypes[i];
    bool ok = results[i] != IR_NONE && rt->dtype == want->dtype && rt->ndim == want->ndim;
    for (int d = 0; ok && d < rt->ndim; d++) ok = rt->dims[d] == want->dims[d];
    if (!ok) {
      st = tpuc_status_make(TPUC_ERR_INTERNAL,
                            "lowering %s: result %d does not have the output's type (%s, rank %d)",
                            tpuc_op_name_of(c->op), i, tpuc_dtype_mlir_name(want->dtype),
                            want->ndim);
      goto done;
    }
  }
  for (int i = 0; i < no && !st; i++) {
    const tpuc_tensor *o = &c->outputs[i];
    int sl = oslot[i];
    if (sl < 0 || tpuc_view_numel(o) == 0) continue;
    if (tpuc_view_covers_storage(o, o->storage->nbytes)) {
      bd->val[sl] = results[i];
    } else {
      tv base;
      st = slot_value(bd, sl, o->dtype, &base);
      /* The new elements computed from the storage's own value, read elsewhere than at this
       * call's shared start: XLA CPU may update the buffer in place inside a fused loop that
       * still reads it at other positions (a graph's slice_scatter(x, f(x[:-1]), start=1)
       * read values it had just written, 2026-12-04, tests/difftest/findings/). The write then
       * goes into a copy XLA cannot see through. */
      if (!st && ir_depends_on(g, results[i], ir_source(g, bd->val[sl]), t_at_reads, n_at_reads))
        base = ir_opaque_identity(g, base);
      if (!st) st = tpuc_view_write_at(g, base, o, results[i], o_at[i], &bd->val[sl]);
    }
    bd->written[sl] = true;
  }
done:
  free(tvals);
  free(svals);
  free(otypes);
  free(results);
  free(t_at);
  free(o_at);
  free(t_at_reads);
  return st;
}

static void dump(const char *text, size_t len, const char *name, uint64_t hash) {
  const char *dir = getenv("TPUC_DUMP_DIR");
  if (!dir || !*dir) return;
  char path[1024];
  int n = snprintf(path, sizeof path, "%s/%s-%016llx.mlir", dir, name, (unsigned long long)hash);
  for (int i = (int)strlen(dir) + 1; i < n && i < (int)sizeof path; i++)
    if (path[i] == ':') path[i] = '_';
  FILE *f = fopen(path, "w");
  if (f) {
    fwrite(text, 1, len, f);
    fclose(f);
  }
}

tpuc_status *plan_build(tpuc_runtime *rt, const tpuc_op_call *const *calls,
                        int *const *tslots, int *const *oslots, int n, slot_set *s,
                        const bool *read, const bool *live, int compile, bool checks,
                        fast_entry *e, const char *name) {
  builder bd;
  memset(&bd, 0, sizeof bd);
  tpuc_checks ck = {NULL, 0, 0, false, checks}; /* asserts always; bounds with `checks` */
  check_set *cset = NULL;
  bd.checks = &ck;
  bd.s = s;
  bd.read = read;
  bd.g = ir_graph_create();
  bd.slice_inplace = rt->slice_inplace;
  bool xla_cpu = rt->platform_name && !strcmp(rt->platform_name, "cpu");
  if (bd.g) {
    ir_graph_set_xla_cpu(bd.g, rt->dot_rewrite && xla_cpu);
    ir_graph_set_sum_block(bd.g, rt->sum_block);
    ir_graph_set_guard_dot_rhs(bd.g, xla_cpu && rt->xnn_may_capture);
  }
  bd.val = malloc((size_t)(s->n + 1) * sizeof *bd.val);
  bd.written = calloc((size_t)s->n + 1, sizeof *bd.written);
  bd.param = malloc((size_t)(s->n + 1) * sizeof *bd.param);
  bd.param_no = malloc((size_t)(s->n + 1) * sizeof *bd.param_no);
  int *result_slot = malloc((size_t)(s->n + 1) * sizeof *result_slot);
  ir_type *rtypes = malloc((size_t)(s->n + 1) * sizeof *rtypes);
  bool *aliased = NULL;
  tpuc_status *st = NULL;
  char *text = NULL;
  if (!bd.g || !bd.val || !bd.written || !bd.param || !bd.param_no || !result_slot || !rtypes) {
    st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  for (int i = 0; i < s->n; i++) bd.val[i] = bd.param[i] = IR_NONE;
  for (int k = 0; k < n && !st; k++) st = build_call(&bd, calls[k], tslots[k], oslots[k], k);
  if (!st && !(aliased = calloc((size_t)bd.nparams + 1, sizeof *aliased)))
    st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  int nres = 0;
  for (int i = 0; !st && i < s->n; i++)
    if (bd.written[i] && live[i]) {
      tv v = bd.val[i];
      int64_t numel = ir_numel(ir_typeof(bd.g, v));
      if (rt->flat_buffers && ir_typeof(bd.g, v)->ndim > 1) v = ir_reshape(bd.g, v, 1, &numel);
      if (bd.param[i] != IR_NONE && v != bd.param[i]) {
        /* the new value may take over the old buffer's memory (donation):
         * it is kept in the old buffer's shape when it has the same bytes */
        const ir_type *pt = ir_typeof(bd.g, bd.param[i]), *vt = ir_typeof(bd.g, v);
        if (pt->dtype == vt->dtype && ir_numel(pt) == ir_numel(vt)) {
          bool same = pt->ndim == vt->ndim;
          for (int d = 0; same && d < pt->ndim; d++) same = pt->dims[d] == vt->dims[d];
          if (!same) v = ir_reshape(bd.g, v, pt->ndim, pt->dims);
          ir_alias(bd.g, bd.param[i], nres);
          aliased[bd.param_no[i]] = true;
        }
      }
      ir_output(bd.g, v);
      rtypes[nres] = *ir_typeof(bd.g, v);
      result_slot[nres++] = i;
    }
  if (!st && ck.oom) st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  if (!st && ck.n > 0) { /* the checks, concatenated: one more result */
    tv *parts = malloc((size_t)ck.n * sizeof *parts);
    cset = parts ? check_set_new(ck.v, ck.n) : NULL;
    if (!cset) {
      free(parts);
      st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
      goto done;
    }
    for (int i = 0; i < ck.n; i++) parts[i] = ck.v[i].value;
    ir_output(bd.g, ck.n == 1 ? parts[0] : ir_concat(bd.g, parts, ck.n, 0));
    free(parts);
  }
  if (st) goto done;
  if (nres == 0 && !cset) { /* nothing kept: a program with a dummy result */
    ir_output(bd.g, ir_splat(bd.g, ir_make_type(TPUC_PRED, 0, NULL), 0));
  }
  if (compile) {
    size_t len = 0;
    text = ir_emit(bd.g, "tpuc", &len);
    if (!text) {
      st = tpuc_status_make(TPUC_ERR_INTERNAL, "%s: %s", name,
                            ir_error(bd.g) ? ir_error(bd.g) : "emit failed");
      goto done;
    }
    dump(text, len, name, e->hash);
    pthread_mutex_lock(&rt->fast_lock);
    rt->emitted_bytes += (int64_t)len;
    pthread_mutex_unlock(&rt->fast_lock);
    tpuc_event_emit(rt, TPUC_EVENT_COMPILE, TPUC_EVENT_BEGIN, name, "", -1, (int64_t)len, 0);
    /* one op's program (strict mode) gets the per-op XLA options (op_options.c) */
    bool per_op = n == 1 && !(name && !strcmp(name, "fused chunk"));
    st = plan_compile(rt, e, &text, len, compile, per_op); /* op_run.c */
    tpuc_event_emit(rt, TPUC_EVENT_COMPILE, TPUC_EVENT_END, name, "", -1, (int64_t)len, 0);
    if (st) {
      st = tpuc_status_wrap(st, name);
      goto done;
    }
  }
  scalars_free(e);
  free(e->params);
  free(e->result_slot);
  e->name = name;
  e->scalars = rt->scalar_cache ? calloc((size_t)bd.nparams + 1, sizeof *e->scalars)
                                 : NULL; /* NULL: nothing kept */
  e->nparams = bd.nparams;
  e->params = bd.params;
  bd.params = NULL;
  e->nresults = nres;
  e->result_slot = result_slot;
  result_slot = NULL;
  free(e->result_types);
  e->result_types = rtypes;
  rtypes = NULL;
  free(e->aliased);
  e->aliased = aliased;
  aliased = NULL;
  check_set_release(e->checks);
  e->checks = cset;
  cset = NULL;
done:
  check_set_release(cset);
  free(ck.v);
  free(text);
  free(aliased);
  free(bd.param);
  free(bd.param_no);
  free(bd.params);
  free(bd.val);
  free(bd.written);
  free(result_slot);
  free(rtypes);
  ir_graph_destroy(bd.g);
  return st;
}

/* ---- launching ---- */
tpuc_status *plan_arg_buffer(tpuc_runtime *rt, int device, const tpuc_arg *a,
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

tpuc_status *plan_launch(tpuc_runtime *rt, int device, const fast_entry *e, const slot_set *s,
                         const tpuc_op_call *const *calls, bool wait) {
  int np = e->nparams, nr = e->nresults + (e->checks ? 1 : 0);
  if (nr == 0) nr = 1; /* the dummy result */
  tpuc_buffer *args_small[16] = {0}, *outs_small[8] = {0};
  bool made_small[16] = {false}, donate_small[16] = {false};
  bool small = np < 16 && nr <= 8; /* a single op: no allocation here */
  tpuc_buffer **args = small ? args_small : calloc((size_t)np + 1, sizeof *args);
  bool *made = small ? made_small : calloc((size_t)np + 1, sizeof *made);
  tpuc_buffer **outs = small ? outs_small : calloc((size_t)nr, sizeof *outs);
  bool *donate = small ? donate_small : calloc((size_t)np + 1, sizeof *donate);
  tpuc_status *st = NULL;
  if (!args || !made || !outs || !donate) {
    st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  for (int i = 0; i < np && !st; i++) {
    const param_src *p = &e->params[i];
    if (p->slot >= 0) {
      args[i] = s->buffer[p->slot];
      /* donated only when the storage (rebound to the result below) and
       * this launch are its only holders: no other storage, no reader */
      /* (never when a failed check may leave the storage on its old buffer) */
      donate[i] = atomic_load(&rt->donate) && e->aliased && e->aliased[i] &&
                  atomic_load(&args[i]->refs) == 2 && !(wait && e->checks);
    } else {
      const tpuc_arg *a = &calls[p->op]->args[p->arg];
      struct scalar_cache *c = e->scalars && a->kind == TPUC_ARG_SCALAR
                                   ? atomic_exchange(&e->scalars[i], NULL) : NULL;
      if (c && c->buf->device == device && same_scalar(&c->arg, a)) {
        args[i] = tpuc_buffer_retain(c->buf);
      } else {
        scalar_cache_free(c);
        c = NULL;
        st = plan_arg_buffer(rt, device, a, &args[i]);
        if (!st && e->scalars && a->kind == TPUC_ARG_SCALAR && (c = malloc(sizeof *c))) {
          c->arg = *a;
          c->buf = tpuc_buffer_retain(args[i]);
          tpuc_buffer_unaccount(c->buf);
        }
      }
      made[i] = !st;
      struct scalar_cache *expected = NULL;
      if (c && !atomic_compare_exchange_strong(&e->scalars[i], &expected, c))
        scalar_cache_free(c); /* another thread kept one meanwhile */
    }
  }
  if (!st) {
    bool observed = tpuc_launch_observed(rt);
    uint64_t id = observed ? tpuc_event_next_id(rt) : 0;
    const char *name = e->name ? e->name : "";
    if (observed) tpuc_event_emit(rt, TPUC_EVENT_EXECUTE, TPUC_EVENT_BEGIN, name, "", device, 0, id);
    /* e->aliased: the parameters the program aliases; without it none is,
     * and donate[] (then all false) says so */
    st = tpuc_execute_aliasing(e->exe, device, args, donate, e->aliased ? e->aliased : donate, np,
                               outs, wait);
    if (observed) {
      tpuc_event_emit(rt, TPUC_EVENT_EXECUTE, TPUC_EVENT_END, name, "", device, 0, id);
      if (!st) tpuc_event_on_done(rt, outs[0], name, device, id);
    }
  }
  if (!st && e->checks) /* waiting: a failure binds nothing, as the op raises */
    st = tpuc_checks_after_launch(rt, e->checks, outs[e->nresults], wait);
  if (!st)
    for (int i = 0; i < e->nresults; i++) {
      tpuc_status *bs = tpuc_storage_bind(s->storage[e->result_slot[i]], outs[i]);
      if (bs && !st) st = bs;
      else tpuc_status_destroy(bs);
    }
  for (int i = 0; outs && i < nr; i++) tpuc_buffer_release(outs[i]);
done:
  for (int i = 0; args && made && i < np; i++)
    if (made[i]) tpuc_buffer_release(args[i]);
  if (!small) {
    free(args);
    free(made);
    free(outs);
    free(donate);
  }
  return st;
}
