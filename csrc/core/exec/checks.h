/* checks.h — run-time checks computed inside programs (index bounds,
 * torch._assert_async) and how their results reach the user: at once in
 * debug mode, at the next synchronisation point otherwise (as CUDA reports
 * device-side asserts). */
#ifndef TPUC_CHECKS_H
#define TPUC_CHECKS_H

#include "../lower/lower.h"
#include "exec.h"

/* What each check of a program means: immutable, shared by a plan and its
 * deferred results (reference counted). */
typedef struct {
  const char *op; /* a registry name: lives as long as the runtime */
  tpuc_check_kind kind;
  int dim;
  int64_t size;
  const char *msg; /* TPUC_CHECK_ASSERT: the assert's message (in the set), or NULL */
} check_desc;

typedef struct check_set {
  atomic_int refs;
  int n;
  check_desc d[];
} check_set;

/* A set describing checks v[0..n-1] (one reference; messages copied into
 * it), or NULL when out of memory. */
check_set *check_set_new(const tpuc_check *v, int n);
check_set *check_set_retain(check_set *cs);
void check_set_release(check_set *cs);

/* Whether programs built now carry their checks: debug mode or `wait`, or
 * checks switched on (TPUC_CHECK_BOUNDS=1, tpuc_set_check_bounds). */
bool tpuc_checks_wanted(tpuc_runtime *rt, bool wait);

/* The check result `b` (s64[2n]) of a program just run: with `now`, reads it
 * and returns the failure (the caller then binds no result); otherwise keeps
 * it (one reference taken) to be read at the next synchronisation point. */
tpuc_status *tpuc_checks_after_launch(tpuc_runtime *rt, check_set *cs, tpuc_buffer *b, bool now);


#endif
