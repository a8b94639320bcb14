/* test_runtime.c — tests of the C core runtime against a real PJRT plugin
 * (the path comes from $TPUC_PJRT_PLUGIN): loading, devices, transfers,
 * compiling and running add / dot_general / reduce in f32, bf16 and i32
 * against host-computed values, the executable cache, errors and the
 * accounting of live bytes. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "../runtime/internal.h"
#include "harness.h"

harness g_h;
static tpuc_runtime *rt;

/* ---- host helpers ---- */
static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1); /* round to nearest even */
  return (uint16_t)(u >> 16);
}
static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Values of a test tensor, as doubles, exactly representable in every dtype. */
static double val(int i, int salt) { return (double)(((i * 7 + salt * 3) % 11) - 5) * 0.5; }

static void fill(tpuc_dtype t, void *dst, int n, int salt) {
  for (int i = 0; i < n; i++) {
    double v = val(i, salt);
    if (t == TPUC_F32) ((float *)dst)[i] = (float)v;
    if (t == TPUC_BF16) ((uint16_t *)dst)[i] = f32_to_bf16((float)v);
    if (t == TPUC_S32) ((int32_t *)dst)[i] = (int32_t)(v * 2);
  }
}
static double host_value(tpuc_dtype t, const void *src, int i) {
  if (t == TPUC_F32) return ((const float *)src)[i];
  if (t == TPUC_BF16) return bf16_to_f32(((const uint16_t *)src)[i]);
  return ((const int32_t *)src)[i];
}

static tpuc_buffer *upload(tpuc_dtype t, const int64_t *dims, int ndim, int salt) {
  int n = 1;
  for (int i = 0; i < ndim; i++) n *= (int)dims[i];
  char data[4 * 64];
  fill(t, data, n, salt);
  tpuc_buffer *b = NULL;
  CHECK_OK(tpuc_buffer_from_host(rt, 0, t, dims, ndim, data, &b));
  return b;
}

/* Runs `text` on the buffers, checks one output of `n` elements against
 * `expect`. */
static void run_and_check(const char *text, tpuc_buffer **args, int nargs, tpuc_dtype t,
                          const double *expect, int n) {
  tpuc_executable *e = NULL;
  CHECK_OK(tpuc_compile(rt, text, strlen(text), &e));
  if (!e) return;
  CHECK(tpuc_executable_num_outputs(e) == 1);
  CHECK(tpuc_executable_output_dtype(e, 0) == t);
  tpuc_buffer *out = NULL;
  CHECK_OK(tpuc_execute(e, 0, args, nargs, &out, false));
  if (out) {
    char host[4 * 64];
    CHECK(tpuc_buffer_numel(out) == n);
    CHECK_OK(tpuc_buffer_to_host(out, host, tpuc_buffer_nbytes(out)));
    for (int i = 0; i < n; i++) {
      double got = host_value(t, host, i);
      double tol = t == TPUC_BF16 ? 0.02 * fabs(expect[i]) + 0.02 : 1e-5;
      if (fabs(got - expect[i]) > tol) {
        printf("    element %d: got %g, expected %g\n", i, got, expect[i]);
        CHECK(0);
        break;
      }
    }
    tpuc_buffer_release(out);
  }
  tpuc_executable_release(e);
}

static const tpuc_dtype k_types[3] = {TPUC_F32, TPUC_BF16, TPUC_S32};

static double typed(tpuc_dtype t, int i, int salt) { return t == TPUC_S32 ? val(i, salt) * 2 : val(i, salt); }

/* ---- tests ---- */
static void test_plugin_loads(void) {
  tpuc_runtime_info info;
  tpuc_runtime_info_get(rt, &info);
  CHECK(info.platform_name && strlen(info.platform_name) > 0);
  CHECK(info.pjrt_api_major == 0 && info.pjrt_api_minor >= 57);
  CHECK(info.plugin_path && strlen(info.plugin_path) > 0);
  /* what the runtime decided for its plugin kind (test_compile_ahead_default) */
  bool ahead = false;
  CHECK_OK(tpuc_compile_ahead_decide(tpuc_plugin_kind_of(info.plugin_path),
                                     getenv("TPUC_COMPILE_AHEAD"), &ahead));
  CHECK(info.compile_ahead == ahead);
  CHECK(info.compile_threads >= 1 && info.compile_threads <= 8);
  CHECK(info.compile_nice >= 0 && info.compile_nice <= 19);
  printf("    platform %s %s, PJRT %d.%d, xla_version %lld\n", info.platform_name,
         info.platform_version, info.pjrt_api_major, info.pjrt_api_minor,
         (long long)info.xla_version);
}

static void test_devices_listed(void) {
  tpuc_runtime_info info;
  tpuc_runtime_info_get(rt, &info);
  CHECK(info.device_count >= 1);
  for (int i = 0; i < info.device_count; i++) {
    tpuc_device_info d;
    CHECK_OK(tpuc_device_info_get(rt, i, &d));
    CHECK(d.local_index == i);
    CHECK(d.kind != NULL);
  }
  tpuc_device_info d;
  tpuc_status *s = tpuc_device_info_get(rt, info.device_count, &d);
  CHECK(s && tpuc_status_code(s) == TPUC_ERR_INVALID_ARGUMENT);
  CHECK(s && strstr(tpuc_status_message(s), "out of range"));
  tpuc_status_destroy(s);
}

static void test_round_trip(void) {
  for (int k = 0; k < 3; k++) {
    int64_t dims[2] = {3, 5};
    char in[4 * 15], back[4 * 15];
    fill(k_types[k], in, 15, 1);
    tpuc_buffer *b = NULL;
    CHECK_OK(tpuc_buffer_from_host(rt, 0, k_types[k], dims, 2, in, &b));
    if (!b) continue;
    CHECK(tpuc_buffer_nbytes(b) == 15 * tpuc_dtype_size(k_types[k]));
    CHECK(tpuc_buffer_ndim(b) == 2 && tpuc_buffer_dims(b)[1] == 5);
    CHECK_OK(tpuc_buffer_to_host(b, back, tpuc_buffer_nbytes(b)));
    CHECK(!memcmp(in, back, tpuc_buffer_nbytes(b)));
    tpuc_status *s = tpuc_buffer_to_host(b, back, 3); /* wrong size: an error */
    CHECK(s && tpuc_status_code(s) == TPUC_ERR_INVALID_ARGUMENT);
    tpuc_status_destroy(s);
    tpuc_buffer_release(b);
  }
  /* a rank-0 buffer */
  float one = 1.5f, got = 0;
  tpuc_buffer *b = NULL;
  CHECK_OK(tpuc_buffer_from_host(rt, 0, TPUC_F32, NULL, 0, &one, &b));
  if (b) {
    CHECK_OK(tpuc_buffer_to_host(b, &got, 4));
    CHECK(got == 1.5f);
    tpuc_buffer_release(b);
  }
}

static void test_add(void) {
  for (int k = 0; k < 3; k++) {
    tpuc_dtype t = k_types[k];
    const char *ty = tpuc_dtype_mlir_name(t);
    char text[1024];
    snprintf(text, sizeof text,
             "module @add {\n"
             "  func.func public @main(%%a: tensor<2x3x%s>, %%b: tensor<2x3x%s>) -> tensor<2x3x%s> {\n"
             "    %%0 = \"stablehlo.add\"(%%a, %%b) : (tensor<2x3x%s>, tensor<2x3x%s>) -> tensor<2x3x%s>\n"
             "    \"func.return\"(%%0) : (tensor<2x3x%s>) -> ()\n"
             "  }\n}\n",
             ty, ty, ty, ty, ty, ty, ty);
    int64_t dims[2] = {2, 3};
    tpuc_buffer *args[2] = {upload(t, dims, 2, 1), upload(t, dims, 2, 2)};
    double expect[6];
    for (int i = 0; i < 6; i++) expect[i] = typed(t, i, 1) + typed(t, i, 2);
    if (args[0] && args[1]) run_and_check(text, args, 2, t, expect, 6);
    tpuc_buffer_release(args[0]);
    tpuc_buffer_release(args[1]);
  }
}

static void test_dot_general(void) {
  for (int k = 0; k < 3; k++) {
    tpuc_dtype t = k_types[k];
    const char *ty = tpuc_dtype_mlir_name(t);
    char text[1024];
    snprintf(text, sizeof text,
             "module @dot {\n"
             "  func.func public @main(%%a: tensor<2x3x%s>, %%b: tensor<3x4x%s>) -> tensor<2x4x%s> {\n"
             "    %%0 = \"stablehlo.dot_general\"(%%a, %%b) {dot_dimension_numbers = "
             "#stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>}"
             " : (tensor<2x3x%s>, tensor<3x4x%s>) -> tensor<2x4x%s>\n"
             "    \"func.return\"(%%0) : (tensor<2x4x%s>) -> ()\n"
             "  }\n}\n",
             ty, ty, ty, ty, ty, ty, ty);
    int64_t da[2] = {2, 3}, db[2] = {3, 4};
    tpuc_buffer *args[2] = {upload(t, da, 2, 3), upload(t, db, 2, 4)};
    double expect[8];
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 4; j++) {
        double acc = 0;
        for (int c = 0; c < 3; c++) acc += typed(t, i * 3 + c, 3) * typed(t, c * 4 + j, 4);
        expect[i * 4 + j] = acc;
      }
    if (args[0] && args[1]) run_and_check(text, args, 2, t, expect, 8);
    tpuc_buffer_release(args[0]);
    tpuc_buffer_release(args[1]);
  }
}

static void test_reduce(void) {
  for (int k = 0; k < 3; k++) {
    tpuc_dtype t = k_types[k];
    const char *ty = tpuc_dtype_mlir_name(t);
    const char *zero = t == TPUC_S32 ? "0" : "0.0";
    char text[2048];
    snprintf(text, sizeof text,
             "module @sum {\n"
             "  func.func public @main(%%a: tensor<2x5x%s>) -> tensor<2x%s> {\n"
             "    %%z = \"stablehlo.constant\"() {value = dense<%s> : tensor<%s>} : () -> tensor<%s>\n"
             "    %%0 = \"stablehlo.reduce\"(%%a, %%z) ({\n"
             "    ^bb0(%%x: tensor<%s>, %%y: tensor<%s>):\n"
             "      %%s = \"stablehlo.add\"(%%x, %%y) : (tensor<%s>, tensor<%s>) -> tensor<%s>\n"
             "      \"stablehlo.return\"(%%s) : (tensor<%s>) -> ()\n"
             "    }) {dimensions = array<i64: 1>} : (tensor<2x5x%s>, tensor<%s>) -> tensor<2x%s>\n"
             "    \"func.return\"(%%0) : (tensor<2x%s>) -> ()\n"
             "  }\n}\n",
             ty, ty, zero, ty, ty, ty, ty, ty, ty, ty, ty, ty, ty, ty, ty);
    int64_t dims[2] = {2, 5};
    tpuc_buffer *arg = upload(t, dims, 2, 5);
    double expect[2] = {0, 0};
    for (int i = 0; i < 10; i++) expect[i / 5] += typed(t, i, 5);
    if (arg) run_and_check(text, &arg, 1, t, expect, 2);
    tpuc_buffer_release(arg);
  }
}

static const char *k_neg =
    "module @neg {\n"
    "  func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
    "    %0 = \"stablehlo.negate\"(%a) : (tensor<4xf32>) -> tensor<4xf32>\n"
    "    \"func.return\"(%0) : (tensor<4xf32>) -> ()\n"
    "  }\n}\n";

static void test_cache_hit(void) {
  tpuc_runtime_stats before, after;
  tpuc_runtime_stats_get(rt, &before);
  tpuc_executable *e1 = NULL, *e2 = NULL;
  CHECK_OK(tpuc_compile(rt, k_neg, strlen(k_neg), &e1));
  CHECK_OK(tpuc_compile(rt, k_neg, strlen(k_neg), &e2));
  tpuc_runtime_stats_get(rt, &after);
  CHECK(e1 && e1 == e2);
  CHECK(after.compiles == before.compiles + 1);
  CHECK(after.cache_misses == before.cache_misses + 1);
  CHECK(after.cache_hits == before.cache_hits + 1);
  CHECK(after.compile_seconds > before.compile_seconds);
  tpuc_executable_release(e1);
  tpuc_executable_release(e2);
}

static void test_invalid_text(void) {
  const char *bad = "module @bad { func.func public @main() -> tensor<f32> { this is not mlir } }";
  tpuc_executable *e = NULL;
  tpuc_status *s = tpuc_compile(rt, bad, strlen(bad), &e);
  CHECK(s != NULL && e == NULL);
  CHECK(tpuc_status_code(s) == TPUC_ERR_COMPILE);
  printf("    plugin says: %.120s\n", tpuc_status_message(s));
  CHECK(strlen(tpuc_status_message(s)) > 20);
  tpuc_status_destroy(s);
  /* the runtime is still usable */
  CHECK_OK(tpuc_compile(rt, k_neg, strlen(k_neg), &e));
  tpuc_executable_release(e);
}

static void test_execute_errors(void) {
  tpuc_executable *e = NULL;
  CHECK_OK(tpuc_compile(rt, k_neg, strlen(k_neg), &e));
  if (!e) return;
  tpuc_buffer *out = NULL;
  tpuc_status *s = tpuc_execute(e, 99, NULL, 0, &out, false);
  CHECK(s && tpuc_status_code(s) == TPUC_ERR_INVALID_ARGUMENT);
  tpuc_status_destroy(s);
  /* wrong argument count: the plugin refuses, the runtime survives */
  s = tpuc_execute(e, 0, NULL, 0, &out, false);
  CHECK(s != NULL && out == NULL);
  tpuc_status_destroy(s);
  tpuc_executable_release(e);
}

typedef struct {
  pthread_mutex_t m;
  pthread_cond_t c;
  int fired;
  int ok;
} ready_flag;

static void on_ready(tpuc_status *s, void *user) {
  ready_flag *f = user;
  pthread_mutex_lock(&f->m);
  f->fired = 1;
  f->ok = s == NULL;
  pthread_cond_signal(&f->c);
  pthread_mutex_unlock(&f->m);
  tpuc_status_destroy(s);
}

static void test_async_completion(void) {
  tpuc_executable *e = NULL;
  CHECK_OK(tpuc_compile(rt, k_neg, strlen(k_neg), &e));
  int64_t dims[1] = {4};
  float in[4] = {1, -2, 3, -4}, got[4];
  tpuc_buffer *a = NULL, *out = NULL;
  CHECK_OK(tpuc_buffer_from_host(rt, 0, TPUC_F32, dims, 1, in, &a));
  if (!e || !a) return;
  CHECK_OK(tpuc_execute(e, 0, &a, 1, &out, false));
  ready_flag f = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
  if (out) {
    CHECK_OK(tpuc_buffer_on_ready(out, on_ready, &f));
    pthread_mutex_lock(&f.m);
    while (!f.fired) pthread_cond_wait(&f.c, &f.m);
    pthread_mutex_unlock(&f.m);
    CHECK(f.ok);
    CHECK(tpuc_buffer_is_ready(out));
    CHECK_OK(tpuc_buffer_await(out));
    CHECK_OK(tpuc_buffer_to_host(out, got, sizeof got));
    CHECK(got[0] == -1 && got[3] == 4);
    tpuc_buffer_release(out);
  }
  /* synchronous launch (debug mode) */
  out = NULL;
  CHECK_OK(tpuc_execute(e, 0, &a, 1, &out, true));
  CHECK(out && tpuc_buffer_is_ready(out));
  tpuc_buffer_release(out);
  tpuc_buffer_release(a);
  tpuc_executable_release(e);
}

/* An asynchronous launch keeps no completion event; tpuc_synchronize waits
 * for a barrier program behind it, which is neither a compile nor an
 * execution in the statistics, and runs only when something was launched. */
static void test_synchronize_barrier(void) {
  tpuc_executable *e = NULL;
  CHECK_OK(tpuc_compile(rt, k_neg, strlen(k_neg), &e));
  int64_t dims[1] = {4};
  float in[4] = {1, -2, 3, -4}, got[4];
  tpuc_buffer *a = NULL, *out = NULL;
  CHECK_OK(tpuc_buffer_from_host(rt, 0, TPUC_F32, dims, 1, in, &a));
  if (!e || !a) return;
  CHECK_OK(tpuc_synchronize(rt, -1));
  CHECK(!atomic_load(&rt->devices[0].unsynced));
  CHECK_OK(tpuc_execute(e, 0, &a, 1, &out, true)); /* waited for: no barrier needed */
  CHECK(!atomic_load(&rt->devices[0].unsynced));
  tpuc_buffer_release(out);
  tpuc_runtime_stats before, after;
  tpuc_runtime_stats_get(rt, &before);
  for (int i = 0; i < 3; i++) { /* results freed unread */
    out = NULL;
    CHECK_OK(tpuc_execute(e, 0, &a, 1, &out, false));
    tpuc_buffer_release(out);
  }
  out = NULL;
  CHECK_OK(tpuc_execute(e, 0, &a, 1, &out, false));
  CHECK(atomic_load(&rt->devices[0].unsynced));
  CHECK_OK(tpuc_synchronize(rt, 0));
  CHECK(!atomic_load(&rt->devices[0].unsynced));
  CHECK(out && tpuc_buffer_is_ready(out)); /* launched before the barrier: done */
  CHECK_OK(tpuc_buffer_to_host(out, got, sizeof got));
  CHECK(got[0] == -1 && got[1] == 2 && got[3] == 4);
  CHECK_OK(tpuc_synchronize(rt, -1)); /* nothing launched since */
  tpuc_runtime_stats_get(rt, &after);
  CHECK(after.executions == before.executions + 4);
  CHECK(after.compiles == before.compiles);
  CHECK(after.cached_executables == before.cached_executables);
  tpuc_buffer_release(out);
  tpuc_buffer_release(a);
  tpuc_executable_release(e);
}

/* Timing markers: each completes after the work launched before it, reads
 * the monotonic clock then, and is released with its barrier's buffer (the
 * accounting and ASan check the ownership). Causality bounds the stamps: a
 * marker recorded after time t completes after t; one waited for completed
 * before the wait returned. */
static int64_t mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void test_timing_markers(void) {
  tpuc_executable *e = NULL;
  CHECK_OK(tpuc_compile(rt, k_neg, strlen(k_neg), &e));
  int64_t dims[1] = {4};
  float in[4] = {1, -2, 3, -4}, got[4];
  tpuc_buffer *a = NULL, *out = NULL;
  CHECK_OK(tpuc_buffer_from_host(rt, 0, TPUC_F32, dims, 1, in, &a));
  if (!e || !a) return;
  tpuc_marker *m0 = NULL, *m1 = NULL, *m2 = NULL;
  int64_t t_before = mono_ns();
  CHECK_OK(tpuc_marker_record(rt, 0, &m0));
  CHECK_OK(tpuc_execute(e, 0, &a, 1, &out, false));
  CHECK_OK(tpuc_marker_record(rt, 0, &m1));
  CHECK_OK(tpuc_marker_record(rt, 0, &m2));
  if (!m0 || !m1 || !m2) return;
  int64_t s0 = 0, s1 = 0, s2 = 0;
  CHECK_OK(tpuc_marker_wait(m2, &s2));
  int64_t t_after = mono_ns();
  CHECK(tpuc_marker_done(m2));
  CHECK(out && tpuc_buffer_is_ready(out)); /* launched before m1: done before it */
  CHECK_OK(tpuc_marker_wait(m0, &s0));
  CHECK_OK(tpuc_marker_wait(m1, &s1));
  CHECK(t_before <= s0 && s0 <= s1 && s1 <= s2 && s2 <= t_after);
  CHECK_OK(tpuc_buffer_to_host(out, got, sizeof got));
  CHECK(got[0] == -1 && got[3] == 4);
  /* recorded after a host wait: its stamp is later than the wait's end */
  int64_t t_mid = mono_ns();
  tpuc_marker *m3 = NULL;
  CHECK_OK(tpuc_marker_record(rt, 0, &m3));
  int64_t s3 = 0;
  if (m3) CHECK_OK(tpuc_marker_wait(m3, &s3));
  CHECK(s3 >= t_mid);
  tpuc_marker *bad = NULL;
  tpuc_status *s = tpuc_marker_record(rt, 99, &bad);
  CHECK(s && tpuc_status_code(s) == TPUC_ERR_INVALID_ARGUMENT && !bad);
  tpuc_status_destroy(s);
  tpuc_marker_release(m0);
  tpuc_marker_release(m1);
  tpuc_marker_release(m2);
  tpuc_marker_release(m3);
  tpuc_marker_release(NULL);
  tpuc_buffer_release(out);
  tpuc_buffer_release(a);
  tpuc_executable_release(e);
}

static void test_retain_shares(void) {
  int64_t dims[1] = {8};
  float in[8] = {0};
  tpuc_buffer *a = NULL;
  CHECK_OK(tpuc_buffer_from_host(rt, 0, TPUC_F32, dims, 1, in, &a));
  tpuc_memory_stats m;
  CHECK_OK(tpuc_memory_stats_get(rt, 0, &m));
  int64_t live = m.bytes_in_use;
  tpuc_buffer *b = tpuc_buffer_retain(a);
  CHECK(a == b);
  tpuc_buffer_release(a);
  CHECK_OK(tpuc_memory_stats_get(rt, 0, &m));
  CHECK(m.bytes_in_use == live); /* still one reference */
  tpuc_buffer_release(b);
  CHECK_OK(tpuc_memory_stats_get(rt, 0, &m));
  CHECK(m.bytes_in_use == live - 32);
}

/* An argument aliased with an output (tf.aliasing_output) and donated is
 * consumed: the output reuses its memory, the accounting drops its bytes at
 * once, and only releasing it remains valid. Not donated, it stays intact. */
static void test_donation(void) {
  static const char *text =
      "module @donate {\n"
      "  func.func public @main(%a: tensor<8xf32> {tf.aliasing_output = 0 : i32}) -> "
      "(tensor<8xf32>) {\n"
      "    %0 = \"stablehlo.add\"(%a, %a) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>\n"
      "    \"func.return\"(%0) : (tensor<8xf32>) -> ()\n  }\n}\n";
  tpuc_executable *e = NULL;
  CHECK_OK(tpuc_compile(rt, text, strlen(text), &e));
  if (!e) return;
  int64_t dims[1] = {8};
  float in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
  for (int donate = 0; donate < 2; donate++) {
    tpuc_buffer *a = NULL, *o = NULL;
    CHECK_OK(tpuc_buffer_from_host(rt, 0, TPUC_F32, dims, 1, in, &a));
    tpuc_memory_stats before, after;
    CHECK_OK(tpuc_memory_stats_get(rt, 0, &before));
    tpuc_runtime_stats rs0, rs1;
    tpuc_runtime_stats_get(rt, &rs0);
    bool d = donate != 0;
    CHECK_OK(tpuc_execute_donating(e, 0, &a, &d, 1, &o, true));
    tpuc_runtime_stats_get(rt, &rs1);
    CHECK_OK(tpuc_memory_stats_get(rt, 0, &after));
    CHECK_OK(tpuc_buffer_to_host(o, out, sizeof out));
    for (int i = 0; i < 8; i++) CHECK(out[i] == 2 * in[i]);
    /* donated: the output took the input's place; kept: both are live */
    CHECK(after.bytes_in_use == before.bytes_in_use + (d ? 0 : 32));
    CHECK(rs1.donations - rs0.donations == (d ? 1 : 0));
    tpuc_status *rs = tpuc_buffer_to_host(a, out, sizeof out);
    CHECK((rs != NULL) == d); /* a donated buffer cannot be read */
    tpuc_status_destroy(rs);
    tpuc_buffer_release(a);
    tpuc_buffer_release(o);
  }
  tpuc_executable_release(e);
}

static void test_accounting_returns_to_zero(void) {
  tpuc_cache_clear(rt); /* executables hold no buffers, but drop them too */
  tpuc_memory_stats m;
  CHECK_OK(tpuc_memory_stats_get(rt, 0, &m));
  CHECK(m.bytes_in_use == 0);
  CHECK(m.num_buffers == 0);
  CHECK(m.peak_bytes_in_use > 0);
  CHECK(m.num_allocs > 0);
  CHECK(atomic_load(&rt->live_objects) == 0);
  CHECK_OK(tpuc_memory_reset_peak(rt, 0));
  CHECK_OK(tpuc_memory_stats_get(rt, 0, &m));
  CHECK(m.peak_bytes_in_use == 0);
}

static void test_bad_plugin_path(void) {
  tpuc_runtime_options o = {"/nonexistent/plugin.so", 0, "off", 0};
  tpuc_runtime *r = NULL;
  tpuc_status *s = tpuc_runtime_create(&o, &r);
  CHECK(s && r == NULL);
  CHECK(tpuc_status_code(s) == TPUC_ERR_PLUGIN);
  CHECK(s && strstr(tpuc_status_message(s), "/nonexistent/plugin.so"));
  CHECK(s && strstr(tpuc_status_message(s), "TPUC_PJRT_PLUGIN"));
  tpuc_status_destroy(s);
  /* a shared library that is not a PJRT plugin */
  o.plugin_path = "libm.so.6";
  s = tpuc_runtime_create(&o, &r);
  CHECK(s && strstr(tpuc_status_message(s), "GetPjrtApi"));
  tpuc_status_destroy(s);
}

static void test_second_runtime(void) {
  /* a second client of the same plugin, with two CPU devices */
  tpuc_runtime_options o = {NULL, 2, "off", 0};
  tpuc_runtime *r = NULL;
  CHECK_OK(tpuc_runtime_create(&o, &r));
  if (!r) return;
  tpuc_runtime_info info;
  tpuc_runtime_info_get(r, &info);
  if (!strcmp(info.platform_name, "cpu")) CHECK(info.device_count == 2);
  /* run on the last device */
  int dev = info.device_count - 1;
  tpuc_executable *e = NULL;
  CHECK_OK(tpuc_compile(r, k_neg, strlen(k_neg), &e));
  int64_t dims[1] = {4};
  float in[4] = {1, 2, 3, 4}, got[4];
  tpuc_buffer *a = NULL, *out = NULL;
  CHECK_OK(tpuc_buffer_from_host(r, dev, TPUC_F32, dims, 1, in, &a));
  if (e && a) {
    CHECK_OK(tpuc_execute(e, dev, &a, 1, &out, false));
    if (out) {
      CHECK(tpuc_buffer_device(out) == dev);
      CHECK_OK(tpuc_buffer_to_host(out, got, sizeof got));
      CHECK(got[2] == -3);
    }
    /* a buffer on another device than the program is refused */
    if (dev > 0) {
      tpuc_status *s = tpuc_execute(e, 0, &a, 1, &out, false);
      CHECK(s && tpuc_status_code(s) == TPUC_ERR_INVALID_ARGUMENT);
      tpuc_status_destroy(s);
    }
  }
  tpuc_buffer_release(out);
  tpuc_buffer_release(a);
  tpuc_executable_release(e);
  tpuc_runtime_destroy(r);
}

/* The create options by plugin kind (client_options.c): a GPU plugin is told
 * not to preallocate unless TPUC_GPU_PREALLOCATE=1; bad values are errors. */
static const pj_named_value *option(const tpuc_client_options *o, const char *name) {
  for (size_t i = 0; i < o->n; i++)
    if (!strcmp(o->v[i].name, name) && o->v[i].name_size == strlen(name)) return &o->v[i];
  return NULL;
}

static void test_client_options(void) {
  CHECK(tpuc_plugin_kind_of("/x/xla_cpu_plugin.so") == TPUC_PLUGIN_CPU);
  CHECK(tpuc_plugin_kind_of("/x/xla_cuda13/xla_cuda_plugin.so") == TPUC_PLUGIN_GPU);
  CHECK(tpuc_plugin_kind_of("/x/libtpu.so") == TPUC_PLUGIN_TPU);
  CHECK(tpuc_plugin_kind_of("/x/pjrt_plugin_metal.so") == TPUC_PLUGIN_OTHER);
  unsetenv("TPUC_GPU_PREALLOCATE");
  unsetenv("TPUC_GPU_MEMORY_FRACTION");
  unsetenv("TPUC_GPU_ALLOCATOR");
  tpuc_client_options o;
  CHECK_OK(tpuc_client_options_make(TPUC_PLUGIN_CPU, 2, 0, 1, &o));
  CHECK(o.n == 1 && option(&o, "cpu_device_count") && option(&o, "cpu_device_count")->int64_value == 2);
  CHECK(!strcmp(o.names, "cpu_device_count"));
  CHECK_OK(tpuc_client_options_make(TPUC_PLUGIN_GPU, 1, 0, 1, &o));
  const pj_named_value *v = option(&o, "preallocate");
  CHECK(v && v->type == PJ_NV_BOOL && !v->bool_value);
  v = option(&o, "memory_fraction");
  CHECK(v && v->type == PJ_NV_FLOAT && v->float_value > 0.89f && v->float_value < 0.91f);
  CHECK(!option(&o, "allocator") && !option(&o, "node_id"));
  CHECK_OK(tpuc_client_options_make(TPUC_PLUGIN_GPU, 1, 1, 2, &o));
  CHECK(option(&o, "node_id") && option(&o, "node_id")->int64_value == 1);
  CHECK(option(&o, "num_nodes") && option(&o, "num_nodes")->int64_value == 2);
  CHECK_OK(tpuc_client_options_make(TPUC_PLUGIN_TPU, 1, 1, 2, &o));
  CHECK(o.n == 0 && !o.names[0]);
  setenv("TPUC_GPU_PREALLOCATE", "1", 1);
  setenv("TPUC_GPU_MEMORY_FRACTION", "0.5", 1);
  setenv("TPUC_GPU_ALLOCATOR", "platform", 1);
  CHECK_OK(tpuc_client_options_make(TPUC_PLUGIN_GPU, 1, 0, 1, &o));
  CHECK(option(&o, "preallocate") && option(&o, "preallocate")->bool_value);
  CHECK(option(&o, "memory_fraction") && option(&o, "memory_fraction")->float_value == 0.5f);
  v = option(&o, "allocator");
  CHECK(v && v->type == PJ_NV_STRING && v->value_size == 8 && !strncmp(v->string_value, "platform", 8));
  const char *bad[][2] = {{"TPUC_GPU_PREALLOCATE", "yes"}, {"TPUC_GPU_MEMORY_FRACTION", "1.5"},
                          {"TPUC_GPU_MEMORY_FRACTION", "0.5x"}, {"TPUC_GPU_ALLOCATOR", "magic"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    unsetenv("TPUC_GPU_PREALLOCATE");
    unsetenv("TPUC_GPU_MEMORY_FRACTION");
    unsetenv("TPUC_GPU_ALLOCATOR");
    setenv(bad[i][0], bad[i][1], 1);
    tpuc_status *s = tpuc_client_options_make(TPUC_PLUGIN_GPU, 1, 0, 1, &o);
    CHECK(s && tpuc_status_code(s) == TPUC_ERR_INVALID_ARGUMENT &&
          strstr(tpuc_status_message(s), bad[i][0]));
    tpuc_status_destroy(s);
    /* the CPU plugin ignores the GPU variables */
    CHECK_OK(tpuc_client_options_make(TPUC_PLUGIN_CPU, 1, 0, 1, &o));
  }
  unsetenv("TPUC_GPU_PREALLOCATE");
  unsetenv("TPUC_GPU_MEMORY_FRACTION");
  unsetenv("TPUC_GPU_ALLOCATOR");
}

/* The per-op programs' XLA options (op_options.c): the default by plugin
 * kind, the variable replacing it, the wire bytes, bad input. */
static void test_op_options(void) {
  tpuc_op_options o;
  CHECK_OK(tpuc_op_options_decide(TPUC_PLUGIN_GPU, NULL, &o));
  CHECK(!strcmp(o.text, "xla_gpu_autotune_level=0") && !o.from_env);
  /* field 7 entry {1: name, 2: {3: int 0}} */
  static const char name[] = "xla_gpu_autotune_level";
  size_t n = sizeof name - 1;
  CHECK(o.len == 2 + 2 + n + 4);
  CHECK(o.bytes[0] == (7 << 3 | 2) && o.bytes[1] == 2 + n + 4);
  CHECK(o.bytes[2] == (1 << 3 | 2) && o.bytes[3] == n && !memcmp(o.bytes + 4, name, n));
  CHECK(o.bytes[4 + n] == (2 << 3 | 2) && o.bytes[5 + n] == 2);
  CHECK(o.bytes[6 + n] == (3 << 3 | 0) && o.bytes[7 + n] == 0);
  CHECK_OK(tpuc_op_options_decide(TPUC_PLUGIN_CPU, NULL, &o));
  CHECK(o.len == 0 && !strcmp(o.text, ""));
  CHECK_OK(tpuc_op_options_decide(TPUC_PLUGIN_TPU, "", &o));
  CHECK(o.len == 0);
  CHECK_OK(tpuc_op_options_decide(TPUC_PLUGIN_GPU, "none", &o));
  CHECK(o.len == 0 && o.from_env);
  /* a bool, a string and a negative int, spaces trimmed */
  CHECK_OK(tpuc_op_options_decide(TPUC_PLUGIN_CPU, " xla_a=true, xla_b=/tmp/d ,xla_c=-1", &o));
  CHECK(!strcmp(o.text, "xla_a=true,xla_b=/tmp/d,xla_c=-1") && o.from_env);
  CHECK(o.bytes[0] == (7 << 3 | 2) && o.bytes[1] == 2 + 5 + 4);
  CHECK(o.bytes[11] == (2 << 3 | 0) && o.bytes[12] == 1); /* bool_field true */
  size_t b = 2 + o.bytes[1];
  CHECK(o.bytes[b + 2 + 2 + 5 + 2] == (1 << 3 | 2)); /* string_field */
  size_t c = b + 2 + o.bytes[b + 1];
  CHECK(o.bytes[c + 1] == 2 + 5 + 2 + 11 && o.bytes[c + 2 + 2 + 5 + 2] == (3 << 3 | 0));
  CHECK(o.len == c + 2 + o.bytes[c + 1]);
  const char *bad[] = {"xla_gpu_autotune_level", "=1", "Xla=1", "xla_a=", "a b=1"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    tpuc_status *s = tpuc_op_options_decide(TPUC_PLUGIN_CPU, bad[i], &o);
    CHECK(s && strstr(tpuc_status_message(s), "TPUC_OP_XLA_OPTIONS"));
    tpuc_status_destroy(s);
  }
}

/* TPUC_COMPILE_AHEAD's decision: on by default for every plugin but the XLA
 * CPU plugin's, 0/1 override it, anything else is an error naming it. */
static void test_compile_ahead_default(void) {
  const tpuc_plugin_kind kinds[] = {TPUC_PLUGIN_CPU, TPUC_PLUGIN_TPU, TPUC_PLUGIN_GPU,
                                    TPUC_PLUGIN_OTHER};
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
    bool on = kinds[k] == TPUC_PLUGIN_CPU; /* the opposite of the default */
    CHECK_OK(tpuc_compile_ahead_decide(kinds[k], NULL, &on));
    CHECK(on == (kinds[k] != TPUC_PLUGIN_CPU));
    on = !on;
    CHECK_OK(tpuc_compile_ahead_decide(kinds[k], "auto", &on));
    CHECK(on == (kinds[k] != TPUC_PLUGIN_CPU));
    CHECK_OK(tpuc_compile_ahead_decide(kinds[k], "", &on));
    CHECK(on == (kinds[k] != TPUC_PLUGIN_CPU));
    CHECK_OK(tpuc_compile_ahead_decide(kinds[k], "1", &on));
    CHECK(on);
    CHECK_OK(tpuc_compile_ahead_decide(kinds[k], "0", &on));
    CHECK(!on);
  }
  const char *bad[] = {"true", "2", "on", "10"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    bool on = false;
    tpuc_status *s = tpuc_compile_ahead_decide(TPUC_PLUGIN_GPU, bad[i], &on);
    CHECK(s && strstr(tpuc_status_message(s), "TPUC_COMPILE_AHEAD"));
    tpuc_status_destroy(s);
  }
}

int main(void) {
  if (!harness_plugin_set()) return 1;
  tpuc_runtime_options opts = {NULL, 0, "off", 0}; /* the disk tier has its own tests */
  if (!harness_runtime(&opts, &rt)) return 1;
  RUN(test_plugin_loads);
  RUN(test_devices_listed);
  RUN(test_round_trip);
  RUN(test_add);
  RUN(test_dot_general);
  RUN(test_reduce);
  RUN(test_cache_hit);
  RUN(test_invalid_text);
  RUN(test_execute_errors);
  RUN(test_async_completion);
  RUN(test_synchronize_barrier);
  RUN(test_timing_markers);
  RUN(test_retain_shares);
  RUN(test_donation);
  RUN(test_accounting_returns_to_zero);
  RUN(test_bad_plugin_path);
  RUN(test_second_runtime);
  RUN(test_client_options);
  RUN(test_op_options);
  RUN(test_compile_ahead_default);
  tpuc_runtime_destroy(rt);
  return harness_end();
}
