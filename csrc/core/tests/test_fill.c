/* test_fill.c — strict mode's constant fills by upload (exec/fill.c): a
 * whole-storage zero_ / fill_.Scalar compiles nothing and writes the bits a
 * program would (16-bit float rounding, integer wrapping, bool); partial
 * writes, subnormal results and TPUC_HOST_FILL_MAX_KB=0 compile a program;
 * behind compile-ahead's queue a fill is queued as an upload, in order; in
 * fused mode a fill of a new storage that outlives its chunk runs before the
 * chunk (exec/fused_hoist.c), one freed before the chunk runs stays in it.
 * The Python suite (tests/test_host_fill.py) compares every dtype with the
 * program and the CPU; this runs the path under ASan+UBSan too. */
#include <stdlib.h>

#include "../exec/exec.h"
#include "../lower/lower.h"
#include "harness.h"

harness g_h;
static tpuc_runtime *rt;

static int64_t compiles(tpuc_runtime *r) {
  tpuc_runtime_stats s;
  tpuc_runtime_stats_get(r, &s);
  return s.compiles;
}

static tpuc_tensor whole(tpuc_storage *s, tpuc_dtype dt, int64_t rows, int64_t cols) {
  tpuc_tensor t;
  memset(&t, 0, sizeof t);
  t.storage = s;
  t.dtype = dt;
  t.ndim = 2;
  t.sizes[0] = rows;
  t.sizes[1] = cols;
  t.strides[0] = cols;
  t.strides[1] = 1;
  return t;
}

/* zero_ (no value) or fill_.Scalar with `v` on tensor t */
static tpuc_status *fill(tpuc_runtime *r, tpuc_tensor t, const tpuc_arg *v) {
  tpuc_arg args[2];
  memset(args, 0, sizeof args);
  args[0].kind = TPUC_ARG_TENSOR;
  args[0].tensors.count = 1;
  if (v) args[1] = *v;
  tpuc_op_call c = {tpuc_op_find(r, v ? "aten::fill_.Scalar" : "aten::zero_"), 0, args, v ? 2 : 1,
                    &t, 1, &t, 1};
  return tpuc_op_run(r, &c, false);
}

#define scalar_f harness_scalar_f
#define scalar_i harness_scalar_i

/* Fills a 2 x 3 storage of dtype dt with v and checks every element's bytes. */
static void expect(tpuc_dtype dt, tpuc_arg v, const void *want, int64_t new_compiles) {
  size_t size = tpuc_dtype_size(dt);
  tpuc_storage *s = NULL;
  CHECK_OK(tpuc_storage_create(rt, 0, 6 * size, &s));
  if (!s) return;
  int64_t c0 = compiles(rt);
  CHECK_OK(fill(rt, whole(s, dt, 2, 3), &v));
  CHECK(compiles(rt) - c0 == new_compiles);
  unsigned char got[6 * 8];
  CHECK_OK(tpuc_storage_download(s, got, 6 * size));
  for (int i = 0; i < 6; i++) CHECK(!memcmp(got + i * size, want, size));
  tpuc_storage_destroy(s);
}

static void test_fills_upload_the_programs_bits(void) {
  uint16_t f16_inf = 0x7c00, f16_one = 0x3c00, f16_up = 0x3c02, bf16_three = 0x4040,
           bf16_max = 0x7f80; /* 2^128 - 2^103 (float32's largest) rounds up to inf */
  float f32 = 0.1f;
  int8_t s8 = -128;
  uint8_t u8 = 255, yes = 1;
  int64_t s64 = INT64_MIN;
  expect(TPUC_F16, scalar_f(65520.0), &f16_inf, 0);                         /* a tie up to inf */
  expect(TPUC_F16, scalar_f(1.0 + 0x1p-11), &f16_one, 0);                   /* a tie to even: down */
  expect(TPUC_F16, scalar_f(1.0 + 3 * 0x1p-11), &f16_up, 0);                /* a tie to even: up */
  expect(TPUC_BF16, scalar_i(3), &bf16_three, 0);
  expect(TPUC_BF16, scalar_f((double)3.4028234663852886e38f), &bf16_max, 0);
  expect(TPUC_F32, scalar_f(0.1), &f32, 0);                                 /* rounds to nearest */
  expect(TPUC_S8, scalar_f(-128.9), &s8, 0);                                /* truncated */
  expect(TPUC_U8, scalar_i(255), &u8, 0);
  expect(TPUC_S64, scalar_i(INT64_MIN), &s64, 0);
  expect(TPUC_PRED, scalar_f(-2.5), &yes, 0);
}

static void test_what_the_host_does_not_decide_compiles(void) {
  int8_t s8 = 0;
  expect(TPUC_S8, scalar_f(0.0), &s8, 0);
  tpuc_storage *s = NULL;
  CHECK_OK(tpuc_storage_create(rt, 0, 6 * 2, &s));
  CHECK_OK(fill(rt, whole(s, TPUC_F16, 2, 3), NULL)); /* written (an upload): one signature below */
  int64_t c0 = compiles(rt);
  /* 2^-24 is a subnormal float16; 1/3 is not exact in float32 */
  tpuc_arg sub = scalar_f(0x1p-24), third = scalar_f(1.0 / 3.0);
  CHECK_OK(fill(rt, whole(s, TPUC_F16, 2, 3), &sub));
  CHECK(compiles(rt) - c0 == 1);
  CHECK_OK(fill(rt, whole(s, TPUC_F16, 2, 3), &third));
  CHECK(compiles(rt) - c0 == 1); /* (the same program: the value is a runtime argument) */
  uint16_t got[6];
  CHECK_OK(tpuc_storage_download(s, got, sizeof got));
  for (int i = 0; i < 6; i++) CHECK(got[i] == 0x3555); /* 1/3 in float16 */
  tpuc_storage_destroy(s);
}

static void test_partial_writes_compile_and_keep_the_rest(void) {
  tpuc_storage *s = NULL;
  CHECK_OK(tpuc_storage_create(rt, 0, 8 * 4, &s));
  float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1}, got[8];
  int64_t n = 8;
  CHECK_OK(tpuc_storage_upload(s, TPUC_F32, &n, 1, ones));
  tpuc_tensor half = whole(s, TPUC_F32, 1, 4);
  half.offset = 4; /* the second half */
  int64_t c0 = compiles(rt);
  CHECK_OK(fill(rt, half, NULL));
  CHECK(compiles(rt) - c0 == 1);
  CHECK_OK(tpuc_storage_download(s, got, sizeof got));
  for (int i = 0; i < 8; i++) CHECK(got[i] == (i < 4 ? 1.0f : 0.0f));
  tpuc_storage_destroy(s);
}

/* A runtime of its own (disk cache off) created while `name`=`value`, which
 * is unset again; NULL (the test failed) if it cannot be created. */
static tpuc_runtime *runtime_with(const char *name, const char *value) {
  setenv(name, value, 1);
  tpuc_runtime_options opts = {NULL, 0, "off", 0};
  tpuc_runtime *r = NULL;
  CHECK_OK(tpuc_runtime_create(&opts, &r));
  unsetenv(name);
  return r;
}

static void test_off_with_0_and_over_the_bound(void) {
  tpuc_runtime *off = runtime_with("TPUC_HOST_FILL_MAX_KB", "0");
  if (!off) return;
  tpuc_storage *s = NULL;
  CHECK_OK(tpuc_storage_create(off, 0, 6 * 4, &s));
  CHECK_OK(fill(off, whole(s, TPUC_F32, 2, 3), NULL));
  CHECK(compiles(off) == 1);
  tpuc_storage_destroy(s);
  tpuc_runtime_destroy(off);
  /* the default bound, 1024 KiB: a 2 MiB zero_ is a program */
  CHECK_OK(tpuc_storage_create(rt, 0, 2 << 20, &s));
  int64_t c0 = compiles(rt);
  CHECK_OK(fill(rt, whole(s, TPUC_F32, 512, 1024), NULL));
  CHECK(compiles(rt) - c0 == 1);
  tpuc_storage_destroy(s);
}

/* With compile-ahead's queue (TPUC_COMPILE_AHEAD=1) a fill behind queued ops
 * is queued too, as an upload (no program), and runs in order: an op queued
 * before it reads the old values, one queued after it reads the constant. */
#define scale harness_mul_scalar /* out = in * by */

static void test_queued_behind_compiles_in_order(void) {
  tpuc_runtime *q = runtime_with("TPUC_COMPILE_AHEAD", "1");
  if (!q) return;
  tpuc_storage *a = NULL, *b = NULL, *c = NULL;
  CHECK_OK(tpuc_storage_create(q, 0, 4 * 4, &a));
  CHECK_OK(tpuc_storage_create(q, 0, 4 * 4, &b));
  CHECK_OK(tpuc_storage_create(q, 0, 4 * 4, &c));
  float x[4] = {1, 2, 3, 4}, got[4];
  int64_t n = 4;
  CHECK_OK(tpuc_storage_upload(a, TPUC_F32, &n, 1, x));
  tpuc_tensor ta = whole(a, TPUC_F32, 1, 4), tb = whole(b, TPUC_F32, 1, 4), tc = whole(c, TPUC_F32, 1, 4);
  tpuc_op_stats s0, s1;
  tpuc_op_stats_get(q, &s0);
  CHECK_OK(scale(q, ta, tb, 2.0)); /* b = a * 2: queued while its program compiles */
  tpuc_arg seven = scalar_i(7);
  CHECK_OK(fill(q, ta, &seven));   /* a = 7: queued behind it, an upload */
  CHECK_OK(scale(q, ta, tc, 3.0)); /* c = a * 3 */
  tpuc_op_stats_get(q, &s1);
  CHECK(s1.ahead_ops - s0.ahead_ops == 3);
  CHECK_OK(tpuc_storage_download(b, got, sizeof got)); /* runs the queue */
  for (int i = 0; i < 4; i++) CHECK(got[i] == 2.0f * x[i]);
  CHECK_OK(tpuc_storage_download(a, got, sizeof got));
  for (int i = 0; i < 4; i++) CHECK(got[i] == 7.0f);
  CHECK_OK(tpuc_storage_download(c, got, sizeof got));
  for (int i = 0; i < 4; i++) CHECK(got[i] == 21.0f);
  CHECK(compiles(q) <= 2); /* mul over a's buffer before and after the fill; no fill program */
  tpuc_storage_destroy(a);
  tpuc_storage_destroy(b);
  tpuc_storage_destroy(c);
  tpuc_runtime_destroy(q);
}

static void test_fused_new_storages_filled_before_the_chunk(void) {
  tpuc_storage *a = NULL, *big = NULL, *tmp = NULL, *c = NULL, *d = NULL, *e = NULL;
  CHECK_OK(tpuc_storage_create(rt, 0, 4 * 4, &a));
  CHECK_OK(tpuc_storage_create(rt, 0, 2 << 20, &big)); /* over the upload bound: a program */
  CHECK_OK(tpuc_storage_create(rt, 0, 4 * 4, &tmp));
  CHECK_OK(tpuc_storage_create(rt, 0, 4 * 4, &c));
  CHECK_OK(tpuc_storage_create(rt, 0, 4 * 4, &d));
  CHECK_OK(tpuc_storage_create(rt, 0, 2 << 20, &e));
  if (!a || !big || !tmp || !c || !d || !e) return;
  tpuc_tensor ta = whole(a, TPUC_F32, 1, 4), tbig = whole(big, TPUC_F32, 512, 1024),
              ttmp = whole(tmp, TPUC_F32, 1, 4), tc = whole(c, TPUC_F32, 1, 4),
              td = whole(d, TPUC_F32, 1, 4), te = whole(e, TPUC_F32, 512, 1024);
  tpuc_op_stats s0, s1;
  tpuc_op_stats_get(rt, &s0);
  CHECK_OK(tpuc_set_mode(rt, TPUC_MODE_FUSED));
  tpuc_arg seven = scalar_i(7), half = scalar_f(0.5), two = scalar_f(-2.0);
  CHECK_OK(fill(rt, ta, &seven));       /* a = 7 (kept: taken out of the chunk) */
  CHECK_OK(fill(rt, tbig, &half));      /* big = 0.5 (kept, 2 MiB: its own program) */
  CHECK_OK(fill(rt, ttmp, &two));       /* tmp = -2 (freed before the chunk runs) */
  CHECK_OK(scale(rt, ta, tc, 3.0));     /* c = a * 3 */
  CHECK_OK(scale(rt, ttmp, td, 4.0));   /* d = tmp * 4 */
  CHECK_OK(scale(rt, tbig, te, 6.0));   /* e = big * 6 */
  tpuc_storage_destroy(tmp);
  tpuc_op_stats_get(rt, &s1);
  CHECK(s1.recorded_ops - s0.recorded_ops == 6 && s1.hoisted_fills == s0.hoisted_fills);
  float got[4];
  CHECK_OK(tpuc_storage_download(c, got, sizeof got)); /* runs the chunk */
  for (int i = 0; i < 4; i++) CHECK(got[i] == 21.0f);
  CHECK_OK(tpuc_storage_download(d, got, sizeof got));
  for (int i = 0; i < 4; i++) CHECK(got[i] == -8.0f);
  CHECK_OK(tpuc_storage_download(a, got, sizeof got));
  for (int i = 0; i < 4; i++) CHECK(got[i] == 7.0f);
  float *many = malloc(2 << 20);
  if (many) {
    CHECK_OK(tpuc_storage_download(e, many, 2 << 20));
    CHECK(many[0] == 3.0f && many[(512 * 1024) - 1] == 3.0f);
    CHECK_OK(tpuc_storage_download(big, many, 2 << 20));
    CHECK(many[0] == 0.5f && many[(512 * 1024) - 1] == 0.5f);
    free(many);
  }
  tpuc_op_stats_get(rt, &s1);
  CHECK(s1.hoisted_fills - s0.hoisted_fills == 2);
  CHECK(s1.flushes - s0.flushes == 1);
  CHECK_OK(tpuc_set_mode(rt, TPUC_MODE_STRICT));
  tpuc_storage_destroy(a);
  tpuc_storage_destroy(big);
  tpuc_storage_destroy(c);
  tpuc_storage_destroy(d);
  tpuc_storage_destroy(e);
}

int main(void) {
  if (!harness_plugin_set()) return 1;
  unsetenv("TPUC_HOST_FILL_MAX_KB");
  tpuc_runtime_options opts = {NULL, 0, "off", 0};
  if (!harness_runtime(&opts, &rt)) return 1;
  RUN(test_fills_upload_the_programs_bits);
  RUN(test_what_the_host_does_not_decide_compiles);
  RUN(test_partial_writes_compile_and_keep_the_rest);
  RUN(test_off_with_0_and_over_the_bound);
  RUN(test_queued_behind_compiles_in_order);
  RUN(test_fused_new_storages_filled_before_the_chunk);
  tpuc_runtime_destroy(rt);
  return harness_end();
}
