/* test_fused_ahead.c — compile-ahead for fused chunks (exec/fused_ahead.c):
 * chunks cut at a loop boundary while their programs compile queue and
 * recording goes on; reading a storage only queued chunks use runs them and
 * leaves the recording chunk pending; the values are the loop's. The Python
 * suite (tests/test_compile_ahead.py) trains with it on and off bit for bit;
 * this runs the path under ASan+UBSan too. */
#include <stdlib.h>

#include "harness.h"

harness g_h;
static tpuc_runtime *rt;

static tpuc_storage *storage_f32(const float *data, int64_t n) {
  return harness_storage_f32(rt, data, n);
}

static tpuc_tensor vec(tpuc_storage *s, int64_t n) { return harness_vec(s, TPUC_F32, n); }

/* out = a + b (aten::add.Tensor, alpha 1) */
static tpuc_status *add(tpuc_tensor a, tpuc_tensor b, tpuc_tensor out) {
  tpuc_tensor ins[2] = {a, b};
  tpuc_arg args[3];
  memset(args, 0, sizeof args);
  args[0].kind = args[1].kind = TPUC_ARG_TENSOR;
  args[0].tensors.count = args[1].tensors.count = 1;
  args[1].tensors.first = 1;
  args[2] = harness_scalar_i(1);
  tpuc_op_call c = {tpuc_op_find(rt, "aten::add.Tensor"), 0, args, 3, ins, 2, &out, 1};
  return tpuc_op_run(rt, &c, false);
}

static tpuc_status *scale(tpuc_tensor a, tpuc_tensor out, double by) {
  return harness_mul_scalar(rt, a, out, by);
}

static void read_f32(tpuc_storage *s, float *out, size_t n) {
  CHECK_OK(tpuc_storage_download(s, out, n * 4));
}

static void test_chunks_queue_behind_compiles(void) {
  /* a(i+1) = (a(i) + y) * 0.75 over new storages, the sum a temporary */
  float x[4] = {8, 8, 8, 8}, y[4] = {0, 2, 4, 6}, got[4];
  tpuc_storage *sy = storage_f32(y, 4), *a[7];
  a[0] = storage_f32(x, 4);
  tpuc_op_stats s0, s1;
  tpuc_op_stats_get(rt, &s0);
  CHECK_OK(tpuc_set_mode(rt, TPUC_MODE_FUSED));
  for (int it = 0; it < 6; it++) {
    tpuc_storage *tmp = storage_f32(NULL, 4);
    a[it + 1] = storage_f32(NULL, 4);
    CHECK_OK(add(vec(a[it], 4), vec(sy, 4), vec(tmp, 4)));
    CHECK_OK(scale(vec(tmp, 4), vec(a[it + 1], 4), 0.75));
    tpuc_storage_destroy(tmp);
  }
  tpuc_op_stats_get(rt, &s1);
  CHECK(s1.ahead_chunks - s0.ahead_chunks >= 1); /* cut, not run: queued */
  CHECK(tpuc_pending_ops(rt, 0) == 12);         /* every op waits, queued or recording */
  read_f32(a[2], got, 4); /* written by a queued chunk: the queue runs */
  for (int i = 0; i < 4; i++) CHECK(got[i] == ((x[i] + y[i]) * 0.75f + y[i]) * 0.75f);
  CHECK(tpuc_pending_ops(rt, 0) > 0); /* the recording chunk was left to record */
  read_f32(a[6], got, 4);
  for (int i = 0; i < 4; i++) {
    float e = x[i];
    for (int it = 0; it < 6; it++) e = (e + y[i]) * 0.75f;
    CHECK(got[i] == e);
  }
  CHECK(tpuc_pending_ops(rt, 0) == 0);
  CHECK_OK(tpuc_set_mode(rt, TPUC_MODE_STRICT));
  for (int i = 0; i < 7; i++) tpuc_storage_destroy(a[i]);
  tpuc_storage_destroy(sy);
}

int main(void) {
  if (!harness_plugin_set()) return 1;
  setenv("TPUC_FUSED_MIN_PERIOD", "1", 1); /* a two-op loop is cut per iteration */
  setenv("TPUC_COMPILE_AHEAD", "1", 1);    /* (off by default on the CPU plugin) */
  tpuc_runtime_options opts = {NULL, 0, "off", 0};
  if (!harness_runtime(&opts, &rt)) return 1;
  RUN(test_chunks_queue_behind_compiles);
  tpuc_runtime_destroy(rt);
  return harness_end();
}
