/* marker.c — timing markers, what torch.tpu.Event(enable_timing=True) records.
 *
 * A marker is the barrier program (execute.c) launched behind everything
 * recorded or launched on a device so far (the recorded ops are flushed
 * first). PJRT calls back on a plugin thread when it completes; the callback
 * reads the host's monotonic clock. With programs run in launch order, that
 * moment is when the device finished the work before the marker, so two
 * markers' stamps bound the device time of the work between them, as two
 * CUDA events do, give or take the plugin's completion latency (microseconds).
 * Recording never waits; reading a stamp waits for its marker. Thread-safe:
 * each marker has its own lock; the callback and the caller hold a reference
 * each. */
#include <stdlib.h>
#include <time.h>

#include "internal.h"

struct tpuc_marker {
  tpuc_runtime *rt;
  pj_buffer *out; /* the barrier's result, kept until the marker is released */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  int64_t ns;       /* CLOCK_MONOTONIC at completion */
  tpuc_status *err; /* the device's error, if the work failed */
  atomic_int refs;
};

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void marker_unref(tpuc_marker *m) {
  if (atomic_fetch_sub(&m->refs, 1) != 1) return;
  tpuc_barrier_output_destroy(m->rt, m->out);
  tpuc_status_destroy(m->err);
  pthread_cond_destroy(&m->cv);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

typedef struct {
  tpuc_marker *m;
  pj_event *ev;
} ready_ctx;

static void on_complete(pj_error *err, void *arg) {
  int64_t t = now_ns(); /* first: the stamp is the point of it */
  ready_ctx *c = arg;
  tpuc_marker *m = c->m;
  const tpuc_plugin *p = &m->rt->plugin;
  tpuc_status *s = tpuc_plugin_error(p, err, "device computation failed");
  pj_generic_fn destroy = (pj_generic_fn)tpuc_plugin_fn(p, PJ_SLOT_EVENT_DESTROY);
  pj_event_args d = {0};
  d.struct_size = PJ_SIZE(pj_event_args, event);
  d.event = c->ev;
  if (destroy) tpuc_status_destroy(tpuc_plugin_error(p, destroy(&d), NULL));
  free(c);
  pthread_mutex_lock(&m->mu);
  m->ns = t;
  m->err = s;
  m->done = true;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
  marker_unref(m);
}

tpuc_status *tpuc_marker_record(tpuc_runtime *rt, int device, tpuc_marker **out) {
  *out = NULL;
  tpuc_status *bad_device = tpuc_device_check(rt, device);
  if (bad_device) return bad_device;
  tpuc_status *s = tpuc_flush(rt, device); /* recorded ops run before the marker */
  if (s) return s;
  const tpuc_plugin *p = &rt->plugin;
  PJ_FN(p, PJ_SLOT_EVENT_ON_READY, pj_event_on_ready_args, on_ready);
  tpuc_marker *m = calloc(1, sizeof *m);
  ready_ctx *c = malloc(sizeof *c);
  if (!m || !c) {
    free(m);
    free(c);
    return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  m->rt = rt;
  pthread_mutex_init(&m->mu, NULL);
  pthread_cond_init(&m->cv, NULL);
  atomic_init(&m->refs, 2); /* the caller's and the callback's */
  pj_event *complete = NULL;
  s = tpuc_barrier_launch(rt, device, &m->out, &complete);
  if (!s && !complete)
    s = tpuc_status_make(TPUC_ERR_RUNTIME, "the plugin gave no completion event for a marker");
  if (!s) {
    c->m = m;
    c->ev = complete;
    pj_event_on_ready_args a = {0};
    a.struct_size = PJ_SIZE(pj_event_on_ready_args, user_arg);
    a.event = complete;
    a.callback = on_complete;
    a.user_arg = c;
    s = tpuc_plugin_error(p, on_ready(&a), "PJRT_Event_OnReady");
    if (!s) {
      *out = m;
      return NULL;
    }
  }
  /* not registered: nothing will call back */
  tpuc_status_destroy(tpuc_event_wait(rt, complete, NULL));
  free(c);
  atomic_store(&m->refs, 1);
  marker_unref(m);
  return s;
}

bool tpuc_marker_done(tpuc_marker *m) {
  pthread_mutex_lock(&m->mu);
  bool done = m->done;
  pthread_mutex_unlock(&m->mu);
  if (done) return true;
  /* The barrier's result is ready but the callback may not have run yet (a
   * torch.tpu.synchronize() returns as soon as the device is done): it is
   * imminent, so wait for it rather than answer "not done" after a sync. */
  if (!tpuc_pj_buffer_is_ready(m->rt, m->out)) return false;
  tpuc_status_destroy(tpuc_marker_wait(m, NULL));
  return true;
}

tpuc_status *tpuc_marker_wait(tpuc_marker *m, int64_t *ns) {
  pthread_mutex_lock(&m->mu);
  while (!m->done) pthread_cond_wait(&m->cv, &m->mu);
  tpuc_status *s = m->err ? tpuc_status_make(tpuc_status_code(m->err), "%s",
                                             tpuc_status_message(m->err))
                          : NULL;
  if (ns) *ns = m->ns;
  pthread_mutex_unlock(&m->mu);
  return s;
}

void tpuc_marker_release(tpuc_marker *m) {
  if (m) marker_unref(m);
}
