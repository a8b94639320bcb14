/* test_reliability.c — the core's answers to bad input and exhausted memory:
 * an out-of-range index checked on the device (TPUC_ERR_INDEX at the op in
 * debug mode with nothing written; at tpuc_synchronize / a host read with
 * checks on in strict mode; unchecked by default), aten::_assert_async as a
 * deferred device-side assert (a zero-output op: reported at tpuc_synchronize
 * / a host read in strict and fused mode, at the op in debug mode), and a memory limit
 * (TPUC_ERR_OUT_OF_MEMORY from an upload and from a launch, the runtime
 * usable afterwards). */
#include <stdlib.h>

#include "harness.h"
#include "tpuc.h"

harness g_h;
static tpuc_runtime *rt;

#define dense harness_vec /* a 1-d contiguous tensor */

/* out = x.index_select(0, idx) with x = [0, 1, 2, 3]; out keeps -1s if not written */
static tpuc_status *index_select(const int64_t *idx, float *out) {
  float x[4] = {0, 1, 2, 3}, init[2] = {-1, -1};
  int64_t four = 4, two = 2;
  tpuc_storage *sx = NULL, *si = NULL, *so = NULL;
  CHECK_OK(tpuc_storage_create(rt, 0, 16, &sx));
  CHECK_OK(tpuc_storage_create(rt, 0, 16, &si));
  CHECK_OK(tpuc_storage_create(rt, 0, 8, &so));
  CHECK_OK(tpuc_storage_upload(sx, TPUC_F32, &four, 1, x));
  CHECK_OK(tpuc_storage_upload(si, TPUC_S64, &two, 1, idx));
  CHECK_OK(tpuc_storage_upload(so, TPUC_F32, &two, 1, init));
  tpuc_tensor ins[2] = {dense(sx, TPUC_F32, 4), dense(si, TPUC_S64, 2)};
  tpuc_tensor o = dense(so, TPUC_F32, 2);
  tpuc_arg args[3];
  memset(args, 0, sizeof args);
  args[0].kind = TPUC_ARG_TENSOR;
  args[0].tensors.first = 0;
  args[0].tensors.count = 1;
  args[1].kind = TPUC_ARG_INT;
  args[1].i = 0;
  args[2].kind = TPUC_ARG_TENSOR;
  args[2].tensors.first = 1;
  args[2].tensors.count = 1;
  const tpuc_op *op = tpuc_op_find(rt, "aten::index_select");
  CHECK(op != NULL);
  tpuc_op_call c = {op, 0, args, 3, ins, 2, &o, 1};
  tpuc_status *st = tpuc_op_run(rt, &c, false);
  if (!st) st = tpuc_storage_download(so, out, 8);
  tpuc_storage_destroy(sx);
  tpuc_storage_destroy(si);
  tpuc_storage_destroy(so);
  return st;
}

static void test_debug_mode_raises_at_the_op(void) {
  CHECK_OK(tpuc_set_mode(rt, TPUC_MODE_DEBUG));
  int64_t bad[2] = {1, 7};
  float out[2] = {0, 0};
  tpuc_status *st = index_select(bad, out);
  CHECK(tpuc_status_code(st) == TPUC_ERR_INDEX);
  CHECK(strstr(tpuc_status_message(st), "aten::index_select") != NULL);
  CHECK(strstr(tpuc_status_message(st), "index 7") != NULL);
  tpuc_status_destroy(st);
  int64_t good[2] = {3, 0};
  CHECK_OK(index_select(good, out));
  CHECK(out[0] == 3 && out[1] == 0);
  CHECK_OK(tpuc_set_mode(rt, TPUC_MODE_STRICT));
}

static void test_strict_checks_report_at_sync(void) {
  int64_t bad[2] = {-1, 2}; /* index_select rejects negatives */
  float out[2];
  tpuc_set_check_bounds(rt, false);
  CHECK_OK(index_select(bad, out)); /* unchecked: no error */
  tpuc_set_check_bounds(rt, true);
  CHECK(tpuc_get_check_bounds(rt));
  tpuc_status *st = index_select(bad, out); /* the host read reports it */
  CHECK(tpuc_status_code(st) == TPUC_ERR_INDEX);
  CHECK(strstr(tpuc_status_message(st), "index -1") != NULL);
  tpuc_status_destroy(st);
  CHECK_OK(tpuc_synchronize(rt, -1)); /* reported once */
  tpuc_set_check_bounds(rt, false);
}

/* torch._assert_async(cond, msg) with cond = (x[0] != 0) of a 1-element f32 storage */
static tpuc_status *assert_async(float v, const char *msg) {
  int64_t one = 1;
  tpuc_storage *sc = NULL;
  CHECK_OK(tpuc_storage_create(rt, 0, 4, &sc));
  CHECK_OK(tpuc_storage_upload(sc, TPUC_F32, &one, 1, &v));
  tpuc_tensor t = dense(sc, TPUC_F32, 1);
  tpuc_arg args[2];
  memset(args, 0, sizeof args);
  args[0].kind = TPUC_ARG_TENSOR;
  args[0].tensors.first = 0;
  args[0].tensors.count = 1;
  args[1].kind = TPUC_ARG_STRING;
  args[1].s = msg;
  const tpuc_op *op = tpuc_op_find(rt, "aten::_assert_async.msg");
  CHECK(op != NULL);
  tpuc_op_call c = {op, 0, args, 2, &t, 1, NULL, 0};
  tpuc_status *st = tpuc_op_run(rt, &c, false);
  tpuc_storage_destroy(sc); /* the check result outlives the condition's storage */
  return st;
}

static void test_assert_async_deferred(void) {
  for (int m = 0; m < 3; m++) {
    tpuc_mode mode = m == 0 ? TPUC_MODE_STRICT : m == 1 ? TPUC_MODE_FUSED : TPUC_MODE_DEBUG;
    CHECK_OK(tpuc_set_mode(rt, mode));
    CHECK_OK(assert_async(1.0f, "fine"));
    CHECK_OK(assert_async(-0.0f / 0.0f, "NaN is true"));
    tpuc_status *st = assert_async(-0.0f, "position_ids exceed 7"); /* -0.0 is false */
    if (mode != TPUC_MODE_DEBUG) {
      CHECK(st == NULL); /* nothing waited */
      if (mode == TPUC_MODE_FUSED) CHECK(tpuc_pending_ops(rt, 0) == 3); /* no chunk ended */
      st = tpuc_synchronize(rt, -1);
    }
    CHECK(tpuc_status_code(st) == TPUC_ERR_RUNTIME);
    CHECK(strstr(tpuc_status_message(st), "position_ids exceed 7") != NULL);
    CHECK((strstr(tpuc_status_message(st), "device-side assert") != NULL) == (mode != TPUC_MODE_DEBUG));
    tpuc_status_destroy(st);
    CHECK_OK(tpuc_synchronize(rt, -1)); /* reported once */
  }
  CHECK_OK(tpuc_set_mode(rt, TPUC_MODE_STRICT));
}

static void test_memory_limit(void) {
  CHECK_OK(tpuc_memory_set_limit(rt, 0, 1024));
  static float big[1024];
  int64_t n = 1024;
  tpuc_buffer *b = NULL;
  tpuc_status *st = tpuc_buffer_from_host(rt, 0, TPUC_F32, &n, 1, big, &b);
  CHECK(tpuc_status_code(st) == TPUC_ERR_OUT_OF_MEMORY && b == NULL);
  CHECK(strstr(tpuc_status_message(st), "tried to allocate 4.00 KiB") != NULL);
  tpuc_status_destroy(st);
  tpuc_memory_stats m;
  CHECK_OK(tpuc_memory_stats_get(rt, 0, &m));
  CHECK(m.num_ooms >= 1 && m.limit_bytes == 1024);
  st = tpuc_memory_set_limit(rt, 0, -1);
  CHECK(tpuc_status_code(st) == TPUC_ERR_INVALID_ARGUMENT);
  tpuc_status_destroy(st);
  CHECK_OK(tpuc_memory_set_limit(rt, 0, 0));
  CHECK_OK(tpuc_buffer_from_host(rt, 0, TPUC_F32, &n, 1, big, &b));
  tpuc_buffer_release(b);
}

int main(void) {
  if (!harness_plugin_set()) return 1;
  tpuc_runtime_options opts = {NULL, 0, "off", 0};
  if (!harness_runtime(&opts, &rt)) return 1;
  RUN(test_debug_mode_raises_at_the_op);
  RUN(test_strict_checks_report_at_sync);
  RUN(test_assert_async_deferred);
  RUN(test_memory_limit);
  tpuc_runtime_destroy(rt);
  return harness_end();
}
