/* test_engine.c — tests of the op engine and the IR: views read and written
 * through every path (reshape, slice, strided, gather, update-slice,
 * scatter), the signature cache (a repeated call or a new scalar value builds
 * and compiles nothing), and every IR primitive's StableHLO accepted and
 * computed correctly by the plugin. Lowerings here are test-only. */
#include <math.h>
#include <stdlib.h>

#include "../exec/exec.h"
#include "../lower/lower.h"
#include "harness.h"

harness g_h;
static tpuc_runtime *rt;

/* ---- test lowerings ---- */
static tpuc_status *low_add(tpuc_lower_ctx *cx) { /* out = a + b (same types) */
  cx->results[0] = ir_binary(cx->g, IR_ADD, lx_tensor(cx, 0), lx_tensor(cx, 1));
  return NULL;
}
static tpuc_status *low_scale(tpuc_lower_ctx *cx) { /* out = a * scalar */
  tv a = lx_tensor(cx, 0);
  tv s = lx_scalar(cx, 1, ir_typeof(cx->g, a)->dtype);
  cx->results[0] = ir_binary(cx->g, IR_MUL, a, lx_coerce(cx->g, s, ir_type_of(cx->g, a)));
  return NULL;
}
static tpuc_status *low_copy(tpuc_lower_ctx *cx) { /* out = a */
  cx->results[0] = lx_coerce(cx->g, lx_tensor(cx, 0), cx->out_types[0]);
  return NULL;
}
static tpuc_status *low_decline(tpuc_lower_ctx *cx) { return lx_unimplemented(cx, "never"); }

static const tpuc_lowering k_add = {"test::add", low_add};
static const tpuc_lowering k_scale = {"test::scale", low_scale};
static const tpuc_lowering k_copy = {"test::copy", low_copy};
static const tpuc_lowering k_decline = {"test::decline", low_decline};
#define OP(l) ((const tpuc_op *)&(l))

/* ---- helpers ---- */
static tpuc_storage *storage_f32(const float *data, int64_t n) {
  tpuc_storage *s = NULL;
  CHECK_OK(tpuc_storage_create(rt, 0, (size_t)n * 4, &s));
  if (s && data) CHECK_OK(tpuc_storage_upload(s, TPUC_F32, &n, 1, data));
  return s;
}

static tpuc_tensor view(tpuc_storage *s, int ndim, const int64_t *sizes, const int64_t *strides,
                        int64_t offset) {
  tpuc_tensor t;
  memset(&t, 0, sizeof t);
  t.storage = s;
  t.dtype = TPUC_F32;
  t.ndim = ndim;
  memcpy(t.sizes, sizes, (size_t)ndim * 8);
  memcpy(t.strides, strides, (size_t)ndim * 8);
  t.offset = offset;
  return t;
}

static tpuc_tensor contiguous(tpuc_storage *s, int ndim, const int64_t *sizes) {
  int64_t strides[TPUC_MAX_DIMS], st = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    strides[i] = st;
    st *= sizes[i];
  }
  return view(s, ndim, sizes, strides, 0);
}

static void read_f32(tpuc_storage *s, float *out, size_t n) {
  CHECK_OK(tpuc_storage_download(s, out, n * 4));
}

static tpuc_status *run1(const tpuc_op *op, const tpuc_tensor *ins, int nin, tpuc_tensor out,
                         const tpuc_arg *extra, int nextra) {
  tpuc_arg args[8];
  int na = 0;
  for (int i = 0; i < nin; i++) {
    memset(&args[na], 0, sizeof args[na]);
    args[na].kind = TPUC_ARG_TENSOR;
    args[na].tensors.first = i;
    args[na].tensors.count = 1;
    na++;
  }
  for (int i = 0; i < nextra; i++) args[na++] = extra[i];
  tpuc_op_call c = {op, 0, args, na, ins, nin, &out, 1};
  return tpuc_op_run(rt, &c, false);
}

/* ---- engine tests ---- */
static void test_add_fresh_output(void) {
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {10, 20, 30, 40, 50, 60}, got[6];
  int64_t sz[2] = {2, 3};
  tpuc_storage *sa = storage_f32(a, 6), *sb = storage_f32(b, 6), *so = storage_f32(NULL, 6);
  tpuc_tensor ins[2] = {contiguous(sa, 2, sz), contiguous(sb, 2, sz)};
  CHECK_OK(run1(OP(k_add), ins, 2, contiguous(so, 2, sz), NULL, 0));
  read_f32(so, got, 6);
  for (int i = 0; i < 6; i++) CHECK(got[i] == a[i] + b[i]);
  /* the output's buffer is rank 1 (TPUC_FLAT_BUFFERS, the default), or keeps the
   * produced shape (TPUC_FLAT_BUFFERS=0) */
  tpuc_buffer *ob = tpuc_storage_get_buffer(so);
  const char *flat = getenv("TPUC_FLAT_BUFFERS");
  if (flat && !strcmp(flat, "0"))
    CHECK(ob && tpuc_buffer_ndim(ob) == 2 && tpuc_buffer_dims(ob)[1] == 3);
  else
    CHECK(ob && tpuc_buffer_ndim(ob) == 1 && tpuc_buffer_dims(ob)[0] == 6);
  tpuc_buffer_release(ob);
  tpuc_storage_destroy(sa);
  tpuc_storage_destroy(sb);
  tpuc_storage_destroy(so);
}

static void test_inplace_through_view(void) {
  /* x is 3x4; x[:, 1] += x[:, 1] (a strided view written in place) */
  float x[12], got[12];
  for (int i = 0; i < 12; i++) x[i] = (float)i;
  tpuc_storage *s = storage_f32(x, 12);
  int64_t sz[1] = {3}, st[1] = {4};
  tpuc_tensor col = view(s, 1, sz, st, 1);
  tpuc_tensor ins[2] = {col, col};
  CHECK_OK(run1(OP(k_add), ins, 2, col, NULL, 0));
  read_f32(s, got, 12);
  for (int i = 0; i < 12; i++) CHECK(got[i] == (i % 4 == 1 ? 2.0f * i : (float)i));
  /* a contiguous sub-range (row 1) written in place: dynamic_update_slice */
  int64_t rs[1] = {4}, rst[1] = {1};
  tpuc_tensor row = view(s, 1, rs, rst, 4);
  tpuc_tensor ins2[2] = {row, row};
  CHECK_OK(run1(OP(k_add), ins2, 2, row, NULL, 0));
  read_f32(s, got, 12);
  for (int i = 4; i < 8; i++) CHECK(got[i] == (i % 4 == 1 ? 4.0f * i : 2.0f * i));
  CHECK(got[0] == 0 && got[9] == 18 && got[11] == 11);
  tpuc_storage_destroy(s);
}

static void test_view_reads(void) {
  float x[24], got[24];
  for (int i = 0; i < 24; i++) x[i] = (float)i;
  tpuc_storage *s = storage_f32(x, 24);
  struct {
    const char *name;
    int ndim;
    int64_t sizes[3], strides[3], offset;
  } cases[] = {
      {"transpose", 2, {6, 4}, {1, 6}, 0},
      {"slice with step", 2, {2, 3}, {12, 2}, 1},
      {"expand", 3, {2, 3, 4}, {0, 4, 1}, 0},
      {"permute 3d", 3, {4, 2, 3}, {1, 12, 4}, 0},
      {"overlapping windows", 2, {5, 4}, {2, 1}, 3},
      {"single element", 2, {1, 1}, {5, 1}, 7},
      {"rank 0", 0, {0}, {0}, 9},
      {"negative-free diagonal", 1, {4}, {7, 0}, 0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int64_t n = 1;
    for (int d = 0; d < cases[c].ndim; d++) n *= cases[c].sizes[d];
    tpuc_storage *so = storage_f32(NULL, n);
    tpuc_tensor in = view(s, cases[c].ndim, cases[c].sizes, cases[c].strides, cases[c].offset);
    CHECK_OK(run1(OP(k_copy), &in, 1, contiguous(so, cases[c].ndim, cases[c].sizes), NULL, 0));
    read_f32(so, got, (size_t)n);
    /* expected: walk the view on the host */
    for (int64_t i = 0; i < n; i++) {
      int64_t rem = i, off = cases[c].offset;
      for (int d = cases[c].ndim - 1; d >= 0; d--) {
        off += (rem % cases[c].sizes[d]) * cases[c].strides[d];
        rem /= cases[c].sizes[d];
      }
      if (got[i] != x[off]) {
        printf("    %s: element %lld is %g, expected %g\n", cases[c].name, (long long)i, got[i],
               x[off]);
        CHECK(0);
        break;
      }
    }
    tpuc_storage_destroy(so);
  }
  tpuc_storage_destroy(s);
}

static void test_strided_write_scatter(void) {
  /* write ones into the transposed view of a 3x2 block (non-contiguous) */
  float x[6] = {0}, ones[6] = {1, 2, 3, 4, 5, 6}, got[6];
  tpuc_storage *s = storage_f32(x, 6), *src = storage_f32(ones, 6);
  int64_t sz[2] = {2, 3}, st[2] = {1, 2};
  tpuc_tensor dst = view(s, 2, sz, st, 0);
  tpuc_tensor in = contiguous(src, 2, sz);
  CHECK_OK(run1(OP(k_copy), &in, 1, dst, NULL, 0));
  read_f32(s, got, 6);
  /* dst[i][j] = storage[i + 2j] = ones[i*3 + j] */
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) CHECK(got[i + 2 * j] == ones[i * 3 + j]);
  tpuc_storage_destroy(s);
  tpuc_storage_destroy(src);
}

static void test_unwritten_storage_reads_zeros(void) {
  float got[4] = {9, 9, 9, 9};
  tpuc_storage *s = storage_f32(NULL, 4), *so = storage_f32(NULL, 4);
  int64_t sz[1] = {4};
  tpuc_tensor in = contiguous(s, 1, sz);
  CHECK_OK(run1(OP(k_copy), &in, 1, contiguous(so, 1, sz), NULL, 0));
  read_f32(so, got, 4);
  for (int i = 0; i < 4; i++) CHECK(got[i] == 0);
  tpuc_storage_destroy(s);
  tpuc_storage_destroy(so);
}

static void test_signature_cache_and_scalars(void) {
  float a[4] = {1, 2, 3, 4}, got[4];
  int64_t sz[1] = {4};
  tpuc_storage *sa = storage_f32(a, 4), *so = storage_f32(NULL, 4);
  tpuc_tensor in = contiguous(sa, 1, sz);
  tpuc_arg sc;
  memset(&sc, 0, sizeof sc);
  sc.kind = TPUC_ARG_SCALAR;
  sc.scalar.kind = TPUC_SCALAR_FLOAT;
  tpuc_op_stats s0, s1;
  tpuc_runtime_stats r0, r1;
  double values[3] = {2.0, 0.5, -3.0};
  for (int k = 0; k < 3; k++) {
    sc.scalar.re = values[k];
    if (k == 1) {
      tpuc_op_stats_get(rt, &s0);
      tpuc_runtime_stats_get(rt, &r0);
    }
    CHECK_OK(run1(OP(k_scale), &in, 1, contiguous(so, 1, sz), &sc, 1));
    read_f32(so, got, 4);
    for (int i = 0; i < 4; i++) CHECK(got[i] == (float)(a[i] * values[k]));
  }
  tpuc_op_stats_get(rt, &s1);
  tpuc_runtime_stats_get(rt, &r1);
  CHECK(s1.fast_hits == s0.fast_hits + 2);
  CHECK(s1.fast_misses == s0.fast_misses);
  CHECK(r1.compiles == r0.compiles);
  CHECK(s1.emitted_bytes == s0.emitted_bytes);
  tpuc_storage_destroy(sa);
  tpuc_storage_destroy(so);
}

static void test_recompile_reason_names_the_change(void) {
  float a[8] = {0};
  tpuc_storage *s4 = storage_f32(a, 4), *s8 = storage_f32(a, 8);
  tpuc_storage *o4 = storage_f32(NULL, 4), *o8 = storage_f32(NULL, 8);
  int64_t four = 4, eight = 8;
  tpuc_tensor i4[2] = {contiguous(s4, 1, &four), contiguous(s4, 1, &four)};
  tpuc_tensor i8[2] = {contiguous(s8, 1, &eight), contiguous(s8, 1, &eight)};
  int64_t before = tpuc_recompile_count(rt);
  CHECK_OK(run1(OP(k_add), i4, 2, contiguous(o4, 1, &four), NULL, 0));
  CHECK_OK(run1(OP(k_add), i8, 2, contiguous(o8, 1, &eight), NULL, 0));
  CHECK(tpuc_recompile_count(rt) >= before + 1);
  char buf[4096];
  size_t need = tpuc_recompile_reasons(rt, buf, sizeof buf);
  CHECK(need > 1 && need <= sizeof buf);
  CHECK(strstr(buf, "test::add: input 0 shape [4] -> [8]") != NULL);
  CHECK_OK(tpuc_flush(rt, -1)); /* ops queued ahead of their compiles (ahead.c) run */
  tpuc_storage_destroy(s4);
  tpuc_storage_destroy(s8);
  tpuc_storage_destroy(o4);
  tpuc_storage_destroy(o8);
}

/* ---- events (the observer) ---- */
typedef struct {
  pthread_mutex_t m;
  pthread_cond_t c;
  int n[6][3];          /* [kind][phase] */
  uint64_t exec_id, done_id;
  int depth, max_depth; /* begin/end nesting on the caller's thread */
  char recompile[256];
  bool gate_open; /* what the gate answers */
  int gate_calls;
} event_log;

static bool gate(void *user) {
  event_log *l = user;
  l->gate_calls++;
  return l->gate_open;
}

static void on_event(const tpuc_event *ev, void *user) {
  event_log *l = user;
  pthread_mutex_lock(&l->m);
  l->n[ev->kind][ev->phase]++;
  if (ev->phase == TPUC_EVENT_BEGIN && ++l->depth > l->max_depth) l->max_depth = l->depth;
  if (ev->phase == TPUC_EVENT_END) l->depth--;
  if (ev->kind == TPUC_EVENT_EXECUTE && ev->phase == TPUC_EVENT_BEGIN) l->exec_id = ev->id;
  if (ev->kind == TPUC_EVENT_DEVICE_DONE) l->done_id = ev->id;
  if (ev->kind == TPUC_EVENT_RECOMPILE) snprintf(l->recompile, sizeof l->recompile, "%s", ev->detail);
  pthread_cond_broadcast(&l->c);
  pthread_mutex_unlock(&l->m);
}

static void test_events(void) {
  event_log l;
  memset(&l, 0, sizeof l);
  pthread_mutex_init(&l.m, NULL);
  pthread_cond_init(&l.c, NULL);
  tpuc_set_event_hook(rt, on_event, &l);
  tpuc_set_event_device_done(rt, true);
  float a[7] = {1, 2, 3, 4, 5, 6, 7}, got[7];
  int64_t three = 3, seven = 7;
  tpuc_storage *s3 = storage_f32(a, 3), *s7 = storage_f32(a, 7);
  tpuc_storage *o3 = storage_f32(NULL, 3), *o7 = storage_f32(NULL, 7);
  tpuc_tensor i3[2] = {contiguous(s3, 1, &three), contiguous(s3, 1, &three)};
  tpuc_tensor i7[2] = {contiguous(s7, 1, &seven), contiguous(s7, 1, &seven)};
  CHECK_OK(run1(OP(k_add), i3, 2, contiguous(o3, 1, &three), NULL, 0));
  CHECK_OK(run1(OP(k_add), i7, 2, contiguous(o7, 1, &seven), NULL, 0));
  read_f32(o7, got, 7);
  CHECK(got[6] == 14);
  pthread_mutex_lock(&l.m);
  while (l.n[TPUC_EVENT_DEVICE_DONE][TPUC_EVENT_INSTANT] < 2) pthread_cond_wait(&l.c, &l.m); /* plugin threads */
  pthread_mutex_unlock(&l.m);
  CHECK(l.n[TPUC_EVENT_TO_DEVICE][TPUC_EVENT_BEGIN] == 2 && l.n[TPUC_EVENT_TO_DEVICE][TPUC_EVENT_END] == 2);
  CHECK(l.n[TPUC_EVENT_COMPILE][TPUC_EVENT_BEGIN] >= 2);
  CHECK(l.n[TPUC_EVENT_COMPILE][TPUC_EVENT_BEGIN] == l.n[TPUC_EVENT_COMPILE][TPUC_EVENT_END]);
  CHECK(l.n[TPUC_EVENT_EXECUTE][TPUC_EVENT_BEGIN] == 2 && l.n[TPUC_EVENT_EXECUTE][TPUC_EVENT_END] == 2);
  CHECK(l.n[TPUC_EVENT_TO_HOST][TPUC_EVENT_BEGIN] == 1 && l.n[TPUC_EVENT_TO_HOST][TPUC_EVENT_END] == 1);
  CHECK(strstr(l.recompile, "test::add: input 0 shape [3] -> [7]") != NULL);
  CHECK(l.depth == 0 && l.max_depth == 1); /* begin/end pairs, not nested here */
  CHECK(l.exec_id > 0 && l.done_id > 0);
  /* a gate that says no: the launch is not reported, a transfer still is */
  tpuc_set_event_gate(rt, gate);
  int ex = l.n[TPUC_EVENT_EXECUTE][TPUC_EVENT_BEGIN], th = l.n[TPUC_EVENT_TO_HOST][TPUC_EVENT_BEGIN];
  CHECK_OK(run1(OP(k_add), i7, 2, contiguous(o7, 1, &seven), NULL, 0));
  read_f32(o7, got, 7);
  CHECK(got[6] == 14 && l.gate_calls >= 1);
  CHECK(l.n[TPUC_EVENT_EXECUTE][TPUC_EVENT_BEGIN] == ex && l.n[TPUC_EVENT_EXECUTE][TPUC_EVENT_END] == ex);
  CHECK(l.n[TPUC_EVENT_TO_HOST][TPUC_EVENT_BEGIN] == th + 1 && l.depth == 0);
  l.gate_open = true; /* says yes: reported again, in pairs */
  int calls = l.gate_calls;
  CHECK_OK(run1(OP(k_add), i7, 2, contiguous(o7, 1, &seven), NULL, 0));
  read_f32(o7, got, 7);
  CHECK(l.gate_calls > calls);
  CHECK(l.n[TPUC_EVENT_EXECUTE][TPUC_EVENT_BEGIN] == ex + 1 && l.n[TPUC_EVENT_EXECUTE][TPUC_EVENT_END] == ex + 1);
  tpuc_set_event_gate(rt, NULL);
  /* removed: nothing more is reported */
  tpuc_set_event_hook(rt, NULL, NULL);
  tpuc_set_event_device_done(rt, false);
  int before = l.n[TPUC_EVENT_EXECUTE][TPUC_EVENT_BEGIN];
  CHECK_OK(run1(OP(k_add), i7, 2, contiguous(o7, 1, &seven), NULL, 0));
  read_f32(o7, got, 7);
  CHECK(l.n[TPUC_EVENT_EXECUTE][TPUC_EVENT_BEGIN] == before);
  tpuc_storage_destroy(s3);
  tpuc_storage_destroy(s7);
  tpuc_storage_destroy(o3);
  tpuc_storage_destroy(o7);
  pthread_mutex_destroy(&l.m);
  pthread_cond_destroy(&l.c);
}

static void test_declined_is_unimplemented_and_cached(void) {
  float a[2] = {1, 2};
  int64_t sz[1] = {2};
  tpuc_storage *sa = storage_f32(a, 2), *so = storage_f32(NULL, 2);
  tpuc_tensor in = contiguous(sa, 1, sz);
  for (int k = 0; k < 2; k++) {
    tpuc_status *s = run1(OP(k_decline), &in, 1, contiguous(so, 1, sz), NULL, 0);
    CHECK(s && tpuc_status_code(s) == TPUC_ERR_UNIMPLEMENTED);
    CHECK(s && strstr(tpuc_status_message(s), "never"));
    tpuc_status_destroy(s);
  }
  tpuc_storage_destroy(sa);
  tpuc_storage_destroy(so);
}

static void test_complex_views_of_float_storage(void) {
  /* view_as_complex: a c64 view of a float storage, squared into a c64 storage,
   * then view_as_real of that: float pairs again */
  float x[4] = {1, 2, 3, -1}, got[4];
  tpuc_storage *s = storage_f32(x, 4), *sc = NULL, *sr = storage_f32(NULL, 4);
  CHECK_OK(tpuc_storage_create(rt, 0, 16, &sc));
  int64_t two = 2, one = 1, sz22[2] = {2, 2}, st22[2] = {2, 1};
  tpuc_tensor cin = view(s, 1, &two, &one, 0);
  cin.dtype = TPUC_C64;
  tpuc_tensor cout = cin;
  cout.storage = sc;
  tpuc_tensor ins[2] = {cin, cin};
  CHECK_OK(run1(OP(k_add), ins, 2, cout, NULL, 0)); /* c + c */
  tpuc_tensor real_view = view(sc, 2, sz22, st22, 0);
  CHECK_OK(run1(OP(k_copy), &real_view, 1, contiguous(sr, 2, sz22), NULL, 0));
  read_f32(sr, got, 4);
  CHECK(got[0] == 2 && got[1] == 4 && got[2] == 6 && got[3] == -2);
  /* view_as_real(...).flatten(): a float view of complex data that is not
   * made of (re, im) pairs dimension-wise; and every other element */
  int64_t four = 4, two1 = 2, st2 = 2;
  tpuc_tensor flat_view = view(sc, 1, &four, &one, 0);
  CHECK_OK(run1(OP(k_copy), &flat_view, 1, contiguous(sr, 1, &four), NULL, 0));
  read_f32(sr, got, 4);
  CHECK(got[0] == 2 && got[1] == 4 && got[2] == 6 && got[3] == -2);
  tpuc_storage *s2 = storage_f32(NULL, 2);
  tpuc_tensor reals = view(sc, 1, &two1, &st2, 0);
  CHECK_OK(run1(OP(k_copy), &reals, 1, contiguous(s2, 1, &two1), NULL, 0));
  read_f32(s2, got, 2);
  CHECK(got[0] == 2 && got[1] == 6);
  tpuc_storage_destroy(s2);
  /* writing a complex view into the float storage: x = c + c */
  CHECK_OK(run1(OP(k_add), ins, 2, cin, NULL, 0));
  read_f32(s, got, 4);
  CHECK(got[0] == 2 && got[1] == 4 && got[2] == 6 && got[3] == -2);
  tpuc_storage_destroy(s);
  tpuc_storage_destroy(sc);
  tpuc_storage_destroy(sr);
}

/* ---- fused mode ---- */
static void test_fused_chain_matches_strict(void) {
  float x[4] = {1, 2, 3, 4}, got[4];
  int64_t sz[1] = {4};
  tpuc_storage *sx = storage_f32(x, 4), *sa = storage_f32(NULL, 4), *sb = storage_f32(NULL, 4);
  tpuc_arg half;
  memset(&half, 0, sizeof half);
  half.kind = TPUC_ARG_SCALAR;
  half.scalar.kind = TPUC_SCALAR_FLOAT;
  half.scalar.re = 0.5;
  tpuc_op_stats s0, s1;
  tpuc_op_stats_get(rt, &s0);
  CHECK_OK(tpuc_set_mode(rt, TPUC_MODE_FUSED));
  tpuc_tensor tx = contiguous(sx, 1, sz), ta = contiguous(sa, 1, sz), tb = contiguous(sb, 1, sz);
  tpuc_tensor xx[2] = {tx, tx};
  CHECK_OK(run1(OP(k_add), xx, 2, ta, NULL, 0));   /* a = x + x */
  tpuc_tensor ax[2] = {ta, tx};
  CHECK_OK(run1(OP(k_add), ax, 2, tb, NULL, 0));   /* b = a + x */
  CHECK_OK(run1(OP(k_scale), &tb, 1, tb, &half, 1)); /* b *= 0.5, in place */
  /* x[1:3] += x[1:3] through a view, after b read x */
  int64_t two = 2, one = 1;
  tpuc_tensor mid = view(sx, 1, &two, &one, 1);
  tpuc_tensor mm[2] = {mid, mid};
  CHECK_OK(run1(OP(k_add), mm, 2, mid, NULL, 0));
  tpuc_op_stats_get(rt, &s1);
  CHECK(s1.recorded_ops == s0.recorded_ops + 4);
  CHECK(s1.flushes == s0.flushes); /* nothing ran yet */
  read_f32(sb, got, 4);             /* a host read runs the chunk */
  for (int i = 0; i < 4; i++) CHECK(got[i] == 1.5f * x[i]);
  read_f32(sx, got, 4);
  CHECK(got[0] == 1 && got[1] == 4 && got[2] == 6 && got[3] == 4);
  tpuc_op_stats_get(rt, &s1);
  CHECK(s1.flushes == s0.flushes + 1);
  CHECK_OK(tpuc_set_mode(rt, TPUC_MODE_STRICT));
  tpuc_storage_destroy(sx);
  tpuc_storage_destroy(sa);
  tpuc_storage_destroy(sb);
}

static void test_fused_loop_hits_the_cache(void) {
  /* x = (x + y) * 0.5 repeated: chunks cut at the loop boundary reuse one
   * program; a freed temporary is never materialised */
  float x[4] = {8, 8, 8, 8}, y[4] = {0, 2, 4, 6}, got[4];
  int64_t sz[1] = {4};
  tpuc_storage *sx = storage_f32(x, 4), *sy = storage_f32(y, 4);
  tpuc_arg half;
  memset(&half, 0, sizeof half);
  half.kind = TPUC_ARG_SCALAR;
  half.scalar.kind = TPUC_SCALAR_FLOAT;
  half.scalar.re = 0.5;
  tpuc_memory_stats m0, m1;
  CHECK_OK(tpuc_memory_stats_get(rt, 0, &m0));
  tpuc_op_stats s0, s1;
  tpuc_op_stats_get(rt, &s0);
  CHECK_OK(tpuc_set_mode(rt, TPUC_MODE_FUSED));
  for (int it = 0; it < 8; it++) {
    tpuc_storage *tmp = storage_f32(NULL, 4);
    tpuc_tensor tx = contiguous(sx, 1, sz), ty = contiguous(sy, 1, sz), tt = contiguous(tmp, 1, sz);
    tpuc_tensor xy[2] = {tx, ty};
    CHECK_OK(run1(OP(k_add), xy, 2, tt, NULL, 0));
    CHECK_OK(run1(OP(k_scale), &tt, 1, tx, &half, 1));
    tpuc_storage_destroy(tmp); /* freed while pending */
  }
  CHECK_OK(tpuc_flush(rt, 0));
  tpuc_op_stats_get(rt, &s1);
  read_f32(sx, got, 4);
  for (int i = 0; i < 4; i++) {
    float e = x[i];
    for (int it = 0; it < 8; it++) e = (e + y[i]) * 0.5f;
    CHECK(got[i] == e);
  }
  /* recognised after two whole iterations, then one chunk per iteration */
  CHECK(s1.flushes - s0.flushes == 7);
  CHECK(s1.chunk_misses - s0.chunk_misses <= 3);
  CHECK(s1.chunk_hits - s0.chunk_hits >= 4);
  CHECK_OK(tpuc_memory_stats_get(rt, 0, &m1));
  CHECK(m1.bytes_in_use == m0.bytes_in_use); /* no temporary left behind */
  CHECK_OK(tpuc_set_mode(rt, TPUC_MODE_STRICT));
  tpuc_storage_destroy(sx);
  tpuc_storage_destroy(sy);
}

static void test_fused_declined_and_host_writes(void) {
  float x[2] = {1, 2}, z[2] = {5, 5}, got[2];
  int64_t sz[1] = {2};
  tpuc_storage *sx = storage_f32(x, 2), *so = storage_f32(NULL, 2);
  CHECK_OK(tpuc_set_mode(rt, TPUC_MODE_FUSED));
  tpuc_tensor tx = contiguous(sx, 1, sz), to = contiguous(so, 1, sz);
  tpuc_status *s = run1(OP(k_decline), &tx, 1, to, NULL, 0);
  CHECK(s && tpuc_status_code(s) == TPUC_ERR_UNIMPLEMENTED);
  tpuc_status_destroy(s);
  tpuc_tensor xx[2] = {tx, tx};
  CHECK_OK(run1(OP(k_add), xx, 2, to, NULL, 0)); /* o = x + x, pending */
  CHECK_OK(tpuc_storage_upload(sx, TPUC_F32, sz, 1, z)); /* the pending op sees the old x */
  read_f32(so, got, 2);
  CHECK(got[0] == 2 && got[1] == 4);
  read_f32(sx, got, 2);
  CHECK(got[0] == 5 && got[1] == 5);
  CHECK_OK(tpuc_set_mode(rt, TPUC_MODE_STRICT));
  tpuc_storage_destroy(sx);
  tpuc_storage_destroy(so);
}

/* ---- IR primitives against the plugin ---- */
static tpuc_buffer *up(tpuc_dtype t, int ndim, const int64_t *dims, const void *data) {
  tpuc_buffer *b = NULL;
  CHECK_OK(tpuc_buffer_from_host(rt, 0, t, dims, ndim, data, &b));
  return b;
}

/* Emits g, compiles, runs with args, downloads output k into out. */
static bool run_graph(ir_graph *g, tpuc_buffer **args, int nargs, int k, void *out, size_t nbytes) {
  size_t len = 0;
  char *text = ir_emit(g, "t", &len);
  if (!text) {
    printf("    emit: %s\n", ir_error(g));
    CHECK(0);
    return false;
  }
  tpuc_executable *e = NULL;
  tpuc_status *s = tpuc_compile(rt, text, len, &e);
  if (s) {
    printf("    compile: %.600s\n    program:\n%s\n", tpuc_status_message(s), text);
    tpuc_status_destroy(s);
    free(text);
    CHECK(0);
    return false;
  }
  free(text);
  tpuc_buffer *outs[8] = {0};
  bool ok = false;
  CHECK_OK(tpuc_execute(e, 0, args, nargs, outs, false));
  if (outs[0]) {
    CHECK_OK(tpuc_buffer_to_host(outs[k], out, nbytes));
    ok = true;
  }
  for (int i = 0; i < tpuc_executable_num_outputs(e); i++) tpuc_buffer_release(outs[i]);
  tpuc_executable_release(e);
  return ok;
}

static void test_ir_argmax_sort(void) {
  float x[6] = {3, NAN, 1, -2, 5, 5};
  int64_t d[2] = {2, 3};
  ir_graph *g = ir_graph_create();
  tv p = ir_param(g, ir_make_type(TPUC_F32, 2, d));
  tv vals, idx, sorted, perm;
  ir_argreduce(g, p, 1, true, TPUC_S64, &vals, &idx);
  ir_output(g, idx);
  ir_sort(g, p, 1, false, &sorted, &perm);
  ir_output(g, perm);
  ir_argreduce(g, p, 1, false, TPUC_S64, &vals, &idx);
  ir_output(g, idx);
  tpuc_buffer *b = up(TPUC_F32, 2, d, x);
  int64_t amax[2], order[6], amin[2];
  if (run_graph(g, &b, 1, 0, amax, sizeof amax)) CHECK(amax[0] == 1 && amax[1] == 1); /* NaN wins; first 5 */
  if (run_graph(g, &b, 1, 1, order, sizeof order))
    CHECK(order[0] == 2 && order[1] == 0 && order[2] == 1 && order[3] == 0 && order[5] == 2);
  if (run_graph(g, &b, 1, 2, amin, sizeof amin)) CHECK(amin[0] == 1 && amin[1] == 0);
  tpuc_buffer_release(b);
  ir_graph_destroy(g);
}

static void test_ir_reduce_window_gather_scatter(void) {
  float x[5] = {1, 2, 3, 4, 5};
  int64_t d5 = 5;
  ir_graph *g = ir_graph_create();
  tv p = ir_param(g, ir_make_type(TPUC_F32, 1, &d5));
  int64_t win = 5, stride = 1, pad[2] = {4, 0};
  tv zero = ir_splat(g, ir_make_type(TPUC_F32, 0, NULL), 0);
  ir_output(g, ir_reduce_window(g, p, zero, IR_RED_SUM, &win, &stride, pad)); /* cumsum */
  int64_t idx[3] = {4, 0, 4}, id2[2] = {3, 1};
  tv ix = ir_reshape(g, ir_const_i64s(g, idx, 3), 2, id2);
  ir_gather_dims gd;
  memset(&gd, 0, sizeof gd);
  gd.collapsed_slice_dims[0] = 0;
  gd.n_collapsed = 1;
  gd.n_start_index_map = 1;
  gd.index_vector_dim = 1;
  gd.slice_sizes[0] = 1;
  int64_t three = 3;
  tv gathered = ir_gather(g, p, ix, &gd, ir_make_type(TPUC_F32, 1, &three));
  ir_output(g, gathered);
  ir_scatter_dims sd;
  memset(&sd, 0, sizeof sd);
  sd.n_inserted = 1;
  sd.n_scatter_dims = 1;
  sd.index_vector_dim = 1;
  ir_output(g, ir_scatter(g, p, ix, gathered, &sd, IR_RED_SUM));
  tpuc_buffer *b = up(TPUC_F32, 1, &d5, x);
  float cs[5], ga[3], sc[5];
  if (run_graph(g, &b, 1, 0, cs, sizeof cs)) CHECK(cs[0] == 1 && cs[2] == 6 && cs[4] == 15);
  if (run_graph(g, &b, 1, 1, ga, sizeof ga)) CHECK(ga[0] == 5 && ga[1] == 1 && ga[2] == 5);
  if (run_graph(g, &b, 1, 2, sc, sizeof sc)) CHECK(sc[0] == 2 && sc[4] == 15 && sc[2] == 3);
  tpuc_buffer_release(b);
  ir_graph_destroy(g);
}

static void test_ir_dot_conv_misc(void) {
  /* conv2d of a 1x1x3x3 image with a 1x1x2x2 kernel of ones = 2x2 window sums */
  float img[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, k[4] = {1, 1, 1, 1};
  int64_t di[4] = {1, 1, 3, 3}, dk[4] = {1, 1, 2, 2};
  ir_graph *g = ir_graph_create();
  tv pi = ir_param(g, ir_make_type(TPUC_F32, 4, di));
  tv pk = ir_param(g, ir_make_type(TPUC_F32, 4, dk));
  int64_t st[2] = {1, 1}, pad[4] = {0, 0, 0, 0}, dil[2] = {1, 1};
  ir_output(g, ir_conv(g, pi, pk, 2, st, pad, dil, dil, 1, TPUC_F32));
  /* erf, concat, pad, reverse, transpose, select, clamp, rng: built and run */
  int64_t d3 = 3;
  tv row = ir_reshape(g, ir_slice(g, ir_reshape(g, pi, 1, (int64_t[]){9}), (int64_t[]){0},
                                  (int64_t[]){3}, NULL),
                      1, &d3);
  tv e = ir_unary(g, IR_ERF, ir_binary(g, IR_DIV, row, ir_splat(g, ir_type_of(g, row), 10)));
  tv cat = ir_concat(g, (tv[]){e, ir_reverse(g, row, (int64_t[]){0}, 1)}, 2, 0);
  tv cl = ir_clamp(g, ir_splat(g, ir_make_type(TPUC_F32, 0, NULL), 0.15),
                   cat, ir_splat(g, ir_make_type(TPUC_F32, 0, NULL), 2.5));
  ir_output(g, cl);
  int64_t two = 2;
  tv state = ir_splat_i64(g, ir_make_type(TPUC_U64, 1, &two), 7);
  tv bits, ns;
  ir_rng_bits(g, state, ir_make_type(TPUC_U32, 1, (int64_t[]){1000}), &bits, &ns);
  tv bf = ir_convert(g, ir_binary(g, IR_SHR_LOGICAL, bits,
                                  ir_splat_i64(g, ir_type_of(g, bits), 31)), TPUC_F32);
  tv zero = ir_splat(g, ir_make_type(TPUC_F32, 0, NULL), 0);
  ir_output(g, ir_reduce(g, bf, zero, IR_RED_SUM, (int64_t[]){0}, 1));
  tpuc_buffer *args[2] = {up(TPUC_F32, 4, di, img), up(TPUC_F32, 4, dk, k)};
  float conv[4], c6[6], ones;
  if (run_graph(g, args, 2, 0, conv, sizeof conv))
    CHECK(conv[0] == 12 && conv[1] == 16 && conv[2] == 24 && conv[3] == 28);
  if (run_graph(g, args, 2, 1, c6, sizeof c6))
    CHECK(fabsf(c6[0] - 0.15f) < 1e-6f && fabsf(c6[1] - erff(0.2f)) < 1e-5f && c6[3] == 2.5f &&
          c6[5] == 1.0f);
  if (run_graph(g, args, 2, 2, &ones, sizeof ones)) CHECK(ones > 400 && ones < 600);
  tpuc_buffer_release(args[0]);
  tpuc_buffer_release(args[1]);
  ir_graph_destroy(g);
}

/* fft (RFFT, IFFT), cholesky and triangular_solve: printed, accepted, computed. */
static void test_ir_fft_cholesky_trisolve(void) {
  float x[4] = {1, 2, 3, 4}, a[4] = {4, 2, 2, 5}, b[2] = {2, 5};
  int64_t d4 = 4, d22[2] = {2, 2}, d21[2] = {2, 1};
  ir_graph *g = ir_graph_create();
  tv pa = ir_param(g, ir_make_type(TPUC_F32, 2, d22));
  CHECK(ir_fft(g, pa, IR_FFT_FFT, &d4, 1) == IR_NONE); /* real operand of a complex FFT */
  CHECK(ir_error(g) && strstr(ir_error(g), "fft"));
  ir_graph_destroy(g);
  g = ir_graph_create();
  tv px = ir_param(g, ir_make_type(TPUC_F32, 1, &d4));
  pa = ir_param(g, ir_make_type(TPUC_F32, 2, d22));
  tv pb = ir_param(g, ir_make_type(TPUC_F32, 2, d21));
  tv spec = ir_fft(g, px, IR_FFT_RFFT, &d4, 1); /* [10, -2+2i, -2] */
  CHECK(ir_typeof(g, spec)->dtype == TPUC_C64 && ir_typeof(g, spec)->dims[0] == 3);
  ir_output(g, ir_unary(g, IR_REAL, spec));
  tv c = ir_fft(g, ir_binary(g, IR_COMPLEX, px, ir_splat(g, ir_type_of(g, px), 0)), IR_FFT_FFT,
                &d4, 1);
  ir_output(g, ir_unary(g, IR_REAL, ir_fft(g, c, IR_FFT_IFFT, &d4, 1)));
  tv l = ir_cholesky(g, pa, true); /* [[2, .], [1, 2]] */
  ir_output(g, l);
  ir_output(g, ir_triangular_solve(g, l, pb, true, true, false, IR_TRANSPOSE_NO)); /* [1, 2] */
  tpuc_buffer *args[3] = {up(TPUC_F32, 1, &d4, x), up(TPUC_F32, 2, d22, a), up(TPUC_F32, 2, d21, b)};
  float re[3], xs[4], lf[4], sol[2];
  if (run_graph(g, args, 3, 0, re, sizeof re))
    CHECK(fabsf(re[0] - 10) < 1e-5f && fabsf(re[1] + 2) < 1e-5f && fabsf(re[2] + 2) < 1e-5f);
  if (run_graph(g, args, 3, 1, xs, sizeof xs))
    CHECK(fabsf(xs[0] - 1) < 1e-5f && fabsf(xs[3] - 4) < 1e-5f);
  if (run_graph(g, args, 3, 2, lf, sizeof lf))
    CHECK(fabsf(lf[0] - 2) < 1e-6f && fabsf(lf[2] - 1) < 1e-6f && fabsf(lf[3] - 2) < 1e-6f);
  if (run_graph(g, args, 3, 3, sol, sizeof sol))
    CHECK(fabsf(sol[0] - 1) < 1e-6f && fabsf(sol[1] - 2) < 1e-6f);
  for (int i = 0; i < 3; i++) tpuc_buffer_release(args[i]);
  ir_graph_destroy(g);
}

/* Counted loops (ir/loop.c) nested two deep, printed as stablehlo.while: the
 * outer body runs an inner loop (y + 1, 4 trips; an argmax inside for the
 * region-local names), doubles its result and writes the counter at z[i] by
 * dynamic_update_slice. x = [1, 2]: 2 (x + 4) three times -> [64, 72]. */
static void test_ir_nested_loops(void) {
  int64_t d2 = 2, d3 = 3;
  float x[2] = {1, 2};
  ir_graph *g = ir_graph_create();
  tv px = ir_param(g, ir_make_type(TPUC_F32, 1, &d2));
  tv init[2] = {px, ir_splat(g, ir_make_type(TPUC_F32, 1, &d3), 0)}, res[2];
  ir_loop lo, li;
  CHECK(ir_loop_begin(g, &lo, init, 2));
  ir_graph *ob = lo.body;
  tv y0 = lo.vals[0], y1;
  CHECK(ir_loop_begin(ob, &li, &y0, 1));
  ir_graph *ib = li.body;
  tv mx, at;
  ir_argreduce(ib, li.vals[0], 0, true, TPUC_S32, &mx, &at);
  tv step = ir_binary(ib, IR_ADD, li.vals[0], ir_splat(ib, ir_type_of(ib, li.vals[0]), 1));
  ir_loop_end(ob, &li, 4, &step, &y1);
  tv next[2] = {ir_binary(ob, IR_MUL, y1, ir_splat(ob, ir_type_of(ob, y1), 2)),
                ir_dynamic_update_slice(ob, lo.vals[1],
                                        ir_reshape(ob, ir_convert(ob, lo.counter, TPUC_F32), 1,
                                                   (int64_t[]){1}),
                                        &lo.counter)};
  ir_loop_end(g, &lo, 3, next, res);
  CHECK(!ir_error(g));
  ir_output(g, res[0]);
  ir_output(g, res[1]);
  tpuc_buffer *b = up(TPUC_F32, 1, &d2, x);
  float got[2], z[3];
  if (run_graph(g, &b, 1, 0, got, sizeof got)) CHECK(got[0] == 64 && got[1] == 72);
  if (run_graph(g, &b, 1, 1, z, sizeof z)) CHECK(z[0] == 0 && z[1] == 1 && z[2] == 2);
  tpuc_buffer_release(b);
  ir_graph_destroy(g);
}

static void test_ir_errors_are_reported(void) {
  ir_graph *g = ir_graph_create();
  int64_t d2 = 2, d3 = 3;
  tv a = ir_param(g, ir_make_type(TPUC_F32, 1, &d2));
  tv b = ir_param(g, ir_make_type(TPUC_F32, 1, &d3));
  CHECK(ir_binary(g, IR_ADD, a, b) == IR_NONE);
  CHECK(ir_error(g) && strstr(ir_error(g), "differ"));
  CHECK(ir_emit(g, "t", NULL) == NULL);
  ir_graph_destroy(g);
  /* a loop whose next value has another type than its carried value */
  g = ir_graph_create();
  a = ir_param(g, ir_make_type(TPUC_F32, 1, &d2));
  ir_loop l;
  CHECK(ir_loop_begin(g, &l, &a, 1));
  tv bad = ir_splat(l.body, ir_make_type(TPUC_F32, 1, &d3), 0), r;
  ir_loop_end(g, &l, 2, &bad, &r);
  CHECK(r == IR_NONE && ir_error(g) && strstr(ir_error(g), "loop body"));
  ir_graph_destroy(g);
}

int main(void) {
  if (!harness_plugin_set()) return 1;
  setenv("TPUC_FUSED_MIN_PERIOD", "1", 1); /* the fused tests use two-op loops */
  /* strict ops queue ahead of their compiles (exec/ahead.c; off by default on the CPU plugin
     that runs these tests, on for GPU and TPU plugins): every strict
     test here runs through the queue and the compile pool, under ASan too */
  setenv("TPUC_COMPILE_AHEAD", "1", 1);
  tpuc_runtime_options opts = {NULL, 0, "off", 0}; /* the disk tier has its own tests */
  if (!harness_runtime(&opts, &rt)) return 1;
  RUN(test_add_fresh_output);
  RUN(test_inplace_through_view);
  RUN(test_view_reads);
  RUN(test_strided_write_scatter);
  RUN(test_unwritten_storage_reads_zeros);
  RUN(test_complex_views_of_float_storage);
  RUN(test_fused_chain_matches_strict);
  RUN(test_fused_loop_hits_the_cache);
  RUN(test_fused_declined_and_host_writes);
  RUN(test_signature_cache_and_scalars);
  RUN(test_declined_is_unimplemented_and_cached);
  RUN(test_recompile_reason_names_the_change);
  RUN(test_events);
  RUN(test_ir_argmax_sort);
  RUN(test_ir_reduce_window_gather_scatter);
  RUN(test_ir_dot_conv_misc);
  RUN(test_ir_fft_cholesky_trisolve);
  RUN(test_ir_nested_loops);
  RUN(test_ir_errors_are_reported);
  tpuc_runtime_destroy(rt);
  return harness_end();
}
