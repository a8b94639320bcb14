/* view.c — strided views of a storage, as IR: reading a tensor's elements out
 * of its storage's buffer, and writing a tensor's new elements back into the
 * buffer (in-place ops, out=, writes through views). PyTorch's aliasing is
 * kept exact: a view is (sizes, strides, offset) over the storage.
 *
 * Reads use, in order: a reshape (contiguous, whole storage); a slice and a
 * reshape (contiguous); slice/reshape/transpose/broadcast for non-overlapping
 * strides that divide each other (transposes, slices with steps, expands);
 * a gather with computed indices for anything else. Writes use a
 * dynamic_update_slice for contiguous views and a scatter otherwise. */
#include <stdlib.h>
#include <string.h>

#include "view.h"

int64_t tpuc_view_numel(const tpuc_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->sizes[i];
  return n;
}

bool tpuc_view_is_contiguous(const tpuc_tensor *t) {
  int64_t expected = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->sizes[i] == 1) continue;
    if (t->strides[i] != expected) return false;
    expected *= t->sizes[i];
  }
  return true;
}

bool tpuc_view_covers_storage(const tpuc_tensor *t, size_t storage_nbytes) {
  return t->offset == 0 && tpuc_view_is_contiguous(t) &&
         (size_t)tpuc_view_numel(t) * tpuc_dtype_size(t->dtype) == storage_nbytes;
}

static tv flat_of(ir_graph *g, tv base) {
  int64_t n = ir_numel(ir_typeof(g, base));
  return ir_reshape(g, base, 1, &n);
}

/* Element indices (s64, shape = sizes) of the view into the flat storage. */
static tv view_indices(ir_graph *g, const tpuc_tensor *t) {
  ir_type it = ir_make_type(TPUC_S64, t->ndim, t->sizes);
  tv idx = ir_splat_i64(g, it, t->offset);
  for (int d = 0; d < t->ndim; d++) {
    if (t->sizes[d] == 1 || t->strides[d] == 0) continue;
    tv term = ir_iota(g, it, d);
    if (t->strides[d] != 1) term = ir_binary(g, IR_MUL, term, ir_splat_i64(g, it, t->strides[d]));
    idx = ir_binary(g, IR_ADD, idx, term);
  }
  return idx;
}

static tv read_gather(ir_graph *g, tv flat, const tpuc_tensor *t) {
  int64_t n = tpuc_view_numel(t);
  int64_t idx_dims[2] = {n, 1};
  tv idx = ir_reshape(g, view_indices(g, t), 2, idx_dims);
  ir_gather_dims d;
  memset(&d, 0, sizeof d);
  d.collapsed_slice_dims[0] = 0;
  d.n_collapsed = 1;
  d.start_index_map[0] = 0;
  d.n_start_index_map = 1;
  d.index_vector_dim = 1;
  d.slice_sizes[0] = 1;
  ir_type rt = ir_make_type(ir_typeof(g, flat)->dtype, 1, &n);
  tv r = ir_gather(g, flat, idx, &d, rt);
  return ir_reshape(g, r, t->ndim, t->sizes);
}

typedef struct {
  int64_t size, stride;
  int dim;
} kept_dim;

static int by_stride_desc(const void *a, const void *b) {
  const kept_dim *x = a, *y = b;
  return x->stride < y->stride ? 1 : x->stride > y->stride ? -1 : x->dim - y->dim;
}

/* The slice/reshape/transpose/broadcast form; IR_NONE if the strides do not
 * have the required shape (then the caller gathers). */
static tv read_strided(ir_graph *g, tv flat, const tpuc_tensor *t) {
  kept_dim k[TPUC_MAX_DIMS];
  int nk = 0;
  for (int d = 0; d < t->ndim; d++)
    if (t->sizes[d] > 1 && t->strides[d] != 0) k[nk++] = (kept_dim){t->sizes[d], t->strides[d], d};
  qsort(k, (size_t)nk, sizeof k[0], by_stride_desc);
  for (int j = 0; j < nk; j++) {
    if (k[j].stride < 0) return IR_NONE;
    if (j + 1 < nk && (k[j].stride % k[j + 1].stride != 0 ||
                       k[j].stride < k[j + 1].size * k[j + 1].stride))
      return IR_NONE;
  }
  int64_t n_flat = ir_numel(ir_typeof(g, flat));
  tpuc_dtype dt = ir_typeof(g, flat)->dtype;
  tv r;
  int64_t sorted_sizes[TPUC_MAX_DIMS];
  if (nk == 0) {
    int64_t start = t->offset, limit = t->offset + 1;
    r = ir_slice(g, flat, &start, &limit, NULL);
  } else {
    int64_t span = k[0].size * k[0].stride;
    if (t->offset + span > n_flat) {
      int64_t lo = 0, hi = t->offset + span - n_flat;
      flat = ir_pad(g, flat, ir_splat(g, ir_make_type(dt, 0, NULL), 0), &lo, &hi, NULL);
    }
    int64_t start = t->offset, limit = t->offset + span;
    r = ir_slice(g, flat, &start, &limit, NULL);
    int64_t vd[TPUC_MAX_DIMS + 1], lim[TPUC_MAX_DIMS + 1], zero[TPUC_MAX_DIMS + 1];
    vd[0] = k[0].size;
    for (int j = 1; j < nk; j++) vd[j] = k[j - 1].stride / k[j].stride;
    vd[nk] = k[nk - 1].stride;
    r = ir_reshape(g, r, nk + 1, vd);
    for (int j = 0; j < nk; j++) {
      lim[j] = k[j].size;
      zero[j] = 0;
      sorted_sizes[j] = k[j].size;
    }
    lim[nk] = 1;
    zero[nk] = 0;
    r = ir_slice(g, r, zero, lim, NULL);
    r = ir_reshape(g, r, nk, sorted_sizes);
    /* back to the tensor's dim order: result dim i is kept dim i in order */
    int order[TPUC_MAX_DIMS], pos = 0;
    for (int d = 0; d < t->ndim; d++)
      for (int j = 0; j < nk; j++)
        if (k[j].dim == d) order[pos++] = j;
    int64_t perm[TPUC_MAX_DIMS];
    for (int i = 0; i < nk; i++) perm[i] = order[i];
    r = ir_transpose(g, r, perm);
  }
  /* insert size-1 dims and broadcast stride-0 dims */
  int64_t bdims[TPUC_MAX_DIMS];
  int nb = 0;
  for (int d = 0; d < t->ndim; d++)
    if (t->sizes[d] > 1 && t->strides[d] != 0) bdims[nb++] = d;
  if (nk == 0) r = ir_reshape(g, r, 0, NULL);
  return ir_broadcast_in_dim(g, r, ir_make_type(dt, t->ndim, t->sizes), bdims);
}

/* The real type whose pairs make up complex type c (c64 -> f32). */
static tpuc_dtype complex_part(tpuc_dtype c) { return c == TPUC_C64 ? TPUC_F32 : TPUC_F64; }

/* t seen with the element type of the storage, when t's elements are pairs
 * of the storage's (a complex view of a float storage): one more trailing dim
 * of 2, strides and offset doubled. */
static tpuc_tensor as_pairs(const tpuc_tensor *t, tpuc_dtype part) {
  tpuc_tensor p = *t;
  p.dtype = part;
  for (int i = 0; i < t->ndim; i++) p.strides[i] = 2 * t->strides[i];
  p.sizes[t->ndim] = 2;
  p.strides[t->ndim] = 1;
  p.ndim = t->ndim + 1;
  p.offset = 2 * t->offset;
  return p;
}

/* A float view of a complex storage (view_as_real): the last dim (size 2,
 * stride 1) selects the part; the rest is a complex view. */
static bool as_complex_view(const tpuc_tensor *t, tpuc_dtype c, tpuc_tensor *out) {
  int n = t->ndim;
  if (n < 1 || t->sizes[n - 1] != 2 || t->strides[n - 1] != 1 || t->offset % 2) return false;
  *out = *t;
  out->dtype = c;
  out->ndim = n - 1;
  for (int i = 0; i < n - 1; i++) {
    if (t->strides[i] % 2) return false;
    out->strides[i] = t->strides[i] / 2;
  }
  out->offset = t->offset / 2;
  return true;
}

static tpuc_status *reinterpret_error(const char *what, tpuc_dtype view, tpuc_dtype data) {
  return tpuc_status_make(TPUC_ERR_UNIMPLEMENTED, "%s a %s view of a storage holding %s data",
                          what, tpuc_dtype_mlir_name(view), tpuc_dtype_mlir_name(data));
}

tpuc_status *tpuc_view_read(ir_graph *g, tv base, const tpuc_tensor *t, tv *out) {
  *out = IR_NONE;
  ir_type bt = *ir_typeof(g, base);
  if (ir_is_complex(t->dtype) && bt.dtype == complex_part(t->dtype)) {
    if (t->ndim >= TPUC_MAX_DIMS) return reinterpret_error("reading", t->dtype, bt.dtype);
    tpuc_tensor p = as_pairs(t, bt.dtype);
    tv pairs;
    tpuc_status *st = tpuc_view_read(g, base, &p, &pairs);
    if (st) return st;
    int64_t start[TPUC_MAX_DIMS] = {0}, limit[TPUC_MAX_DIMS];
    memcpy(limit, p.sizes, (size_t)p.ndim * 8);
    limit[t->ndim] = 1;
    tv re = ir_reshape(g, ir_slice(g, pairs, start, limit, NULL), t->ndim, t->sizes);
    start[t->ndim] = 1;
    limit[t->ndim] = 2;
    tv im = ir_reshape(g, ir_slice(g, pairs, start, limit, NULL), t->ndim, t->sizes);
    *out = ir_binary(g, IR_COMPLEX, re, im);
    return NULL;
  }
  if (ir_is_complex(bt.dtype) && t->dtype == complex_part(bt.dtype)) {
    tpuc_tensor cv;
    if (!as_complex_view(t, bt.dtype, &cv)) return reinterpret_error("reading", t->dtype, bt.dtype);
    tv c;
    tpuc_status *st = tpuc_view_read(g, base, &cv, &c);
    if (st) return st;
    int64_t one[TPUC_MAX_DIMS];
    memcpy(one, cv.sizes, (size_t)cv.ndim * 8);
    one[cv.ndim] = 1;
    tv parts[2] = {ir_reshape(g, ir_unary(g, IR_REAL, c), cv.ndim + 1, one),
                   ir_reshape(g, ir_unary(g, IR_IMAG, c), cv.ndim + 1, one)};
    *out = ir_concat(g, parts, 2, cv.ndim);
    return NULL;
  }
  ir_type tt = ir_make_type(t->dtype, t->ndim, t->sizes);
  if (bt.dtype != t->dtype) {
    if (tpuc_dtype_size(bt.dtype) != tpuc_dtype_size(t->dtype))
      return tpuc_status_make(TPUC_ERR_UNIMPLEMENTED,
                              "reading a %s view of a storage holding %s data",
                              tpuc_dtype_mlir_name(t->dtype), tpuc_dtype_mlir_name(bt.dtype));
    base = ir_bitcast(g, base, ir_with_dtype_(bt, t->dtype));
  }
  int64_t n = tpuc_view_numel(t), nbase = ir_numel(&bt);
  if (n == 0) {
    *out = ir_splat(g, tt, 0);
    return NULL;
  }
  if (tpuc_view_is_contiguous(t) && t->offset == 0 && n == nbase) {
    *out = ir_reshape(g, base, t->ndim, t->sizes);
    return NULL;
  }
  tv flat = flat_of(g, base);
  if (tpuc_view_is_contiguous(t)) {
    int64_t start = t->offset, limit = t->offset + n;
    *out = ir_reshape(g, ir_slice(g, flat, &start, &limit, NULL), t->ndim, t->sizes);
    return NULL;
  }
  tv r = read_strided(g, flat, t);
  *out = r != IR_NONE ? r : read_gather(g, flat, t);
  return NULL;
}

tpuc_status *tpuc_view_write(ir_graph *g, tv base, const tpuc_tensor *t, tv value, tv *out) {
  *out = IR_NONE;
  ir_type bt = *ir_typeof(g, base);
  if (ir_is_complex(t->dtype) && bt.dtype == complex_part(t->dtype)) {
    if (t->ndim >= TPUC_MAX_DIMS) return reinterpret_error("writing", t->dtype, bt.dtype);
    tpuc_tensor p = as_pairs(t, bt.dtype);
    int64_t one[TPUC_MAX_DIMS];
    memcpy(one, t->sizes, (size_t)t->ndim * 8);
    one[t->ndim] = 1;
    tv parts[2] = {ir_reshape(g, ir_unary(g, IR_REAL, value), t->ndim + 1, one),
                   ir_reshape(g, ir_unary(g, IR_IMAG, value), t->ndim + 1, one)};
    return tpuc_view_write(g, base, &p, ir_concat(g, parts, 2, t->ndim), out);
  }
  if (ir_is_complex(bt.dtype) && t->dtype == complex_part(bt.dtype)) {
    tpuc_tensor cv;
    if (!as_complex_view(t, bt.dtype, &cv)) return reinterpret_error("writing", t->dtype, bt.dtype);
    int64_t start[TPUC_MAX_DIMS] = {0}, limit[TPUC_MAX_DIMS];
    memcpy(limit, t->sizes, (size_t)t->ndim * 8);
    limit[cv.ndim] = 1;
    tv re = ir_reshape(g, ir_slice(g, value, start, limit, NULL), cv.ndim, cv.sizes);
    start[cv.ndim] = 1;
    limit[cv.ndim] = 2;
    tv im = ir_reshape(g, ir_slice(g, value, start, limit, NULL), cv.ndim, cv.sizes);
    return tpuc_view_write(g, base, &cv, ir_binary(g, IR_COMPLEX, re, im), out);
  }
  if (bt.dtype != t->dtype) {
    if (tpuc_dtype_size(bt.dtype) != tpuc_dtype_size(t->dtype))
      return tpuc_status_make(TPUC_ERR_UNIMPLEMENTED,
                              "writing a %s view into a storage holding %s data",
                              tpuc_dtype_mlir_name(t->dtype), tpuc_dtype_mlir_name(bt.dtype));
    ir_type vt = *ir_typeof(g, value);
    value = ir_bitcast(g, value, ir_with_dtype_(vt, bt.dtype));
  }
  int64_t n = tpuc_view_numel(t);
  if (n == 0) {
    *out = base;
    return NULL;
  }
  tv flat = flat_of(g, base);
  tv upd = ir_reshape(g, value, 1, &n);
  tv r;
  if (tpuc_view_is_contiguous(t)) {
    tv start = ir_splat_i64(g, ir_make_type(TPUC_S64, 0, NULL), t->offset);
    r = ir_dynamic_update_slice(g, flat, upd, &start);
  } else {
    int64_t idx_dims[2] = {n, 1};
    tv idx = ir_reshape(g, view_indices(g, t), 2, idx_dims);
    ir_scatter_dims d;
    memset(&d, 0, sizeof d);
    d.inserted_window_dims[0] = 0;
    d.n_inserted = 1;
    d.scatter_dims_to_operand_dims[0] = 0;
    d.n_scatter_dims = 1;
    d.index_vector_dim = 1;
    r = ir_scatter(g, flat, idx, upd, &d, IR_SCATTER_REPLACE);
  }
  *out = ir_reshape(g, r, bt.ndim, bt.dims);
  return NULL;
}
