/* collective.c — tpuc_collective: a collective over several devices of the
 * client, compiled once as a replicated program (lower/collective.c builds
 * its IR, runtime/replicated.c compiles and launches it).
 *
 * tpuc_collective_run works on dense buffers. tpuc_collective_run_tensors
 * works on PyTorch-style views: an input whose storage already holds a
 * buffer of exactly the input's dtype and shape goes straight in; any other
 * view (a slice, strides, another buffer shape or dtype) is first read into a
 * dense buffer by a small program on its own device. An output that covers
 * its storage is bound directly; a partial view is written into the storage's
 * buffer the same way, so in-place collectives and outputs that are views
 * keep PyTorch's aliasing. */
#include <stdlib.h>
#include <string.h>

#include "../lower/collective.h"
#include "exec.h"
#include "view.h"

struct tpuc_collective {
  tpuc_runtime *rt;
  tpuc_executable *exe;
  int n;
  int *devices;
  tpuc_dtype dtype;
  int ndim, out_ndim;
  int64_t dims[TPUC_MAX_DIMS], out_dims[TPUC_MAX_DIMS];
};

tpuc_runtime *tpuc_storage_runtime(const tpuc_storage *s) { return s->rt; }

static tpuc_status *emit_text(ir_graph *g, const char *name, char **text, size_t *len) {
  *text = ir_emit(g, name, len);
  if (!*text)
    return tpuc_status_make(TPUC_ERR_INTERNAL, "emitting %s: %s", name,
                            ir_error(g) ? ir_error(g) : "unknown error");
  return NULL;
}

tpuc_status *tpuc_collective_create(tpuc_runtime *rt, const tpuc_collective_desc *d,
                                    tpuc_collective **out) {
  *out = NULL;
  if (!d || d->ndevices < 1 || !d->devices)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "tpuc_collective_create: no participants");
  if ((unsigned)d->dtype >= TPUC_DTYPE_COUNT)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "tpuc_collective_create: unknown dtype %d",
                            (int)d->dtype);
  if (d->ndim < 0 || d->ndim > TPUC_MAX_DIMS || (d->ndim && !d->dims))
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "tpuc_collective_create: rank %d", d->ndim);
  for (int i = 0; i < d->ndim; i++)
    if (d->dims[i] < 0)
      return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "tpuc_collective_create: negative size");
  tpuc_collective *c = calloc(1, sizeof *c);
  if (c) c->devices = malloc((size_t)d->ndevices * sizeof *c->devices);
  if (!c || !c->devices) {
    free(c);
    return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  c->rt = rt;
  c->n = d->ndevices;
  memcpy(c->devices, d->devices, (size_t)d->ndevices * sizeof *c->devices);
  c->dtype = d->dtype;
  c->ndim = d->ndim;
  if (d->ndim) memcpy(c->dims, d->dims, (size_t)d->ndim * sizeof *c->dims);

  ir_graph *g = ir_graph_create();
  tpuc_status *s = g ? NULL : tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  tv x = IR_NONE, y = IR_NONE;
  if (!s) {
    x = ir_param(g, ir_make_type(d->dtype, d->ndim, d->dims));
    s = tpuc_lower_collective(g, d, x, &y);
  }
  char *text = NULL;
  size_t len = 0;
  if (!s) {
    const ir_type *yt = ir_typeof(g, y);
    c->out_ndim = yt->ndim;
    memcpy(c->out_dims, yt->dims, sizeof c->out_dims);
    ir_output(g, y);
    s = emit_text(g, "tpuc_collective", &text, &len);
  }
  if (!s) s = tpuc_compile_replicated(rt, text, len, d->devices, d->ndevices, &c->exe);
  free(text);
  ir_graph_destroy(g);
  if (s) {
    tpuc_collective_destroy(c);
    return s;
  }
  *out = c;
  return NULL;
}

void tpuc_collective_destroy(tpuc_collective *c) {
  if (!c) return;
  tpuc_executable_release(c->exe);
  free(c->devices);
  free(c);
}

int tpuc_collective_output_ndim(const tpuc_collective *c) { return c->out_ndim; }
const int64_t *tpuc_collective_output_dims(const tpuc_collective *c) { return c->out_dims; }

static bool same_dims(int na, const int64_t *a, int nb, const int64_t *b) {
  if (na != nb) return false;
  for (int i = 0; i < na; i++)
    if (a[i] != b[i]) return false;
  return true;
}

tpuc_status *tpuc_collective_run(tpuc_collective *c, tpuc_buffer *const *inputs,
                                 tpuc_buffer **outputs, bool wait) {
  for (int r = 0; r < c->n; r++) {
    const tpuc_buffer *b = inputs[r];
    if (!b || b->dtype != c->dtype || !same_dims(b->ndim, b->dims, c->ndim, c->dims))
      return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                              "collective: the input of participant %d %s; every participant "
                              "must pass the dtype and shape the collective was created for",
                              r, b ? "has another dtype or shape" : "is missing");
  }
  return tpuc_execute_replicated(c->exe, c->devices, c->n, inputs, 1, outputs, wait);
}

/* Runs a one-device program built in g (outputs already set). */
static tpuc_status *run_local(tpuc_runtime *rt, int device, ir_graph *g, tpuc_buffer *const *args,
                              int nargs, tpuc_buffer **out) {
  char *text = NULL;
  size_t len = 0;
  tpuc_status *s = emit_text(g, "tpuc_collective_view", &text, &len);
  tpuc_executable *e = NULL;
  if (!s) s = tpuc_compile(rt, text, len, &e);
  if (!s) s = tpuc_execute(e, device, args, nargs, out, false);
  tpuc_executable_release(e);
  free(text);
  return s;
}

/* The storage's buffer, or a zero buffer of its size when it was never
 * written (one reference). */
static tpuc_status *base_of(tpuc_storage *st, tpuc_buffer **out) {
  *out = tpuc_storage_get_buffer(st);
  if (*out) return NULL;
  int64_t n = (int64_t)st->nbytes;
  ir_graph *g = ir_graph_create();
  if (!g) return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  ir_output(g, ir_splat_i64(g, ir_make_type(TPUC_U8, 1, &n), 0));
  tpuc_status *s = run_local(st->rt, st->device, g, NULL, 0, out);
  ir_graph_destroy(g);
  return s;
}

static tpuc_status *check_view(const tpuc_collective *c, const tpuc_tensor *t, int r, bool output) {
  const int64_t *dims = output ? c->out_dims : c->dims;
  int ndim = output ? c->out_ndim : c->ndim;
  const char *what = output ? "output" : "input";
  if (!t->storage)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "collective: %s %d has no storage", what, r);
  if (t->storage->device != c->devices[r])
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                            "collective: %s %d is on device %d, participant %d is device %d", what,
                            r, t->storage->device, r, c->devices[r]);
  if (t->dtype != c->dtype || !same_dims(t->ndim, t->sizes, ndim, dims))
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                            "collective: %s %d has another dtype or shape than the collective "
                            "expects (rank %d, dtype %s)",
                            what, r, ndim, tpuc_dtype_mlir_name(c->dtype));
  int64_t last = t->offset;
  for (int i = 0; i < t->ndim; i++)
    if (t->sizes[i] > 0) last += (t->sizes[i] - 1) * t->strides[i];
  if (t->offset < 0 || (tpuc_view_numel(t) > 0 &&
                        (size_t)(last + 1) * tpuc_dtype_size(t->dtype) > t->storage->nbytes))
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                            "collective: %s %d reaches outside its storage", what, r);
  return NULL;
}

/* The storage's buffer as flat elements of `dtype`, through the host: for a
 * buffer whose element type the view code cannot reinterpret on the device
 * (raw bytes written by a storage copy). Replaces *b. */
static tpuc_status *recast_on_host(tpuc_storage *st, tpuc_dtype dtype, tpuc_buffer **b) {
  size_t nbytes = (*b)->nbytes, es = tpuc_dtype_size(dtype);
  if (nbytes % es)
    return tpuc_status_make(TPUC_ERR_UNIMPLEMENTED,
                            "collective: a storage of %zu bytes seen as %s elements", nbytes,
                            tpuc_dtype_mlir_name(dtype));
  void *host = malloc(nbytes ? nbytes : 1);
  if (!host) return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  tpuc_status *s = tpuc_buffer_to_host(*b, host, nbytes);
  int64_t n = (int64_t)(nbytes / es);
  tpuc_buffer *nb = NULL;
  if (!s) s = tpuc_buffer_from_host(st->rt, st->device, dtype, &n, 1, host, &nb);
  free(host);
  if (s) return s;
  tpuc_buffer_release(*b);
  *b = nb;
  return NULL;
}

/* A dense buffer of view t (one reference). */
static tpuc_status *dense_of(const tpuc_collective *c, const tpuc_tensor *t, tpuc_buffer **out) {
  tpuc_buffer *b = NULL;
  tpuc_status *s = base_of(t->storage, &b);
  if (s) return s;
  if (b->dtype != c->dtype && tpuc_dtype_size(b->dtype) != tpuc_dtype_size(c->dtype) &&
      !ir_is_complex(b->dtype) && !ir_is_complex(c->dtype)) {
    s = recast_on_host(t->storage, c->dtype, &b);
    if (s) {
      tpuc_buffer_release(b);
      return s;
    }
  }
  if (b->dtype == c->dtype && same_dims(b->ndim, b->dims, c->ndim, c->dims) &&
      tpuc_view_covers_storage(t, t->storage->nbytes)) {
    *out = b;
    return NULL;
  }
  ir_graph *g = ir_graph_create();
  if (!g) s = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  tv v = IR_NONE;
  if (!s) s = tpuc_view_read(g, ir_param(g, ir_make_type(b->dtype, b->ndim, b->dims)), t, &v);
  if (!s) {
    ir_output(g, v);
    s = run_local(c->rt, t->storage->device, g, &b, 1, out);
  }
  ir_graph_destroy(g);
  tpuc_buffer_release(b);
  return s;
}

/* Writes value (the output's dtype and shape) into view t. */
static tpuc_status *write_view(const tpuc_collective *c, const tpuc_tensor *t, tpuc_buffer *value) {
  if (tpuc_view_covers_storage(t, t->storage->nbytes))
    return tpuc_storage_set_buffer(t->storage, value);
  tpuc_buffer *b = NULL;
  tpuc_status *s = base_of(t->storage, &b);
  if (s) return s;
  if (b->dtype != c->dtype && tpuc_dtype_size(b->dtype) != tpuc_dtype_size(c->dtype) &&
      !ir_is_complex(b->dtype) && !ir_is_complex(c->dtype)) {
    s = recast_on_host(t->storage, c->dtype, &b);
    if (s) {
      tpuc_buffer_release(b);
      return s;
    }
  }
  ir_graph *g = ir_graph_create();
  if (!g) s = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  tv w = IR_NONE;
  if (!s) {
    tv base = ir_param(g, ir_make_type(b->dtype, b->ndim, b->dims));
    tv val = ir_param(g, ir_make_type(c->dtype, c->out_ndim, c->out_dims));
    s = tpuc_view_write(g, base, t, val, &w);
  }
  tpuc_buffer *nb = NULL;
  if (!s) {
    ir_output(g, w);
    tpuc_buffer *args[2] = {b, value};
    s = run_local(c->rt, t->storage->device, g, args, 2, &nb);
  }
  if (!s) s = tpuc_storage_set_buffer(t->storage, nb);
  tpuc_buffer_release(nb);
  ir_graph_destroy(g);
  tpuc_buffer_release(b);
  return s;
}

tpuc_status *tpuc_collective_run_tensors(tpuc_collective *c, const tpuc_tensor *inputs,
                                         const tpuc_tensor *outputs, bool wait) {
  tpuc_status *s = NULL;
  for (int r = 0; r < c->n && !s; r++) s = check_view(c, &inputs[r], r, false);
  for (int r = 0; r < c->n && !s; r++) s = check_view(c, &outputs[r], r, true);
  if (s) return s;
  tpuc_buffer **in = calloc((size_t)c->n, sizeof *in), **res = calloc((size_t)c->n, sizeof *res);
  if (!in || !res) s = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  for (int r = 0; r < c->n && !s; r++) s = dense_of(c, &inputs[r], &in[r]);
  if (!s) s = tpuc_collective_run(c, in, res, wait);
  for (int r = 0; r < c->n && !s; r++) s = write_view(c, &outputs[r], res[r]);
  for (int r = 0; in && res && r < c->n; r++) {
    tpuc_buffer_release(in[r]);
    tpuc_buffer_release(res[r]);
  }
  free(in);
  free(res);
  return s;
}
