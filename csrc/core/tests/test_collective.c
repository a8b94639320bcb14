/* test_collective.c — collectives across the devices of one client (the XLA
 * CPU plugin with 4 devices in this process): every collective kind and
 * reduction on 2 and 4 participants, in many dtypes, checked bit for bit
 * against host-computed results (the inputs are small integers, so every
 * sum, product and average is exact in every dtype and any order); a
 * non-integer float32 sum against a derived rounding bound; groups, device
 * orders other than 0..N-1, views and in-place outputs, the compile cache,
 * concurrent launches from two threads, and the errors. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/internal.h"
#include "harness.h"

harness g_h;
static tpuc_runtime *rt;

/* ---- host values in any dtype ---- */
static uint16_t f32_to_half(float f, bool bf16) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (bf16) return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  /* f16, for the exactly representable values these tests use */
  uint32_t sign = (u >> 16) & 0x8000;
  if (f == 0) return (uint16_t)sign;
  int e;
  float m = frexpf(fabsf(f), &e);
  uint32_t mant = (uint32_t)lrintf((m * 2.0f - 1.0f) * 1024.0f);
  return (uint16_t)(sign | (uint32_t)(e - 1 + 15) << 10 | mant);
}

static void put(tpuc_dtype t, void *p, int64_t i, double re, double im) {
  switch (t) {
    case TPUC_PRED: ((uint8_t *)p)[i] = re != 0; break;
    case TPUC_S8: ((int8_t *)p)[i] = (int8_t)re; break;
    case TPUC_S16: ((int16_t *)p)[i] = (int16_t)re; break;
    case TPUC_S32: ((int32_t *)p)[i] = (int32_t)re; break;
    case TPUC_S64: ((int64_t *)p)[i] = (int64_t)re; break;
    case TPUC_U8: ((uint8_t *)p)[i] = (uint8_t)re; break;
    case TPUC_U16: ((uint16_t *)p)[i] = (uint16_t)re; break;
    case TPUC_U32: ((uint32_t *)p)[i] = (uint32_t)re; break;
    case TPUC_U64: ((uint64_t *)p)[i] = (uint64_t)re; break;
    case TPUC_F16: ((uint16_t *)p)[i] = f32_to_half((float)re, false); break;
    case TPUC_BF16: ((uint16_t *)p)[i] = f32_to_half((float)re, true); break;
    case TPUC_F32: ((float *)p)[i] = (float)re; break;
    case TPUC_F64: ((double *)p)[i] = re; break;
    case TPUC_C64: ((float *)p)[2 * i] = (float)re; ((float *)p)[2 * i + 1] = (float)im; break;
    case TPUC_C128: ((double *)p)[2 * i] = re; ((double *)p)[2 * i + 1] = im; break;
    default: break;
  }
}

static bool is_unsigned(tpuc_dtype t) {
  return t == TPUC_U8 || t == TPUC_U16 || t == TPUC_U32 || t == TPUC_U64 || t == TPUC_PRED;
}
static bool is_complex(tpuc_dtype t) { return t == TPUC_C64 || t == TPUC_C128; }
static bool is_int(tpuc_dtype t) { return t >= TPUC_S8 && t <= TPUC_U64; }

/* Participant r's element i: small integers (exact everywhere). PRODUCT
 * inputs stay in {-1, 0, 1} (unsigned: {0, 1, 2}) so that products cannot
 * overflow. */
static void gen(tpuc_dtype t, int r, int64_t i, bool product, double *re, double *im) {
  int64_t k = (i * 5 + r * 3 + 1) % 7;
  if (product) k = (i + r) % 3;
  double v = (double)k;
  if (!is_unsigned(t)) v -= product ? 1 : 3;
  if (t == TPUC_PRED) v = (i + r) % 3 != 0;
  *re = v;
  *im = is_complex(t) ? (double)((i + 2 * r) % 5) - 2 : 0;
}

/* ---- plumbing ---- */
static int64_t numel(int ndim, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= dims[i];
  return n;
}

static tpuc_buffer *upload(tpuc_dtype t, int device, int ndim, const int64_t *dims, const void *d) {
  tpuc_buffer *b = NULL;
  CHECK_OK(tpuc_buffer_from_host(rt, device, t, dims, ndim, d, &b));
  return b;
}

/* Creates the collective, runs it on the participants' generated inputs and
 * returns each participant's output bytes (out[r], malloc'ed) or false. */
static bool run_collective(const tpuc_collective_desc *d, bool product, void **out, size_t *nbytes) {
  tpuc_collective *c = NULL;
  tpuc_status *s = tpuc_collective_create(rt, d, &c);
  if (s) {
    printf("    create (kind %d, op %d, dtype %s, n %d): %s\n", d->kind, d->op,
           tpuc_dtype_mlir_name(d->dtype), d->ndevices, tpuc_status_message(s));
    tpuc_status_destroy(s);
    g_h.current_failed = 1;
    return false;
  }
  int64_t n = numel(d->ndim, d->dims);
  size_t es = tpuc_dtype_size(d->dtype);
  tpuc_buffer *in[8] = {0}, *res[8] = {0};
  for (int r = 0; r < d->ndevices; r++) {
    unsigned char *host = calloc((size_t)(n ? n : 1), es);
    for (int64_t i = 0; i < n; i++) {
      double re, im;
      gen(d->dtype, r, i, product, &re, &im);
      put(d->dtype, host, i, re, im);
    }
    in[r] = upload(d->dtype, d->devices[r], d->ndim, d->dims, host);
    free(host);
  }
  bool ok = true;
  s = tpuc_collective_run(c, in, res, false);
  if (s) {
    printf("    run: %s\n", tpuc_status_message(s));
    tpuc_status_destroy(s);
    g_h.current_failed = 1;
    ok = false;
  }
  for (int r = 0; ok && r < d->ndevices; r++) {
    CHECK(tpuc_buffer_device(res[r]) == d->devices[r]);
    *nbytes = tpuc_buffer_nbytes(res[r]);
    out[r] = malloc(*nbytes ? *nbytes : 1);
    CHECK_OK(tpuc_buffer_to_host(res[r], out[r], *nbytes));
  }
  for (int r = 0; r < d->ndevices; r++) {
    tpuc_buffer_release(in[r]);
    tpuc_buffer_release(res[r]);
  }
  tpuc_collective_destroy(c);
  return ok;
}

/* The host reference of participant r's output, element by element. */
typedef void (*expect_fn)(const tpuc_collective_desc *d, int r, int64_t i, double *re, double *im);

static int group_of(const tpuc_collective_desc *d, int r, int *rank) {
  int gs = d->group_size ? d->group_size : d->ndevices;
  *rank = r % gs;
  return r / gs;
}
static int gsize(const tpuc_collective_desc *d) { return d->group_size ? d->group_size : d->ndevices; }

static void reduce_at(const tpuc_collective_desc *d, int r, int64_t i, double *re, double *im) {
  int rank, grp = group_of(d, r, &rank), gs = gsize(d);
  bool product = d->op == TPUC_REDUCE_PRODUCT;
  double ar = 0, ai = 0;
  for (int k = 0; k < gs; k++) {
    double xr, xi;
    gen(d->dtype, grp * gs + k, i, product, &xr, &xi);
    if (k == 0) {
      ar = xr;
      ai = xi;
      continue;
    }
    switch (d->op) {
      case TPUC_REDUCE_SUM:
      case TPUC_REDUCE_AVG: ar += xr; ai += xi; break;
      case TPUC_REDUCE_PRODUCT: {
        double nr = ar * xr - ai * xi, ni = ar * xi + ai * xr;
        ar = nr;
        ai = ni;
        break;
      }
      case TPUC_REDUCE_MIN: ar = fmin(ar, xr); break;
      case TPUC_REDUCE_MAX: ar = fmax(ar, xr); break;
    }
  }
  if (d->dtype == TPUC_PRED) ar = ar != 0;
  if (d->op == TPUC_REDUCE_AVG) {
    ar = is_int(d->dtype) ? trunc(ar / gs) : ar / gs;
    ai = ai / gs;
  }
  *re = ar;
  *im = ai;
}

/* Output element i of participant r as (source participant, source index). */
static void gather_src(const tpuc_collective_desc *d, int r, int64_t i, int *src, int64_t *si) {
  int rank, grp = group_of(d, r, &rank), gs = gsize(d);
  (void)rank;
  /* output dims: dims with dims[dim] * gs */
  int64_t idx[TPUC_MAX_DIMS], rem = i;
  int64_t od[TPUC_MAX_DIMS];
  for (int k = 0; k < d->ndim; k++) od[k] = d->dims[k] * (k == d->dim ? gs : 1);
  for (int k = d->ndim - 1; k >= 0; k--) {
    idx[k] = rem % od[k];
    rem /= od[k];
  }
  *src = grp * gs + (int)(idx[d->dim] / d->dims[d->dim]);
  idx[d->dim] %= d->dims[d->dim];
  int64_t s = 0;
  for (int k = 0; k < d->ndim; k++) s = s * d->dims[k] + idx[k];
  *si = s;
}

static void gather_at(const tpuc_collective_desc *d, int r, int64_t i, double *re, double *im) {
  int src;
  int64_t si;
  gather_src(d, r, i, &src, &si);
  gen(d->dtype, src, si, false, re, im);
}

/* reduce_scatter along dim: output element i of rank k is the reduction's
 * element at the same index with dims[dim] offset by k * block. */
static void scatter_at(const tpuc_collective_desc *d, int r, int64_t i, double *re, double *im) {
  int rank, gs = gsize(d);
  group_of(d, r, &rank);
  int64_t od[TPUC_MAX_DIMS], idx[TPUC_MAX_DIMS], rem = i;
  for (int k = 0; k < d->ndim; k++) od[k] = d->dims[k] / (k == d->dim ? gs : 1);
  for (int k = d->ndim - 1; k >= 0; k--) {
    idx[k] = rem % od[k];
    rem /= od[k];
  }
  idx[d->dim] += rank * od[d->dim];
  int64_t s = 0;
  for (int k = 0; k < d->ndim; k++) s = s * d->dims[k] + idx[k];
  reduce_at(d, r, s, re, im);
}

/* all_to_all: output block j (along concat_dim) is participant j's block
 * `rank` (along split dim). */
static void a2a_at(const tpuc_collective_desc *d, int r, int64_t i, double *re, double *im) {
  int rank, grp = group_of(d, r, &rank), gs = gsize(d);
  int64_t od[TPUC_MAX_DIMS], idx[TPUC_MAX_DIMS], rem = i;
  for (int k = 0; k < d->ndim; k++) od[k] = d->dims[k];
  od[d->dim] /= gs;
  od[d->concat_dim] *= gs;
  for (int k = d->ndim - 1; k >= 0; k--) {
    idx[k] = rem % od[k];
    rem /= od[k];
  }
  /* each received block has the shape of one split piece */
  int64_t piece = d->dims[d->dim] / gs;
  int64_t block = d->concat_dim == d->dim ? piece : d->dims[d->concat_dim];
  int j = (int)(idx[d->concat_dim] / block);
  idx[d->concat_dim] %= block;
  idx[d->dim] += rank * piece;
  int64_t s = 0;
  for (int k = 0; k < d->ndim; k++) s = s * d->dims[k] + idx[k];
  gen(d->dtype, grp * gs + j, s, false, re, im);
}

static void permute_at(const tpuc_collective_desc *d, int r, int64_t i, double *re, double *im) {
  int rank, grp = group_of(d, r, &rank), gs = gsize(d);
  *re = *im = 0;
  for (int p = 0; p < d->npairs; p++)
    if (d->pairs[2 * p + 1] == rank) gen(d->dtype, grp * gs + d->pairs[2 * p], i, false, re, im);
}

static void broadcast_at(const tpuc_collective_desc *d, int r, int64_t i, double *re, double *im) {
  int rank, grp = group_of(d, r, &rank), gs = gsize(d);
  gen(d->dtype, grp * gs + d->root, i, false, re, im);
}

/* Runs d and compares every participant's bytes with the reference. */
static void check_collective(const tpuc_collective_desc *d, expect_fn expect, int64_t out_numel) {
  void *out[8] = {0};
  size_t nbytes = 0;
  bool product = d->op == TPUC_REDUCE_PRODUCT &&
                 (d->kind == TPUC_COLL_ALL_REDUCE || d->kind == TPUC_COLL_REDUCE_SCATTER);
  if (!run_collective(d, product, out, &nbytes)) return;
  size_t es = tpuc_dtype_size(d->dtype);
  CHECK(nbytes == (size_t)out_numel * es);
  unsigned char *want = calloc((size_t)(out_numel ? out_numel : 1), es);
  for (int r = 0; r < d->ndevices; r++) {
    for (int64_t i = 0; i < out_numel; i++) {
      double re, im;
      expect(d, r, i, &re, &im);
      put(d->dtype, want, i, re, im);
    }
    if (nbytes == (size_t)out_numel * es && memcmp(want, out[r], nbytes)) {
      printf("    kind %d op %d dtype %s n %d group %d: participant %d differs\n", d->kind, d->op,
             tpuc_dtype_mlir_name(d->dtype), d->ndevices, d->group_size, r);
      g_h.current_failed = 1;
    }
    free(out[r]);
  }
  free(want);
}

static const tpuc_dtype ALL_DTYPES[] = {TPUC_PRED, TPUC_S8,  TPUC_S16, TPUC_S32, TPUC_S64,
                                        TPUC_U8,   TPUC_U16, TPUC_U32, TPUC_U64, TPUC_F16,
                                        TPUC_BF16, TPUC_F32, TPUC_F64, TPUC_C64, TPUC_C128};
/* one of each family: what the sanitizer build runs (TPUC_TEST_DTYPES=families). ASan and
 * UBSan check the buffer handling, which does not depend on the dtype; every dtype's values
 * are checked by the plain build, and each dtype costs one compile per case. */
static const tpuc_dtype FAMILY_DTYPES[] = {TPUC_PRED, TPUC_U8, TPUC_S64, TPUC_BF16, TPUC_F32,
                                           TPUC_C64};
static const tpuc_dtype *g_dtypes = ALL_DTYPES;
static int g_ndtypes = (int)(sizeof ALL_DTYPES / sizeof ALL_DTYPES[0]);
#define NDTYPES g_ndtypes

/* participants 0..n-1, and a shuffled order of 4 */
static const int IDENT[4] = {0, 1, 2, 3}, SHUFFLED[4] = {2, 0, 3, 1};

static tpuc_collective_desc desc_of(tpuc_collective_kind k, tpuc_dtype t, const int *devs, int n,
                                    int ndim, const int64_t *dims) {
  tpuc_collective_desc d;
  memset(&d, 0, sizeof d);
  d.kind = k;
  d.devices = devs;
  d.ndevices = n;
  d.dtype = t;
  d.ndim = ndim;
  d.dims = dims;
  return d;
}

/* ---- the tests ---- */
static void test_all_reduce_every_op_and_dtype(void) {
  int64_t dims[2] = {3, 5};
  for (int n = 2; n <= 4; n += 2)
    for (int k = 0; k < NDTYPES; k++)
      for (int op = TPUC_REDUCE_SUM; op <= TPUC_REDUCE_MAX; op++) {
        tpuc_dtype t = g_dtypes[k];
        /* every dtype on 2 participants; on 4, one of each family */
        if (n == 4 && t != TPUC_F32 && t != TPUC_BF16 && t != TPUC_S64 && t != TPUC_U8 &&
            t != TPUC_PRED && t != TPUC_C64)
          continue;
        if (is_complex(t) && (op == TPUC_REDUCE_MIN || op == TPUC_REDUCE_MAX)) continue;
        if (t == TPUC_PRED && op == TPUC_REDUCE_AVG) continue;
        tpuc_collective_desc d = desc_of(TPUC_COLL_ALL_REDUCE, t, n == 4 ? SHUFFLED : IDENT, n, 2,
                                         dims);
        d.op = (tpuc_reduce_op)op;
        check_collective(&d, reduce_at, 15);
      }
}

static void test_all_gather(void) {
  int64_t dims[2] = {2, 3};
  for (int n = 2; n <= 4; n += 2)
    for (int k = 0; k < NDTYPES; k++)
      for (int dim = 0; dim < 2; dim++) {
        tpuc_collective_desc d = desc_of(TPUC_COLL_ALL_GATHER, g_dtypes[k], IDENT, n, 2, dims);
        d.dim = dim;
        check_collective(&d, gather_at, 6 * n);
      }
}

static void test_reduce_scatter(void) {
  tpuc_dtype ts[] = {TPUC_F32, TPUC_BF16, TPUC_F16, TPUC_S32, TPUC_S64, TPUC_U8, TPUC_F64, TPUC_C64};
  for (int n = 2; n <= 4; n += 2)
    for (int k = 0; k < (int)(sizeof ts / sizeof ts[0]); k++)
      for (int dim = 0; dim < 2; dim++)
        for (int op = TPUC_REDUCE_SUM; op <= TPUC_REDUCE_MAX; op++) {
          if (is_complex(ts[k]) && op >= TPUC_REDUCE_MIN) continue;
          int64_t dims[2] = {dim == 0 ? 2 * n : 3, dim == 1 ? 2 * n : 3};
          tpuc_collective_desc d = desc_of(TPUC_COLL_REDUCE_SCATTER, ts[k], n == 4 ? SHUFFLED : IDENT,
                                           n, 2, dims);
          d.dim = dim;
          d.op = (tpuc_reduce_op)op;
          check_collective(&d, scatter_at, 6);
        }
}

static void test_all_to_all(void) {
  tpuc_dtype ts[] = {TPUC_F32, TPUC_BF16, TPUC_S64, TPUC_U8, TPUC_PRED, TPUC_C128};
  for (int n = 2; n <= 4; n += 2)
    for (int k = 0; k < (int)(sizeof ts / sizeof ts[0]); k++)
      for (int split = 0; split < 2; split++)
        for (int concat = 0; concat < 2; concat++) {
          int64_t dims[2] = {split == 0 ? 2 * n : 3, split == 1 ? 2 * n : 3};
          tpuc_collective_desc d = desc_of(TPUC_COLL_ALL_TO_ALL, ts[k], IDENT, n, 2, dims);
          d.dim = split;
          d.concat_dim = concat;
          check_collective(&d, a2a_at, 6 * n);
        }
}

static void test_permute(void) {
  tpuc_dtype ts[] = {TPUC_F32, TPUC_BF16, TPUC_S32, TPUC_U64, TPUC_PRED, TPUC_C64};
  int64_t dims[1] = {7};
  int ring4[8] = {0, 1, 1, 2, 2, 3, 3, 0}, ring2[4] = {0, 1, 1, 0}, one[2] = {2, 0};
  for (int k = 0; k < (int)(sizeof ts / sizeof ts[0]); k++) {
    tpuc_collective_desc d = desc_of(TPUC_COLL_PERMUTE, ts[k], IDENT, 2, 1, dims);
    d.pairs = ring2;
    d.npairs = 2;
    check_collective(&d, permute_at, 7);
    d = desc_of(TPUC_COLL_PERMUTE, ts[k], SHUFFLED, 4, 1, dims);
    d.pairs = ring4;
    d.npairs = 4;
    check_collective(&d, permute_at, 7);
    d.pairs = one; /* send/recv: rank 2 -> rank 0, the others receive zeros */
    d.npairs = 1;
    check_collective(&d, permute_at, 7);
  }
}

static void test_broadcast(void) {
  int64_t dims[2] = {2, 3};
  for (int n = 2; n <= 4; n += 2)
    for (int k = 0; k < NDTYPES; k++)
      for (int root = 0; root < n; root += n - 1) {
        tpuc_collective_desc d = desc_of(TPUC_COLL_BROADCAST, g_dtypes[k], SHUFFLED, n, 2, dims);
        d.root = root;
        check_collective(&d, broadcast_at, 6);
      }
}

/* Broadcast moves bits: -0.0, NaN payloads and infinities arrive as sent. */
static void test_broadcast_is_bit_exact(void) {
  uint32_t bits[4] = {0x80000000u, 0x7fc01234u, 0xff800000u, 0x00000001u};
  int64_t dims[1] = {4};
  tpuc_collective_desc d = desc_of(TPUC_COLL_BROADCAST, TPUC_F32, IDENT, 4, 1, dims);
  d.root = 3;
  tpuc_collective *c = NULL;
  CHECK_OK(tpuc_collective_create(rt, &d, &c));
  if (!c) return;
  tpuc_buffer *in[4], *out[4] = {0};
  float zeros[4] = {1, 2, 3, 4};
  for (int r = 0; r < 4; r++) in[r] = upload(TPUC_F32, r, 1, dims, r == 3 ? (void *)bits : zeros);
  CHECK_OK(tpuc_collective_run(c, in, out, true));
  for (int r = 0; r < 4; r++) {
    uint32_t got[4] = {0};
    if (out[r]) CHECK_OK(tpuc_buffer_to_host(out[r], got, sizeof got));
    CHECK(!memcmp(got, bits, sizeof got));
    tpuc_buffer_release(in[r]);
    tpuc_buffer_release(out[r]);
  }
  tpuc_collective_destroy(c);
}

static void test_groups(void) {
  int64_t dims[2] = {4, 3};
  tpuc_dtype ts[] = {TPUC_F32, TPUC_S32, TPUC_BF16};
  int pair[2] = {1, 0};
  for (int k = 0; k < 3; k++) {
    tpuc_collective_desc d = desc_of(TPUC_COLL_ALL_REDUCE, ts[k], SHUFFLED, 4, 2, dims);
    d.group_size = 2;
    d.op = TPUC_REDUCE_SUM;
    check_collective(&d, reduce_at, 12);
    d.kind = TPUC_COLL_ALL_GATHER;
    d.dim = 1;
    check_collective(&d, gather_at, 24);
    d.kind = TPUC_COLL_REDUCE_SCATTER;
    d.dim = 0;
    check_collective(&d, scatter_at, 6);
    d.kind = TPUC_COLL_ALL_TO_ALL;
    d.dim = 0;
    d.concat_dim = 1;
    check_collective(&d, a2a_at, 12);
    d.kind = TPUC_COLL_PERMUTE;
    d.pairs = pair;
    d.npairs = 1;
    check_collective(&d, permute_at, 12);
    d.kind = TPUC_COLL_BROADCAST;
    d.root = 1;
    check_collective(&d, broadcast_at, 12);
  }
}

/* A non-integer float32 sum. Any order of the n-1 additions of n float32
 * values x_r has |computed - S| <= gamma_{n-1} * sum |x_r| with
 * gamma_k = k u / (1 - k u), u = 2^-24 (Higham, Accuracy and Stability of
 * Numerical Algorithms, 4.2); S itself is computed here in float64, whose
 * own error (n-1) 2^-53 sum |x_r| is added to the bound. */
static void test_float_sum_within_rounding_bound(void) {
  enum { N = 4, E = 257 };
  int64_t dims[1] = {E};
  float x[N][E];
  for (int r = 0; r < N; r++)
    for (int i = 0; i < E; i++)
      x[r][i] = (float)(sin(0.37 * i + 1.3 * r) * pow(10.0, (i % 9) - 4));
  for (int n = 2; n <= N; n += 2) {
    tpuc_collective_desc d = desc_of(TPUC_COLL_ALL_REDUCE, TPUC_F32, SHUFFLED, n, 1, dims);
    tpuc_collective *c = NULL;
    CHECK_OK(tpuc_collective_create(rt, &d, &c));
    if (!c) return;
    tpuc_buffer *in[N], *out[N] = {0};
    for (int r = 0; r < n; r++) in[r] = upload(TPUC_F32, SHUFFLED[r], 1, dims, x[r]);
    CHECK_OK(tpuc_collective_run(c, in, out, false));
    double u = ldexp(1.0, -24), gamma = (n - 1) * u / (1 - (n - 1) * u);
    for (int r = 0; r < n; r++) {
      float got[E];
      if (out[r]) CHECK_OK(tpuc_buffer_to_host(out[r], got, sizeof got));
      for (int i = 0; i < E && out[r]; i++) {
        double s = 0, a = 0;
        for (int k = 0; k < n; k++) {
          s += x[k][i];
          a += fabs(x[k][i]);
        }
        double bound = gamma * a + (n - 1) * ldexp(1.0, -53) * a;
        if (fabs((double)got[i] - s) > bound) {
          printf("    element %d: %.9g vs %.17g (bound %.3g)\n", i, got[i], s, bound);
          g_h.current_failed = 1;
          break;
        }
      }
      tpuc_buffer_release(in[r]);
      tpuc_buffer_release(out[r]);
    }
    tpuc_collective_destroy(c);
  }
}

/* Views: a transposed input, an input whose buffer holds raw bytes, an
 * output that is a slice of a larger storage, and an in-place all_reduce. */
static void test_tensor_views_and_in_place(void) {
  enum { N = 2 };
  int64_t dims[2] = {4, 3};
  tpuc_collective_desc d = desc_of(TPUC_COLL_ALL_REDUCE, TPUC_F32, IDENT, N, 2, dims);
  tpuc_collective *c = NULL;
  CHECK_OK(tpuc_collective_create(rt, &d, &c));
  if (!c) return;
  float host[N][12], sentinel[24];
  tpuc_storage *in_s[N] = {0}, *out_s[N] = {0};
  tpuc_tensor in[N], out[N];
  for (int i = 0; i < 24; i++) sentinel[i] = -100.0f - (float)i;
  for (int r = 0; r < N; r++) {
    for (int i = 0; i < 12; i++) host[r][i] = (float)(i * (r + 1));
    CHECK_OK(tpuc_storage_create(rt, r, sizeof host[r], &in_s[r]));
    CHECK_OK(tpuc_storage_create(rt, r, sizeof sentinel, &out_s[r]));
    /* participant 1's input storage holds its bytes as u8[48] */
    int64_t bytes = 48, shape[2] = {3, 4};
    if (r == 1) CHECK_OK(tpuc_storage_upload(in_s[r], TPUC_U8, &bytes, 1, host[r]));
    else CHECK_OK(tpuc_storage_upload(in_s[r], TPUC_F32, shape, 2, host[r]));
    int64_t sdims[1] = {24};
    CHECK_OK(tpuc_storage_upload(out_s[r], TPUC_F32, sdims, 1, sentinel));
    /* the input: the [3, 4] storage seen transposed as [4, 3] */
    in[r] = (tpuc_tensor){in_s[r], TPUC_F32, 2, {4, 3}, {1, 4}, 0};
    out[r] = (tpuc_tensor){out_s[r], TPUC_F32, 2, {4, 3}, {3, 1}, 12};
  }
  if (g_h.current_failed) goto done;
  CHECK_OK(tpuc_collective_run_tensors(c, in, out, false));
  for (int r = 0; r < N; r++) {
    float got[24];
    CHECK_OK(tpuc_storage_download(out_s[r], got, sizeof got));
    CHECK(!memcmp(got, sentinel, 12 * sizeof(float))); /* outside the view: untouched */
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 3; j++) CHECK(got[12 + i * 3 + j] == host[0][j * 4 + i] + host[1][j * 4 + i]);
  }
  /* in place through the transposed view: storage[j][i] = sum */
  CHECK_OK(tpuc_collective_run_tensors(c, in, in, false));
  for (int r = 0; r < N; r++) {
    float got[12];
    CHECK_OK(tpuc_storage_download(in_s[r], got, sizeof got));
    for (int i = 0; i < 12; i++) CHECK(got[i] == host[0][i] + host[1][i]);
  }
  /* a view on the wrong device, and a wrong shape */
  tpuc_tensor swapped[N] = {in[1], in[0]};
  tpuc_status *s = tpuc_collective_run_tensors(c, swapped, out, false);
  CHECK(s && tpuc_status_code(s) == TPUC_ERR_INVALID_ARGUMENT);
  tpuc_status_destroy(s);
  tpuc_tensor small[N] = {in[0], in[1]};
  small[0].sizes[0] = 2;
  s = tpuc_collective_run_tensors(c, small, out, false);
  CHECK(s && tpuc_status_code(s) == TPUC_ERR_INVALID_ARGUMENT);
  tpuc_status_destroy(s);
done:
  for (int r = 0; r < N; r++) {
    tpuc_storage_destroy(in_s[r]);
    tpuc_storage_destroy(out_s[r]);
  }
  tpuc_collective_destroy(c);
}

static void test_second_create_hits_the_cache(void) {
  int64_t dims[1] = {33};
  tpuc_collective_desc d = desc_of(TPUC_COLL_ALL_GATHER, TPUC_S16, SHUFFLED, 4, 1, dims);
  tpuc_collective *a = NULL, *b = NULL;
  CHECK_OK(tpuc_collective_create(rt, &d, &a));
  tpuc_runtime_stats s0, s1;
  tpuc_runtime_stats_get(rt, &s0);
  CHECK_OK(tpuc_collective_create(rt, &d, &b));
  tpuc_runtime_stats_get(rt, &s1);
  CHECK(s1.compiles == s0.compiles);
  CHECK(s1.cache_hits == s0.cache_hits + 1);
  CHECK(a && b && tpuc_collective_output_ndim(b) == 1 && tpuc_collective_output_dims(b)[0] == 132);
  /* another device order is another program */
  const int order[4] = {0, 1, 2, 3};
  tpuc_collective *e = NULL;
  d.devices = order;
  CHECK_OK(tpuc_collective_create(rt, &d, &e));
  tpuc_runtime_stats_get(rt, &s0);
  CHECK(s0.compiles == s1.compiles + 1);
  tpuc_collective_destroy(a);
  tpuc_collective_destroy(b);
  tpuc_collective_destroy(e);
}

typedef struct {
  int64_t len;
  int failures;
} thread_job;

static void *thread_main(void *arg) {
  thread_job *j = arg;
  int64_t dims[1] = {j->len};
  tpuc_collective_desc d = desc_of(TPUC_COLL_ALL_REDUCE, TPUC_S32, IDENT, 4, 1, dims);
  tpuc_collective *c = NULL;
  tpuc_status *s = tpuc_collective_create(rt, &d, &c);
  if (s) {
    tpuc_status_destroy(s);
    j->failures++;
    return NULL;
  }
  int32_t *x = malloc((size_t)j->len * sizeof *x), *got = malloc((size_t)j->len * sizeof *got);
  for (int it = 0; it < 10; it++) {
    tpuc_buffer *in[4] = {0}, *out[4] = {0};
    for (int r = 0; r < 4; r++) {
      for (int64_t i = 0; i < j->len; i++) x[i] = (int32_t)(i + r * 1000 + it);
      s = tpuc_buffer_from_host(rt, r, TPUC_S32, dims, 1, x, &in[r]);
      if (s) j->failures++;
      tpuc_status_destroy(s);
    }
    s = tpuc_collective_run(c, in, out, false);
    if (s) j->failures++;
    tpuc_status_destroy(s);
    for (int r = 0; r < 4; r++) {
      if (out[r] && !tpuc_buffer_to_host(out[r], got, (size_t)j->len * sizeof *got)) {
        for (int64_t i = 0; i < j->len; i++)
          if (got[i] != (int32_t)(4 * (i + it) + 6000)) {
            j->failures++;
            break;
          }
      } else {
        j->failures++;
      }
      tpuc_buffer_release(in[r]);
      tpuc_buffer_release(out[r]);
    }
  }
  free(x);
  free(got);
  tpuc_collective_destroy(c);
  return NULL;
}

static void test_concurrent_threads(void) {
  pthread_t th[2];
  thread_job jobs[2] = {{1000, 0}, {77, 0}};
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, thread_main, &jobs[i]);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  CHECK(jobs[0].failures == 0);
  CHECK(jobs[1].failures == 0);
}

static void expect_invalid(const tpuc_collective_desc *d, const char *what) {
  tpuc_collective *c = NULL;
  tpuc_status *s = tpuc_collective_create(rt, d, &c);
  if (!s || tpuc_status_code(s) != TPUC_ERR_INVALID_ARGUMENT) {
    printf("    %s: expected INVALID_ARGUMENT, got %s\n", what, s ? tpuc_status_message(s) : "OK");
    g_h.current_failed = 1;
  } else if (!strlen(tpuc_status_message(s))) {
    g_h.current_failed = 1;
  }
  CHECK(c == NULL);
  tpuc_status_destroy(s);
  tpuc_collective_destroy(c);
}

static void test_errors(void) {
  int64_t dims[1] = {6};
  tpuc_collective_desc d = desc_of(TPUC_COLL_ALL_REDUCE, TPUC_C64, IDENT, 4, 1, dims);
  d.op = TPUC_REDUCE_MAX;
  expect_invalid(&d, "complex MAX");
  d = desc_of(TPUC_COLL_ALL_REDUCE, TPUC_PRED, IDENT, 4, 1, dims);
  d.op = TPUC_REDUCE_AVG;
  expect_invalid(&d, "bool AVG");
  d = desc_of(TPUC_COLL_REDUCE_SCATTER, TPUC_F32, IDENT, 4, 1, dims);
  expect_invalid(&d, "reduce_scatter of 6 over 4");
  d = desc_of(TPUC_COLL_ALL_GATHER, TPUC_F32, IDENT, 4, 1, dims);
  d.dim = 1;
  expect_invalid(&d, "all_gather dim out of range");
  int dup[4] = {0, 1, 1, 1};
  d = desc_of(TPUC_COLL_PERMUTE, TPUC_F32, IDENT, 4, 1, dims);
  d.pairs = dup;
  d.npairs = 2;
  expect_invalid(&d, "permute with a target twice");
  int far[2] = {0, 4};
  d.pairs = far;
  d.npairs = 1;
  expect_invalid(&d, "permute outside the group");
  d = desc_of(TPUC_COLL_BROADCAST, TPUC_F32, IDENT, 4, 1, dims);
  d.root = 4;
  expect_invalid(&d, "broadcast root out of range");
  int twice[2] = {1, 1}, beyond[2] = {0, 9};
  d = desc_of(TPUC_COLL_ALL_REDUCE, TPUC_F32, twice, 2, 1, dims);
  expect_invalid(&d, "a device twice");
  d.devices = beyond;
  expect_invalid(&d, "a device out of range");
  d = desc_of(TPUC_COLL_ALL_REDUCE, TPUC_F32, IDENT, 4, 1, dims);
  d.group_size = 3;
  expect_invalid(&d, "groups of 3 out of 4");

  /* a run with a buffer of another shape, or on another device */
  d = desc_of(TPUC_COLL_ALL_REDUCE, TPUC_F32, IDENT, 2, 1, dims);
  tpuc_collective *c = NULL;
  CHECK_OK(tpuc_collective_create(rt, &d, &c));
  if (!c) return;
  float x[7] = {0};
  int64_t seven[1] = {7};
  tpuc_buffer *in[2] = {upload(TPUC_F32, 0, 1, dims, x), upload(TPUC_F32, 1, 1, seven, x)};
  tpuc_buffer *out[2] = {0};
  tpuc_status *s = tpuc_collective_run(c, in, out, true);
  CHECK(s && tpuc_status_code(s) == TPUC_ERR_INVALID_ARGUMENT);
  tpuc_status_destroy(s);
  tpuc_buffer_release(in[1]);
  in[1] = upload(TPUC_F32, 0, 1, dims, x); /* right shape, wrong device */
  s = tpuc_collective_run(c, in, out, true);
  CHECK(s && tpuc_status_code(s) == TPUC_ERR_INVALID_ARGUMENT);
  tpuc_status_destroy(s);
  CHECK(out[0] == NULL && out[1] == NULL);
  tpuc_buffer_release(in[0]);
  tpuc_buffer_release(in[1]);
  tpuc_collective_destroy(c);
}

static void test_accounting_returns_to_zero(void) {
  for (int dv = 0; dv < 4; dv++) {
    tpuc_memory_stats m;
    CHECK_OK(tpuc_memory_stats_get(rt, dv, &m));
    CHECK(m.bytes_in_use == 0 && m.num_buffers == 0);
  }
}

int main(void) {
  if (!harness_plugin_set()) return 1;
  const char *which = getenv("TPUC_TEST_DTYPES");
  if (which && strcmp(which, "families") == 0) {
    g_dtypes = FAMILY_DTYPES;
    g_ndtypes = (int)(sizeof FAMILY_DTYPES / sizeof FAMILY_DTYPES[0]);
    printf("dtypes: one of each family (TPUC_TEST_DTYPES=families)\n");
  }
  tpuc_runtime_options opts = {NULL, 4, "off", 0};
  if (!harness_runtime(&opts, &rt)) return 1;
  tpuc_runtime_info info;
  tpuc_runtime_info_get(rt, &info);
  if (info.device_count < 4) {
    printf("the plugin made %d device(s); these tests need 4 (the XLA CPU plugin's "
           "cpu_device_count)\n0 passed, 1 failed\n", info.device_count);
    tpuc_runtime_destroy(rt);
    return 1;
  }
  RUN(test_all_reduce_every_op_and_dtype);
  RUN(test_all_gather);
  RUN(test_reduce_scatter);
  RUN(test_all_to_all);
  RUN(test_permute);
  RUN(test_broadcast);
  RUN(test_broadcast_is_bit_exact);
  RUN(test_groups);
  RUN(test_float_sum_within_rounding_bound);
  RUN(test_tensor_views_and_in_place);
  RUN(test_second_create_hits_the_cache);
  RUN(test_concurrent_threads);
  RUN(test_errors);
  RUN(test_accounting_returns_to_zero);
  tpuc_runtime_destroy(rt);
  return harness_end();
}
