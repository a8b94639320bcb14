/* execute.c — launching a compiled program on one device.
 *
 * Launches are asynchronous: PJRT returns the output buffers at once and the
 * host waits only when it reads them (or, with `wait`, right here, which is
 * how debug mode reports a device error at the op that caused it).
 *
 * An asynchronous launch on one device asks the plugin for no completion
 * event (about 1.5k instructions per launch to make, wait for and destroy):
 * tpuc_synchronize waits instead for a barrier, a tiny program launched after
 * everything else on the device. That relies on a device running the
 * programs launched on it in order: TPU and GPU plugins run them on the
 * device's stream; the XLA CPU plugin makes each launch on a device wait for
 * the one before it (its per-device last-enqueue event). A failed program
 * reports its error through its outputs (a host read, or a program that
 * consumes them); one whose outputs were all freed unread reports it nowhere
 * (the barrier's own status does not carry it). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define SMALL 16

tpuc_status *tpuc_execute(tpuc_executable *e, int device, tpuc_buffer *const *args, int nargs,
                          tpuc_buffer **outs, bool wait) {
  return tpuc_execute_donating(e, device, args, NULL, nargs, outs, wait);
}

tpuc_status *tpuc_execute_donating(tpuc_executable *e, int device, tpuc_buffer *const *args,
                                   const bool *donate, int nargs, tpuc_buffer **outs,
                                   bool wait) {
  return tpuc_execute_aliasing(e, device, args, donate, NULL, nargs, outs, wait);
}

tpuc_status *tpuc_execute_aliasing(tpuc_executable *e, int device, tpuc_buffer *const *args,
                                   const bool *donate, const bool *aliasable, int nargs,
                                   tpuc_buffer **outs, bool wait) {
  tpuc_runtime *rt = e->rt;
  const tpuc_plugin *p = &rt->plugin;
  tpuc_status *bad_device = tpuc_device_check(rt, device);
  if (bad_device) return bad_device;
  for (int i = 0; i < nargs; i++)
    if (!args[i] || args[i]->device != device)
      return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                              "argument %d is %s device %d; the program runs on device %d", i,
                              args[i] ? "on" : "missing, not on", args[i] ? args[i]->device : -1,
                              device);
    else if (!args[i]->buf) /* a shape-only buffer (exec/ahead.c): a bug, never run it */
      return tpuc_status_make(TPUC_ERR_INTERNAL, "argument %d has no device memory (an op "
                              "recorded ahead of its run was not run first)", i);
  PJ_FN(p, PJ_SLOT_LOADED_EXECUTABLE_EXECUTE, pj_execute_args, execute);

  pj_buffer *arg_small[SMALL], *out_small[SMALL];
  pj_buffer **arg_bufs = nargs <= SMALL ? arg_small : malloc((size_t)nargs * sizeof *arg_bufs);
  pj_buffer **out_bufs =
      e->num_outputs <= SMALL ? out_small : malloc((size_t)e->num_outputs * sizeof *out_bufs);
  /* an argument the program may alias with an output is donated unless
   * listed here: every argument not marked for donation is */
  int64_t keep_small[SMALL];
  int64_t *keep = nargs <= SMALL ? keep_small : malloc((size_t)nargs * sizeof *keep);
  size_t nkeep = 0;
  tpuc_status *s = NULL;
  if (!arg_bufs || !out_bufs || !keep) {
    s = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  for (int i = 0; i < nargs; i++) {
    arg_bufs[i] = args[i]->buf;
    /* only an argument the program may alias can be donated: listing the
     * others changes nothing, and the plugin builds a hash set of the list
     * on every launch */
    if ((!donate || !donate[i]) && (!aliasable || aliasable[i])) keep[nkeep++] = i;
  }
  for (int i = 0; i < e->num_outputs; i++) out_bufs[i] = NULL;

  pj_execute_options opts = {0};
  opts.struct_size = PJ_SIZE(pj_execute_options, num_custom_options);
  opts.non_donatable_input_indices = keep;
  opts.num_non_donatable_input_indices = nkeep;
  pj_buffer *const *arg_lists[1] = {arg_bufs};
  pj_buffer **out_lists[1] = {out_bufs};
  pj_event *complete[1] = {NULL};

  /* what the launch allocates: its outputs and scratch, less what donated
   * arguments hand over */
  int64_t need = e->temp_bytes;
  for (int i = 0; i < e->num_outputs; i++) {
    int64_t n = (int64_t)tpuc_dtype_size(e->out_dtypes[i]);
    for (int k = 0; k < e->out_ndims[i]; k++) n *= e->out_dims[i][k];
    need += n;
  }
  for (int i = 0; donate && i < nargs; i++)
    if (donate[i]) need -= (int64_t)args[i]->nbytes;
  if ((s = tpuc_memory_admit(rt, device, need, "launching a program: its outputs and scratch")))
    goto done;

  pj_execute_args a = {0};
  a.struct_size = PJ_SIZE(pj_execute_args, execute_device);
  a.executable = e->exe;
  a.options = &opts;
  a.argument_lists = arg_lists;
  a.num_devices = 1;
  a.num_args = (size_t)nargs;
  a.output_lists = out_lists;
  /* waited for here; an asynchronous launch needs none (the barrier) */
  a.device_complete_events = wait ? complete : NULL;
  /* a bound executable runs on the device it was compiled for, the only one
   * (device was checked above) */
  a.execute_device = e->bound ? NULL : rt->devices[device].device;
  s = tpuc_plugin_error(p, execute(&a), "launching a program");
  if (s) {
    s = tpuc_oom_explain(rt, device, s, need);
    goto done;
  }
  atomic_fetch_add(&rt->executions, 1);
  for (int i = 0; donate && i < nargs; i++) /* their memory now holds outputs */
    if (donate[i] && !atomic_exchange(&args[i]->donated, true)) {
      tpuc_runtime_account(rt, device, -(int64_t)args[i]->nbytes);
      atomic_fetch_add(&rt->donations, 1);
    }

  int made = 0;
  for (; made < e->num_outputs && !s; made++)
    s = tpuc_buffer_wrap(rt, device, out_bufs[made], e->out_dtypes[made], e->out_ndims[made],
                         e->out_dims[made], &outs[made]);
  if (s) { /* wrap destroyed the failing buffer; release the ones before it */
    for (int i = 0; i < made - 1; i++) tpuc_buffer_release(outs[i]);
    pj_generic_fn destroy = (pj_generic_fn)tpuc_plugin_fn(p, PJ_SLOT_BUFFER_DESTROY);
    for (int i = made; i < e->num_outputs && destroy; i++) {
      pj_buffer_destroy_args d = {0};
      d.struct_size = PJ_SIZE(pj_buffer_destroy_args, buffer);
      d.buffer = out_bufs[i];
      tpuc_status_destroy(tpuc_plugin_error(p, destroy(&d), NULL));
    }
  }
  if (!s && e->temp_bytes) tpuc_runtime_note_transient(rt, device, e->temp_bytes);
  if (!wait) /* tpuc_synchronize launches a barrier on this device */
    atomic_store_explicit(&rt->devices[device].unsynced, true, memory_order_release);
  tpuc_status *ws = tpuc_event_wait(rt, complete[0], "device computation failed");
  ws = tpuc_oom_explain(rt, device, ws, -1);
  if (ws && !s) {
    for (int i = 0; i < e->num_outputs; i++) tpuc_buffer_release(outs[i]);
    s = ws;
  } else {
    tpuc_status_destroy(ws);
  }
  if (s)
    for (int i = 0; i < e->num_outputs; i++) outs[i] = NULL;
done:
  if (arg_bufs != arg_small) free(arg_bufs);
  if (out_bufs != out_small) free(out_bufs);
  if (keep != keep_small) free(keep);
  return s;
}

/* ---- in-flight programs ----
 * Each asynchronous replicated launch leaves its completion event here, so that
 * tpuc_synchronize can wait for every program launched so far, including
 * those whose results were already freed. The ring is bounded: when it is
 * full the oldest event is waited for (long done, in practice). */
void tpuc_inflight_push(tpuc_runtime *rt, int device, pj_event *ev) {
  pj_event *old = NULL;
  pthread_mutex_lock(&rt->mem_lock);
  tpuc_device_rec *d = &rt->devices[device];
  if (d->inflight_n == TPUC_INFLIGHT) {
    old = d->inflight[d->inflight_head];
    d->inflight_head = (d->inflight_head + 1) % TPUC_INFLIGHT;
    d->inflight_n--;
  }
  d->inflight[(d->inflight_head + d->inflight_n) % TPUC_INFLIGHT] = ev;
  d->inflight_n++;
  pthread_mutex_unlock(&rt->mem_lock);
  /* an error here belongs to a program whose results were read (and the
   * error reported) or freed: nothing is left to report it to */
  tpuc_status_destroy(tpuc_event_wait(rt, old, NULL));
}

/* Launches the barrier program on `device` without waiting: with programs
 * run in launch order, *complete is ready once every program launched there
 * before it is done. The caller waits for or watches *complete (and destroys
 * it) and releases *out with tpuc_barrier_output_destroy. */
tpuc_status *tpuc_barrier_launch(tpuc_runtime *rt, int device, pj_buffer **out,
                                 pj_event **complete) {
  const tpuc_plugin *p = &rt->plugin;
  *out = NULL;
  *complete = NULL;
  PJ_FN(p, PJ_SLOT_LOADED_EXECUTABLE_EXECUTE, pj_execute_args, execute);
  pthread_mutex_lock(&rt->cache_lock); /* made once, tiny */
  tpuc_status *s = rt->barrier ? NULL : tpuc_compile_barrier(rt, &rt->barrier);
  pj_loaded_executable *exe = rt->barrier;
  pthread_mutex_unlock(&rt->cache_lock);
  if (s) return s;
  pj_buffer **out_lists[1] = {out};
  pj_buffer *const *arg_lists[1] = {NULL};
  pj_execute_options opts = {0};
  opts.struct_size = PJ_SIZE(pj_execute_options, num_custom_options);
  pj_execute_args a = {0};
  a.struct_size = PJ_SIZE(pj_execute_args, execute_device);
  a.executable = exe;
  a.options = &opts;
  a.argument_lists = arg_lists;
  a.num_devices = 1;
  a.num_args = 0;
  a.output_lists = out_lists;
  a.device_complete_events = complete;
  a.execute_device = rt->single_device ? NULL : rt->devices[device].device;
  return tpuc_plugin_error(p, execute(&a), "synchronizing the device");
}

void tpuc_barrier_output_destroy(tpuc_runtime *rt, pj_buffer *out) {
  pj_generic_fn destroy = (pj_generic_fn)tpuc_plugin_fn(&rt->plugin, PJ_SLOT_BUFFER_DESTROY);
  if (!out || !destroy) return;
  pj_buffer_destroy_args d = {0};
  d.struct_size = PJ_SIZE(pj_buffer_destroy_args, buffer);
  d.buffer = out;
  tpuc_status_destroy(tpuc_plugin_error(&rt->plugin, destroy(&d), NULL));
}

/* Launches the barrier program on `device` and waits for it. */
static tpuc_status *barrier(tpuc_runtime *rt, int device) {
  pj_buffer *out = NULL;
  pj_event *complete = NULL;
  tpuc_status *s = tpuc_barrier_launch(rt, device, &out, &complete);
  tpuc_status *w = tpuc_event_wait(rt, complete, "synchronizing the device");
  if (!s) s = w;
  else tpuc_status_destroy(w);
  tpuc_barrier_output_destroy(rt, out);
  return s;
}

void tpuc_barrier_destroy(tpuc_runtime *rt) {
  if (!rt->barrier) return;
  pj_generic_fn destroy =
      (pj_generic_fn)tpuc_plugin_fn(&rt->plugin, PJ_SLOT_LOADED_EXECUTABLE_DESTROY);
  pj_loaded_executable_destroy_args d = {0};
  d.struct_size = PJ_SIZE(pj_loaded_executable_destroy_args, executable);
  d.executable = rt->barrier;
  if (destroy) tpuc_status_destroy(tpuc_plugin_error(&rt->plugin, destroy(&d), NULL));
  rt->barrier = NULL;
}

tpuc_status *tpuc_synchronize(tpuc_runtime *rt, int device) {
  tpuc_status *first = tpuc_flush(rt, device);
  for (int dv = 0; dv < rt->device_count; dv++) {
    if (device >= 0 && dv != device) continue;
    /* programs launched without an event: wait for a barrier behind them.
     * Under sync_lock, so that a caller finding the flag already cleared by
     * another thread's synchronize still returns only after that thread's
     * barrier (launched behind this caller's programs) has finished. */
    {
      pthread_mutex_lock(&rt->sync_lock);
      tpuc_status *s = atomic_exchange(&rt->devices[dv].unsynced, false) ? barrier(rt, dv) : NULL;
      pthread_mutex_unlock(&rt->sync_lock);
      if (s && !first) first = s;
      else tpuc_status_destroy(s);
    }
    for (;;) {
      pj_event *ev = NULL;
      pthread_mutex_lock(&rt->mem_lock);
      tpuc_device_rec *d = &rt->devices[dv];
      if (d->inflight_n) {
        ev = d->inflight[d->inflight_head];
        d->inflight_head = (d->inflight_head + 1) % TPUC_INFLIGHT;
        d->inflight_n--;
      }
      pthread_mutex_unlock(&rt->mem_lock);
      if (!ev) break;
      tpuc_status *s = tpuc_oom_explain(rt, dv, tpuc_event_wait(rt, ev, "device computation failed"), -1);
      if (s && !first) first = s;
      else tpuc_status_destroy(s);
    }
  }
  tpuc_status *cs = tpuc_checks_report(rt); /* device-side bounds checks */
  if (cs && !first) first = cs;
  else tpuc_status_destroy(cs);
  return first;
}
