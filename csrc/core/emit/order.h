/* order.h — data dependencies that order a donated parameter's reads
 * before its in-place update (order.c), used by the StableHLO printer. */
#ifndef TPUC_EMIT_ORDER_H
#define TPUC_EMIT_ORDER_H

#include "../ir/ir_internal.h"

typedef struct {
  int nbar;
  int *pos;  /* dependency k is emitted right after node pos[k] */
  tv *via;   /* the value its gated nodes read as %ok (same value, after the tokens) */
  int *nops; /* its tokens ops[k][0 .. nops[k]) */
  tv **ops;
  int *gate; /* per node: the dependency whose %ok it reads for via[k], or -1; a gated
              * node at or before pos[k] is emitted right after dependency k */
} ir_order;

/* Plans the dependencies of graph g (none when no parameter is aliased,
 * then gate is NULL). false: out of host memory (o left empty). */
bool ir_order_plan(const ir_graph *g, ir_order *o);
void ir_order_free(ir_order *o);
/* The StableHLO text of dependency k, defining %o<k> (malloc'd; NULL: out
 * of host memory). */
char *ir_order_text(const ir_graph *g, const ir_order *o, int k);

#endif
