/* test_replay.c — tests of the replay module (exec/replay.c): a program
 * recorded in GRAPH mode and captured (tpuc_flush_capture) is launched again
 * on other storages without recording an op, computing the same function,
 * updating an in-place slot with its buffer donated; a storage that no
 * longer fits (size, buffer type) is a mismatch that runs nothing; a missing
 * storage and a wrong constant slot are errors; and the emitter's ordering
 * dependency (emit/order.c) keeps values bit for bit. Lowerings are
 * test-only. */
#include <stdlib.h>

#include "../exec/exec.h"
#include "../lower/lower.h"
#include "harness.h"

harness g_h;
static tpuc_runtime *rt;

static tpuc_status *low_add(tpuc_lower_ctx *cx) { /* out = a + b */
  cx->results[0] = ir_binary(cx->g, IR_ADD, lx_tensor(cx, 0), lx_tensor(cx, 1));
  return NULL;
}
static tpuc_status *low_scale(tpuc_lower_ctx *cx) { /* out = a * scalar */
  tv a = lx_tensor(cx, 0);
  tv s = lx_scalar(cx, 1, ir_typeof(cx->g, a)->dtype);
  cx->results[0] = ir_binary(cx->g, IR_MUL, a, lx_coerce(cx->g, s, ir_type_of(cx->g, a)));
  return NULL;
}
static const tpuc_lowering k_add = {"test::add", low_add};
static const tpuc_lowering k_scale = {"test::scale", low_scale};
#define OP(l) ((const tpuc_op *)&(l))

static tpuc_storage *storage_f32(const float *data, int64_t n) {
  return harness_storage_f32(rt, data, n);
}

static tpuc_tensor vec(tpuc_storage *s, int64_t n) { return harness_vec(s, TPUC_F32, n); }

static tpuc_status *run(const tpuc_op *op, const tpuc_tensor *ins, int nin, tpuc_tensor out,
                        const tpuc_arg *extra) {
  tpuc_arg args[3];
  int na = 0;
  for (int i = 0; i < nin; i++) {
    memset(&args[na], 0, sizeof args[na]);
    args[na].kind = TPUC_ARG_TENSOR;
    args[na].tensors.first = i;
    args[na].tensors.count = 1;
    na++;
  }
  if (extra) args[na++] = *extra;
  tpuc_op_call c = {op, 0, args, na, ins, nin, &out, 1};
  return tpuc_op_run(rt, &c, false);
}

/* Records y = x + x; w *= 0.5 (in place) in GRAPH mode and captures it. */
static tpuc_replay *record(tpuc_storage *x, tpuc_storage *y, tpuc_storage *w) {
  tpuc_arg half;
  memset(&half, 0, sizeof half);
  half.kind = TPUC_ARG_SCALAR;
  half.scalar.kind = TPUC_SCALAR_FLOAT;
  half.scalar.re = 0.5;
  CHECK_OK(tpuc_set_mode(rt, TPUC_MODE_GRAPH));
  tpuc_tensor xx[2] = {vec(x, 4), vec(x, 4)}, tw = vec(w, 4);
  CHECK_OK(run(OP(k_add), xx, 2, vec(y, 4), NULL));
  CHECK_OK(run(OP(k_scale), &tw, 1, tw, &half));
  CHECK(tpuc_pending_ops(rt, 0) == 2);
  tpuc_replay *r = NULL;
  CHECK_OK(tpuc_flush_capture(rt, 0, &r));
  CHECK_OK(tpuc_set_mode(rt, TPUC_MODE_STRICT));
  CHECK(r != NULL && tpuc_pending_ops(rt, 0) == 0);
  return r;
}

/* The slot of storage s at capture, or -1. */
static int slot_of(const tpuc_replay *r, const tpuc_storage *s) {
  for (int i = 0; i < tpuc_replay_slot_count(r); i++) {
    tpuc_replay_slot sl;
    tpuc_replay_slot_info(r, i, &sl);
    if (sl.storage == s) return i;
  }
  return -1;
}

static void read4(tpuc_storage *s, float *out) { CHECK_OK(tpuc_storage_download(s, out, 16)); }

static void test_capture_maps_slots_and_computes(void) {
  float xv[4] = {1, 2, 3, 4}, wv[4] = {8, -6, 0.5f, 3}, got[4];
  tpuc_storage *x = storage_f32(xv, 4), *y = storage_f32(NULL, 4), *w = storage_f32(wv, 4);
  tpuc_replay *r = record(x, y, w);
  if (!r) return;
  int sx = slot_of(r, x), sy = slot_of(r, y), sw = slot_of(r, w);
  CHECK(tpuc_replay_slot_count(r) == 3 && sx >= 0 && sy >= 0 && sw >= 0);
  tpuc_replay_slot a, b, c;
  tpuc_replay_slot_info(r, sx, &a);
  tpuc_replay_slot_info(r, sy, &b);
  tpuc_replay_slot_info(r, sw, &c);
  CHECK(a.read && a.param && !a.result && !a.constant && a.nbytes == 16);
  CHECK(!b.read && b.result);
  CHECK(c.read && c.param && c.result);
  CHECK(tpuc_replay_rng_count(r) == 0);
  read4(y, got);
  for (int i = 0; i < 4; i++) CHECK(got[i] == 2 * xv[i]);
  read4(w, got);
  for (int i = 0; i < 4; i++) CHECK(got[i] == 0.5f * wv[i]);
  tpuc_replay_destroy(r);
  tpuc_storage_destroy(x);
  tpuc_storage_destroy(y);
  tpuc_storage_destroy(w);
}

static void test_launch_on_new_storages_records_nothing(void) {
  float xv[4] = {1, 2, 3, 4}, wv[4] = {8, -6, 0.5f, 3}, got[4];
  tpuc_storage *x = storage_f32(xv, 4), *y = storage_f32(NULL, 4), *w = storage_f32(wv, 4);
  tpuc_replay *r = record(x, y, w);
  if (!r) return;
  float x2v[4] = {-1, 10, 0.25f, 7}, w2v[4] = {2, 4, -8, 1e30f};
  tpuc_storage *x2 = storage_f32(x2v, 4), *y2 = storage_f32(NULL, 4), *w2 = storage_f32(w2v, 4);
  tpuc_storage *slots[3] = {NULL, NULL, NULL};
  slots[slot_of(r, x)] = x2;
  slots[slot_of(r, y)] = y2;
  slots[slot_of(r, w)] = w2;
  tpuc_op_stats o0, o1;
  tpuc_runtime_stats s0, s1;
  tpuc_op_stats_get(rt, &o0);
  tpuc_runtime_stats_get(rt, &s0);
  for (int k = 0; k < 2; k++) { /* w2 halves each time, in place */
    bool mismatch = true;
    CHECK_OK(tpuc_replay_launch(r, slots, NULL, &mismatch));
    CHECK(!mismatch);
  }
  CHECK_OK(tpuc_synchronize(rt, 0));
  tpuc_op_stats_get(rt, &o1);
  tpuc_runtime_stats_get(rt, &s1);
  CHECK(o1.recorded_ops == o0.recorded_ops && o1.flushes == o0.flushes);
  CHECK(s1.executions == s0.executions + 2);
  CHECK(s1.donations >= s0.donations + 2); /* w2's buffer, both times */
  CHECK(s1.compiles == s0.compiles);
  read4(y2, got);
  for (int i = 0; i < 4; i++) CHECK(got[i] == 2 * x2v[i]);
  read4(w2, got);
  for (int i = 0; i < 4; i++) CHECK(got[i] == 0.25f * w2v[i]);
  read4(w, got); /* the captured storages are untouched */
  for (int i = 0; i < 4; i++) CHECK(got[i] == 0.5f * wv[i]);
  tpuc_replay_destroy(r);
  tpuc_storage *all[6] = {x, y, w, x2, y2, w2};
  for (int i = 0; i < 6; i++) tpuc_storage_destroy(all[i]);
}

static void test_mismatch_runs_nothing_and_errors(void) {
  float xv[4] = {1, 2, 3, 4}, wv[4] = {1, 1, 1, 1}, got[4];
  tpuc_storage *x = storage_f32(xv, 4), *y = storage_f32(NULL, 4), *w = storage_f32(wv, 4);
  tpuc_replay *r = record(x, y, w);
  if (!r) return;
  int sx = slot_of(r, x), sy = slot_of(r, y), sw = slot_of(r, w);
  float big[8] = {0};
  tpuc_storage *x8 = storage_f32(big, 8), *y2 = storage_f32(NULL, 4), *w2 = storage_f32(wv, 4);
  /* the same 16 bytes as a 2x2 buffer: another buffer type (set directly: an upload's
   * buffer is rank 1 under TPUC_FLAT_BUFFERS) */
  tpuc_storage *x22 = NULL;
  tpuc_buffer *b22 = NULL;
  int64_t d22[2] = {2, 2};
  CHECK_OK(tpuc_storage_create(rt, 0, 16, &x22));
  CHECK_OK(tpuc_buffer_from_host(rt, 0, TPUC_F32, d22, 2, xv, &b22));
  CHECK_OK(tpuc_storage_set_buffer(x22, b22));
  tpuc_buffer_release(b22);
  tpuc_runtime_stats s0, s1;
  tpuc_runtime_stats_get(rt, &s0);
  tpuc_storage *slots[3];
  slots[sy] = y2;
  slots[sw] = w2;
  tpuc_storage *wrong[2] = {x8, x22};
  for (int k = 0; k < 2; k++) {
    slots[sx] = wrong[k];
    bool mismatch = false;
    CHECK_OK(tpuc_replay_launch(r, slots, NULL, &mismatch));
    CHECK(mismatch);
  }
  tpuc_runtime_stats_get(rt, &s1);
  CHECK(s1.executions == s0.executions);
  read4(w2, got); /* nothing ran: w2 kept its value */
  for (int i = 0; i < 4; i++) CHECK(got[i] == 1);
  /* a slot the program reads, left out: an error, not a crash */
  slots[sx] = NULL;
  bool mismatch = false;
  tpuc_status *st = tpuc_replay_launch(r, slots, NULL, &mismatch);
  CHECK(st != NULL && tpuc_status_code(st) == TPUC_ERR_INVALID_ARGUMENT);
  tpuc_status_destroy(st);
  /* only a slot read and never written can be held as a constant */
  st = tpuc_replay_hold_constant(r, sw);
  CHECK(st != NULL && tpuc_status_code(st) == TPUC_ERR_INVALID_ARGUMENT);
  tpuc_status_destroy(st);
  st = tpuc_replay_hold_constant(r, 99);
  CHECK(st != NULL);
  tpuc_status_destroy(st);
  tpuc_replay_destroy(r);
  tpuc_storage *all[7] = {x, y, w, x8, y2, w2, x22};
  for (int i = 0; i < 7; i++) tpuc_storage_destroy(all[i]);
}

static void test_nothing_pending_captures_nothing(void) {
  tpuc_replay *r = (tpuc_replay *)&rt; /* overwritten */
  CHECK_OK(tpuc_set_mode(rt, TPUC_MODE_GRAPH));
  CHECK_OK(tpuc_flush_capture(rt, 0, &r));
  CHECK_OK(tpuc_set_mode(rt, TPUC_MODE_STRICT));
  CHECK(r == NULL);
  tpuc_replay_destroy(NULL);
}

/* A program that updates p in place (aliased) while another output reads
 * the old p outside the update's chain (r = p * p; p' = p + g): the emitter
 * orders that read before the update with a dependency, which leaves every
 * value as it was. */
static void test_ordering_dependency_keeps_values(void) {
  ir_graph *g = ir_graph_create();
  int64_t n = 4;
  ir_type t = ir_make_type(TPUC_F32, 1, &n);
  tv p = ir_param(g, t), gr = ir_param(g, t);
  tv rd = ir_binary(g, IR_MUL, p, p);  /* a free read of p: an output of its own */
  tv upd = ir_binary(g, IR_ADD, p, gr); /* p' */
  ir_output(g, rd);
  ir_output(g, upd);
  ir_alias(g, p, 1);
  size_t len = 0;
  char *text = ir_emit(g, "order", &len);
  CHECK(text != NULL);
  if (text) CHECK(strstr(text, "%o0 = \"stablehlo.select\"") != NULL);
  tpuc_executable *exe = NULL;
  if (text) CHECK_OK(tpuc_compile(rt, text, len, &exe));
  free(text);
  float pv[4] = {1.5f, -2, 3, 1e20f}, gv[4] = {0.25f, 2, -1, 1};
  tpuc_buffer *args[2] = {NULL, NULL}, *outs[2] = {NULL, NULL};
  CHECK_OK(tpuc_buffer_from_host(rt, 0, TPUC_F32, &n, 1, pv, &args[0]));
  CHECK_OK(tpuc_buffer_from_host(rt, 0, TPUC_F32, &n, 1, gv, &args[1]));
  if (exe && args[0] && args[1]) {
    CHECK_OK(tpuc_execute(exe, 0, args, 2, outs, false));
    float r0[4], r1[4];
    if (outs[0] && outs[1]) {
      CHECK_OK(tpuc_buffer_to_host(outs[0], r0, sizeof r0));
      CHECK_OK(tpuc_buffer_to_host(outs[1], r1, sizeof r1));
      for (int i = 0; i < 4; i++) CHECK(r0[i] == pv[i] * pv[i] && r1[i] == pv[i] + gv[i]);
    }
  }
  for (int i = 0; i < 2; i++) {
    tpuc_buffer_release(args[i]);
    tpuc_buffer_release(outs[i]);
  }
  tpuc_executable_release(exe);
  ir_graph_destroy(g);
}

int main(void) {
  if (!harness_plugin_set()) return 1;
  tpuc_runtime_options opts = {NULL, 0, "off", 0};
  if (!harness_runtime(&opts, &rt)) return 1;
  RUN(test_capture_maps_slots_and_computes);
  RUN(test_launch_on_new_storages_records_nothing);
  RUN(test_mismatch_runs_nothing_and_errors);
  RUN(test_nothing_pending_captures_nothing);
  RUN(test_ordering_dependency_keeps_values);
  tpuc_runtime_destroy(rt);
  return harness_end();
}
