/* harness.h — a minimal test runner for the C core: CHECK records a failure
 * and continues; the run ends with the line "N passed, N failed". */
#ifndef TPUC_TEST_HARNESS_H
#define TPUC_TEST_HARNESS_H

#include <stdio.h>
#include <string.h>

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

#endif
