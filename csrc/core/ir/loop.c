/* loop.c — IR builders for counted loops (ir_loop_begin / ir_loop_end, see
 * ir.h), printed by emit/loop.c as one stablehlo.while.
 *
 * The body is an ir_graph of its own, so every builder and check works in
 * it unchanged and the printer prints it with the same code as a function
 * body. Its parameters are the counter (parameter 0) and the carried values
 * in order; it reads nothing of the outer graph (outer values are carried),
 * which keeps the body's numbering independent of the outer one. The loop is
 * node N_WHILE of the outer graph: operands the counter's start (0) and the
 * initial values, extra the body (freed with the outer graph), a[0] the trip
 * count; result 0 is the counter, results 1..n (N_GET values) the carried
 * values after the last trip. The body's outputs are the incremented counter
 * (added here) and the caller's next values. */
#include <stdlib.h>

#include "ir_internal.h"

static const ir_type s32_scalar = {TPUC_S32, 0, {0}};

tv ir_s32(ir_graph *g, int64_t v) { return ir_splat_i64(g, s32_scalar, v); }

bool ir_loop_begin(ir_graph *g, ir_loop *l, const tv *init, int n) {
  l->body = NULL;
  l->node = l->counter = IR_NONE;
  l->n = 0;
  if (ir_error(g)) return false;
  if (n < 0 || n > IR_LOOP_MAX) {
    ir_fail(g, "IR loop: %d carried values (at most %d)", n, IR_LOOP_MAX);
    return false;
  }
  tv ops[IR_LOOP_MAX + 1];
  ops[0] = ir_s32(g, 0);
  for (int i = 0; i < n; i++) {
    if (init[i] < 0 || init[i] >= g->n) {
      ir_fail(g, "IR loop: carried value %d is not a value", i);
      return false;
    }
    ops[1 + i] = init[i];
  }
  ir_graph *body = ir_graph_create();
  if (!body) {
    ir_fail(g, "out of host memory");
    return false;
  }
  tv node = ir_node_add(g, N_WHILE, 0, s32_scalar, ops, n + 1, NULL, 0);
  if (node == IR_NONE) {
    ir_graph_destroy(body);
    return false;
  }
  g->nodes[node].extra = body; /* owned by g from here on */
  g->nodes[node].nresults = n + 1;
  ir_graph_set_xla_cpu(body, g->xla_cpu);
  ir_graph_set_sum_block(body, g->sum_block);
  body->guard_dot_rhs = g->guard_dot_rhs;
  l->body = body;
  l->node = node;
  l->n = n;
  l->counter = ir_param(body, s32_scalar);
  for (int i = 0; i < n; i++) l->vals[i] = ir_param(body, g->nodes[init[i]].type);
  return !ir_error(body);
}

static bool same_type(const ir_type *a, const ir_type *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

void ir_loop_end(ir_graph *g, ir_loop *l, int64_t trips, const tv *next, tv *results) {
  for (int i = 0; i < l->n; i++) results[i] = IR_NONE;
  if (ir_error(g) || !l->body) return;
  ir_graph *body = l->body;
  if (trips < 0 || trips > INT32_MAX) {
    ir_fail(g, "IR loop: trip count %lld out of the s32 range", (long long)trips);
    return;
  }
  ir_output(body, ir_binary(body, IR_ADD, l->counter, ir_s32(body, 1)));
  for (int i = 0; i < l->n && !ir_error(body); i++) {
    if (next[i] < 0 || !same_type(ir_typeof(body, next[i]), &body->nodes[l->vals[i]].type)) {
      ir_fail(body, "next value %d is not of its carried value's type", i);
      break;
    }
    ir_output(body, next[i]);
  }
  if (ir_error(body)) {
    ir_fail(g, "IR loop body: %s", ir_error(body));
    return;
  }
  ir_node *n = &g->nodes[l->node];
  n->a = malloc(sizeof *n->a);
  if (!n->a) {
    ir_fail(g, "out of host memory");
    return;
  }
  n->a[0] = trips;
  n->na = 1;
  for (int i = 0; i < l->n; i++) {
    tv v = ir_node_add(g, N_GET, 0, body->nodes[l->vals[i]].type, &l->node, 1, NULL, 0);
    if (v == IR_NONE) return;
    g->nodes[v].i = 1 + i;
    results[i] = v;
  }
}
