/* test_kv_bridge.c — the key-value bridge of multi-process clients
 * (pjrt/kv_bridge.c): this test plays the plugin's part, calling the PJRT
 * get / try_get / put callbacks the way XLA's wrapper does (argument structs
 * without struct_size, an error maker passed by pointer, the value released
 * through the returned deleter), against a fake in-memory store. Values
 * round-trip byte for byte, a get waits for a put from another thread, a
 * missing key is NOT_FOUND (try_get) or DEADLINE_EXCEEDED (get), the store's
 * own failures reach the plugin with their code and message, and concurrent
 * use is safe. Then tpuc_runtime_create_multiprocess on the real plugin:
 * argument checks, what it reports, and that the XLA CPU plugin never touches
 * the store. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "../pjrt/kv_bridge.h"
#include "../runtime/internal.h"
#include "harness.h"

harness g_h;

/* ---- the plugin's side: its errors ---- */
typedef struct {
  int code;
  char message[512];
} fake_error;

static pj_error *make_error(int code, const char *message, size_t n) {
  fake_error *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->code = code;
  if (n >= sizeof e->message) n = sizeof e->message - 1;
  memcpy(e->message, message, n);
  return (pj_error *)e;
}
static pj_callback_error_fn g_maker = make_error;

static int take_code(pj_error *err, char *msg, size_t cap) {
  if (!err) return 0;
  fake_error *e = (fake_error *)err;
  int c = e->code;
  if (msg) snprintf(msg, cap, "%s", e->message);
  free(e);
  return c;
}

/* ---- a fake store ---- */
#define SLOTS 1024
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char *keys[SLOTS];
  char *vals[SLOTS];
  size_t lens[SLOTS];
  int n;
  int calls;
  tpuc_code fail_with; /* TPUC_OK: work */
} fake_store;

static int find(fake_store *f, const char *k, size_t kl) {
  for (int i = 0; i < f->n; i++)
    if (strlen(f->keys[i]) == kl && !memcmp(f->keys[i], k, kl)) return i;
  return -1;
}

static tpuc_status *fs_get(void *user, const char *key, size_t kl, int timeout_ms,
                           tpuc_kv_value *v) {
  fake_store *f = user;
  pthread_mutex_lock(&f->mu);
  f->calls++;
  if (f->fail_with != TPUC_OK) {
    pthread_mutex_unlock(&f->mu);
    return tpuc_status_create(f->fail_with, "the store is down");
  }
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  long ms = timeout_ms < 0 ? 0 : timeout_ms;
  dl.tv_sec += ms / 1000;
  dl.tv_nsec += (ms % 1000) * 1000000L;
  if (dl.tv_nsec >= 1000000000L) {
    dl.tv_sec++;
    dl.tv_nsec -= 1000000000L;
  }
  int i;
  while ((i = find(f, key, kl)) < 0 && timeout_ms > 0)
    if (pthread_cond_timedwait(&f->cv, &f->mu, &dl)) break;
  if (i < 0) i = find(f, key, kl);
  if (i >= 0) tpuc_kv_value_set(v, f->vals[i], f->lens[i]);
  pthread_mutex_unlock(&f->mu);
  return NULL;
}

static tpuc_status *fs_put(void *user, const char *key, size_t kl, const char *val,
                           size_t len) {
  fake_store *f = user;
  pthread_mutex_lock(&f->mu);
  f->calls++;
  if (f->fail_with != TPUC_OK) {
    pthread_mutex_unlock(&f->mu);
    return tpuc_status_create(f->fail_with, "the store is down");
  }
  int i = find(f, key, kl);
  if (i < 0 && f->n < SLOTS) {
    i = f->n++;
    f->keys[i] = calloc(1, kl + 1);
    memcpy(f->keys[i], key, kl);
  } else if (i >= 0) {
    free(f->vals[i]);
  }
  if (i >= 0) {
    f->vals[i] = malloc(len ? len : 1);
    memcpy(f->vals[i], val, len);
    f->lens[i] = len;
  }
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
  return NULL;
}

static void fs_init(fake_store *f, tpuc_kv_store *kv) {
  memset(f, 0, sizeof *f);
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  kv->get = fs_get;
  kv->put = fs_put;
  kv->user = f;
}

static void fs_free(fake_store *f) {
  for (int i = 0; i < f->n; i++) {
    free(f->keys[i]);
    free(f->vals[i]);
  }
  pthread_mutex_destroy(&f->mu);
  pthread_cond_destroy(&f->cv);
}

/* ---- calls as the plugin makes them (struct_size left unset) ---- */
static int plugin_put(pj_client_create_args *a, const char *k, const char *v, size_t n,
                      char *msg, size_t cap) {
  pj_kv_put_args p;
  memset(&p, 0xAB, sizeof p); /* XLA's wrapper does not zero the struct */
  p.key = k;
  p.key_size = strlen(k);
  p.value = v;
  p.value_size = n;
  p.callback_error = &g_maker;
  p.user_arg = a->kv_put_user_arg;
  return take_code(a->kv_put_callback(&p), msg, cap);
}

/* Returns the PJRT code; on success copies the value to out (*n bytes). */
static int plugin_get(pj_client_create_args *a, const char *k, int timeout_ms, bool try_only,
                      char *out, size_t *n, char *msg, size_t cap) {
  char *value;
  size_t size;
  pj_kv_value_deleter del;
  pj_error *e;
  if (try_only) {
    pj_kv_try_get_args g;
    memset(&g, 0xAB, sizeof g);
    g.key = k;
    g.key_size = strlen(k);
    g.callback_error = &g_maker;
    g.user_arg = a->kv_try_get_user_arg;
    e = a->kv_try_get_callback(&g);
    value = g.value, size = g.value_size, del = g.value_deleter;
  } else {
    pj_kv_get_args g;
    memset(&g, 0xAB, sizeof g);
    g.key = k;
    g.key_size = strlen(k);
    g.timeout_in_ms = timeout_ms;
    g.callback_error = &g_maker;
    g.user_arg = a->kv_get_user_arg;
    e = a->kv_get_callback(&g);
    value = g.value, size = g.value_size, del = g.value_deleter;
  }
  if (e) return take_code(e, msg, cap);
  memcpy(out, value, size);
  *n = size;
  del(value); /* the plugin copies, then releases through the deleter */
  return 0;
}

static void test_attach_sets_every_callback(void) {
  fake_store f;
  tpuc_kv_store kv;
  fs_init(&f, &kv);
  pj_client_create_args a = {0};
  tpuc_kv_bridge_attach(&kv, &a);
  CHECK(a.kv_get_callback && a.kv_try_get_callback && a.kv_put_callback);
  CHECK(a.kv_get_user_arg == &kv && a.kv_try_get_user_arg == &kv && a.kv_put_user_arg == &kv);
  fs_free(&f);
}

static void test_values_round_trip_byte_for_byte(void) {
  fake_store f;
  tpuc_kv_store kv;
  fs_init(&f, &kv);
  pj_client_create_args a = {0};
  tpuc_kv_bridge_attach(&kv, &a);
  const char bin[6] = {'a', 0, 'b', (char)0xff, 0, 'c'};
  CHECK(plugin_put(&a, "gpu:local_topology/0", bin, sizeof bin, NULL, 0) == 0);
  CHECK(plugin_put(&a, "empty", "", 0, NULL, 0) == 0);
  char out[64];
  size_t n = 99;
  CHECK(plugin_get(&a, "gpu:local_topology/0", 1000, false, out, &n, NULL, 0) == 0);
  CHECK(n == sizeof bin && !memcmp(out, bin, n));
  n = 99;
  CHECK(plugin_get(&a, "gpu:local_topology/0", 0, true, out, &n, NULL, 0) == 0);
  CHECK(n == sizeof bin && !memcmp(out, bin, n));
  n = 99;
  CHECK(plugin_get(&a, "empty", 0, true, out, &n, NULL, 0) == 0);
  CHECK(n == 0);
  /* a second put replaces the value */
  CHECK(plugin_put(&a, "empty", "xyz", 3, NULL, 0) == 0);
  CHECK(plugin_get(&a, "empty", 10, false, out, &n, NULL, 0) == 0);
  CHECK(n == 3 && !memcmp(out, "xyz", 3));
  fs_free(&f);
}

static void test_missing_keys(void) {
  fake_store f;
  tpuc_kv_store kv;
  fs_init(&f, &kv);
  pj_client_create_args a = {0};
  tpuc_kv_bridge_attach(&kv, &a);
  char out[8], msg[512];
  size_t n;
  CHECK(plugin_get(&a, "nope", 0, true, out, &n, msg, sizeof msg) == PJ_CODE_NOT_FOUND);
  CHECK(strstr(msg, "'nope'") != NULL);
  CHECK(plugin_get(&a, "nope", 30, false, out, &n, msg, sizeof msg) == PJ_CODE_DEADLINE_EXCEEDED);
  CHECK(strstr(msg, "'nope'") && strstr(msg, "30 ms"));
  fs_free(&f);
}

static void test_store_errors_reach_the_plugin(void) {
  fake_store f;
  tpuc_kv_store kv;
  fs_init(&f, &kv);
  pj_client_create_args a = {0};
  tpuc_kv_bridge_attach(&kv, &a);
  char out[8], msg[512];
  size_t n;
  f.fail_with = TPUC_ERR_RUNTIME;
  CHECK(plugin_put(&a, "k1", "v", 1, msg, sizeof msg) == PJ_CODE_UNAVAILABLE);
  CHECK(strstr(msg, "the store is down") && strstr(msg, "put 'k1'"));
  f.fail_with = TPUC_ERR_INVALID_ARGUMENT;
  CHECK(plugin_get(&a, "k2", 100, false, out, &n, msg, sizeof msg) == PJ_CODE_INVALID_ARGUMENT);
  CHECK(strstr(msg, "the store is down") && strstr(msg, "get 'k2'"));
  f.fail_with = TPUC_ERR_OUT_OF_MEMORY;
  CHECK(plugin_get(&a, "k3", 0, true, out, &n, msg, sizeof msg) == PJ_CODE_RESOURCE_EXHAUSTED);
  /* a store without functions */
  tpuc_kv_store none = {0};
  tpuc_kv_bridge_attach(&none, &a);
  CHECK(plugin_put(&a, "k", "v", 1, msg, sizeof msg) == PJ_CODE_FAILED_PRECONDITION);
  CHECK(plugin_get(&a, "k", 0, true, out, &n, msg, sizeof msg) == PJ_CODE_FAILED_PRECONDITION);
  fs_free(&f);
}

typedef struct {
  pj_client_create_args *a;
  int id;
  int failures;
} worker;

static void *delayed_put(void *arg) {
  worker *w = arg;
  struct timespec d = {0, 50 * 1000000L};
  nanosleep(&d, NULL);
  if (plugin_put(w->a, "late", "here", 4, NULL, 0)) w->failures++;
  return NULL;
}

static void test_get_waits_for_a_put_from_another_thread(void) {
  fake_store f;
  tpuc_kv_store kv;
  fs_init(&f, &kv);
  pj_client_create_args a = {0};
  tpuc_kv_bridge_attach(&kv, &a);
  worker w = {&a, 0, 0};
  pthread_t t;
  pthread_create(&t, NULL, delayed_put, &w);
  char out[8];
  size_t n = 0;
  CHECK(plugin_get(&a, "late", 20000, false, out, &n, NULL, 0) == 0);
  CHECK(n == 4 && !memcmp(out, "here", 4));
  pthread_join(t, NULL);
  CHECK(w.failures == 0);
  fs_free(&f);
}

static void *hammer(void *arg) {
  worker *w = arg;
  for (int i = 0; i < 100; i++) {
    char k[32], v[32], out[32];
    snprintf(k, sizeof k, "w%d/%d", w->id, i);
    snprintf(v, sizeof v, "value %d %d", w->id, i);
    size_t n = 0;
    if (plugin_put(w->a, k, v, strlen(v), NULL, 0)) w->failures++;
    if (plugin_get(w->a, k, 1000, i % 2, out, &n, NULL, 0) || n != strlen(v) ||
        memcmp(out, v, n))
      w->failures++;
  }
  return NULL;
}

static void test_concurrent_use(void) {
  fake_store f;
  tpuc_kv_store kv;
  fs_init(&f, &kv);
  pj_client_create_args a = {0};
  tpuc_kv_bridge_attach(&kv, &a);
  worker w[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (worker){&a, i, 0};
    pthread_create(&t[i], NULL, hammer, &w[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    CHECK(w[i].failures == 0);
  }
  CHECK(f.n == 400);
  fs_free(&f);
}

static void test_multiprocess_arguments_checked(void) {
  tpuc_runtime_options opts = {NULL, 1, "off", 0};
  tpuc_runtime *rt = NULL;
  tpuc_process_options p = {2, 2, NULL};
  tpuc_status *s = tpuc_runtime_create_multiprocess(&opts, &p, &rt);
  CHECK(tpuc_status_code(s) == TPUC_ERR_INVALID_ARGUMENT && !rt);
  CHECK(strstr(tpuc_status_message(s), "process 2 of 2") != NULL);
  tpuc_status_destroy(s);
  p = (tpuc_process_options){1, 2, NULL};
  s = tpuc_runtime_create_multiprocess(&opts, &p, &rt);
  CHECK(tpuc_status_code(s) == TPUC_ERR_INVALID_ARGUMENT && !rt);
  CHECK(strstr(tpuc_status_message(s), "key-value store") != NULL);
  tpuc_status_destroy(s);
  s = tpuc_runtime_create_multiprocess(&opts, NULL, &rt);
  CHECK(tpuc_status_code(s) == TPUC_ERR_INVALID_ARGUMENT);
  tpuc_status_destroy(s);
}

/* The XLA CPU plugin (as released: it reads cpu_device_count only) creates a
 * one-process client even when told of two processes, and never calls the
 * store: a plugin that did would wait here for a second process and fail. */
static void test_cpu_plugin_ignores_the_store(void) {
  fake_store f;
  tpuc_kv_store kv;
  fs_init(&f, &kv);
  tpuc_runtime_options opts = {NULL, 2, "off", 0};
  tpuc_process_options p = {0, 2, &kv};
  tpuc_runtime *rt = NULL;
  CHECK_OK(tpuc_runtime_create_multiprocess(&opts, &p, &rt));
  if (rt) {
    tpuc_process_info pi;
    tpuc_process_info_get(rt, &pi);
    CHECK(pi.kv_store && pi.num_processes == 2);
    CHECK(!strcmp(pi.create_options, "cpu_device_count"));
    CHECK(pi.device_count == 2);
    CHECK(pi.global_device_count == pi.device_count);
    CHECK(pi.process_index == 0);
    CHECK(f.calls == 0);
    tpuc_runtime_destroy(rt);
  }
  /* the one-process creation reports itself too */
  CHECK_OK(tpuc_runtime_create(&opts, &rt));
  if (rt) {
    tpuc_process_info pi;
    tpuc_process_info_get(rt, &pi);
    CHECK(!pi.kv_store && pi.num_processes == 1 && pi.global_device_count == 2);
    tpuc_runtime_destroy(rt);
  }
  fs_free(&f);
}

static void test_status_create(void) {
  tpuc_status *s = tpuc_status_create(TPUC_ERR_RUNTIME, "boom");
  CHECK(tpuc_status_code(s) == TPUC_ERR_RUNTIME && !strcmp(tpuc_status_message(s), "boom"));
  tpuc_status_destroy(s);
  s = tpuc_status_create(TPUC_OK, NULL); /* a status is never OK */
  CHECK(tpuc_status_code(s) == TPUC_ERR_INTERNAL && !strcmp(tpuc_status_message(s), ""));
  tpuc_status_destroy(s);
}

int main(void) {
  RUN(test_attach_sets_every_callback);
  RUN(test_values_round_trip_byte_for_byte);
  RUN(test_missing_keys);
  RUN(test_store_errors_reach_the_plugin);
  RUN(test_get_waits_for_a_put_from_another_thread);
  RUN(test_concurrent_use);
  RUN(test_status_create);
  if (getenv("TPUC_PJRT_PLUGIN")) {
    RUN(test_multiprocess_arguments_checked);
    RUN(test_cpu_plugin_ignores_the_store);
  } else {
    printf("TPUC_PJRT_PLUGIN is not set: the runtime tests need a plugin (make test-c sets it)\n");
    g_h.failed++;
  }
  return harness_end();
}
