/* emit_internal.h — the StableHLO printer's buffer and the helpers that
 * emit.c shares with the printers of nested regions (loop.c). */
#ifndef TPUC_EMIT_INTERNAL_H
#define TPUC_EMIT_INTERNAL_H

#include "order.h"

typedef struct {
  char *s;
  size_t len, cap;
  bool oom;
  const ir_order *ord; /* ordering dependencies (order.c), or NULL (always in a region) */
  tv cur;              /* the node whose operands are being printed, or -1 */
  char pfx[96];        /* value v prints as %<pfx><v>: "v" in the function, longer in regions */
} sb;

void emit_printf(sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void emit_type(sb *b, const ir_type *t);
/* The printed name of value v of graph g (the graph printed with b's prefix). */
void emit_name(sb *b, const ir_graph *g, tv v);
/* Every node of g (emit.c). */
void emit_nodes(sb *b, const ir_graph *g);
/* The stablehlo.while of N_WHILE node v (loop.c). */
void emit_while(sb *b, const ir_graph *g, tv v);

#endif
