/* loop.c — printing a counted loop (N_WHILE, ir/loop.c) as stablehlo.while:
 *
 *   %v7:3 = "stablehlo.while"(%v5, %v1, %v2) ({
 *   ^bb0(%v7_c0: tensor<i32>, %v7_c1: ..., %v7_c2: ...):   cond: counter < trips
 *     ...
 *   }, {
 *   ^bb0(%v7_0: tensor<i32>, %v7_1: ..., %v7_2: ...):      the body graph's nodes
 *     ...
 *     "stablehlo.return"(...)
 *   }) : (...) -> (...)
 *
 * The body graph is printed by emit.c's own node printer with the prefix
 * extended by "<v>_" (body value w of loop node v in the function prints as
 * %v<v>_<w>; loops nest), so its names never meet the enclosing scope's:
 * MLIR lets a region see the names around it, and the body reads none. */
#include <stdio.h>
#include <string.h>

#include "emit_internal.h"

/* The types of the loop's results (= the body's parameters), comma-separated. */
static void put_types(sb *b, const ir_graph *body, int n) {
  for (int i = 0; i < n; i++) {
    if (i) emit_printf(b, ", ");
    emit_type(b, ir_typeof(body, (tv)i));
  }
}

void emit_while(sb *b, const ir_graph *g, tv v) {
  const ir_node *n = &g->nodes[v];
  const ir_graph *body = n->extra;
  int nv = n->nops; /* counter + carried values = the body's parameters 0 .. nv-1 */
  const char *p = b->pfx;
  emit_printf(b, "    %%%s%d:%d = \"stablehlo.while\"(", p, v, nv);
  for (int i = 0; i < nv; i++) {
    if (i) emit_printf(b, ", ");
    emit_name(b, g, n->ops[i]);
  }
  emit_printf(b, ") ({\n    ^bb0(");
  for (int i = 0; i < nv; i++) {
    emit_printf(b, "%s%%%s%d_c%d: ", i ? ", " : "", p, v, i);
    emit_type(b, ir_typeof(body, (tv)i));
  }
  emit_printf(b, "):\n"
               "      %%%s%d_cn = \"stablehlo.constant\"() {value = dense<%lld> : tensor<i32>} : () "
               "-> tensor<i32>\n"
               "      %%%s%d_cl = \"stablehlo.compare\"(%%%s%d_c0, %%%s%d_cn) {comparison_direction = "
               "#stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type "
               "SIGNED>} : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
               "      \"stablehlo.return\"(%%%s%d_cl) : (tensor<i1>) -> ()\n    }, {\n    ^bb0(",
            p, v, (long long)n->a[0], p, v, p, v, p, v, p, v);
  /* the body, its names one level deeper */
  sb inner = *b;
  inner.ord = NULL;
  inner.cur = -1;
  int w = snprintf(inner.pfx, sizeof inner.pfx, "%s%d_", p, v);
  if (w < 0 || (size_t)w >= sizeof inner.pfx) { /* nested beyond any real use */
    b->oom = true;
    return;
  }
  for (int i = 0; i < nv; i++) {
    if (i) emit_printf(&inner, ", ");
    emit_name(&inner, body, (tv)i);
    emit_printf(&inner, ": ");
    emit_type(&inner, ir_typeof(body, (tv)i));
  }
  emit_printf(&inner, "):\n");
  emit_nodes(&inner, body);
  emit_printf(&inner, "      \"stablehlo.return\"(");
  for (int i = 0; i < ir_num_outputs(body); i++) {
    if (i) emit_printf(&inner, ", ");
    emit_name(&inner, body, body->outputs[i]);
  }
  emit_printf(&inner, ") : (");
  put_types(&inner, body, nv);
  emit_printf(&inner, ") -> ()\n    }) : (");
  put_types(&inner, body, nv);
  emit_printf(&inner, ") -> (");
  put_types(&inner, body, nv);
  emit_printf(&inner, ")\n");
  /* the buffer moved on in the copy; keep the caller's prefix and order */
  b->s = inner.s, b->len = inner.len, b->cap = inner.cap, b->oom = inner.oom;
}
