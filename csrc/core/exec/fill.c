/* fill.c — strict mode's constant fills without a program. An in-place
 * zero_ or fill_.Scalar that writes every byte of its storage (offset 0,
 * contiguous) binds a buffer uploaded from the host instead of compiling a
 * program that makes the constant: one XLA compile fewer per size and dtype
 * (zeros_like for an optimizer's state is one per parameter shape; on a GPU
 * plugin each costs about a second), with the same bits as the program
 * gives. Only values whose conversion to the tensor's dtype has one answer
 * take this path: integers, and floats that are exact in float32 for the
 * 16-bit float types (no double rounding question), never a subnormal
 * result (XLA's CPU programs flush those to zero); the rest, complex fills,
 * views and fills over TPUC_HOST_FILL_MAX_KB (default 1024, 0: off) compile
 * as before, a big fill being cheaper on the device than over the bus. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "plan.h"

static const tpuc_op *k_zero, *k_fill;
static pthread_once_t k_once = PTHREAD_ONCE_INIT;

static void find_ops(void) {
  k_zero = tpuc_op_find(NULL, "aten::zero_");
  k_fill = tpuc_op_find(NULL, "aten::fill_.Scalar");
}

/* float32 -> bfloat16 / float16, rounding to nearest even (f is not NaN) */
static uint16_t to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  x += 0x7fffu + ((x >> 16) & 1u); /* carries into the exponent: inf on overflow */
  return (uint16_t)(x >> 16);
}

static uint16_t to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x477ff000u) return sign | 0x7c00u; /* >= 65520 (and inf): inf */
  if (ax < 0x38800000u) {                       /* below 2^-14: a subnormal or zero */
    float a;
    memcpy(&a, &ax, 4);
    return sign | (uint16_t)lrintf(a * 16777216.0f); /* units of 2^-24, exact scaling */
  }
  uint32_t m = ax - ((uint32_t)(127 - 15) << 23); /* rebias the exponent */
  m += 0xfffu + ((m >> 13) & 1u);
  return sign | (uint16_t)(m >> 13);
}

/* The element the device's convert would give for the scalar, in `out`
 * (size bytes); false when the host does not decide it: complex, NaN into
 * an integer or bool, a value out of an integer type's range, or one not
 * exact in float32 for a 16-bit float. */
static bool element_of(const tpuc_arg *v, tpuc_dtype dt, unsigned char *out) {
  if (v->kind != TPUC_ARG_SCALAR || v->scalar.kind == TPUC_SCALAR_COMPLEX) return false;
  bool is_float = v->scalar.kind == TPUC_SCALAR_FLOAT;
  double d = v->scalar.re;
  int64_t i = v->scalar.i;
  if (dt == TPUC_F64 || dt == TPUC_F32 || dt == TPUC_F16 || dt == TPUC_BF16) {
    /* both casts round to nearest even, as the program's convert does */
    float f = is_float ? (float)d : (float)i;
    if (dt == TPUC_F64) {
      double x = is_float ? d : (double)i;
      memcpy(out, &x, 8);
      return fpclassify(x) != FP_SUBNORMAL;
    }
    if (fpclassify(f) == FP_SUBNORMAL) return false;
    if (dt == TPUC_F32) {
      memcpy(out, &f, 4);
      return true;
    }
    bool exact = is_float ? !isnan(d) && (double)f == d
                          : i >= -(INT64_C(1) << 53) && i <= (INT64_C(1) << 53) && (int64_t)f == i;
    if (!exact) return false;
    uint16_t h = dt == TPUC_F16 ? to_f16(f) : to_bf16(f);
    memcpy(out, &h, 2);
    /* (a subnormal result too: the program's float32 detour flushes it) */
    return dt == TPUC_F16 ? (h & 0x7c00u) || !(h & 0x3ffu) : (h & 0x7f80u) || !(h & 0x7fu);
  }
  if (dt == TPUC_C64 || dt == TPUC_C128) return false;
  if (is_float && isnan(d)) return false;
  if (dt == TPUC_PRED) {
    out[0] = is_float ? d != 0.0 : i != 0;
    return true;
  }
  /* an integer type: the value, truncated toward zero, within the type's range */
  int bits = 8 * (int)tpuc_dtype_size(dt);
  bool is_unsigned = dt == TPUC_U8 || dt == TPUC_U16 || dt == TPUC_U32 || dt == TPUC_U64;
  double lo = is_unsigned ? 0.0 : -ldexp(1.0, bits - 1), hi = ldexp(1.0, bits - (is_unsigned ? 0 : 1));
  if (is_float) {
    d = trunc(d);
    if (!(d >= lo && d < hi) || fabs(d) >= 0x1p63) return false;
    i = (int64_t)d;
  } else if (bits < 64 ? ((double)i < lo || (double)i >= hi) : (is_unsigned && i < 0)) {
    return false;
  }
  uint64_t u = (uint64_t)i; /* the low bytes, little-endian as the buffers are */
  for (int b = 0; b < bits / 8; b++) out[b] = (unsigned char)(u >> (8 * b));
  return true;
}

/* Whether the view is the whole storage, row-major (size-1 dims aside). */
static bool whole_storage(const tpuc_tensor *t, size_t *numel) {
  if (!t->storage || t->offset != 0) return false;
  int64_t n = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->sizes[d] != 1 && t->strides[d] != n) return false;
    n *= t->sizes[d];
  }
  *numel = (size_t)n;
  return n > 0 && (size_t)n * tpuc_dtype_size(t->dtype) == tpuc_storage_nbytes(t->storage);
}

/* Whether the upload takes the call: numel and the element (fill_) if so. */
static bool takes(tpuc_runtime *rt, const tpuc_op_call *c, size_t *numel, unsigned char *elem) {
  if (rt->host_fill_max_bytes <= 0) return false;
  pthread_once(&k_once, find_ops);
  if (!c->op || (c->op != k_zero && c->op != k_fill) || c->noutputs != 1) return false;
  const tpuc_tensor *t = &c->outputs[0];
  if (!whole_storage(t, numel) || (int64_t)(*numel * tpuc_dtype_size(t->dtype)) > rt->host_fill_max_bytes)
    return false;
  return c->op == k_zero || (c->nargs >= 2 && element_of(&c->args[1], t->dtype, elem));
}

bool tpuc_fill_takes(tpuc_runtime *rt, const tpuc_op_call *c) {
  size_t numel;
  unsigned char elem[16];
  return takes(rt, c, &numel, elem);
}

bool tpuc_fill_on_host(tpuc_runtime *rt, const tpuc_op_call *c, tpuc_status **st) {
  *st = NULL;
  size_t numel = 0;
  unsigned char elem[16] = {0};
  if (!takes(rt, c, &numel, elem)) return false;
  const tpuc_tensor *t = &c->outputs[0];
  size_t size = tpuc_dtype_size(t->dtype);
  unsigned char *data = c->op == k_zero ? calloc(numel, size) : malloc(numel * size);
  if (!data) return false; /* the program path says out of memory if it is so */
  if (c->op == k_fill) {
    memcpy(data, elem, size);
    for (size_t done = size, total = numel * size; done < total; done *= 2)
      memcpy(data + done, data, done < total - done ? done : total - done);
  }
  *st = tpuc_storage_upload_now(t->storage, t->dtype, t->sizes, t->ndim, data);
  free(data);
  return true;
}

bool tpuc_fill_whole(const tpuc_op_call *c) {
  pthread_once(&k_once, find_ops);
  size_t numel;
  return c->op && (c->op == k_zero || c->op == k_fill) && c->noutputs == 1 &&
         whole_storage(&c->outputs[0], &numel);
}

tpuc_status *tpuc_fill_run(tpuc_runtime *rt, const tpuc_op_call *c) {
  tpuc_status *st = NULL;
  if (tpuc_fill_on_host(rt, c, &st)) return st;
  slot_set s; /* as strict mode runs it: its own (small) program */
  slots_init(&s);
  fast_entry *e = NULL, *owned = NULL;
  st = plan_single(rt, c, &s, PLAN_COMPILE, false, &e, &owned, NULL);
  if (!st && e->declined) st = tpuc_status_make(TPUC_ERR_UNIMPLEMENTED, "%s", e->declined);
  if (!st) {
    const tpuc_op_call *calls[1] = {c};
    st = plan_launch(rt, c->device, e, &s, calls, false);
  }
  entry_free(owned);
  slots_release(&s);
  return st;
}

tpuc_status *tpuc_fill_predict(tpuc_runtime *rt, const tpuc_op_call *c) {
  const tpuc_tensor *t = &c->outputs[0];
  const int64_t *dims = t->sizes; /* as tpuc_storage_upload_now shapes it */
  int64_t numel;
  int ndim = tpuc_storage_buffer_shape(rt, &dims, t->ndim, &numel);
  tpuc_buffer *b = NULL;
  tpuc_status *st = tpuc_buffer_shape_only(rt, c->device, t->dtype, ndim, dims, &b);
  if (st) return st;
  tpuc_buffer_release(t->storage->ahead);
  t->storage->ahead = b;
  return NULL;
}
