/* runtime.c — the runtime object: one PJRT client, its addressable devices,
 * their memory accounting and the runtime-wide statistics. All mutable state
 * of the core lives in a tpuc_runtime. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "../pjrt/kv_bridge.h"

static char *dup_n(const char *s, size_t n) {
  char *r = malloc(n + 1);
  if (!r) return NULL;
  if (n) memcpy(r, s, n);
  r[n] = 0;
  return r;
}

static void read_attributes(tpuc_runtime *rt) {
  rt->xla_version = -1;
  for (int i = 0; i < 3; i++) rt->shlo_current[i] = rt->shlo_minimum[i] = -1;
  typedef pj_error *(*attrs_fn)(pj_plugin_attributes_args *);
  attrs_fn fn = (attrs_fn)tpuc_plugin_fn(&rt->plugin, PJ_SLOT_PLUGIN_ATTRIBUTES);
  if (!fn) return;
  pj_plugin_attributes_args a = {0};
  a.struct_size = PJ_SIZE(pj_plugin_attributes_args, num_attributes);
  tpuc_status *s = tpuc_plugin_error(&rt->plugin, fn(&a), "PJRT_Plugin_Attributes");
  if (s) { /* attributes are informative only */
    tpuc_status_destroy(s);
    return;
  }
  for (size_t i = 0; i < a.num_attributes; i++) {
    const pj_named_value *v = &a.attributes[i];
    size_t n = v->name_size;
    if (n == 11 && !strncmp(v->name, "xla_version", n) && v->type == PJ_NV_INT64)
      rt->xla_version = v->int64_value;
    int64_t *dst = NULL;
    if (n == 25 && !strncmp(v->name, "stablehlo_current_version", n)) dst = rt->shlo_current;
    if (n == 25 && !strncmp(v->name, "stablehlo_minimum_version", n)) dst = rt->shlo_minimum;
    if (dst && v->type == PJ_NV_INT64_LIST)
      for (size_t k = 0; k < v->value_size && k < 3; k++) dst[k] = v->int64_array_value[k];
  }
}

static tpuc_status *create_client(tpuc_runtime *rt, int cpu_devices) {
  PJ_FN(&rt->plugin, PJ_SLOT_CLIENT_CREATE, pj_client_create_args, create);
  tpuc_client_options opt;
  tpuc_status *os = tpuc_client_options_make(tpuc_plugin_kind_of(rt->plugin.path), cpu_devices,
                                             rt->process_id, rt->num_processes, &opt);
  if (os) return os;
  size_t nopt = opt.n;
  snprintf(rt->create_options, sizeof rt->create_options, "%s", opt.names);

  pj_client_create_args a = {0};
  a.struct_size = PJ_SIZE(pj_client_create_args, kv_try_get_user_arg);
  a.create_options = nopt ? opt.v : NULL;
  a.num_options = nopt;
  if (rt->has_kv) tpuc_kv_bridge_attach(&rt->kv, &a);
  pj_error *err = create(&a);
  if (err && a.num_options && !rt->has_kv) { /* a plugin that rejects the option: retry bare */
    tpuc_status_destroy(tpuc_plugin_error(&rt->plugin, err, NULL));
    memset(&a, 0, sizeof a);
    a.struct_size = PJ_SIZE(pj_client_create_args, kv_try_get_user_arg);
    rt->create_options[0] = 0;
    err = create(&a);
  }
  tpuc_status *s = tpuc_plugin_error(&rt->plugin, err, "PJRT_Client_Create");
  if (s && rt->has_kv) {
    char what[320];
    snprintf(what, sizeof what,
             "creating process %d of %d's client (options sent: %s) failed; every process of "
             "the job must create its client, with the same store",
             rt->process_id, rt->num_processes,
             rt->create_options[0] ? rt->create_options : "none");
    s = tpuc_status_wrap(s, what);
  }
  if (s) return s;
  rt->client = a.client;
  return NULL;
}

static tpuc_status *client_string(tpuc_runtime *rt, pj_slot slot, const char *what, char **out) {
  pj_generic_fn fn = (pj_generic_fn)tpuc_plugin_fn(&rt->plugin, slot);
  if (!fn) return tpuc_plugin_missing(&rt->plugin, what);
  pj_client_string_args a = {0};
  a.struct_size = PJ_SIZE(pj_client_string_args, text_size);
  a.client = rt->client;
  tpuc_status *s = tpuc_plugin_error(&rt->plugin, fn(&a), what);
  if (s) return s;
  *out = dup_n(a.text ? a.text : "", a.text ? a.text_size : 0);
  return *out ? NULL : tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
}

static tpuc_status *describe_device(tpuc_runtime *rt, tpuc_device_rec *d) {
  PJ_FN(&rt->plugin, PJ_SLOT_DEVICE_GET_DESCRIPTION, pj_device_get_description_args, get_desc);
  PJ_FN(&rt->plugin, PJ_SLOT_DEVICE_DESCRIPTION_ID, pj_device_description_id_args, get_id);
  pj_device_get_description_args g = {0};
  g.struct_size = PJ_SIZE(pj_device_get_description_args, device_description);
  g.device = d->device;
  tpuc_status *s = tpuc_plugin_error(&rt->plugin, get_desc(&g), "PJRT_Device_GetDescription");
  if (s) return s;
  pj_device_description_id_args ia = {0};
  ia.struct_size = PJ_SIZE(pj_device_description_id_args, id);
  ia.device_description = g.device_description;
  if ((s = tpuc_plugin_error(&rt->plugin, get_id(&ia), "PJRT_DeviceDescription_Id"))) return s;
  d->id = ia.id;

  const pj_slot slots[2] = {PJ_SLOT_DEVICE_DESCRIPTION_KIND, PJ_SLOT_DEVICE_DESCRIPTION_DEBUG_STRING};
  char **dst[2] = {&d->kind, &d->description};
  for (int k = 0; k < 2; k++) {
    pj_generic_fn fn = (pj_generic_fn)tpuc_plugin_fn(&rt->plugin, slots[k]);
    pj_device_description_string_args sa = {0};
    sa.struct_size = PJ_SIZE(pj_device_description_string_args, text_size);
    sa.device_description = g.device_description;
    if (fn && (s = tpuc_plugin_error(&rt->plugin, fn(&sa), "PJRT_DeviceDescription"))) return s;
    *dst[k] = dup_n(sa.text ? sa.text : "", sa.text ? sa.text_size : 0);
    if (!*dst[k]) return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  return NULL;
}

static tpuc_status *list_devices(tpuc_runtime *rt) {
  PJ_FN(&rt->plugin, PJ_SLOT_CLIENT_ADDRESSABLE_DEVICES, pj_client_devices_args, devs);
  pj_client_devices_args a = {0};
  a.struct_size = PJ_SIZE(pj_client_devices_args, num_devices);
  a.client = rt->client;
  tpuc_status *s = tpuc_plugin_error(&rt->plugin, devs(&a), "PJRT_Client_AddressableDevices");
  if (s) return s;
  if (a.num_devices == 0)
    return tpuc_status_make(TPUC_ERR_PLUGIN, "the PJRT plugin '%s' reports no addressable device",
                            rt->plugin.path);
  rt->devices = calloc(a.num_devices, sizeof *rt->devices);
  if (!rt->devices) return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  rt->device_count = (int)a.num_devices;
  for (size_t i = 0; i < a.num_devices; i++) {
    rt->devices[i].device = a.devices[i];
    if ((s = describe_device(rt, &rt->devices[i]))) return s;
  }
  /* one device in all (not one of several processes' devices): programs are
   * compiled bound to it (compile.c) */
  pj_generic_fn all = (pj_generic_fn)tpuc_plugin_fn(&rt->plugin, PJ_SLOT_CLIENT_DEVICES);
  if (all && a.num_devices == 1) {
    pj_client_devices_args g = {0};
    g.struct_size = PJ_SIZE(pj_client_devices_args, num_devices);
    g.client = rt->client;
    tpuc_status *gs = tpuc_plugin_error(&rt->plugin, all(&g), NULL);
    rt->single_device = !gs && g.num_devices == 1 && g.devices && g.devices[0] == a.devices[0];
    tpuc_status_destroy(gs);
  }
  return NULL;
}

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  long n = strtol(v, &end, 10);
  return (*end || n <= 0 || n > 4096) ? dflt : (int)n;
}

static tpuc_status *runtime_create(const tpuc_runtime_options *opts,
                                   const tpuc_process_options *process, tpuc_runtime **out);

/* Whether XLA's CPU runtime may run dots through XNNPACK (which reuses its packing of a
 * parameter operand while the address is unchanged, ir.h): yes unless XLA_FLAGS turns
 * xla_cpu_use_xnnpack off (python/tpuc/_xla_flags.py does, unless the user names it). The
 * last occurrence wins, as in XLA's own parser. */
static bool xnn_may_capture(void) {
  const char *f = getenv("XLA_FLAGS");
  static const char name[] = "xla_cpu_use_xnnpack";
  bool on = true;
  while (f && *f) {
    while (*f == ' ' || *f == '\t' || *f == '\n') f++;
    const char *w = f;
    while (*f && *f != ' ' && *f != '\t' && *f != '\n') f++;
    while (w < f && *w == '-') w++;
    size_t n = sizeof name - 1;
    if ((size_t)(f - w) >= n && !strncmp(w, name, n)) {
      const char *v = w + n;
      if (v == f) on = true;
      else if (*v == '=') {
        v++;
        size_t len = (size_t)(f - v);
        on = !((len == 5 && !strncmp(v, "false", 5)) || (len == 1 && *v == '0'));
      }
    }
  }
  return on;
}

/* A switch of the engine: on unless the variable is "0". */
static bool switch_on(const char *name) {
  const char *v = getenv(name);
  return !(v && !strcmp(v, "0"));
}

tpuc_status *tpuc_runtime_create(const tpuc_runtime_options *opts, tpuc_runtime **out) {
  return runtime_create(opts, NULL, out);
}

tpuc_status *tpuc_runtime_create_multiprocess(const tpuc_runtime_options *opts,
                                              const tpuc_process_options *process,
                                              tpuc_runtime **out) {
  *out = NULL;
  if (!process)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                            "tpuc_runtime_create_multiprocess: no process options given");
  if (process->num_processes < 1 || process->process_id < 0 ||
      process->process_id >= process->num_processes)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                            "tpuc_runtime_create_multiprocess: process %d of %d is not a "
                            "process of the job (0 <= process_id < num_processes)",
                            process->process_id, process->num_processes);
  if (process->num_processes > 1 &&
      (!process->kv_store || !process->kv_store->get || !process->kv_store->put))
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                            "tpuc_runtime_create_multiprocess: %d processes need a key-value "
                            "store with get and put",
                            process->num_processes);
  return runtime_create(opts, process, out);
}

static tpuc_status *runtime_create(const tpuc_runtime_options *opts,
                                   const tpuc_process_options *process, tpuc_runtime **out) {
  *out = NULL;
  const char *path = opts && opts->plugin_path ? opts->plugin_path : getenv("TPUC_PJRT_PLUGIN");
  int cpu_devices = opts && opts->cpu_device_count > 0 ? opts->cpu_device_count
                                                       : env_int("TPUC_CPU_DEVICE_COUNT", 1);
  tpuc_runtime *rt = calloc(1, sizeof *rt);
  if (!rt) return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  pthread_mutex_init(&rt->mem_lock, NULL);
  pthread_mutex_init(&rt->cache_lock, NULL);
  pthread_cond_init(&rt->compile_done, NULL);
  pthread_mutex_init(&rt->sync_lock, NULL);
  pthread_mutex_init(&rt->fast_lock, NULL);
  pthread_mutex_init(&rt->hook_lock, NULL);
  atomic_init(&rt->executions, 0);
  atomic_init(&rt->donations, 0);
  atomic_init(&rt->live_objects, 0);
  rt->num_processes = 1;
  if (process) {
    rt->process_id = process->process_id;
    rt->num_processes = process->num_processes;
    if (process->kv_store) {
      rt->kv = *process->kv_store;
      rt->has_kv = true;
    }
  }
  tpuc_progress_init(rt);

  tpuc_status *s = tpuc_plugin_load(path, &rt->plugin);
  if (!s) s = create_client(rt, cpu_devices);
  if (!s) s = client_string(rt, PJ_SLOT_CLIENT_PLATFORM_NAME, "PJRT_Client_PlatformName",
                            &rt->platform_name);
  if (!s) s = client_string(rt, PJ_SLOT_CLIENT_PLATFORM_VERSION, "PJRT_Client_PlatformVersion",
                            &rt->platform_version);
  if (!s) s = tpuc_op_options_decide(tpuc_plugin_kind_of(rt->plugin.path),
                                     getenv("TPUC_OP_XLA_OPTIONS"), &rt->op_options);
  if (!s) s = tpuc_compile_ahead_decide(tpuc_plugin_kind_of(rt->plugin.path),
                                        getenv("TPUC_COMPILE_AHEAD"), &rt->compile_ahead);
  if (!s) s = list_devices(rt);
  if (!s) s = tpuc_checks_init(rt);
  if (!s) tpuc_memory_limit_init(rt);
  if (s) {
    tpuc_runtime_destroy(rt);
    return s;
  }
  read_attributes(rt);
  atomic_init(&rt->donate, switch_on("TPUC_DONATE"));
  rt->dot_rewrite = switch_on("TPUC_DOT_REWRITE");
  rt->slice_inplace = switch_on("TPUC_SLICE_INPLACE");
  rt->scalar_cache = switch_on("TPUC_SCALAR_CACHE");
  {
    const char *v = getenv("TPUC_SUM_BLOCK");
    long long b = v && *v ? atoll(v) : 256;
    rt->sum_block = b >= 2 ? (int64_t)b : 0;
  }
  /* on by default (docs/execution.md, "Fewer programs"): rank-1 storage buffers, so a
   * program's signature does not depend on the shape a storage was last written at; never
   * on a TPU, whose tiled layouts make a reshape a copy. Merged pointwise calls follow it
   * (alone they gave one program more, not fewer) unless TPUC_CANONICAL says otherwise. */
  const char *flat = getenv("TPUC_FLAT_BUFFERS"), *canon = getenv("TPUC_CANONICAL");
  bool on_tpu = rt->platform_name && !strcmp(rt->platform_name, "tpu");
  rt->flat_buffers = (flat && *flat ? strcmp(flat, "0") != 0 : true) && !on_tpu;
  rt->canonical = canon && *canon ? strcmp(canon, "0") != 0 : rt->flat_buffers;
  /* opt-in (docs/execution.md, "Host-first"): TPUC_HOST_FIRST=1 */
  const char *hf = getenv("TPUC_HOST_FIRST"), *hf_mb = getenv("TPUC_HOST_FIRST_MAX_MB");
  rt->host_first = hf && !strcmp(hf, "1");
  rt->host_first_max_bytes = (hf_mb && *hf_mb ? atoll(hf_mb) : 64) << 20;
  /* on by default (docs/execution.md, "Fewer programs"): constant fills upload */
  const char *fill_kb = getenv("TPUC_HOST_FILL_MAX_KB");
  rt->host_fill_max_bytes = (fill_kb && *fill_kb ? atoll(fill_kb) : 1024) << 10;
  rt->xnn_may_capture = xnn_may_capture();
  tpuc_disk_cache_init(rt, opts ? opts->cache_dir : NULL, opts ? opts->cache_max_bytes : 0);
  tpuc_preload_start(rt, opts ? opts->cache_preload : 0);
  *out = rt;
  return NULL;
}

void tpuc_stop_background_compiles(tpuc_runtime *rt) {
  if (!rt) return;
  tpuc_preload_stop(rt);
  tpuc_compile_pool_stop(rt);
  tpuc_progress_stop(rt);
}

void tpuc_runtime_destroy(tpuc_runtime *rt) {
  if (!rt) return;
  tpuc_preload_destroy(rt); /* before the caches and the client it loads into */
  tpuc_fused_destroy(rt);
  tpuc_compile_pool_destroy(rt); /* before the caches and the client it compiles into */
  tpuc_progress_destroy(rt);      /* after the last compile */
  if (rt->devices) tpuc_status_destroy(tpuc_synchronize(rt, -1));
  tpuc_barrier_destroy(rt);
  tpuc_checks_destroy(rt);
  tpuc_fast_cache_clear(rt);
  free(rt->fast_buckets);
  tpuc_recompiles_destroy(rt);
  tpuc_cache_clear(rt);
  if (rt->client) {
    pj_generic_fn destroy = (pj_generic_fn)tpuc_plugin_fn(&rt->plugin, PJ_SLOT_CLIENT_DESTROY);
    if (destroy) {
      pj_client_destroy_args a = {0};
      a.struct_size = PJ_SIZE(pj_client_destroy_args, client);
      a.client = rt->client;
      tpuc_status_destroy(tpuc_plugin_error(&rt->plugin, destroy(&a), NULL));
    }
  }
  for (int i = 0; i < rt->device_count; i++) {
    free(rt->devices[i].kind);
    free(rt->devices[i].description);
  }
  free(rt->devices);
  free(rt->platform_name);
  free(rt->platform_version);
  free(rt->cache_buckets);
  free(rt->disk_dir);
  free(rt->disk_host_isa);
  tpuc_plugin_unload(&rt->plugin);
  pthread_mutex_destroy(&rt->mem_lock);
  pthread_mutex_destroy(&rt->cache_lock);
  pthread_cond_destroy(&rt->compile_done);
  pthread_mutex_destroy(&rt->sync_lock);
  pthread_mutex_destroy(&rt->fast_lock);
  pthread_mutex_destroy(&rt->hook_lock);
  free(rt);
}

void tpuc_set_donation(tpuc_runtime *rt, bool on) { atomic_store(&rt->donate, on); }

void tpuc_runtime_info_get(const tpuc_runtime *rt, tpuc_runtime_info *out) {
  memset(out, 0, sizeof *out);
  out->plugin_path = rt->plugin.path;
  out->platform_name = rt->platform_name;
  out->platform_version = rt->platform_version;
  out->pjrt_api_major = rt->plugin.api_major;
  out->pjrt_api_minor = rt->plugin.api_minor;
  out->xla_version = rt->xla_version;
  memcpy(out->stablehlo_current, rt->shlo_current, sizeof out->stablehlo_current);
  memcpy(out->stablehlo_minimum, rt->shlo_minimum, sizeof out->stablehlo_minimum);
  out->device_count = rt->device_count;
  out->op_xla_options = rt->op_options.text;
  out->op_xla_options_from_env = rt->op_options.from_env;
  out->compile_ahead = rt->compile_ahead;
  out->compile_threads = tpuc_compile_pool_threads(rt);
  out->compile_nice = tpuc_compile_pool_nice();
}

static tpuc_status *check_device(const tpuc_runtime *rt, int device) {
  if (device < 0 || device >= rt->device_count)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                            "device index %d is out of range: this runtime has %d device(s) "
                            "(valid indices 0..%d)",
                            device, rt->device_count, rt->device_count - 1);
  return NULL;
}

tpuc_status *tpuc_device_info_get(const tpuc_runtime *rt, int device, tpuc_device_info *out) {
  tpuc_status *s = check_device(rt, device);
  if (s) return s;
  const tpuc_device_rec *d = &rt->devices[device];
  out->id = d->id;
  out->local_index = device;
  out->kind = d->kind;
  out->description = d->description;
  return NULL;
}

void tpuc_runtime_account(tpuc_runtime *rt, int device, int64_t delta) {
  pthread_mutex_lock(&rt->mem_lock);
  tpuc_device_rec *d = &rt->devices[device];
  d->bytes_in_use += delta;
  if (delta > 0) {
    d->num_buffers++;
    d->num_allocs++;
  } else {
    d->num_buffers--;
  }
  if (d->bytes_in_use > d->peak_bytes) d->peak_bytes = d->bytes_in_use;
  pthread_mutex_unlock(&rt->mem_lock);
}

void tpuc_runtime_note_transient(tpuc_runtime *rt, int device, int64_t transient) {
  pthread_mutex_lock(&rt->mem_lock);
  tpuc_device_rec *d = &rt->devices[device];
  if (d->bytes_in_use + transient > d->peak_bytes) d->peak_bytes = d->bytes_in_use + transient;
  pthread_mutex_unlock(&rt->mem_lock);
}

tpuc_status *tpuc_memory_stats_get(tpuc_runtime *rt, int device, tpuc_memory_stats *out) {
  tpuc_status *s = check_device(rt, device);
  if (s) return s;
  pthread_mutex_lock(&rt->mem_lock);
  const tpuc_device_rec *d = &rt->devices[device];
  out->bytes_in_use = d->bytes_in_use;
  out->peak_bytes_in_use = d->peak_bytes;
  out->num_buffers = d->num_buffers;
  out->num_allocs = d->num_allocs;
  out->limit_bytes = d->limit_bytes;
  out->num_ooms = d->num_ooms;
  pthread_mutex_unlock(&rt->mem_lock);
  return NULL;
}

tpuc_status *tpuc_memory_reset_peak(tpuc_runtime *rt, int device) {
  tpuc_status *s = check_device(rt, device);
  if (s) return s;
  pthread_mutex_lock(&rt->mem_lock);
  rt->devices[device].peak_bytes = rt->devices[device].bytes_in_use;
  pthread_mutex_unlock(&rt->mem_lock);
  return NULL;
}

void tpuc_runtime_stats_get(tpuc_runtime *rt, tpuc_runtime_stats *out) {
  memset(out, 0, sizeof *out);
  out->executions = atomic_load(&rt->executions);
  pthread_mutex_lock(&rt->cache_lock);
  out->compiles = rt->compiles;
  out->cache_hits = rt->cache_hits;
  out->cache_misses = rt->cache_misses;
  out->compile_seconds = rt->compile_seconds;
  out->cached_executables = (int64_t)rt->cache_count;
  out->disk_hits = rt->disk_hits;
  out->disk_misses = rt->disk_misses;
  out->disk_writes = rt->disk_writes;
  out->disk_corrupt = rt->disk_corrupt;
  out->disk_evictions = rt->disk_evictions;
  out->load_seconds = rt->load_seconds;
  out->donations = atomic_load(&rt->donations);
  out->compiles_ahead = rt->compiles_submitted;
  out->compile_joins = rt->compile_joins;
  out->preloaded = rt->preloaded;
  out->preload_seconds = rt->preload_seconds;
  pthread_mutex_unlock(&rt->cache_lock);
}

void tpuc_process_info_get(tpuc_runtime *rt, tpuc_process_info *out) {
  memset(out, 0, sizeof *out);
  out->process_index = -1;
  out->global_device_count = -1;
  out->device_count = rt->device_count;
  out->num_processes = rt->num_processes;
  out->kv_store = rt->has_kv;
  out->create_options = rt->create_options;
  pj_generic_fn idx = (pj_generic_fn)tpuc_plugin_fn(&rt->plugin, PJ_SLOT_CLIENT_PROCESS_INDEX);
  if (idx) {
    pj_client_process_index_args a = {0};
    a.struct_size = PJ_SIZE(pj_client_process_index_args, process_index);
    a.client = rt->client;
    tpuc_status *s = tpuc_plugin_error(&rt->plugin, idx(&a), NULL);
    if (!s) out->process_index = a.process_index;
    tpuc_status_destroy(s);
  }
  pj_generic_fn devs = (pj_generic_fn)tpuc_plugin_fn(&rt->plugin, PJ_SLOT_CLIENT_DEVICES);
  if (devs) {
    pj_client_devices_args a = {0};
    a.struct_size = PJ_SIZE(pj_client_devices_args, num_devices);
    a.client = rt->client;
    tpuc_status *s = tpuc_plugin_error(&rt->plugin, devs(&a), NULL);
    if (!s) out->global_device_count = (int)a.num_devices;
    tpuc_status_destroy(s);
  }
}
