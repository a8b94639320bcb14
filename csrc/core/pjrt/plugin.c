/* plugin.c — finding, loading and checking a PJRT plugin, and turning PJRT
 * errors into tpuc statuses.
 *
 * A plugin is dlopen'ed with RTLD_LOCAL (so plugins of several platforms can
 * coexist) and never dlclose'd: closing tears down static state inside XLA.
 * PJRT_Plugin_Initialize must run once per process and plugin, so the table
 * of initialised plugins is the one piece of process-wide state in the core;
 * it mirrors a fact about the process (which libraries are loaded) and is
 * guarded by a mutex. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin.h"

#define MAX_PLUGINS 8

static pthread_mutex_t g_plugins_lock = PTHREAD_MUTEX_INITIALIZER;
static const pj_api *g_initialized[MAX_PLUGINS];
static int g_ninitialized;

typedef const pj_api *(*get_api_fn)(void);
typedef pj_error *(*init_fn)(pj_plugin_initialize_args *);

void *tpuc_plugin_fn(const tpuc_plugin *p, pj_slot slot) {
  size_t end = offsetof(pj_api, slots) + ((size_t)slot + 1) * sizeof(void *);
  if (!p->api || p->api->struct_size < end) return NULL;
  return p->api->slots[slot];
}

tpuc_status *tpuc_plugin_missing(const tpuc_plugin *p, const char *what) {
  return tpuc_status_make(TPUC_ERR_UNIMPLEMENTED,
                          "the PJRT plugin %s (PJRT API %d.%d) lacks %s; tpuc needs a plugin "
                          "with PJRT API 0.57 or newer that provides it",
                          p->path ? p->path : "?", p->api_major, p->api_minor, what);
}

static tpuc_code code_from_pjrt(int c) {
  switch (c) {
    case PJ_CODE_INVALID_ARGUMENT:
    case PJ_CODE_OUT_OF_RANGE:
    case PJ_CODE_FAILED_PRECONDITION:
    case PJ_CODE_NOT_FOUND:
    case PJ_CODE_ALREADY_EXISTS:
      return TPUC_ERR_INVALID_ARGUMENT;
    case PJ_CODE_RESOURCE_EXHAUSTED:
      return TPUC_ERR_OUT_OF_MEMORY;
    case PJ_CODE_UNIMPLEMENTED:
      return TPUC_ERR_UNIMPLEMENTED;
    default:
      return TPUC_ERR_RUNTIME;
  }
}

static bool contains(const char *s, size_t n, const char *w) {
  size_t k = strlen(w);
  for (size_t i = 0; i + k <= n; i++)
    if (!memcmp(s + i, w, k)) return true;
  return false;
}

tpuc_status *tpuc_plugin_error(const tpuc_plugin *p, pj_error *err, const char *what) {
  if (!err) return NULL;
  typedef void (*msg_fn)(pj_error_message_args *);
  typedef pj_error *(*code_fn)(pj_error_get_code_args *);
  typedef void (*destroy_fn)(pj_error_destroy_args *);
  msg_fn msg = (msg_fn)tpuc_plugin_fn(p, PJ_SLOT_ERROR_MESSAGE);
  code_fn getcode = (code_fn)tpuc_plugin_fn(p, PJ_SLOT_ERROR_GET_CODE);
  destroy_fn destroy = (destroy_fn)tpuc_plugin_fn(p, PJ_SLOT_ERROR_DESTROY);

  const char *text = "(the plugin gave no message)";
  size_t text_len = strlen(text);
  if (msg) {
    pj_error_message_args a = {0};
    a.struct_size = PJ_SIZE(pj_error_message_args, message_size);
    a.error = err;
    msg(&a);
    if (a.message) {
      text = a.message;
      text_len = a.message_size;
    }
  }
  int code = PJ_CODE_UNKNOWN;
  if (getcode) {
    pj_error_get_code_args a = {0};
    a.struct_size = PJ_SIZE(pj_error_get_code_args, code);
    a.error = err;
    pj_error *e2 = getcode(&a);
    if (!e2) code = a.code;
    else if (destroy) {
      pj_error_destroy_args d = {0};
      d.struct_size = PJ_SIZE(pj_error_destroy_args, error);
      d.error = e2;
      destroy(&d);
    }
  }
  tpuc_code tc = code_from_pjrt(code);
  /* The XLA CPU plugin reports a failed allocation inside an asynchronous
   * execution ("Error preparing computation: Out of memory allocating N
   * bytes") without RESOURCE_EXHAUSTED: recognise its words (all versions
   * seen, xla-cpu-pjrt 0.x) so that it is an out-of-memory error too. */
  if (tc == TPUC_ERR_RUNTIME &&
      (contains(text, text_len, "Out of memory") || contains(text, text_len, "RESOURCE_EXHAUSTED")))
    tc = TPUC_ERR_OUT_OF_MEMORY;
  tpuc_status *s = tpuc_status_make(tc, "%s: %.*s", what ? what : "PJRT", (int)text_len, text);
  if (destroy) {
    pj_error_destroy_args d = {0};
    d.struct_size = PJ_SIZE(pj_error_destroy_args, error);
    d.error = err;
    destroy(&d);
  }
  return s;
}

tpuc_status *tpuc_plugin_load(const char *path, tpuc_plugin *out) {
  memset(out, 0, sizeof *out);
  if (!path || !*path)
    return tpuc_status_make(TPUC_ERR_PLUGIN,
                            "no PJRT plugin given: set TPUC_PJRT_PLUGIN=/path/to/plugin.so or "
                            "install the XLA CPU plugin (pip install xla-cpu-pjrt)");
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    return tpuc_status_make(TPUC_ERR_PLUGIN,
                            "cannot load the PJRT plugin '%s': %s. Point TPUC_PJRT_PLUGIN at an "
                            "existing PJRT plugin (.so), or unset it to use the default plugin",
                            path, why ? why : "unknown dlopen error");
  }
  get_api_fn get_api = (get_api_fn)dlsym(h, "GetPjrtApi");
  if (!get_api)
    return tpuc_status_make(TPUC_ERR_PLUGIN,
                            "'%s' is not a PJRT plugin: it exports no GetPjrtApi symbol. Point "
                            "TPUC_PJRT_PLUGIN at a PJRT plugin (.so)",
                            path);
  const pj_api *api = get_api();
  if (!api || api->struct_size < offsetof(pj_api, slots))
    return tpuc_status_make(TPUC_ERR_PLUGIN, "the PJRT plugin '%s' returned an invalid API table",
                            path);
  out->api = api;
  out->api_major = api->pjrt_api_version.major_version;
  out->api_minor = api->pjrt_api_version.minor_version;
  out->path = strdup(path);
  if (!out->path) return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  if (out->api_major != PJ_ABI_MAJOR || out->api_minor < 57) {
    tpuc_status *s = tpuc_status_make(
        TPUC_ERR_PLUGIN,
        "the PJRT plugin '%s' has PJRT API %d.%d; tpuc speaks %d.%d and accepts 0.57 to 0.%d "
        "(older tables have another layout). Install a newer plugin",
        path, out->api_major, out->api_minor, PJ_ABI_MAJOR, PJ_ABI_MINOR, PJ_ABI_MINOR);
    tpuc_plugin_unload(out);
    return s;
  }

  pthread_mutex_lock(&g_plugins_lock);
  bool done = false;
  for (int i = 0; i < g_ninitialized; i++) done |= g_initialized[i] == api;
  tpuc_status *s = NULL;
  if (!done) {
    init_fn init = (init_fn)tpuc_plugin_fn(out, PJ_SLOT_PLUGIN_INITIALIZE);
    if (init) {
      pj_plugin_initialize_args a = {0};
      a.struct_size = PJ_SIZE(pj_plugin_initialize_args, extension_start);
      s = tpuc_plugin_error(out, init(&a), "PJRT_Plugin_Initialize");
    }
    if (!s && g_ninitialized < MAX_PLUGINS) g_initialized[g_ninitialized++] = api;
  }
  pthread_mutex_unlock(&g_plugins_lock);
  if (s) tpuc_plugin_unload(out);
  return s;
}

void tpuc_plugin_unload(tpuc_plugin *p) {
  free(p->path);
  p->path = NULL;
  p->api = NULL;
}
