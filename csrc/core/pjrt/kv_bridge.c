/* kv_bridge.c — the key-value store of a multi-process PJRT client.
 *
 * PJRT_Client_Create takes get / try_get / put callbacks through which the
 * clients of one job exchange their topology (and, on GPU, NCCL ids). This
 * module implements them on the caller's tpuc_kv_store: it turns the
 * plugin's argument structs into store calls, hands values back in memory the
 * plugin releases through our deleter, and reports failures as PJRT errors
 * made with the plugin's own callback_error, so that their code and message
 * reach the plugin (and from it the caller of tpuc_runtime_create_*):
 *   a store status       its code mapped to the nearest PJRT code, its message
 *   get, key missing     DEADLINE_EXCEEDED after the plugin's timeout
 *   try_get, missing     NOT_FOUND (what PJRT specifies)
 * No state of its own: the user argument is the runtime's copy of the store. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv_bridge.h"

struct tpuc_kv_value {
  char *data;
  size_t len;
  bool set;
  bool oom;
};

bool tpuc_kv_value_set(tpuc_kv_value *v, const char *data, size_t len) {
  if (!v || (!data && len)) return false;
  char *p = malloc(len ? len : 1);
  if (!p) {
    v->oom = true;
    return false;
  }
  if (len) memcpy(p, data, len);
  free(v->data);
  v->data = p;
  v->len = len;
  v->set = true;
  return true;
}

static void free_value(char *value) { free(value); }

static int pjrt_code(tpuc_code c) {
  switch (c) {
    case TPUC_ERR_INVALID_ARGUMENT: return PJ_CODE_INVALID_ARGUMENT;
    case TPUC_ERR_INDEX: return PJ_CODE_OUT_OF_RANGE;
    case TPUC_ERR_UNIMPLEMENTED: return PJ_CODE_UNIMPLEMENTED;
    case TPUC_ERR_OUT_OF_MEMORY: return PJ_CODE_RESOURCE_EXHAUSTED;
    case TPUC_ERR_INTERNAL: return PJ_CODE_INTERNAL;
    case TPUC_ERR_RUNTIME: return PJ_CODE_UNAVAILABLE;
    default: return PJ_CODE_UNKNOWN;
  }
}

/* A PJRT error made by the plugin; NULL only when the plugin gave no maker. */
static pj_error *error(pj_callback_error_fn *maker, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static pj_error *error(pj_callback_error_fn *maker, int code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!maker || !*maker) return NULL;
  return (*maker)(code, msg, strlen(msg));
}

static pj_error *from_status(pj_callback_error_fn *maker, tpuc_status *s, const char *what,
                             const char *key, size_t key_len) {
  pj_error *e = error(maker, pjrt_code(tpuc_status_code(s)), "tpuc key-value store %s '%.*s': %s",
                      what, (int)key_len, key, tpuc_status_message(s));
  tpuc_status_destroy(s);
  return e;
}

/* get and try_get: timeout_ms < 0 does not wait. */
static pj_error *get_common(const tpuc_kv_store *kv, const char *key, size_t key_len,
                            int timeout_ms, pj_callback_error_fn *maker, char **value,
                            size_t *value_size, pj_kv_value_deleter *deleter) {
  *value = NULL;
  *value_size = 0;
  *deleter = free_value;
  const char *what = timeout_ms < 0 ? "try_get" : "get";
  if (!kv || !kv->get)
    return error(maker, PJ_CODE_FAILED_PRECONDITION,
                 "tpuc key-value store %s '%.*s': no store was given", what, (int)key_len, key);
  tpuc_kv_value v = {0};
  tpuc_status *s = kv->get(kv->user, key, key_len, timeout_ms, &v);
  if (s) {
    free(v.data);
    return from_status(maker, s, what, key, key_len);
  }
  if (v.oom) {
    free(v.data);
    return error(maker, PJ_CODE_RESOURCE_EXHAUSTED,
                 "tpuc key-value store %s '%.*s': out of host memory", what, (int)key_len, key);
  }
  if (!v.set) {
    if (timeout_ms < 0)
      return error(maker, PJ_CODE_NOT_FOUND, "tpuc key-value store: key '%.*s' not found",
                   (int)key_len, key);
    return error(maker, PJ_CODE_DEADLINE_EXCEEDED,
                 "tpuc key-value store: key '%.*s' did not appear within %d ms (did every "
                 "process of the job create its client?)",
                 (int)key_len, key, timeout_ms);
  }
  *value = v.data;
  *value_size = v.len;
  return NULL;
}

pj_error *tpuc_kv_bridge_get(pj_kv_get_args *a) {
  int t = a->timeout_in_ms < 0 ? 0 : a->timeout_in_ms;
  return get_common(a->user_arg, a->key, a->key_size, t, a->callback_error, &a->value,
                    &a->value_size, &a->value_deleter);
}

pj_error *tpuc_kv_bridge_try_get(pj_kv_try_get_args *a) {
  return get_common(a->user_arg, a->key, a->key_size, -1, a->callback_error, &a->value,
                    &a->value_size, &a->value_deleter);
}

pj_error *tpuc_kv_bridge_put(pj_kv_put_args *a) {
  const tpuc_kv_store *kv = a->user_arg;
  if (!kv || !kv->put)
    return error(a->callback_error, PJ_CODE_FAILED_PRECONDITION,
                 "tpuc key-value store put '%.*s': no store was given", (int)a->key_size, a->key);
  tpuc_status *s = kv->put(kv->user, a->key, a->key_size, a->value, a->value_size);
  return s ? from_status(a->callback_error, s, "put", a->key, a->key_size) : NULL;
}

void tpuc_kv_bridge_attach(const tpuc_kv_store *kv, pj_client_create_args *a) {
  a->kv_get_callback = tpuc_kv_bridge_get;
  a->kv_get_user_arg = (void *)kv;
  a->kv_try_get_callback = tpuc_kv_bridge_try_get;
  a->kv_try_get_user_arg = (void *)kv;
  a->kv_put_callback = tpuc_kv_bridge_put;
  a->kv_put_user_arg = (void *)kv;
}
