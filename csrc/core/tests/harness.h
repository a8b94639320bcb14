/* harness.h — a minimal test runner for the C core: CHECK records a failure
 * and continues; the run ends with the line "N passed, N failed". */
#ifndef TPUC_TEST_HARNESS_H
#define TPUC_TEST_HARNESS_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpuc.h"

typedef struct {
  int passed, failed;
  int current_failed;
} harness;

extern harness g_h;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      printf("    CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);   \
      g_h.current_failed = 1;                                                  \
    }                                                                          \
  } while (0)

/* Fails the test on a non-NULL status, printing its message, and frees it. */
#define CHECK_OK(expr)                                                         \
  do {                                                                         \
    tpuc_status *s_ = (expr);                                                  \
    if (s_) {                                                                  \
      printf("    %s:%d: %s -> %s\n", __FILE__, __LINE__, #expr,               \
             tpuc_status_message(s_));                                         \
      tpuc_status_destroy(s_);                                                 \
      g_h.current_failed = 1;                                                  \
    }                                                                          \
  } while (0)

#define RUN(test)                                                              \
  do {                                                                         \
    g_h.current_failed = 0;                                                    \
    test();                                                                    \
    if (g_h.current_failed) {                                                  \
      g_h.failed++;                                                            \
      printf("FAIL %s\n", #test);                                              \
    } else {                                                                   \
      g_h.passed++;                                                            \
      printf("ok   %s\n", #test);                                              \
    }                                                                          \
    fflush(stdout);                                                            \
  } while (0)

/* The start of a test program's main(): false, with the closing line the make
 * target reads ("0 passed, 1 failed"), when TPUC_PJRT_PLUGIN names no plugin. */
static inline bool harness_plugin_set(void) {
  if (getenv("TPUC_PJRT_PLUGIN")) return true;
  printf("TPUC_PJRT_PLUGIN is not set: point it at a PJRT plugin (make test-c does)\n");
  printf("0 passed, 1 failed\n");
  return false;
}

/* Creates the runtime the tests share, or says why not (with that line). */
static inline bool harness_runtime(const tpuc_runtime_options *opts, tpuc_runtime **rt) {
  tpuc_status *s = tpuc_runtime_create(opts, rt);
  if (!s) return true;
  printf("cannot create the runtime: %s\n0 passed, 1 failed\n", tpuc_status_message(s));
  tpuc_status_destroy(s);
  return false;
}

/* A 1-d contiguous tensor over the first n elements of storage s. */
static inline tpuc_tensor harness_vec(tpuc_storage *s, tpuc_dtype dt, int64_t n) {
  tpuc_tensor t;
  memset(&t, 0, sizeof t);
  t.storage = s;
  t.dtype = dt;
  t.ndim = 1;
  t.sizes[0] = n;
  t.strides[0] = 1;
  return t;
}

/* A float32 storage of n elements, uploaded from data unless it is NULL. */
static inline tpuc_storage *harness_storage_f32(tpuc_runtime *rt, const float *data, int64_t n) {
  tpuc_storage *s = NULL;
  CHECK_OK(tpuc_storage_create(rt, 0, (size_t)n * 4, &s));
  if (s && data) CHECK_OK(tpuc_storage_upload(s, TPUC_F32, &n, 1, data));
  return s;
}

/* Scalar arguments: a float, an integer. */
static inline tpuc_arg harness_scalar_f(double x) {
  tpuc_arg a;
  memset(&a, 0, sizeof a);
  a.kind = TPUC_ARG_SCALAR;
  a.scalar.kind = TPUC_SCALAR_FLOAT;
  a.scalar.re = x;
  return a;
}

static inline tpuc_arg harness_scalar_i(int64_t x) {
  tpuc_arg a = harness_scalar_f((double)x);
  a.scalar.kind = TPUC_SCALAR_INT;
  a.scalar.i = x;
  return a;
}

/* out = a * by (aten::mul.Scalar), as strict or fused mode runs it. */
static inline tpuc_status *harness_mul_scalar(tpuc_runtime *rt, tpuc_tensor a, tpuc_tensor out,
                                              double by) {
  tpuc_arg args[2];
  memset(args, 0, sizeof args);
  args[0].kind = TPUC_ARG_TENSOR;
  args[0].tensors.count = 1;
  args[1] = harness_scalar_f(by);
  tpuc_op_call c = {tpuc_op_find(rt, "aten::mul.Scalar"), 0, args, 2, &a, 1, &out, 1};
  return tpuc_op_run(rt, &c, false);
}

/* The end of main(): the closing line and the exit status. */
static inline int harness_end(void) {
  printf("%d passed, %d failed\n", g_h.passed, g_h.failed);
  return g_h.failed ? 1 : 0;
}

/* A distinct small program for each k (a @main adding k to a tensor<4xf32>):
 * tests that count compiles, cache entries or loads make as many as they need. */
static inline void harness_program(char *buf, size_t n, int k) {
  snprintf(buf, n,
           "module @p%d {\n  func.func public @main(%%a: tensor<4xf32>) -> tensor<4xf32> {\n"
           "    %%c = \"stablehlo.constant\"() {value = dense<%d.0> : tensor<4xf32>} : () -> "
           "tensor<4xf32>\n"
           "    %%0 = \"stablehlo.add\"(%%a, %%c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
           "    \"func.return\"(%%0) : (tensor<4xf32>) -> ()\n  }\n}\n",
           k, k);
}

#endif
