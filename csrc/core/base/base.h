/* base.h — the core's shared vocabulary, below every other module: statuses
 * (status.c) and element types (dtype.c) besides what tpuc.h makes public.
 * Every module of csrc/core may include it; it includes only tpuc.h. Private
 * to the core. */
#ifndef TPUC_BASE_H
#define TPUC_BASE_H

#include "tpuc.h"

/* ---- status.c ---- */
tpuc_status *tpuc_status_make(tpuc_code code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefixes the message of `s` with `what: ` and returns it. */
tpuc_status *tpuc_status_wrap(tpuc_status *s, const char *what);

/* ---- dtype.c ---- */
/* tpuc_dtype_size and tpuc_dtype_mlir_name are public (tpuc.h); the mapping
 * to PJRT's buffer types belongs to the runtime (runtime/buffer.c). */

#endif /* TPUC_BASE_H */
