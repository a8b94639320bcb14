/* replicated.c — one program on several devices of the client at once: the
 * launch that collectives need (StableHLO all_reduce, all_gather, ... run
 * between the replicas of one launch).
 *
 * A replicated executable is compiled for N replicas with an explicit device
 * assignment (replica r runs on the r-th device given), not as a portable
 * executable, and launched once with one argument list per device. PJRT
 * orders the lists by the executable's addressable devices; this module maps
 * the caller's device order onto that order and back. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- compile options ----
 * xla.CompileOptionsProto (protobuf wire format):
 *   3 executable_build_options {
 *       4 num_replicas, 5 num_partitions,
 *       9 device_assignment { 1 replica_count, 2 computation_count,
 *                             3 computation_devices { 1 replica_device_ids (packed) } } }
 * compile_portable_executable (4) stays false: the executable is bound to
 * the assignment. */
typedef struct {
  unsigned char *p;
  size_t len, cap;
  bool overflow;
} wbuf;

static void put_byte(wbuf *b, unsigned char c) {
  if (b->len < b->cap) b->p[b->len++] = c;
  else b->overflow = true;
}

static void put_varint(wbuf *b, uint64_t v) {
  while (v >= 0x80) {
    put_byte(b, (unsigned char)(v | 0x80));
    v >>= 7;
  }
  put_byte(b, (unsigned char)v);
}

static void put_key(wbuf *b, unsigned field, unsigned wire) { put_varint(b, field << 3 | wire); }

static void put_bytes(wbuf *b, unsigned field, const wbuf *inner) {
  put_key(b, field, 2);
  put_varint(b, inner->len);
  for (size_t i = 0; i < inner->len; i++) put_byte(b, inner->p[i]);
  b->overflow |= inner->overflow;
}

static size_t encode_replicated(unsigned char *out, size_t cap, const int64_t *device_ids, int n) {
  unsigned char ids_s[TPUC_COMPILE_OPTIONS_MAX], comp_s[TPUC_COMPILE_OPTIONS_MAX],
      da_s[TPUC_COMPILE_OPTIONS_MAX], build_s[TPUC_COMPILE_OPTIONS_MAX];
  wbuf ids = {ids_s, 0, sizeof ids_s, false}, comp = {comp_s, 0, sizeof comp_s, false};
  wbuf da = {da_s, 0, sizeof da_s, false}, build = {build_s, 0, sizeof build_s, false};
  wbuf top = {out, 0, cap, false};
  for (int i = 0; i < n; i++) put_varint(&ids, (uint64_t)device_ids[i]);
  put_bytes(&comp, 1, &ids);
  put_key(&da, 1, 0);
  put_varint(&da, (uint64_t)n);
  put_key(&da, 2, 0);
  put_varint(&da, 1);
  put_bytes(&da, 3, &comp);
  put_key(&build, 4, 0);
  put_varint(&build, (uint64_t)n);
  put_key(&build, 5, 0);
  put_varint(&build, 1);
  put_bytes(&build, 9, &da);
  put_bytes(&top, 3, &build);
  return top.overflow ? 0 : top.len;
}

static tpuc_status *check_devices(const tpuc_runtime *rt, const int *devices, int n,
                                  const char *what) {
  if (n < 1 || !devices)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "%s: no devices given", what);
  for (int i = 0; i < n; i++) {
    if (devices[i] < 0 || devices[i] >= rt->device_count)
      return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                              "%s: device index %d is out of range: %d device(s) available", what,
                              devices[i], rt->device_count);
    for (int j = 0; j < i; j++)
      if (devices[j] == devices[i])
        return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "%s: device %d is listed twice", what,
                                devices[i]);
  }
  return NULL;
}

tpuc_status *tpuc_compile_replicated(tpuc_runtime *rt, const char *mlir, size_t len,
                                     const int *devices, int ndevices, tpuc_executable **out) {
  *out = NULL;
  tpuc_status *s = check_devices(rt, devices, ndevices, "tpuc_compile_replicated");
  if (s) return s;
  int64_t *ids = malloc((size_t)ndevices * sizeof *ids);
  unsigned char *opts = malloc(TPUC_COMPILE_OPTIONS_MAX);
  if (!ids || !opts) {
    free(ids);
    free(opts);
    return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  for (int i = 0; i < ndevices; i++) ids[i] = rt->devices[devices[i]].id;
  size_t n = encode_replicated(opts, TPUC_COMPILE_OPTIONS_MAX, ids, ndevices);
  if (!n)
    s = tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                         "tpuc_compile_replicated: %d devices do not fit the compile options",
                         ndevices);
  else
    s = tpuc_compile_with_options(rt, mlir, len, opts, n, out);
  free(ids);
  free(opts);
  return s;
}

/* row[i] = the executable's row (PJRT argument list) of devices[i]. */
static tpuc_status *rows_of(tpuc_executable *e, const int *devices, int n, int *row) {
  tpuc_runtime *rt = e->rt;
  const tpuc_plugin *p = &rt->plugin;
  PJ_FN(p, PJ_SLOT_LOADED_EXECUTABLE_ADDRESSABLE_DEVICES,
        pj_loaded_executable_addressable_devices_args, addressable);
  pj_loaded_executable_addressable_devices_args a = {0};
  a.struct_size = PJ_SIZE(pj_loaded_executable_addressable_devices_args, num_addressable_devices);
  a.executable = e->exe;
  tpuc_status *s =
      tpuc_plugin_error(p, addressable(&a), "PJRT_LoadedExecutable_AddressableDevices");
  if (s) return s;
  if ((int)a.num_addressable_devices != n)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                            "the program was compiled for %zu device(s), %d given (compile it "
                            "with tpuc_compile_replicated for these devices)",
                            a.num_addressable_devices, n);
  for (int i = 0; i < n; i++) {
    row[i] = -1;
    for (int r = 0; r < n; r++)
      if (a.addressable_devices[r] == rt->devices[devices[i]].device) row[i] = r;
    if (row[i] < 0)
      return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                              "device %d is not one the program was compiled for", devices[i]);
  }
  return NULL;
}

tpuc_status *tpuc_execute_replicated(tpuc_executable *e, const int *devices, int ndevices,
                                     tpuc_buffer *const *args, int nargs, tpuc_buffer **outs,
                                     bool wait) {
  tpuc_runtime *rt = e->rt;
  const tpuc_plugin *p = &rt->plugin;
  tpuc_status *s = check_devices(rt, devices, ndevices, "tpuc_execute_replicated");
  if (s) return s;
  for (int d = 0; d < ndevices; d++)
    for (int i = 0; i < nargs; i++) {
      tpuc_buffer *b = args[(size_t)d * (size_t)nargs + (size_t)i];
      if (!b || b->device != devices[d])
        return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                                "argument %d of participant %d is %s device %d; it must be on "
                                "device %d",
                                i, d, b ? "on" : "missing, not on", b ? b->device : -1,
                                devices[d]);
    }
  PJ_FN(p, PJ_SLOT_LOADED_EXECUTABLE_EXECUTE, pj_execute_args, execute);
  int nout = e->num_outputs;
  size_t n = (size_t)ndevices;
  int *row = calloc(n, sizeof *row);
  pj_buffer **arg_bufs = calloc(n * (size_t)(nargs ? nargs : 1), sizeof *arg_bufs);
  pj_buffer **out_bufs = calloc(n * (size_t)(nout ? nout : 1), sizeof *out_bufs);
  pj_buffer *const **arg_lists = calloc(n, sizeof *arg_lists);
  pj_buffer ***out_lists = calloc(n, sizeof *out_lists);
  pj_event **complete = calloc(n, sizeof *complete);
  if (!row || !arg_bufs || !out_bufs || !arg_lists || !out_lists || !complete) {
    s = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  s = rows_of(e, devices, ndevices, row);
  if (s) goto done;
  for (int d = 0; d < ndevices; d++) {
    size_t r = (size_t)row[d];
    for (int i = 0; i < nargs; i++)
      arg_bufs[r * (size_t)nargs + (size_t)i] = args[(size_t)d * (size_t)nargs + (size_t)i]->buf;
  }
  for (size_t r = 0; r < n; r++) {
    arg_lists[r] = arg_bufs + r * (size_t)nargs;
    out_lists[r] = out_bufs + r * (size_t)nout;
  }
  pj_execute_options opts = {0};
  opts.struct_size = PJ_SIZE(pj_execute_options, num_custom_options);
  pj_execute_args a = {0};
  a.struct_size = PJ_SIZE(pj_execute_args, execute_device);
  a.executable = e->exe;
  a.options = &opts;
  a.argument_lists = (pj_buffer *const *const *)arg_lists;
  a.num_devices = n;
  a.num_args = (size_t)nargs;
  a.output_lists = (pj_buffer **const *)out_lists;
  a.device_complete_events = complete;
  a.execute_device = NULL; /* every device of the assignment */
  s = tpuc_plugin_error(p, execute(&a), "launching a replicated program");
  if (s) goto done;
  atomic_fetch_add(&rt->executions, 1);

  /* wrap every output; on failure release what was wrapped, destroy the rest */
  size_t total = n * (size_t)nout, made = 0;
  for (int d = 0; d < ndevices && !s; d++)
    for (int i = 0; i < nout && !s; i++) {
      size_t src = (size_t)row[d] * (size_t)nout + (size_t)i;
      size_t dst = (size_t)d * (size_t)nout + (size_t)i;
      s = tpuc_buffer_wrap(rt, devices[d], out_bufs[src], e->out_dtypes[i], e->out_ndims[i],
                           e->out_dims[i], &outs[dst]);
      out_bufs[src] = NULL; /* wrapped, or destroyed by the failing wrap */
      if (!s) made++;
    }
  if (s) {
    for (size_t k = 0; k < total; k++)
      if (k < made) tpuc_buffer_release(outs[k]);
    pj_generic_fn destroy = (pj_generic_fn)tpuc_plugin_fn(p, PJ_SLOT_BUFFER_DESTROY);
    for (size_t k = 0; k < total && destroy; k++)
      if (out_bufs[k]) {
        pj_buffer_destroy_args da = {0};
        da.struct_size = PJ_SIZE(pj_buffer_destroy_args, buffer);
        da.buffer = out_bufs[k];
        tpuc_status_destroy(tpuc_plugin_error(p, destroy(&da), NULL));
      }
  }
  for (int d = 0; d < ndevices; d++) {
    pj_event *ev = complete[row[d]];
    complete[row[d]] = NULL;
    if (!s && e->temp_bytes) tpuc_runtime_note_transient(rt, devices[d], e->temp_bytes);
    if (!wait && ev) {
      tpuc_inflight_push(rt, devices[d], ev);
      continue;
    }
    tpuc_status *ws = tpuc_event_wait(rt, ev, "device computation failed");
    if (ws && !s) s = ws;
    else tpuc_status_destroy(ws);
  }
  if (s && made == total)
    for (size_t k = 0; k < total; k++) tpuc_buffer_release(outs[k]);
  if (s)
    for (size_t k = 0; k < total; k++) outs[k] = NULL;
done:
  free(row);
  free(arg_bufs);
  free(out_bufs);
  free(arg_lists);
  free(out_lists);
  free(complete);
  return s;
}
