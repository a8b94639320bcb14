/* storage.c — tpuc_storage: the mutable cell behind a PyTorch storage. It
 * holds at most one immutable buffer; writes bind a new buffer. A mutex makes
 * rebinding safe against concurrent readers (autograd's device thread). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/internal.h"
#include "exec.h"

tpuc_status *tpuc_storage_create(tpuc_runtime *rt, int device, size_t nbytes, tpuc_storage **out) {
  *out = NULL;
  tpuc_status *bad_device = tpuc_device_check(rt, device);
  if (bad_device) return bad_device;
  /* malloc, not calloc (which skips glibc's thread cache); every field is
   * set here, and not as one memset, which the compiler would turn back
   * into calloc */
  tpuc_storage *s = malloc(sizeof *s);
  if (!s) return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  s->buf = NULL;
  s->ahead = NULL;
  pthread_mutex_init(&s->lock, NULL);
  atomic_init(&s->refs, 1);
  atomic_init(&s->alive, true);
  atomic_init(&s->pending, 0);
  s->rt = rt;
  s->device = device;
  s->nbytes = nbytes;
  *out = s;
  return NULL;
}

tpuc_storage *tpuc_storage_retain(tpuc_storage *s) {
  if (s) atomic_fetch_add(&s->refs, 1);
  return s;
}

void tpuc_storage_release(tpuc_storage *s) {
  if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
  tpuc_buffer_release(s->buf);
  tpuc_buffer_release(s->ahead);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

/* The owner lets go; ops still pending on the storage keep it until they
 * run, and then drop its results (a temporary never materialises). */
void tpuc_storage_destroy(tpuc_storage *s) {
  if (!s) return;
  atomic_store(&s->alive, false);
  tpuc_storage_release(s);
}

size_t tpuc_storage_nbytes(const tpuc_storage *s) { return s->nbytes; }
int tpuc_storage_device(const tpuc_storage *s) { return s->device; }

tpuc_buffer *tpuc_storage_peek_buffer(tpuc_storage *s) {
  pthread_mutex_lock(&s->lock);
  tpuc_buffer *b = tpuc_buffer_retain(s->buf);
  pthread_mutex_unlock(&s->lock);
  return b;
}

/* Pending fused ops that use the storage run before anyone looks at or
 * replaces its buffer. */
static tpuc_status *settle(tpuc_storage *s) {
  return atomic_load(&s->pending) ? tpuc_fused_flush_for(s) : NULL;
}

tpuc_buffer *tpuc_storage_get_buffer(tpuc_storage *s) {
  tpuc_status *st = settle(s);
  if (st) { /* the flush failed: its error surfaces when the data is read */
    tpuc_status_destroy(st);
  }
  pthread_mutex_lock(&s->lock);
  tpuc_buffer *b = tpuc_buffer_retain(s->buf);
  pthread_mutex_unlock(&s->lock);
  return b;
}

tpuc_status *tpuc_storage_set_buffer(tpuc_storage *s, tpuc_buffer *b) {
  tpuc_status *st = settle(s);
  if (st) return st;
  return tpuc_storage_bind(s, b);
}

tpuc_status *tpuc_storage_bind(tpuc_storage *s, tpuc_buffer *b) {
  if (b && (tpuc_buffer_nbytes(b) != s->nbytes || tpuc_buffer_device(b) != s->device))
    return tpuc_status_make(TPUC_ERR_INTERNAL,
                            "binding a buffer of %zu bytes on device %d to a storage of %zu bytes "
                            "on device %d",
                            tpuc_buffer_nbytes(b), tpuc_buffer_device(b), s->nbytes, s->device);
  tpuc_buffer_retain(b);
  pthread_mutex_lock(&s->lock);
  tpuc_buffer *old = s->buf;
  s->buf = b;
  pthread_mutex_unlock(&s->lock);
  tpuc_buffer_release(old);
  return NULL;
}

int tpuc_storage_buffer_shape(const tpuc_runtime *rt, const int64_t **dims, int ndim,
                              int64_t *numel) {
  *numel = 1; /* TPUC_FLAT_BUFFERS: no storage's buffer above rank 1 (internal.h) */
  for (int d = 0; d < ndim; d++) *numel *= (*dims)[d];
  if (!rt->flat_buffers || ndim <= 1) return ndim;
  *dims = numel;
  return 1;
}

tpuc_status *tpuc_storage_upload(tpuc_storage *s, tpuc_dtype dtype, const int64_t *dims, int ndim,
                                 const void *data) {
  tpuc_status *st = settle(s);
  return st ? st : tpuc_storage_upload_now(s, dtype, dims, ndim, data);
}

tpuc_status *tpuc_storage_upload_now(tpuc_storage *s, tpuc_dtype dtype, const int64_t *dims,
                                     int ndim, const void *data) {
  tpuc_buffer *b = NULL;
  tpuc_status *st = NULL;
  int64_t numel;
  ndim = tpuc_storage_buffer_shape(s->rt, &dims, ndim, &numel);
  tpuc_event_emit(s->rt, TPUC_EVENT_TO_DEVICE, TPUC_EVENT_BEGIN, "", "", s->device, (int64_t)s->nbytes, 0);
  st = tpuc_buffer_from_host(s->rt, s->device, dtype, dims, ndim, data, &b);
  tpuc_event_emit(s->rt, TPUC_EVENT_TO_DEVICE, TPUC_EVENT_END, "", "", s->device, (int64_t)s->nbytes, 0);
  if (st) return st;
  st = tpuc_storage_bind(s, b);
  tpuc_buffer_release(b);
  return st;
}

tpuc_status *tpuc_storage_download(tpuc_storage *s, void *dst, size_t nbytes) {
  if (nbytes != s->nbytes)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                            "tpuc_storage_download: %zu bytes asked of a storage of %zu", nbytes,
                            s->nbytes);
  tpuc_status *st = settle(s);
  if (!st) st = tpuc_checks_report(s->rt); /* a host read reports device-side check failures */
  if (st) return st;
  tpuc_buffer *b = tpuc_storage_peek_buffer(s);
  if (!b) {
    memset(dst, 0, nbytes);
    return NULL;
  }
  tpuc_event_emit(s->rt, TPUC_EVENT_TO_HOST, TPUC_EVENT_BEGIN, "", "", s->device, (int64_t)nbytes, 0);
  st = tpuc_buffer_to_host(b, dst, nbytes);
  tpuc_event_emit(s->rt, TPUC_EVENT_TO_HOST, TPUC_EVENT_END, "", "", s->device, (int64_t)nbytes, 0);
  tpuc_buffer_release(b);
  return st;
}

tpuc_status *tpuc_storage_resize(tpuc_storage *s, size_t nbytes) {
  if (nbytes == s->nbytes) return NULL;
  tpuc_status *pst = settle(s);
  if (pst) return pst;
  tpuc_buffer *b = tpuc_storage_peek_buffer(s);
  if (!b) { /* nothing written yet: only the size changes */
    pthread_mutex_lock(&s->lock);
    s->nbytes = nbytes;
    pthread_mutex_unlock(&s->lock);
    return NULL;
  }
  size_t keep = nbytes < s->nbytes ? nbytes : s->nbytes;
  if (keep == 0) {
    /* Nothing to keep (to or from zero bytes: FSDP2 frees each unsharded
     * parameter with storage().resize_(0) after use and grows it back before
     * the all-gather writes it, twice per parameter per step): the storage
     * becomes unwritten (it reads as zeros, as a fresh one), with no copy and
     * no wait. */
    tpuc_buffer_release(b);
    pthread_mutex_lock(&s->lock);
    tpuc_buffer *prev = s->buf;
    s->buf = NULL;
    s->nbytes = nbytes;
    pthread_mutex_unlock(&s->lock);
    tpuc_buffer_release(prev);
    return NULL;
  }
  /* Through the host: resizing a written storage to another non-zero size is
   * rare (resize_ of a non-empty tensor, storage().resize_()). */
  unsigned char *host = calloc(nbytes ? nbytes : 1, 1);
  unsigned char *old = malloc(s->nbytes ? s->nbytes : 1);
  tpuc_status *st = NULL;
  if (!host || !old) st = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  if (!st) st = tpuc_buffer_to_host(b, old, s->nbytes);
  tpuc_buffer_release(b);
  if (!st) {
    memcpy(host, old, keep);
    int64_t dims[1] = {(int64_t)nbytes};
    tpuc_buffer *nb = NULL;
    st = tpuc_buffer_from_host(s->rt, s->device, TPUC_U8, dims, 1, host, &nb);
    if (!st) {
      pthread_mutex_lock(&s->lock);
      tpuc_buffer *prev = s->buf;
      s->buf = nb;
      s->nbytes = nbytes;
      pthread_mutex_unlock(&s->lock);
      tpuc_buffer_release(prev);
    }
  }
  free(host);
  free(old);
  return st;
}
