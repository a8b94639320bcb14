/* buffer.c — device buffers: host<->device transfers, readiness, reference
 * counting, the element types' PJRT buffer types and tpuc's per-device
 * accounting of live bytes (the XLA CPU plugin reports no memory statistics
 * of its own). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* PJRT's buffer type of each element type (sizes and names: base/dtype.c) */
static const pj_buffer_type k_pjrt_types[TPUC_DTYPE_COUNT] = {
    [TPUC_PRED] = PJ_TYPE_PRED,
    [TPUC_S8] = PJ_TYPE_S8,
    [TPUC_S16] = PJ_TYPE_S16,
    [TPUC_S32] = PJ_TYPE_S32,
    [TPUC_S64] = PJ_TYPE_S64,
    [TPUC_U8] = PJ_TYPE_U8,
    [TPUC_U16] = PJ_TYPE_U16,
    [TPUC_U32] = PJ_TYPE_U32,
    [TPUC_U64] = PJ_TYPE_U64,
    [TPUC_F16] = PJ_TYPE_F16,
    [TPUC_BF16] = PJ_TYPE_BF16,
    [TPUC_F32] = PJ_TYPE_F32,
    [TPUC_F64] = PJ_TYPE_F64,
    [TPUC_C64] = PJ_TYPE_C64,
    [TPUC_C128] = PJ_TYPE_C128,
};

pj_buffer_type tpuc_dtype_to_pjrt(tpuc_dtype t) {
  return (unsigned)t < TPUC_DTYPE_COUNT ? k_pjrt_types[t] : PJ_TYPE_INVALID;
}

bool tpuc_dtype_from_pjrt(pj_buffer_type t, tpuc_dtype *out) {
  for (int i = 0; i < TPUC_DTYPE_COUNT; i++)
    if (k_pjrt_types[i] == t) {
      *out = (tpuc_dtype)i;
      return true;
    }
  return false;
}

tpuc_status *tpuc_event_wait(tpuc_runtime *rt, pj_event *ev, const char *what) {
  if (!ev) return NULL;
  const tpuc_plugin *p = &rt->plugin;
  pj_generic_fn await = (pj_generic_fn)tpuc_plugin_fn(p, PJ_SLOT_EVENT_AWAIT);
  pj_generic_fn destroy = (pj_generic_fn)tpuc_plugin_fn(p, PJ_SLOT_EVENT_DESTROY);
  pj_event_args a = {0};
  a.struct_size = PJ_SIZE(pj_event_args, event);
  a.event = ev;
  tpuc_status *s = await ? tpuc_plugin_error(p, await(&a), what)
                         : tpuc_plugin_missing(p, "PJRT_Event_Await");
  if (destroy) tpuc_status_destroy(tpuc_plugin_error(p, destroy(&a), NULL));
  return s;
}

static tpuc_status *check_shape(const tpuc_runtime *rt, int device, tpuc_dtype dtype,
                                const int64_t *dims, int ndim, int64_t *numel) {
  tpuc_status *bad_device = tpuc_device_check(rt, device);
  if (bad_device) return bad_device;
  if ((unsigned)dtype >= TPUC_DTYPE_COUNT)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "unknown dtype %d", (int)dtype);
  if (ndim < 0 || ndim > TPUC_MAX_DIMS)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "rank %d is outside 0..%d", ndim,
                            TPUC_MAX_DIMS);
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (dims[i] < 0)
      return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "dimension %d is negative (%lld)", i,
                              (long long)dims[i]);
    if (dims[i] && n > INT64_MAX / dims[i])
      return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "shape has too many elements");
    n *= dims[i];
  }
  *numel = n;
  return NULL;
}

tpuc_status *tpuc_buffer_wrap(tpuc_runtime *rt, int device, pj_buffer *pb, tpuc_dtype dtype,
                              int ndim, const int64_t *dims, tpuc_buffer **out) {
  int64_t numel = 0;
  tpuc_status *s = check_shape(rt, device, dtype, dims, ndim, &numel);
  /* malloc, not calloc (which skips glibc's thread cache: about 150
   * instructions more per result on the strict path); every field is set
   * below, and not as one memset, which the compiler would turn back into
   * calloc */
  tpuc_buffer *b = s ? NULL : malloc(sizeof *b);
  if (!s && !b) s = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  if (s) {
    pj_generic_fn destroy = (pj_generic_fn)tpuc_plugin_fn(&rt->plugin, PJ_SLOT_BUFFER_DESTROY);
    pj_buffer_destroy_args d = {0};
    d.struct_size = PJ_SIZE(pj_buffer_destroy_args, buffer);
    d.buffer = pb;
    if (destroy) tpuc_status_destroy(tpuc_plugin_error(&rt->plugin, destroy(&d), NULL));
    return s;
  }
  atomic_init(&b->refs, 1);
  atomic_init(&b->donated, false);
  atomic_init(&b->unaccounted, false);
  b->rt = rt;
  b->buf = pb;
  b->device = device;
  b->dtype = dtype;
  b->ndim = ndim;
  memset(b->dims, 0, sizeof b->dims);
  if (ndim) memcpy(b->dims, dims, (size_t)ndim * sizeof *dims);
  b->numel = numel;
  b->nbytes = (size_t)numel * tpuc_dtype_size(dtype);
  tpuc_runtime_account(rt, device, (int64_t)b->nbytes);
  atomic_fetch_add(&rt->live_objects, 1);
  *out = b;
  return NULL;
}

tpuc_status *tpuc_buffer_from_host(tpuc_runtime *rt, int device, tpuc_dtype dtype,
                                   const int64_t *dims, int ndim, const void *data,
                                   tpuc_buffer **out) {
  *out = NULL;
  int64_t numel = 0;
  tpuc_status *s = check_shape(rt, device, dtype, dims, ndim, &numel);
  if (s) return s;
  if (!data && numel)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "tpuc_buffer_from_host: data is NULL");
  PJ_FN(&rt->plugin, PJ_SLOT_CLIENT_BUFFER_FROM_HOST, pj_buffer_from_host_args, from_host);
  static const char empty[16] = {0};
  pj_buffer_from_host_args a = {0};
  a.struct_size = PJ_SIZE(pj_buffer_from_host_args, buffer);
  a.client = rt->client;
  a.data = numel ? data : empty;
  a.type = tpuc_dtype_to_pjrt(dtype);
  a.dims = dims;
  a.num_dims = (size_t)ndim;
  a.host_buffer_semantics = PJ_HOST_IMMUTABLE_ONLY_DURING_CALL;
  a.device = rt->devices[device].device;
  int64_t nbytes = numel * (int64_t)tpuc_dtype_size(dtype);
  if ((s = tpuc_memory_admit(rt, device, nbytes, "copying to the device"))) return s;
  if ((s = tpuc_plugin_error(&rt->plugin, from_host(&a), "copying to the device")))
    return tpuc_oom_explain(rt, device, s, nbytes);
  /* With these semantics the data is read during the call; the event only
   * needs to be released. */
  if (a.done_with_host_buffer)
    tpuc_status_destroy(tpuc_event_wait(rt, a.done_with_host_buffer, NULL));
  return tpuc_buffer_wrap(rt, device, a.buffer, dtype, ndim, dims, out);
}

tpuc_status *tpuc_buffer_to_host(tpuc_buffer *b, void *dst, size_t nbytes) {
  if (nbytes != b->nbytes)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                            "tpuc_buffer_to_host: destination has %zu bytes, buffer has %zu",
                            nbytes, b->nbytes);
  if (b->nbytes == 0) return tpuc_buffer_await(b);
  const tpuc_plugin *p = &b->rt->plugin;
  PJ_FN(p, PJ_SLOT_BUFFER_TO_HOST, pj_buffer_to_host_args, to_host);
  /* Ask for dense row-major data whatever the device layout is. */
  int64_t minor_to_major[TPUC_MAX_DIMS];
  for (int i = 0; i < b->ndim; i++) minor_to_major[i] = b->ndim - 1 - i;
  pj_memory_layout layout = {0};
  layout.struct_size = PJ_SIZE(pj_memory_layout, type);
  layout.type = PJ_LAYOUT_TILED;
  layout.tiled.struct_size = PJ_SIZE(pj_layout_tiled, num_tiles);
  layout.tiled.minor_to_major = minor_to_major;
  layout.tiled.minor_to_major_size = (size_t)b->ndim;

  pj_buffer_to_host_args a = {0};
  a.struct_size = PJ_SIZE(pj_buffer_to_host_args, event);
  a.src = b->buf;
  a.host_layout = &layout;
  a.dst = dst;
  a.dst_size = nbytes;
  tpuc_status *s = tpuc_plugin_error(p, to_host(&a), "copying to the host");
  if (!s) s = tpuc_event_wait(b->rt, a.event, "copying to the host");
  /* the error of the program that produced b, e.g. its scratch memory */
  return tpuc_oom_explain(b->rt, b->device, s, -1);
}

static tpuc_status *pj_ready_event(tpuc_runtime *rt, pj_buffer *buf, pj_event **ev) {
  const tpuc_plugin *p = &rt->plugin;
  PJ_FN(p, PJ_SLOT_BUFFER_READY_EVENT, pj_buffer_ready_event_args, ready);
  pj_buffer_ready_event_args a = {0};
  a.struct_size = PJ_SIZE(pj_buffer_ready_event_args, event);
  a.buffer = buf;
  tpuc_status *s = tpuc_plugin_error(p, ready(&a), "PJRT_Buffer_ReadyEvent");
  *ev = a.event;
  return s;
}

static tpuc_status *ready_event(tpuc_buffer *b, pj_event **ev) {
  return pj_ready_event(b->rt, b->buf, ev);
}

tpuc_status *tpuc_buffer_await(tpuc_buffer *b) {
  pj_event *ev = NULL;
  tpuc_status *s = ready_event(b, &ev);
  if (!s) s = tpuc_event_wait(b->rt, ev, "device computation failed");
  return tpuc_oom_explain(b->rt, b->device, s, -1);
}

bool tpuc_pj_buffer_is_ready(tpuc_runtime *rt, pj_buffer *buf) {
  pj_event *ev = NULL;
  tpuc_status *s = pj_ready_event(rt, buf, &ev);
  if (s) {
    tpuc_status_destroy(s);
    return true;
  }
  const tpuc_plugin *p = &rt->plugin;
  pj_generic_fn is_ready = (pj_generic_fn)tpuc_plugin_fn(p, PJ_SLOT_EVENT_IS_READY);
  pj_generic_fn destroy = (pj_generic_fn)tpuc_plugin_fn(p, PJ_SLOT_EVENT_DESTROY);
  pj_event_is_ready_args a = {0};
  a.struct_size = PJ_SIZE(pj_event_is_ready_args, is_ready);
  a.event = ev;
  bool ready = true;
  if (is_ready) {
    tpuc_status *e = tpuc_plugin_error(p, is_ready(&a), NULL);
    ready = e ? true : a.is_ready;
    tpuc_status_destroy(e);
  }
  pj_event_args d = {0};
  d.struct_size = PJ_SIZE(pj_event_args, event);
  d.event = ev;
  if (destroy) tpuc_status_destroy(tpuc_plugin_error(p, destroy(&d), NULL));
  return ready;
}

bool tpuc_buffer_is_ready(tpuc_buffer *b) { return tpuc_pj_buffer_is_ready(b->rt, b->buf); }

typedef struct {
  tpuc_runtime *rt;
  pj_event *ev;
  tpuc_ready_fn fn;
  void *user;
} on_ready_ctx;

static void on_ready_trampoline(pj_error *err, void *arg) {
  on_ready_ctx *c = arg;
  tpuc_status *s = tpuc_plugin_error(&c->rt->plugin, err, "device computation failed");
  pj_generic_fn destroy = (pj_generic_fn)tpuc_plugin_fn(&c->rt->plugin, PJ_SLOT_EVENT_DESTROY);
  pj_event_args d = {0};
  d.struct_size = PJ_SIZE(pj_event_args, event);
  d.event = c->ev;
  tpuc_ready_fn fn = c->fn;
  void *user = c->user;
  if (destroy) tpuc_status_destroy(tpuc_plugin_error(&c->rt->plugin, destroy(&d), NULL));
  free(c);
  fn(s, user);
}

tpuc_status *tpuc_buffer_on_ready(tpuc_buffer *b, tpuc_ready_fn fn, void *user) {
  const tpuc_plugin *p = &b->rt->plugin;
  PJ_FN(p, PJ_SLOT_EVENT_ON_READY, pj_event_on_ready_args, on_ready);
  on_ready_ctx *c = malloc(sizeof *c);
  if (!c) return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  tpuc_status *s = ready_event(b, &c->ev);
  if (s) {
    free(c);
    return s;
  }
  c->rt = b->rt;
  c->fn = fn;
  c->user = user;
  pj_event_on_ready_args a = {0};
  a.struct_size = PJ_SIZE(pj_event_on_ready_args, user_arg);
  a.event = c->ev;
  a.callback = on_ready_trampoline;
  a.user_arg = c;
  s = tpuc_plugin_error(p, on_ready(&a), "PJRT_Event_OnReady");
  if (s) { /* the callback was not registered: clean up here */
    tpuc_status_destroy(tpuc_event_wait(b->rt, c->ev, NULL));
    free(c);
  }
  return s;
}

tpuc_buffer *tpuc_buffer_retain(tpuc_buffer *b) {
  if (b) atomic_fetch_add(&b->refs, 1);
  return b;
}

void tpuc_buffer_release(tpuc_buffer *b) {
  if (!b || atomic_fetch_sub(&b->refs, 1) != 1) return;
  tpuc_runtime *rt = b->rt;
  pj_generic_fn destroy = (pj_generic_fn)tpuc_plugin_fn(&rt->plugin, PJ_SLOT_BUFFER_DESTROY);
  pj_buffer_destroy_args d = {0};
  d.struct_size = PJ_SIZE(pj_buffer_destroy_args, buffer);
  d.buffer = b->buf;
  if (destroy && b->buf) /* a shape-only buffer has no plugin buffer */
    tpuc_status_destroy(tpuc_plugin_error(&rt->plugin, destroy(&d), NULL));
  /* a donated buffer's bytes left with the donation */
  if (!atomic_load(&b->donated) && !atomic_load(&b->unaccounted))
    tpuc_runtime_account(rt, b->device, -(int64_t)b->nbytes);
  atomic_fetch_sub(&rt->live_objects, 1);
  free(b);
}

tpuc_status *tpuc_buffer_shape_only(tpuc_runtime *rt, int device, tpuc_dtype dtype, int ndim,
                                    const int64_t *dims, tpuc_buffer **out) {
  *out = NULL;
  int64_t numel = 0;
  tpuc_status *s = check_shape(rt, device, dtype, dims, ndim, &numel);
  if (s) return s;
  tpuc_buffer *b = malloc(sizeof *b);
  if (!b) return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  atomic_init(&b->refs, 1);
  atomic_init(&b->donated, false);
  atomic_init(&b->unaccounted, true); /* holds no memory */
  b->rt = rt;
  b->buf = NULL;
  b->device = device;
  b->dtype = dtype;
  b->ndim = ndim;
  memset(b->dims, 0, sizeof b->dims);
  if (ndim) memcpy(b->dims, dims, (size_t)ndim * sizeof *dims);
  b->numel = numel;
  b->nbytes = (size_t)numel * tpuc_dtype_size(dtype);
  atomic_fetch_add(&rt->live_objects, 1);
  *out = b;
  return NULL;
}

void tpuc_buffer_unaccount(tpuc_buffer *b) {
  if (!atomic_exchange(&b->unaccounted, true) && !atomic_load(&b->donated))
    tpuc_runtime_account(b->rt, b->device, -(int64_t)b->nbytes);
}

tpuc_dtype tpuc_buffer_dtype(const tpuc_buffer *b) { return b->dtype; }
int tpuc_buffer_ndim(const tpuc_buffer *b) { return b->ndim; }
const int64_t *tpuc_buffer_dims(const tpuc_buffer *b) { return b->dims; }
int64_t tpuc_buffer_numel(const tpuc_buffer *b) { return b->numel; }
size_t tpuc_buffer_nbytes(const tpuc_buffer *b) { return b->nbytes; }
int tpuc_buffer_device(const tpuc_buffer *b) { return b->device; }
