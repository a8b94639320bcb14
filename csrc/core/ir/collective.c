/* collective.c — IR builders for the collective primitives (all_reduce,
 * all_gather, reduce_scatter, all_to_all, collective_permute, replica_id):
 * type inference and checks. A node's attributes are laid out as
 *   [ngroups, group_size, channel, dim_a, dim_b, groups...]   (group ops)
 *   [npairs, channel, pairs...]                                (permute)
 * and emit/emit.c prints them as StableHLO. */
#include <stdlib.h>
#include <string.h>

#include "ir_internal.h"

#define GROUP_HEADER 5

static bool valid_groups(ir_graph *g, const ir_replica_groups *rg, const char *what) {
  if (!rg || rg->ngroups < 1 || rg->group_size < 1 || !rg->groups) {
    ir_fail(g, "IR %s: empty replica groups", what);
    return false;
  }
  for (int i = 0; i < rg->ngroups * rg->group_size; i++)
    if (rg->groups[i] < 0) {
      ir_fail(g, "IR %s: negative replica id", what);
      return false;
    }
  return true;
}

static tv group_node(ir_graph *g, int kind, int sub, ir_type t, tv x, const ir_replica_groups *rg,
                     int64_t dim_a, int64_t dim_b) {
  int n = rg->ngroups * rg->group_size;
  int64_t *a = malloc((size_t)(GROUP_HEADER + n) * sizeof *a);
  if (!a) {
    ir_fail(g, "out of host memory");
    return IR_NONE;
  }
  a[0] = rg->ngroups;
  a[1] = rg->group_size;
  a[2] = rg->channel;
  a[3] = dim_a;
  a[4] = dim_b;
  memcpy(a + GROUP_HEADER, rg->groups, (size_t)n * sizeof *a);
  tv v = ir_node_add(g, kind, sub, t, &x, 1, a, GROUP_HEADER + n);
  free(a);
  return v;
}

static bool operand(ir_graph *g, tv x, ir_type *t) {
  if (ir_error(g) || x < 0) return false;
  *t = *ir_typeof(g, x);
  return true;
}

tv ir_all_reduce(ir_graph *g, tv x, ir_reducer r, const ir_replica_groups *rg) {
  ir_type t;
  if (!operand(g, x, &t) || !valid_groups(g, rg, "all_reduce")) return IR_NONE;
  return group_node(g, N_ALL_REDUCE, r, t, x, rg, 0, 0);
}

static bool check_dim(ir_graph *g, const ir_type *t, int dim, const char *what) {
  if (dim < 0 || dim >= t->ndim) {
    ir_fail(g, "IR %s: dimension %d out of range for rank %d", what, dim, t->ndim);
    return false;
  }
  return true;
}

tv ir_all_gather(ir_graph *g, tv x, int dim, const ir_replica_groups *rg) {
  ir_type t;
  if (!operand(g, x, &t) || !valid_groups(g, rg, "all_gather") ||
      !check_dim(g, &t, dim, "all_gather"))
    return IR_NONE;
  t.dims[dim] *= rg->group_size;
  return group_node(g, N_ALL_GATHER, 0, t, x, rg, dim, 0);
}

tv ir_reduce_scatter(ir_graph *g, tv x, int dim, ir_reducer r, const ir_replica_groups *rg) {
  ir_type t;
  if (!operand(g, x, &t) || !valid_groups(g, rg, "reduce_scatter") ||
      !check_dim(g, &t, dim, "reduce_scatter"))
    return IR_NONE;
  if (t.dims[dim] % rg->group_size) {
    ir_fail(g, "IR reduce_scatter: size %lld of dimension %d does not divide by %d",
            (long long)t.dims[dim], dim, rg->group_size);
    return IR_NONE;
  }
  t.dims[dim] /= rg->group_size;
  return group_node(g, N_REDUCE_SCATTER, r, t, x, rg, dim, 0);
}

tv ir_all_to_all(ir_graph *g, tv x, int split_dim, int concat_dim, const ir_replica_groups *rg) {
  ir_type t;
  if (!operand(g, x, &t) || !valid_groups(g, rg, "all_to_all") ||
      !check_dim(g, &t, split_dim, "all_to_all") || !check_dim(g, &t, concat_dim, "all_to_all"))
    return IR_NONE;
  if (t.dims[split_dim] % rg->group_size) {
    ir_fail(g, "IR all_to_all: size %lld of dimension %d does not divide by %d",
            (long long)t.dims[split_dim], split_dim, rg->group_size);
    return IR_NONE;
  }
  t.dims[split_dim] /= rg->group_size;
  t.dims[concat_dim] *= rg->group_size;
  return group_node(g, N_ALL_TO_ALL, 0, t, x, rg, split_dim, concat_dim);
}

tv ir_collective_permute(ir_graph *g, tv x, const int64_t *pairs, int npairs, int64_t channel) {
  ir_type t;
  if (!operand(g, x, &t)) return IR_NONE;
  if (npairs < 1 || !pairs) {
    ir_fail(g, "IR collective_permute: no (source, target) pairs");
    return IR_NONE;
  }
  for (int i = 0; i < npairs; i++)
    for (int j = 0; j < i; j++)
      if (pairs[2 * i] == pairs[2 * j] || pairs[2 * i + 1] == pairs[2 * j + 1]) {
        ir_fail(g, "IR collective_permute: a source or target appears twice");
        return IR_NONE;
      }
  int64_t *a = malloc((size_t)(2 + 2 * npairs) * sizeof *a);
  if (!a) {
    ir_fail(g, "out of host memory");
    return IR_NONE;
  }
  a[0] = npairs;
  a[1] = channel;
  memcpy(a + 2, pairs, (size_t)(2 * npairs) * sizeof *a);
  tv v = ir_node_add(g, N_PERMUTE, 0, t, &x, 1, a, 2 + 2 * npairs);
  free(a);
  return v;
}

tv ir_replica_id(ir_graph *g) {
  return ir_node_add(g, N_REPLICA_ID, 0, ir_make_type(TPUC_U32, 0, NULL), NULL, 0, NULL, 0);
}
