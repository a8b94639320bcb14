/* compile.c — StableHLO text -> loaded executable, through an in-memory cache.
 *
 * The cache key is a hash of (program text, compile options, platform name,
 * platform version, PJRT API version); a hit also compares the full text, so
 * a hash collision can never return the wrong program. Each executable
 * records its output dtypes and shapes once, so that running it needs no
 * further queries to the plugin. Programs the preload (preload.c) put there
 * come in through tpuc_cache_preload, as a compile in flight that requests
 * for the same program wait for. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

/* ---- compile options ---------------------------------------------------
 * xla.CompileOptionsProto, hand-encoded (protobuf wire format):
 *   field 3 executable_build_options { field 4 num_replicas, 5 num_partitions }
 *   field 4 compile_portable_executable
 * A portable executable is not bound to a device: tpuc picks the device at
 * execution time, so one executable serves every device of the client. On a
 * client of one device in all (one process) tpuc_compile asks for an executable bound to it
 * instead (not portable), launched without naming a device: the plugin
 * copies a portable executable's CompileOptions on every launch that names
 * one (0.4k instructions per op on the XLA CPU plugin). */
typedef struct {
  unsigned char bytes[TPUC_COMPILE_OPTIONS_MAX];
  size_t len;
} proto_buf;

static void put_varint(proto_buf *b, uint64_t v) {
  while (v >= 0x80 && b->len < sizeof b->bytes) {
    b->bytes[b->len++] = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  if (b->len < sizeof b->bytes) b->bytes[b->len++] = (unsigned char)v;
}

static void put_key(proto_buf *b, unsigned field, unsigned wire) { put_varint(b, field << 3 | wire); }

static void encode_compile_options(proto_buf *out, int replicas, int partitions, bool portable) {
  proto_buf build = {{0}, 0};
  put_key(&build, 4, 0);
  put_varint(&build, (uint64_t)replicas);
  put_key(&build, 5, 0);
  put_varint(&build, (uint64_t)partitions);
  out->len = 0;
  if (portable) {
    put_key(out, 4, 0);
    put_varint(out, 1);
  }
  put_key(out, 3, 2);
  put_varint(out, build.len);
  memcpy(out->bytes + out->len, build.bytes, build.len);
  out->len += build.len;
}

/* ---- hashing ---- */
uint64_t tpuc_hash64(const void *data, size_t len, uint64_t seed) {
  const unsigned char *p = data;
  uint64_t h = seed ^ 0xcbf29ce484222325ull;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* ---- the cache ---- */
struct tpuc_cache_entry {
  uint64_t key;
  char *text;
  size_t len;
  tpuc_executable *exe;
  tpuc_cache_entry *next;
  bool touch;              /* preloaded, not used yet: its first use marks the file used */
  unsigned char dkey[32];  /* (then) its disk key */
};

static uint64_t program_key(const tpuc_runtime *rt, const char *text, size_t len,
                            const proto_buf *opts) {
  uint64_t h = tpuc_hash64(text, len, 0);
  h = tpuc_hash64(opts->bytes, opts->len, h);
  h = tpuc_hash64(rt->platform_name, strlen(rt->platform_name), h);
  h = tpuc_hash64(rt->platform_version, strlen(rt->platform_version), h);
  int v[2] = {rt->plugin.api_major, rt->plugin.api_minor};
  return tpuc_hash64(v, sizeof v, h);
}

static tpuc_cache_entry *cache_entry(tpuc_runtime *rt, uint64_t key, const char *text,
                                     size_t len) {
  if (!rt->cache_nbuckets) return NULL;
  for (tpuc_cache_entry *e = rt->cache_buckets[key % rt->cache_nbuckets]; e; e = e->next)
    if (e->key == key && e->len == len && !memcmp(e->text, text, len)) return e;
  return NULL;
}

static tpuc_executable *cache_find(tpuc_runtime *rt, uint64_t key, const char *text, size_t len) {
  tpuc_cache_entry *e = cache_entry(rt, key, text, len);
  return e ? e->exe : NULL;
}

static bool cache_grow(tpuc_runtime *rt) {
  size_t n = rt->cache_nbuckets ? rt->cache_nbuckets * 2 : 64;
  tpuc_cache_entry **nb = calloc(n, sizeof *nb);
  if (!nb) return false;
  for (size_t i = 0; i < rt->cache_nbuckets; i++)
    for (tpuc_cache_entry *e = rt->cache_buckets[i], *next; e; e = next) {
      next = e->next;
      e->next = nb[e->key % n];
      nb[e->key % n] = e;
    }
  free(rt->cache_buckets);
  rt->cache_buckets = nb;
  rt->cache_nbuckets = n;
  return true;
}

static bool cache_insert(tpuc_runtime *rt, uint64_t key, const char *text, size_t len,
                         tpuc_executable *exe, const unsigned char *dkey) {
  if (rt->cache_count >= rt->cache_nbuckets && !cache_grow(rt) && !rt->cache_nbuckets)
    return false;
  tpuc_cache_entry *e = malloc(sizeof *e);
  char *copy = malloc(len ? len : 1);
  if (!e || !copy) { /* not cached: still correct, only slower */
    free(e);
    free(copy);
    return false;
  }
  memcpy(copy, text, len);
  e->key = key;
  e->text = copy;
  e->len = len;
  e->exe = tpuc_executable_retain(exe);
  e->touch = dkey != NULL;
  if (dkey) memcpy(e->dkey, dkey, sizeof e->dkey);
  size_t b = key % rt->cache_nbuckets;
  e->next = rt->cache_buckets[b];
  rt->cache_buckets[b] = e;
  rt->cache_count++;
  return true;
}

void tpuc_cache_clear(tpuc_runtime *rt) {
  pthread_mutex_lock(&rt->cache_lock);
  for (size_t i = 0; i < rt->cache_nbuckets; i++) {
    for (tpuc_cache_entry *e = rt->cache_buckets[i], *next; e; e = next) {
      next = e->next;
      tpuc_executable_release(e->exe);
      free(e->text);
      free(e);
    }
    rt->cache_buckets[i] = NULL;
  }
  rt->cache_count = 0;
  pthread_mutex_unlock(&rt->cache_lock);
}

/* ---- executables ---- */
static tpuc_status *describe_outputs(tpuc_runtime *rt, tpuc_executable *x) {
  const tpuc_plugin *p = &rt->plugin;
  PJ_FN(p, PJ_SLOT_LOADED_EXECUTABLE_GET_EXECUTABLE, pj_loaded_executable_get_executable_args, get_exe);
  PJ_FN(p, PJ_SLOT_EXECUTABLE_NUM_OUTPUTS, pj_executable_num_outputs_args, nout);
  PJ_FN(p, PJ_SLOT_EXECUTABLE_OUTPUT_ELEMENT_TYPES, pj_executable_output_types_args, out_types);
  PJ_FN(p, PJ_SLOT_EXECUTABLE_OUTPUT_DIMENSIONS, pj_executable_output_dims_args, out_dims);
  PJ_FN(p, PJ_SLOT_EXECUTABLE_DESTROY, pj_executable_destroy_args, destroy);

  pj_loaded_executable_get_executable_args g = {0};
  g.struct_size = PJ_SIZE(pj_loaded_executable_get_executable_args, executable);
  g.loaded_executable = x->exe;
  tpuc_status *s = tpuc_plugin_error(p, get_exe(&g), "PJRT_LoadedExecutable_GetExecutable");
  if (s) return s;

  pj_executable_num_outputs_args n = {0};
  n.struct_size = PJ_SIZE(pj_executable_num_outputs_args, num_outputs);
  n.executable = g.executable;
  pj_executable_output_types_args t = {0};
  t.struct_size = PJ_SIZE(pj_executable_output_types_args, num_output_types);
  t.executable = g.executable;
  pj_executable_output_dims_args d = {0};
  d.struct_size = PJ_SIZE(pj_executable_output_dims_args, dim_sizes);
  d.executable = g.executable;
  s = tpuc_plugin_error(p, nout(&n), "PJRT_Executable_NumOutputs");
  if (!s) s = tpuc_plugin_error(p, out_types(&t), "PJRT_Executable_OutputElementTypes");
  if (!s) s = tpuc_plugin_error(p, out_dims(&d), "PJRT_Executable_OutputDimensions");
  if (!s && (t.num_output_types != n.num_outputs || d.num_outputs != n.num_outputs))
    s = tpuc_status_make(TPUC_ERR_PLUGIN, "the plugin reports inconsistent output counts");
  if (!s) {
    x->num_outputs = (int)n.num_outputs;
    size_t k = n.num_outputs ? n.num_outputs : 1;
    x->out_dtypes = calloc(k, sizeof *x->out_dtypes);
    x->out_ndims = calloc(k, sizeof *x->out_ndims);
    x->out_dims = calloc(k, sizeof *x->out_dims);
    if (!x->out_dtypes || !x->out_ndims || !x->out_dims)
      s = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  size_t pos = 0;
  for (int i = 0; !s && i < x->num_outputs; i++) {
    if (!tpuc_dtype_from_pjrt(t.output_types[i], &x->out_dtypes[i]))
      s = tpuc_status_make(TPUC_ERR_UNIMPLEMENTED, "output %d has an element type (%d) tpuc does "
                           "not support", i, (int)t.output_types[i]);
    else if (d.dim_sizes[i] > TPUC_MAX_DIMS)
      s = tpuc_status_make(TPUC_ERR_UNIMPLEMENTED, "output %d has rank %zu > %d", i,
                           d.dim_sizes[i], TPUC_MAX_DIMS);
    else {
      x->out_ndims[i] = (int)d.dim_sizes[i];
      if (d.dim_sizes[i]) /* all-scalar outputs may come with dims == NULL */
        memcpy(x->out_dims[i], d.dims + pos, d.dim_sizes[i] * sizeof(int64_t));
      pos += d.dim_sizes[i];
    }
  }
  /* scratch memory, for the peak accounting; optional (older plugins) */
  pj_generic_fn mstats =
      (pj_generic_fn)tpuc_plugin_fn(p, PJ_SLOT_EXECUTABLE_GET_COMPILED_MEMORY_STATS);
  if (!s && mstats) {
    pj_executable_memory_stats_args m = {0};
    m.struct_size = PJ_SIZE(pj_executable_memory_stats_args, total_size_in_bytes);
    m.executable = g.executable;
    tpuc_status *ms = tpuc_plugin_error(p, mstats(&m), NULL);
    if (!ms && m.temp_size_in_bytes > 0) x->temp_bytes = m.temp_size_in_bytes;
    tpuc_status_destroy(ms);
  }
  pj_executable_destroy_args da = {0};
  da.struct_size = PJ_SIZE(pj_executable_destroy_args, executable);
  da.executable = g.executable;
  tpuc_status_destroy(tpuc_plugin_error(p, destroy(&da), NULL));
  return s;
}

static tpuc_status *wrap_executable(tpuc_runtime *rt, pj_loaded_executable *exe,
                                    tpuc_executable **out);

/* The plugin's compile of StableHLO text (MLIR) with encoded options. */
static pj_error *plugin_compile(pj_error *(*compile)(pj_client_compile_args *), tpuc_runtime *rt,
                                const char *text, size_t len, const proto_buf *opts,
                                pj_loaded_executable **out) {
  pj_program prog = {0};
  prog.struct_size = PJ_SIZE(pj_program, format_size);
  prog.code = (char *)text;
  prog.code_size = len;
  prog.format = "mlir";
  prog.format_size = 4;
  pj_client_compile_args a = {0};
  a.struct_size = PJ_SIZE(pj_client_compile_args, executable);
  a.client = rt->client;
  a.program = &prog;
  a.compile_options = (const char *)opts->bytes;
  a.compile_options_size = opts->len;
  pj_error *err = compile(&a);
  *out = err ? NULL : a.executable;
  return err;
}

static tpuc_status *compile_uncached(tpuc_runtime *rt, const char *text, size_t len,
                                     const proto_buf *opts, tpuc_executable **out) {
  const tpuc_plugin *p = &rt->plugin;
  PJ_FN(p, PJ_SLOT_CLIENT_COMPILE, pj_client_compile_args, compile);
  struct timespec t0, t1;
  pj_loaded_executable *exe = NULL;
  tpuc_progress_begin(rt);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pj_error *err = plugin_compile(compile, rt, text, len, opts, &exe);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  tpuc_progress_end(rt);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  pthread_mutex_lock(&rt->cache_lock);
  rt->compile_seconds += secs;
  if (!err) rt->compiles++;
  pthread_mutex_unlock(&rt->cache_lock);
  tpuc_status *s = tpuc_plugin_error(p, err, "compiling StableHLO");
  if (s) {
    if (tpuc_status_code(s) != TPUC_ERR_OUT_OF_MEMORY) {
      tpuc_status *c = tpuc_status_make(TPUC_ERR_COMPILE, "%s", tpuc_status_message(s));
      tpuc_status_destroy(s);
      s = c;
    }
    return s;
  }
  return wrap_executable(rt, exe, out);
}

/* Wraps a loaded executable (taking ownership) with its output types. */
static tpuc_status *wrap_executable(tpuc_runtime *rt, pj_loaded_executable *exe,
                                    tpuc_executable **out) {
  const tpuc_plugin *p = &rt->plugin;
  tpuc_executable *x = calloc(1, sizeof *x);
  if (!x) {
    pj_loaded_executable_destroy_args d = {0};
    d.struct_size = PJ_SIZE(pj_loaded_executable_destroy_args, executable);
    d.executable = exe;
    pj_generic_fn destroy = (pj_generic_fn)tpuc_plugin_fn(p, PJ_SLOT_LOADED_EXECUTABLE_DESTROY);
    if (destroy) tpuc_status_destroy(tpuc_plugin_error(p, destroy(&d), NULL));
    return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  atomic_init(&x->refs, 1);
  x->rt = rt;
  x->exe = exe;
  atomic_fetch_add(&rt->live_objects, 1);
  tpuc_status *s = describe_outputs(rt, x);
  if (s) {
    tpuc_executable_release(x);
    return s;
  }
  *out = x;
  return NULL;
}

/* A compile in flight (under rt->cache_lock), on its compiler's stack. */
struct tpuc_inflight {
  uint64_t key;
  const char *text;
  size_t len;
  struct tpuc_inflight *next;
};

static bool inflight_find(const tpuc_runtime *rt, const struct tpuc_inflight *q) {
  for (const struct tpuc_inflight *f = rt->inflight; f; f = f->next)
    if (f != q && f->key == q->key && f->len == q->len && !memcmp(f->text, q->text, q->len))
      return true;
  return false;
}

/* Whether x was compiled with the options tpuc_compile gives a bound one
 * (perhaps followed by a per-op program's option overrides). */
static void mark_bound(const tpuc_runtime *rt, tpuc_executable *x, const proto_buf *opts) {
  if (!rt->single_device) return;
  proto_buf bound;
  encode_compile_options(&bound, 1, 1, false);
  x->bound = opts->len >= bound.len && !memcmp(opts->bytes, bound.bytes, bound.len) &&
             (opts->len == bound.len || opts->bytes[bound.len] == (7 << 3 | 2));
}

/* A program in neither memory cache nor flight: from the disk tier, else
 * compiled (and then written to disk). */
static tpuc_status *compile_miss(tpuc_runtime *rt, const char *text, size_t len,
                                 const proto_buf *opts, tpuc_executable **out) {
  tpuc_executable *x = NULL;
  tpuc_status *s = NULL;
  unsigned char dkey[32];
  pj_loaded_executable *from_disk = NULL;
  int lock = -1;
  const tpuc_disk_program prog = {text, len, opts->bytes, opts->len};
  if (rt->disk_dir) {
    tpuc_disk_key(rt, text, len, opts->bytes, opts->len, dkey);
    s = tpuc_disk_load(rt, dkey, &prog, &from_disk);
    if (s) return s;
    if (!from_disk) {
      /* another process may be compiling this program right now: wait for
       * it and load its result rather than compile it a second time */
      lock = tpuc_disk_lock(rt, dkey);
      if (lock >= 0) s = tpuc_disk_reload(rt, dkey, &prog, &from_disk);
      if (s) {
        tpuc_disk_unlock(rt, dkey, lock);
        return s;
      }
    }
  }
  if (from_disk) {
    s = wrap_executable(rt, from_disk, &x);
  } else {
    s = compile_uncached(rt, text, len, opts, &x);
    if (!s && rt->disk_dir) tpuc_disk_store(rt, dkey, &prog, x->exe);
  }
  tpuc_disk_unlock(rt, dkey, lock);
  if (s) return s;
  mark_bound(rt, x, opts);
  *out = x;
  return NULL;
}

tpuc_status *tpuc_compile(tpuc_runtime *rt, const char *text, size_t len, tpuc_executable **out) {
  proto_buf opts;
  encode_compile_options(&opts, 1, 1, !rt->single_device);
  return tpuc_compile_with_options(rt, text, len, opts.bytes, opts.len, out);
}

/* The options of strict mode's per-op programs: tpuc_compile's, then rt->op_options. */
static tpuc_status *op_compile_options(const tpuc_runtime *rt, proto_buf *opts) {
  const tpuc_op_options *o = &rt->op_options;
  encode_compile_options(opts, 1, 1, !rt->single_device);
  if (opts->len + o->len > sizeof opts->bytes)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "TPUC_OP_XLA_OPTIONS: too long");
  memcpy(opts->bytes + opts->len, o->bytes, o->len);
  opts->len += o->len;
  return NULL;
}

tpuc_status *tpuc_compile_op(tpuc_runtime *rt, const char *text, size_t len,
                             tpuc_executable **out) {
  const tpuc_op_options *o = &rt->op_options;
  if (!o->len) return tpuc_compile(rt, text, len, out);
  proto_buf opts;
  tpuc_status *s = op_compile_options(rt, &opts);
  if (!s) s = tpuc_compile_with_options(rt, text, len, opts.bytes, opts.len, out);
  if (s && tpuc_status_code(s) != TPUC_ERR_OUT_OF_MEMORY) {
    /* an option the plugin's XLA does not know fails every per-op compile:
     * say where the options came from */
    tpuc_status *w = tpuc_status_make(
        tpuc_status_code(s), "%s (per-op programs are compiled with the XLA options %s%s; "
        "TPUC_OP_XLA_OPTIONS=none compiles them with XLA's defaults)",
        tpuc_status_message(s), o->text, o->from_env ? " from TPUC_OP_XLA_OPTIONS" : "");
    tpuc_status_destroy(s);
    s = w;
  }
  return s;
}

tpuc_status *tpuc_compile_op_at_hand(tpuc_runtime *rt, const char *text, size_t len,
                                     bool per_op, bool submit, tpuc_executable **out,
                                     bool *pending) {
  *out = NULL;
  *pending = false;
  proto_buf opts;
  tpuc_status *s = NULL;
  if (per_op) s = op_compile_options(rt, &opts);
  else encode_compile_options(&opts, 1, 1, !rt->single_device);
  if (s) return s;
  uint64_t key = program_key(rt, text, len, &opts);
  pthread_mutex_lock(&rt->cache_lock);
  tpuc_executable *hit = cache_find(rt, key, text, len);
  struct tpuc_inflight me = {key, text, len, NULL};
  bool flying = !hit && inflight_find(rt, &me);
  if (hit) *out = tpuc_executable_retain(hit);
  pthread_mutex_unlock(&rt->cache_lock);
  if (hit) return NULL; /* (the op's own compile counts the hit when it asks) */
  if (!flying && rt->disk_dir) { /* a warm disk cache: a load, not a compile */
    unsigned char dkey[32];
    tpuc_disk_key(rt, text, len, opts.bytes, opts.len, dkey);
    if (tpuc_disk_has(rt, dkey))
      return per_op ? tpuc_compile_op(rt, text, len, out) : tpuc_compile(rt, text, len, out);
  }
  *pending = flying || tpuc_compile_pool_busy(rt) > 0;
  if (submit && !flying) *pending = tpuc_compile_submit(rt, text, len, per_op);
  return NULL;
}

tpuc_status *tpuc_compile_with_options(tpuc_runtime *rt, const char *text, size_t len,
                                       const unsigned char *opt_bytes, size_t opt_len,
                                       tpuc_executable **out) {
  *out = NULL;
  if (!text || !len)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "tpuc_compile: empty program");
  proto_buf opts;
  if (opt_len > sizeof opts.bytes)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                            "compile options of %zu bytes (at most %zu)", opt_len,
                            sizeof opts.bytes);
  memcpy(opts.bytes, opt_bytes, opt_len);
  opts.len = opt_len;
  uint64_t key = program_key(rt, text, len, &opts);

  pthread_mutex_lock(&rt->cache_lock);
  tpuc_cache_entry *ce = cache_entry(rt, key, text, len);
  tpuc_executable *hit = ce ? ce->exe : NULL;
  if (hit) rt->cache_hits++;
  else rt->cache_misses++;
  /* the same program being compiled by another thread (a compile ahead of
   * need, compile_pool.c): wait for it rather than compile it twice */
  struct tpuc_inflight me = {key, text, len, NULL};
  while (!hit && inflight_find(rt, &me)) {
    rt->compile_joins++;
    pthread_cond_wait(&rt->compile_done, &rt->cache_lock);
    ce = cache_entry(rt, key, text, len); /* NULL: it failed; compile it here */
    hit = ce ? ce->exe : NULL;
  }
  unsigned char touch[32];
  bool touched = ce && ce->touch;
  if (touched) { /* a preloaded program's first use: its file is used now */
    ce->touch = false;
    memcpy(touch, ce->dkey, sizeof touch);
    rt->preload_used++; /* room in the preload's window */
    pthread_cond_broadcast(&rt->preload_cv);
  }
  if (hit) {
    *out = tpuc_executable_retain(hit);
    pthread_mutex_unlock(&rt->cache_lock);
    if (touched) tpuc_disk_touch(rt, touch);
    return NULL;
  }
  me.next = rt->inflight;
  rt->inflight = &me;
  pthread_mutex_unlock(&rt->cache_lock);

  /* Compile outside the lock: compiles may take seconds, and other threads
   * may keep running cached programs meanwhile. */
  tpuc_executable *x = NULL;
  tpuc_status *s = compile_miss(rt, text, len, &opts, &x);

  pthread_mutex_lock(&rt->cache_lock);
  for (struct tpuc_inflight **pp = &rt->inflight; *pp; pp = &(*pp)->next)
    if (*pp == &me) {
      *pp = me.next;
      break;
    }
  if (!s) {
    tpuc_executable *raced = cache_find(rt, key, text, len);
    if (raced) {
      tpuc_executable_release(x);
      x = tpuc_executable_retain(raced);
    } else {
      cache_insert(rt, key, text, len, x, NULL);
    }
  }
  pthread_cond_broadcast(&rt->compile_done);
  pthread_mutex_unlock(&rt->cache_lock);
  if (s) return s;
  *out = x;
  return NULL;
}

int tpuc_cache_preload(tpuc_runtime *rt, const char *text, size_t len, const void *opt_bytes,
                       size_t opt_len, const unsigned char dkey[32], const void *payload,
                       size_t payload_len) {
  proto_buf opts;
  if (!len || opt_len > sizeof opts.bytes) return 0;
  memcpy(opts.bytes, opt_bytes, opt_len);
  opts.len = opt_len;
  uint64_t key = program_key(rt, text, len, &opts);
  pthread_mutex_lock(&rt->cache_lock);
  struct tpuc_inflight me = {key, text, len, NULL};
  if (cache_find(rt, key, text, len) || inflight_find(rt, &me)) {
    pthread_mutex_unlock(&rt->cache_lock);
    return 0; /* already loaded, or being loaded or compiled by its requester */
  }
  me.next = rt->inflight; /* from here a request for it waits for this load */
  rt->inflight = &me;
  pthread_mutex_unlock(&rt->cache_lock);

  pj_loaded_executable *exe = NULL;
  double secs = 0;
  tpuc_executable *x = NULL;
  bool ok = tpuc_disk_deserialize(rt, payload, payload_len, &exe, &secs);
  tpuc_status *s = ok ? wrap_executable(rt, exe, &x) : NULL;
  if (s) { /* out of host memory, or the plugin cannot describe it: leave it to its requester */
    tpuc_status_destroy(s);
    x = NULL;
  }
  if (x) mark_bound(rt, x, &opts);

  pthread_mutex_lock(&rt->cache_lock);
  for (struct tpuc_inflight **pp = &rt->inflight; *pp; pp = &(*pp)->next)
    if (*pp == &me) {
      *pp = me.next;
      break;
    }
  rt->preload_seconds += secs;
  if (x && !cache_find(rt, key, text, len) && cache_insert(rt, key, text, len, x, dkey))
    rt->preloaded++;
  pthread_cond_broadcast(&rt->compile_done); /* waiters find it, or (NULL) compile it */
  pthread_mutex_unlock(&rt->cache_lock);
  tpuc_executable_release(x);
  return ok ? 1 : -1;
}

/* The device barrier of tpuc_synchronize (execute.c): a program of no
 * arguments, compiled as tpuc_compile would (bound on a client of one
 * device), but outside the caches and the compile statistics: it is tpuc's
 * own, not the user's. */
tpuc_status *tpuc_compile_barrier(tpuc_runtime *rt, pj_loaded_executable **out) {
  static const char text[] =
      "module @tpuc_barrier {\n  func.func public @main() -> (tensor<i32>) {\n"
      "    %v0 = \"stablehlo.constant\"() {value = dense<0> : tensor<i32>} : () -> tensor<i32>\n"
      "    \"func.return\"(%v0) : (tensor<i32>) -> ()\n  }\n}\n";
  *out = NULL;
  const tpuc_plugin *p = &rt->plugin;
  PJ_FN(p, PJ_SLOT_CLIENT_COMPILE, pj_client_compile_args, compile);
  proto_buf opts;
  encode_compile_options(&opts, 1, 1, !rt->single_device);
  return tpuc_plugin_error(p, plugin_compile(compile, rt, text, sizeof text - 1, &opts, out),
                           "compiling the synchronize barrier");
}

tpuc_executable *tpuc_executable_retain(tpuc_executable *e) {
  if (e) atomic_fetch_add(&e->refs, 1);
  return e;
}

void tpuc_executable_release(tpuc_executable *e) {
  if (!e || atomic_fetch_sub(&e->refs, 1) != 1) return;
  const tpuc_plugin *p = &e->rt->plugin;
  pj_generic_fn destroy = (pj_generic_fn)tpuc_plugin_fn(p, PJ_SLOT_LOADED_EXECUTABLE_DESTROY);
  pj_loaded_executable_destroy_args d = {0};
  d.struct_size = PJ_SIZE(pj_loaded_executable_destroy_args, executable);
  d.executable = e->exe;
  if (destroy) tpuc_status_destroy(tpuc_plugin_error(p, destroy(&d), NULL));
  atomic_fetch_sub(&e->rt->live_objects, 1);
  free(e->out_dtypes);
  free(e->out_ndims);
  free(e->out_dims);
  free(e);
}

int tpuc_executable_num_outputs(const tpuc_executable *e) { return e->num_outputs; }
tpuc_dtype tpuc_executable_output_dtype(const tpuc_executable *e, int i) { return e->out_dtypes[i]; }
int tpuc_executable_output_ndim(const tpuc_executable *e, int i) { return e->out_ndims[i]; }
const int64_t *tpuc_executable_output_dims(const tpuc_executable *e, int i) { return e->out_dims[i]; }
