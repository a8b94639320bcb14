/* exec.h — private definitions of the op engine: storages and the hooks
 * between storages and fused execution. */
#ifndef TPUC_EXEC_H
#define TPUC_EXEC_H

#include <pthread.h>
#include <stdatomic.h>

#include "../ir/ir.h"
#include "../runtime/internal.h"

struct tpuc_storage {
  pthread_mutex_t lock;
  tpuc_runtime *rt;
  int device;
  size_t nbytes;
  tpuc_buffer *buf;  /* NULL until written */
  atomic_int refs;   /* the owner's reference + one per pending fused op */
  atomic_bool alive; /* the owner (PyTorch) still holds it */
  atomic_int pending; /* uses by ops recorded and not yet flushed */
  /* ahead.c: the buffer type an op recorded ahead of its run will bind (a
   * shape-only buffer; NULL: none pending), under the ahead queue's lock */
  tpuc_buffer *ahead;
};

/* The bound buffer (one reference) without flushing pending work: for the
 * engine itself, which has already flushed or is flushing. */
tpuc_buffer *tpuc_storage_peek_buffer(tpuc_storage *s);
/* The shape of the buffer an upload of `dims` binds (rank 1 with
 * TPUC_FLAT_BUFFERS): returns its rank and may point *dims at *numel. */
int tpuc_storage_buffer_shape(const tpuc_runtime *rt, const int64_t **dims, int ndim,
                              int64_t *numel);
/* tpuc_storage_upload without running what is pending on the storage: for
 * the engine, whose caller has (strict mode) or runs it in order (ahead.c). */
tpuc_status *tpuc_storage_upload_now(tpuc_storage *s, tpuc_dtype dtype, const int64_t *dims,
                                     int ndim, const void *data);
/* Binds without flushing (the engine's results). */
tpuc_status *tpuc_storage_bind(tpuc_storage *s, tpuc_buffer *b);
tpuc_storage *tpuc_storage_retain(tpuc_storage *s);
void tpuc_storage_release(tpuc_storage *s);

/* op_run.c: validates a call (builds its IR, compiles nothing); returns the
 * lowering's refusal as TPUC_ERR_UNIMPLEMENTED, and in *sig a hash of the call
 * itself (op, geometry, static arguments; not what its storages hold), which
 * fused execution uses to find loop boundaries. */
tpuc_status *tpuc_op_check(tpuc_runtime *rt, const tpuc_op_call *c, uint64_t *sig);

/* recompile.c: records why `c` compiles when its op compiled before. */
void tpuc_recompile_note(tpuc_runtime *rt, const tpuc_op_call *c);
/* Appends the last min(count, keep) strings of a ring (keep slots of `width`
 * chars, slot i % keep holding the i-th string noted) to buf[len..n) as lines,
 * NUL-terminated while they fit; returns len plus the chars all of them need
 * (without the NUL). The reasons of recompiles and of fused replay's fallbacks. */
size_t tpuc_reason_lines(const char *ring, size_t width, int keep, int64_t count, char *buf,
                         size_t n, size_t len);

/* fused.c */
bool tpuc_fused_recording(tpuc_runtime *rt);
tpuc_status *tpuc_fused_record(tpuc_runtime *rt, const tpuc_op_call *c);
/* Flushes device's pending ops if the storage is used by any. */
tpuc_status *tpuc_fused_flush_for(tpuc_storage *s);
void tpuc_fused_destroy(tpuc_runtime *rt);

/* fill.c: does a whole-storage zero_ / fill_.Scalar by an upload (true, the
 * upload's status in *st) or leaves it to a program (false). What the call
 * reads or writes must not be pending in a fused chunk. tpuc_fill_takes says
 * whether it would upload; tpuc_fill_predict leaves in the storage the
 * shape-only buffer the upload will bind (compile-ahead's queue, ahead.c). */
bool tpuc_fill_on_host(tpuc_runtime *rt, const tpuc_op_call *c, tpuc_status **st);
bool tpuc_fill_takes(tpuc_runtime *rt, const tpuc_op_call *c);
tpuc_status *tpuc_fill_predict(tpuc_runtime *rt, const tpuc_op_call *c);
/* Whether c is a zero_ / fill_.Scalar of a whole storage (any size), and
 * running it as strict mode does: an upload when fill.c takes it, else its
 * own program (fused_hoist.c, whose storage is pending in the chunk it is
 * taken out of: nothing is flushed). */
bool tpuc_fill_whole(const tpuc_op_call *c);
tpuc_status *tpuc_fill_run(tpuc_runtime *rt, const tpuc_op_call *c);

/* ahead.c: strict mode's compile-ahead queue (its top comment) */
bool tpuc_ahead_queued(tpuc_runtime *rt, int device);
/* Queues c, its program handed to the compile pool (*queued), or runs the
 * queue and leaves c to the caller (*queued false, e.g. with fused ops
 * pending). A lowering's refusal is TPUC_ERR_UNIMPLEMENTED (c not queued). */
tpuc_status *tpuc_ahead_record(tpuc_runtime *rt, const tpuc_op_call *c, bool *queued);
/* Runs device's queue (-1: every device's), in order. */
tpuc_status *tpuc_ahead_drain(tpuc_runtime *rt, int device);
void tpuc_ahead_destroy(tpuc_runtime *rt);

#endif /* TPUC_EXEC_H */
