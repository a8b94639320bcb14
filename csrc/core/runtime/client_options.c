/* client_options.c — the named options tpuc gives PJRT_Client_Create, chosen
 * by the kind of plugin (its file name) and the environment.
 *
 *   XLA CPU plugin   cpu_device_count (TPUC_CPU_DEVICE_COUNT, via the caller)
 *   GPU plugins      preallocate=false, memory_fraction=0.9 (TPUC_GPU_PREALLOCATE,
 *                    TPUC_GPU_MEMORY_FRACTION, TPUC_GPU_ALLOCATOR), and in a job of
 *                    several processes node_id / num_nodes
 *   libtpu           nothing (it learns the topology itself)
 *
 * Why GPU plugins do not preallocate: XLA's GPU client reserves 75% of the
 * card for its pool when it starts (its default, JAX's too), so a second
 * client in the process, PyTorch's own CUDA allocator or another process on
 * the same GPU runs out of memory at once (seen on an H200: two runtimes in
 * one process -> CUDA OOM). A PyTorch user expects memory to be taken as
 * tensors need it, as torch.cuda does. The pool then grows on demand up to
 * memory_fraction of the card. The option names and types are the GPU
 * plugin's (xla/pjrt/c/pjrt_c_api_gpu_internal.cc: "preallocate" bool,
 * "memory_fraction" float, "allocator" string); a plugin that rejects them is
 * retried without options by the caller (runtime.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char *base_name(const char *path) {
  const char *base = strrchr(path, '/');
  return base ? base + 1 : path;
}

tpuc_plugin_kind tpuc_plugin_kind_of(const char *path) {
  const char *b = base_name(path ? path : "");
  if (strstr(b, "cpu")) return TPUC_PLUGIN_CPU;
  if (strstr(b, "tpu")) return TPUC_PLUGIN_TPU;
  if (strstr(b, "cuda") || strstr(b, "rocm") || strstr(b, "gpu")) return TPUC_PLUGIN_GPU;
  return TPUC_PLUGIN_OTHER;
}

static pj_named_value *next(tpuc_client_options *o, const char *name, pj_named_value_type t) {
  pj_named_value *v = &o->v[o->n++];
  memset(v, 0, sizeof *v);
  v->struct_size = PJ_SIZE(pj_named_value, value_size);
  v->name = name;
  v->name_size = strlen(name);
  v->type = t;
  v->value_size = 1;
  size_t len = strlen(o->names);
  snprintf(o->names + len, sizeof o->names - len, "%s%s", len ? "," : "", name);
  return v;
}

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

static tpuc_status *gpu_options(tpuc_client_options *o) {
  const char *pre = env("TPUC_GPU_PREALLOCATE");
  bool preallocate = false;
  if (pre && !strcmp(pre, "1")) preallocate = true;
  else if (pre && strcmp(pre, "0"))
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                            "TPUC_GPU_PREALLOCATE=%s: expected 0 (take GPU memory as tensors "
                            "need it, the default) or 1 (reserve memory_fraction of the GPU at "
                            "start)", pre);
  next(o, "preallocate", PJ_NV_BOOL)->bool_value = preallocate;

  const char *frac = env("TPUC_GPU_MEMORY_FRACTION");
  double f = 0.9;
  if (frac) {
    char *end = NULL;
    errno = 0;
    f = strtod(frac, &end);
    if (errno || !end || *end || !(f > 0.0 && f <= 1.0))
      return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                              "TPUC_GPU_MEMORY_FRACTION=%s: expected a number in (0, 1], the "
                              "share of the GPU's memory tpuc's pool may grow to", frac);
  }
  next(o, "memory_fraction", PJ_NV_FLOAT)->float_value = (float)f;

  const char *alloc = env("TPUC_GPU_ALLOCATOR");
  if (alloc) {
    static const char *const known[] = {"default", "bfc", "platform", "cuda_async"};
    bool ok = false;
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) ok = ok || !strcmp(alloc, known[i]);
    if (!ok)
      return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                              "TPUC_GPU_ALLOCATOR=%s: expected default, bfc, platform or "
                              "cuda_async (XLA's GPU allocators)", alloc);
    snprintf(o->allocator, sizeof o->allocator, "%s", alloc);
    pj_named_value *v = next(o, "allocator", PJ_NV_STRING);
    v->string_value = o->allocator;
    v->value_size = strlen(o->allocator);
  }
  return NULL;
}

tpuc_status *tpuc_client_options_make(tpuc_plugin_kind kind, int cpu_devices, int process_id,
                                      int num_processes, tpuc_client_options *out) {
  memset(out, 0, sizeof *out);
  if (kind == TPUC_PLUGIN_CPU) {
    next(out, "cpu_device_count", PJ_NV_INT64)->int64_value = cpu_devices;
    return NULL;
  }
  if (kind == TPUC_PLUGIN_GPU) {
    tpuc_status *s = gpu_options(out);
    if (s) return s;
  }
  if (num_processes > 1 && kind != TPUC_PLUGIN_TPU) {
    next(out, "node_id", PJ_NV_INT64)->int64_value = process_id;
    next(out, "num_nodes", PJ_NV_INT64)->int64_value = num_processes;
  }
  return NULL;
}
