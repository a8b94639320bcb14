/* ir_internal.h — the node representation shared by ir.c (builders) and
 * emit/emit.c (StableHLO printer). */
#ifndef TPUC_IR_INTERNAL_H
#define TPUC_IR_INTERNAL_H

#include "ir.h"

typedef enum {
  N_PARAM, N_SPLAT, N_SPLAT_I64, N_CONST_I64S, N_IOTA, N_UNARY, N_BINARY, N_COMPARE, N_SELECT,
  N_CLAMP, N_CONVERT, N_BITCAST, N_RESHAPE, N_TRANSPOSE, N_BROADCAST, N_SLICE, N_CONCAT, N_PAD,
  N_REVERSE, N_DSLICE, N_DUS, N_REDUCE, N_ARGREDUCE, N_REDUCE_WINDOW, N_DOT, N_CONV, N_GATHER,
  N_SCATTER, N_SORT, N_RNG, N_GET, N_BARRIER, N_FFT, N_CHOLESKY, N_TRIANGULAR_SOLVE,
  /* collectives (ir_collective.c) */
  N_ALL_REDUCE, N_ALL_GATHER, N_REDUCE_SCATTER, N_ALL_TO_ALL, N_PERMUTE, N_REPLICA_ID,
  /* counted loops (ir/loop.c): extra is the body graph, a[0] the trip count */
  N_WHILE
} ir_kind;

typedef struct {
  ir_kind kind;
  int sub;          /* unary/binary op, comparison, reducer, flags */
  ir_type type;     /* the result type (of result 0 for multi-result nodes) */
  tv *ops;          /* operands */
  int nops;
  int64_t *a;       /* integer attributes, kind-specific layout */
  int na;
  double f;         /* N_SPLAT value */
  int64_t i;        /* N_SPLAT_I64 value, N_IOTA dim, N_GET index, N_PARAM number */
  int nresults;     /* > 1 for multi-result nodes; their N_GET values follow */
  ir_type rtype2;   /* type of result 1 (argreduce indices, sort indices, rng bits) */
  void *extra;      /* gather/scatter dimension numbers; N_WHILE: the body ir_graph */
} ir_node;

struct ir_graph {
  ir_node *nodes;
  int n, cap;
  tv *outputs;
  int nout, outcap;
  int nparams;
  bool xla_cpu; /* lowered for XLA's CPU compiler (ir_graph_set_xla_cpu) */
  bool guard_dot_rhs; /* ir_graph_set_guard_dot_rhs */
  int64_t sum_block;  /* ir_graph_set_sum_block */
  char *error;
};

/* ir.c: appends a node (operands and attributes copied); IR_NONE on error. */
tv ir_node_add(ir_graph *g, int kind, int sub, ir_type type, const tv *ops, int nops,
               const int64_t *a, int na);

#endif
