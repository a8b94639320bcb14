/* events.c — the runtime's one observer (profilers, `tpuc doctor`): what the
 * core does, reported as begin/end pairs on the caller's thread (compiles,
 * launches, transfers), instants (recompiles) and, from a plugin thread, the
 * moment a launched program's results are ready (DEVICE_DONE). Nothing is
 * built or reported while no observer is set. */
#include <stdlib.h>

#include "internal.h"

void tpuc_set_event_hook(tpuc_runtime *rt, tpuc_event_fn fn, void *user) {
  pthread_mutex_lock(&rt->hook_lock); /* one writer at a time */
  unsigned seq = atomic_load_explicit(&rt->hook_seq, memory_order_relaxed);
  atomic_store_explicit(&rt->hook_seq, seq + 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&rt->hook_user, user, memory_order_relaxed);
  atomic_store_explicit(&rt->hook, fn, memory_order_relaxed);
  atomic_store_explicit(&rt->hook_seq, seq + 2, memory_order_release);
  pthread_mutex_unlock(&rt->hook_lock);
}

void tpuc_set_event_gate(tpuc_runtime *rt, tpuc_event_gate_fn gate) {
  pthread_mutex_lock(&rt->hook_lock);
  unsigned seq = atomic_load_explicit(&rt->hook_seq, memory_order_relaxed);
  atomic_store_explicit(&rt->hook_seq, seq + 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&rt->hook_gate, gate, memory_order_relaxed);
  atomic_store_explicit(&rt->hook_seq, seq + 2, memory_order_release);
  pthread_mutex_unlock(&rt->hook_lock);
}

/* The hook, its user and its gate as one writer left them, without a lock
 * (an event per launch: a mutex here was two locked instructions and two
 * calls on every op). */
static tpuc_event_fn read_hook(tpuc_runtime *rt, void **user, tpuc_event_gate_fn *gate) {
  for (;;) {
    unsigned s1 = atomic_load_explicit(&rt->hook_seq, memory_order_acquire);
    tpuc_event_fn fn = atomic_load_explicit(&rt->hook, memory_order_relaxed);
    *user = atomic_load_explicit(&rt->hook_user, memory_order_relaxed);
    *gate = atomic_load_explicit(&rt->hook_gate, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (!(s1 & 1u) && atomic_load_explicit(&rt->hook_seq, memory_order_relaxed) == s1) return fn;
  }
}

/* A launch nobody reports costs one gate call instead of two events (about
 * 0.3k instructions per op in all, docs/execution.md). */
bool tpuc_launch_observed(tpuc_runtime *rt) {
  if (!tpuc_events_on(rt)) return false;
  void *user;
  tpuc_event_gate_fn gate;
  tpuc_event_fn fn = read_hook(rt, &user, &gate);
  return fn && (!gate || gate(user));
}

void tpuc_event_emit(tpuc_runtime *rt, tpuc_event_kind kind, tpuc_event_phase phase,
                     const char *name, const char *detail, int device, int64_t bytes,
                     uint64_t id) {
  if (!tpuc_events_on(rt)) return;
  void *user;
  tpuc_event_gate_fn gate;
  tpuc_event_fn fn = read_hook(rt, &user, &gate);
  if (!fn) return;
  tpuc_event ev = {kind, phase, name ? name : "", detail ? detail : "", device, bytes, id};
  fn(&ev, user);
}

void tpuc_set_event_device_done(tpuc_runtime *rt, bool on) { atomic_store(&rt->want_done, on); }

uint64_t tpuc_event_next_id(tpuc_runtime *rt) { return atomic_fetch_add(&rt->event_ids, 1) + 1; }

typedef struct {
  tpuc_runtime *rt;
  const char *name; /* static: a lowering's name or a literal */
  int device;
  uint64_t id;
} done_ctx;

static void on_done(tpuc_status *s, void *user) {
  done_ctx *c = user;
  tpuc_status_destroy(s); /* the error reaches whoever reads the result */
  tpuc_event_emit(c->rt, TPUC_EVENT_DEVICE_DONE, TPUC_EVENT_INSTANT, c->name, "", c->device, 0,
                  c->id);
  free(c);
}

void tpuc_event_on_done(tpuc_runtime *rt, tpuc_buffer *b, const char *name, int device,
                        uint64_t id) {
  if (!b || !tpuc_events_on(rt) || !atomic_load(&rt->want_done)) return;
  done_ctx *c = malloc(sizeof *c);
  if (!c) return;
  *c = (done_ctx){rt, name, device, id};
  tpuc_status *s = tpuc_buffer_on_ready(b, on_done, c);
  if (s) { /* not registered: no event */
    tpuc_status_destroy(s);
    free(c);
  }
}
