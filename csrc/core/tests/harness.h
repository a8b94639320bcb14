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
