/* view.c — strided views of a storage, as IR: reading a tensor's elements out
 * of its storage's buffer, and writing a tensor's new elements back into the
 * buffer (in-place ops, out=, writes through views). PyTorch's aliasing is
 * kept exact: a view is (sizes, strides, offset) over the storage.
 *
 * Reads use, in order: a reshape (contiguous, whole storage); a slice and a
 * reshape (contiguous); slice/reshape/transpose/broadcast for non-overlapping
 * strides that divide each other (transposes, slices with steps, expands);
 * a gather with computed indices for anything else. Writes use a
 * dynamic_update_slice: of the values for contiguous views, of the values
 * transposed into memory order for views of the same stride shape, and a
 * scatter with computed indices only for anything else. An op that reads and
 * writes the same contiguous view uses a dynamic_slice and a
 * dynamic_update_slice at one start XLA cannot fold (tpuc_view_opaque_start),
 * so that XLA updates the buffer in place (view.h says why). */
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

/* The dims of `t` that move through memory (size > 1, stride != 0), sorted by
 * stride, largest first, into k; their count in *nk. False unless the strides
 * are positive, divide each other and do not overlap: then the view is a
 * sub-block of the region [offset, offset + k[0].size * k[0].stride) seen as
 * the row-major array region_dims(), and reads and writes need no indices. */
static bool strided_layout(const tpuc_tensor *t, kept_dim *k, int *nk) {
  int n = 0;
  for (int d = 0; d < t->ndim; d++)
    if (t->sizes[d] > 1 && t->strides[d] != 0) k[n++] = (kept_dim){t->sizes[d], t->strides[d], d};
  qsort(k, (size_t)n, sizeof k[0], by_stride_desc);
  *nk = n;
  for (int j = 0; j < n; j++) {
    if (k[j].stride < 0) return false;
    if (j + 1 < n && (k[j].stride % k[j + 1].stride != 0 ||
                      k[j].stride < k[j + 1].size * k[j + 1].stride))
      return false;
  }
  return true;
}

/* The region as a row-major array of nk + 1 dims: [k0.size, k0.stride /
 * k1.stride, ..., k[nk-1].stride]; the view is its [0:size_j..., 0:1] block. */
static void region_dims(const kept_dim *k, int nk, int64_t *vd) {
  vd[0] = k[0].size;
  for (int j = 1; j < nk; j++) vd[j] = k[j - 1].stride / k[j].stride;
  vd[nk] = k[nk - 1].stride;
}

/* The slice/reshape/transpose/broadcast form; IR_NONE if the strides do not
 * have the required shape (then the caller gathers). */
static tv read_strided(ir_graph *g, tv flat, const tpuc_tensor *t) {
  kept_dim k[TPUC_MAX_DIMS];
  int nk;
  if (!strided_layout(t, k, &nk)) return IR_NONE;
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
    region_dims(k, nk, vd);
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

static tpuc_status *reinterpret_error(const char *what, tpuc_dtype view, tpuc_dtype data) {
  return tpuc_status_make(TPUC_ERR_UNIMPLEMENTED, "%s a %s view of a storage holding %s data",
                          what, tpuc_dtype_mlir_name(view), tpuc_dtype_mlir_name(data));
}

/* The unsigned integer type of `size` bytes. */
static tpuc_dtype uint_of_size(size_t size) {
  return size == 1 ? TPUC_U8 : size == 2 ? TPUC_U16 : size == 4 ? TPUC_U32 : TPUC_U64;
}

/* `base` (n elements) seen as elements of another size (x.view(torch.int16) of a float32
 * tensor), in the host's little-endian memory order: the k-th smaller element holds bits
 * [k w, (k + 1) w) of the larger. Built from same-size bitcasts, shifts and masks, not from
 * StableHLO's bitcast_convert between sizes: XLA's simplifier folds two of those in a row
 * into one of the wrong shape (its HLO verifier then rejects the program). A storage whose
 * bytes are not a whole number of larger elements is padded; restore() drops the padding. */
static tv resize_elements(ir_graph *g, tv base, int64_t n, tpuc_dtype want) {
  tpuc_dtype have = ir_typeof(g, base)->dtype;
  size_t bs = tpuc_dtype_size(have), ws = tpuc_dtype_size(want);
  tpuc_dtype ub = uint_of_size(bs), uw = uint_of_size(ws);
  tv u = ir_bitcast(g, ir_reshape(g, base, 1, &n), ir_make_type(ub, 1, &n));
  tv parts[8];
  if (bs > ws) { /* each element into r smaller ones */
    int r = (int)(bs / ws);
    int64_t col[2] = {n, 1}, total = n * r;
    ir_type ut = ir_make_type(ub, 1, &n);
    uint64_t mask = ws == 8 ? UINT64_MAX : (UINT64_C(1) << (8 * ws)) - 1;
    for (int k = 0; k < r; k++) {
      tv sh = ir_binary(g, IR_SHR_LOGICAL, u, ir_splat_i64(g, ut, (int64_t)(8 * ws * (size_t)k)));
      tv low = ir_binary(g, IR_AND, sh, ir_splat_i64(g, ut, (int64_t)mask));
      parts[k] = ir_reshape(g, ir_convert(g, low, uw), 2, col);
    }
    tv pieces = ir_reshape(g, ir_concat(g, parts, r, 1), 1, &total);
    return ir_bitcast(g, pieces, ir_make_type(want, 1, &total));
  }
  int r = (int)(ws / bs); /* r elements into one larger one */
  int64_t whole = (n + r - 1) / r, lo = 0, hi = whole * r - n, rows[2] = {whole, r};
  if (hi) u = ir_pad(g, u, ir_splat_i64(g, ir_make_type(ub, 0, NULL), 0), &lo, &hi, NULL);
  u = ir_reshape(g, u, 2, rows);
  ir_type wt = ir_make_type(uw, 1, &whole);
  tv acc = IR_NONE;
  for (int k = 0; k < r; k++) {
    int64_t start[2] = {0, k}, limit[2] = {whole, k + 1};
    tv piece = ir_convert(g, ir_reshape(g, ir_slice(g, u, start, limit, NULL), 1, &whole), uw);
    if (k) piece = ir_binary(g, IR_SHL, piece, ir_splat_i64(g, wt, (int64_t)(8 * bs * (size_t)k)));
    acc = k ? ir_binary(g, IR_OR, acc, piece) : piece;
  }
  return ir_bitcast(g, acc, ir_make_type(want, 1, &whole));
}

/* The buffer value `base` seen as elements of `want`: itself, a bitcast of
 * same-size elements, or complex numbers as pairs of floats and back
 * (view_as_complex / view_as_real, and any view of their results). */
static tpuc_status *reinterpret(ir_graph *g, tv base, tpuc_dtype want, const char *what, tv *out) {
  ir_type bt = *ir_typeof(g, base);
  int64_t n = ir_numel(&bt);
  if (bt.dtype == want) {
    *out = base;
  } else if (tpuc_dtype_size(bt.dtype) == tpuc_dtype_size(want) && !ir_is_complex(want) &&
             !ir_is_complex(bt.dtype)) {
    *out = ir_bitcast(g, base, ir_with_dtype_(bt, want));
  } else if (ir_is_complex(want) && bt.dtype == complex_part(want) && n % 2 == 0) {
    int64_t pairs[2] = {n / 2, 2}, start[2] = {0, 0}, lim[2] = {n / 2, 1}, half = n / 2;
    tv p = ir_reshape(g, base, 2, pairs);
    tv re = ir_reshape(g, ir_slice(g, p, start, lim, NULL), 1, &half);
    start[1] = 1;
    lim[1] = 2;
    tv im = ir_reshape(g, ir_slice(g, p, start, lim, NULL), 1, &half);
    *out = ir_binary(g, IR_COMPLEX, re, im);
  } else if (ir_is_complex(bt.dtype) && want == complex_part(bt.dtype)) {
    int64_t col[2] = {n, 1}, twice = 2 * n;
    tv flat = ir_reshape(g, base, 1, &n);
    tv parts[2] = {ir_reshape(g, ir_unary(g, IR_REAL, flat), 2, col),
                   ir_reshape(g, ir_unary(g, IR_IMAG, flat), 2, col)};
    *out = ir_reshape(g, ir_concat(g, parts, 2, 1), 1, &twice);
  } else if (bt.dtype != TPUC_PRED && want != TPUC_PRED && !ir_is_complex(want) &&
             !ir_is_complex(bt.dtype) && n < INT64_MAX / 8) {
    *out = resize_elements(g, base, n, want);
  } else {
    return reinterpret_error(what, want, bt.dtype);
  }
  return NULL;
}

/* The inverse of reinterpret: `v` (elements of another type) back to `bt`. */
static tv restore(ir_graph *g, tv v, ir_type bt) {
  ir_type vt = *ir_typeof(g, v);
  if (vt.dtype == bt.dtype) return ir_reshape(g, v, bt.ndim, bt.dims);
  if (tpuc_dtype_size(vt.dtype) == tpuc_dtype_size(bt.dtype))
    return ir_reshape(g, ir_bitcast(g, v, ir_with_dtype_(vt, bt.dtype)), bt.ndim, bt.dims);
  tv back;
  tpuc_status *st = reinterpret(g, v, bt.dtype, "restoring", &back);
  if (st) {
    ir_fail(g, "%s", tpuc_status_message(st));
    tpuc_status_destroy(st);
    return IR_NONE;
  }
  int64_t n = ir_numel(&bt), zero = 0;
  if (ir_numel(ir_typeof(g, back)) > n) back = ir_slice(g, back, &zero, &n, NULL); /* padding */
  return ir_reshape(g, back, bt.ndim, bt.dims);
}

bool tpuc_view_same_region(const tpuc_tensor *a, const tpuc_tensor *b) {
  if (a->storage != b->storage || a->dtype != b->dtype || a->offset != b->offset) return false;
  if (!tpuc_view_is_contiguous(a) || !tpuc_view_is_contiguous(b)) return false;
  return tpuc_view_numel(a) == tpuc_view_numel(b) && tpuc_view_numel(a) > 0;
}

tv tpuc_view_opaque_start(ir_graph *g, int64_t offset) {
  return ir_opaque_identity(g, ir_splat_i64(g, ir_make_type(TPUC_S64, 0, NULL), offset));
}

tpuc_status *tpuc_view_read(ir_graph *g, tv base, const tpuc_tensor *t, tv *out) {
  return tpuc_view_read_at(g, base, t, IR_NONE, out);
}

tpuc_status *tpuc_view_read_at(ir_graph *g, tv base, const tpuc_tensor *t, tv at, tv *out) {
  *out = IR_NONE;
  tpuc_status *st = reinterpret(g, base, t->dtype, "reading", &base);
  if (st) return st;
  ir_type bt = *ir_typeof(g, base);
  ir_type tt = ir_make_type(t->dtype, t->ndim, t->sizes);
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
  if (tpuc_view_is_contiguous(t) && at != IR_NONE) {
    *out = ir_reshape(g, ir_dynamic_slice(g, flat, &at, &n), t->ndim, t->sizes);
    return NULL;
  }
  if (tpuc_view_is_contiguous(t)) {
    int64_t start = t->offset, limit = t->offset + n;
    *out = ir_reshape(g, ir_slice(g, flat, &start, &limit, NULL), t->ndim, t->sizes);
    return NULL;
  }
  tv r = read_strided(g, flat, t);
  *out = r != IR_NONE ? r : read_gather(g, flat, t);
  return NULL;
}

/* Writing `value` through a view with strided_layout(): the value, in the
 * region's dim order, replaces the view's block of the region (a
 * dynamic_update_slice, in place for XLA) instead of a scatter of one index
 * per element. IR_NONE if the layout does not allow it. */
static tv write_strided(ir_graph *g, tv flat, const tpuc_tensor *t, tv value) {
  kept_dim k[TPUC_MAX_DIMS];
  int nk;
  if (!strided_layout(t, k, &nk) || nk == 0) return IR_NONE;
  for (int d = 0; d < t->ndim; d++)
    if (t->sizes[d] > 1 && t->strides[d] == 0) return IR_NONE; /* expanded: overlapping */
  ir_type ft = *ir_typeof(g, flat);
  int64_t n_flat = ir_numel(&ft), span = k[0].size * k[0].stride;
  int64_t hi = t->offset + span > n_flat ? t->offset + span - n_flat : 0;
  if (hi) {
    int64_t lo = 0;
    flat = ir_pad(g, flat, ir_splat(g, ir_make_type(ft.dtype, 0, NULL), 0), &lo, &hi, NULL);
  }
  /* value's moving dims in tensor order, then permuted into stride order */
  int64_t kept_sizes[TPUC_MAX_DIMS], perm[TPUC_MAX_DIMS], blk[TPUC_MAX_DIMS + 1];
  int pos_of[TPUC_MAX_DIMS], nkept = 0;
  for (int d = 0; d < t->ndim; d++)
    if (t->sizes[d] > 1) {
      pos_of[d] = nkept;
      kept_sizes[nkept++] = t->sizes[d];
    }
  for (int j = 0; j < nk; j++) {
    perm[j] = pos_of[k[j].dim];
    blk[j] = k[j].size;
  }
  blk[nk] = 1;
  tv v = ir_transpose(g, ir_reshape(g, value, nkept, kept_sizes), perm);
  v = ir_reshape(g, v, nk + 1, blk);
  int64_t vd[TPUC_MAX_DIMS + 1], start = t->offset, limit = t->offset + span;
  region_dims(k, nk, vd);
  tv region = ir_reshape(g, ir_slice(g, flat, &start, &limit, NULL), nk + 1, vd);
  tv zeros[TPUC_MAX_DIMS + 1];
  for (int j = 0; j <= nk; j++) zeros[j] = ir_splat_i64(g, ir_make_type(TPUC_S64, 0, NULL), 0);
  region = ir_reshape(g, ir_dynamic_update_slice(g, region, v, zeros), 1, &span);
  tv at = ir_splat_i64(g, ir_make_type(TPUC_S64, 0, NULL), t->offset);
  tv r = ir_dynamic_update_slice(g, flat, region, &at);
  if (hi) {
    int64_t s0 = 0;
    r = ir_slice(g, r, &s0, &n_flat, NULL);
  }
  return r;
}

tpuc_status *tpuc_view_write(ir_graph *g, tv base, const tpuc_tensor *t, tv value, tv *out) {
  return tpuc_view_write_at(g, base, t, value, IR_NONE, out);
}

tpuc_status *tpuc_view_write_at(ir_graph *g, tv base, const tpuc_tensor *t, tv value, tv at,
                                tv *out) {
  *out = IR_NONE;
  ir_type orig = *ir_typeof(g, base);
  int64_t n = tpuc_view_numel(t);
  if (n == 0) {
    *out = base;
    return NULL;
  }
  tpuc_status *st = reinterpret(g, base, t->dtype, "writing", &base);
  if (st) return st;
  tv flat = flat_of(g, base);
  tv upd = ir_reshape(g, value, 1, &n);
  tv r;
  if (tpuc_view_is_contiguous(t)) {
    tv start = at != IR_NONE ? at : ir_splat_i64(g, ir_make_type(TPUC_S64, 0, NULL), t->offset);
    r = ir_dynamic_update_slice(g, flat, upd, &start);
  } else if ((r = write_strided(g, flat, t, value)) == IR_NONE) {
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
  *out = restore(g, r, orig);
  return NULL;
}
