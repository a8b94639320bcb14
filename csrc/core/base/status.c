/* status.c — tpuc_status: an error code with a message, owned by the caller.
 * A NULL status means success. Creating a status never fails: when memory is
 * exhausted a static out-of-memory status (which destroy ignores) stands in. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

struct tpuc_status {
  tpuc_code code;
  bool is_static;
  char *message;
};

static tpuc_status oom_status = {TPUC_ERR_OUT_OF_MEMORY, true,
                                 (char *)"tpuc: out of host memory while reporting an error"};

tpuc_status *tpuc_status_make(tpuc_code code, const char *fmt, ...) {
  tpuc_status *s = malloc(sizeof *s);
  if (!s) return &oom_status;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  s->message = malloc((size_t)(n < 0 ? 0 : n) + 1);
  if (!s->message) {
    free(s);
    return &oom_status;
  }
  va_start(ap, fmt);
  vsnprintf(s->message, (size_t)n + 1, fmt, ap);
  va_end(ap);
  s->code = code;
  s->is_static = false;
  return s;
}

tpuc_status *tpuc_status_wrap(tpuc_status *s, const char *what) {
  if (!s || s->is_static || !what) return s;
  size_t n = strlen(what) + strlen(s->message) + 3;
  char *m = malloc(n);
  if (!m) return s;
  snprintf(m, n, "%s: %s", what, s->message);
  free(s->message);
  s->message = m;
  return s;
}

tpuc_status *tpuc_status_create(tpuc_code code, const char *message) {
  return tpuc_status_make(code == TPUC_OK ? TPUC_ERR_INTERNAL : code, "%s", message ? message : "");
}

tpuc_code tpuc_status_code(const tpuc_status *s) { return s ? s->code : TPUC_OK; }

const char *tpuc_status_message(const tpuc_status *s) { return s ? s->message : ""; }

void tpuc_status_destroy(tpuc_status *s) {
  if (!s || s->is_static) return;
  free(s->message);
  free(s);
}
