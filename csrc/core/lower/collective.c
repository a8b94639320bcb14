/* collective.c — the collective lowering family: all_reduce (sum, avg,
 * product, min, max), all_gather, reduce_scatter, all_to_all,
 * collective_permute (send/recv) and broadcast, as StableHLO collectives over
 * the replicas of one program, for every dtype the device has.
 *
 * Replica r is participant r; groups are consecutive runs of group_size
 * participants (replica_groups [[0..k-1], [k..2k-1], ...]). Broadcast is an
 * all_reduce of the root's value with zeros elsewhere, on the value's bits
 * (unsigned integers of the same width, so every float bit pattern, -0.0 and
 * NaN payloads included, arrives unchanged). */
#include <stdlib.h>

#include "../base/base.h"
#include "collective.h"

int tpuc_collective_group_size(const tpuc_collective_desc *d) {
  return d->group_size > 0 ? d->group_size : d->ndevices;
}

static tpuc_status *bad(const char *fmt, const char *what, int a, int b) {
  return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, fmt, what, a, b);
}

/* The IR reducer of op on dtype t (AVG reduces with SUM). */
static tpuc_status *reducer_of(tpuc_reduce_op op, tpuc_dtype t, ir_reducer *r) {
  bool pred = t == TPUC_PRED, cplx = ir_is_complex(t);
  switch (op) {
    case TPUC_REDUCE_SUM: *r = pred ? IR_RED_OR : IR_RED_SUM; return NULL;
    case TPUC_REDUCE_AVG:
      if (pred)
        return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                                "AVG of bool tensors is undefined; use SUM (or) or MIN (and)");
      *r = IR_RED_SUM;
      return NULL;
    case TPUC_REDUCE_PRODUCT: *r = pred ? IR_RED_AND : IR_RED_PROD; return NULL;
    case TPUC_REDUCE_MIN:
    case TPUC_REDUCE_MAX:
      if (cplx)
        return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                                "%s of complex tensors is undefined (complex numbers are not "
                                "ordered)", op == TPUC_REDUCE_MIN ? "MIN" : "MAX");
      if (pred) *r = op == TPUC_REDUCE_MIN ? IR_RED_AND : IR_RED_OR;
      else *r = op == TPUC_REDUCE_MIN ? IR_RED_MIN : IR_RED_MAX;
      return NULL;
  }
  return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "unknown reduction %d", (int)op);
}

static tv divide_by(ir_graph *g, tv x, int n) {
  ir_type t = *ir_typeof(g, x);
  tv k = ir_is_int(t.dtype) ? ir_splat_i64(g, t, n) : ir_splat(g, t, (double)n);
  return ir_binary(g, IR_DIV, x, k);
}

/* The unsigned integer type of the same width as a real dtype. */
static tpuc_dtype bits_dtype(tpuc_dtype t) {
  switch (tpuc_dtype_size(t)) {
    case 1: return TPUC_U8;
    case 2: return TPUC_U16;
    case 4: return TPUC_U32;
    default: return TPUC_U64;
  }
}

/* x where this replica's group rank is `root`, zeros (false) elsewhere,
 * summed (or-ed) over the group: exact for every dtype. */
static tv broadcast_real(ir_graph *g, tv x, tv is_root, const ir_replica_groups *rg) {
  ir_type t = *ir_typeof(g, x);
  ir_type pt = t;
  pt.dtype = TPUC_PRED;
  int64_t none[1] = {0};
  tv mask = ir_broadcast_in_dim(g, is_root, pt, none);
  if (t.dtype == TPUC_PRED) {
    tv masked = ir_select(g, mask, x, ir_splat(g, t, 0));
    return ir_all_reduce(g, masked, IR_RED_OR, rg);
  }
  ir_type bt = t;
  bt.dtype = bits_dtype(t.dtype);
  tv bits = ir_bitcast(g, x, bt);
  tv masked = ir_select(g, mask, bits, ir_splat_i64(g, bt, 0));
  tv summed = ir_all_reduce(g, masked, IR_RED_SUM, rg);
  return ir_bitcast(g, summed, t);
}

static tv lower_broadcast(ir_graph *g, tv x, int root, int gs, const ir_replica_groups *rg) {
  ir_type s = ir_make_type(TPUC_U32, 0, NULL);
  tv rank = ir_binary(g, IR_REM, ir_replica_id(g), ir_splat_i64(g, s, gs));
  tv is_root = ir_compare(g, IR_EQ, rank, ir_splat_i64(g, s, root));
  tpuc_dtype d = ir_typeof(g, x)->dtype;
  if (!ir_is_complex(d)) return broadcast_real(g, x, is_root, rg);
  tv re = broadcast_real(g, ir_unary(g, IR_REAL, x), is_root, rg);
  tv im = broadcast_real(g, ir_unary(g, IR_IMAG, x), is_root, rg);
  return ir_binary(g, IR_COMPLEX, re, im);
}

tpuc_status *tpuc_lower_collective(ir_graph *g, const tpuc_collective_desc *d, tv x, tv *out) {
  *out = IR_NONE;
  int n = d->ndevices, gs = tpuc_collective_group_size(d);
  if (n < 1) return bad("%s: %d participants (%d)", "collective", n, 0);
  if (gs < 1 || n % gs)
    return bad("%s: %d participants do not form groups of %d", "collective", n, gs);
  const ir_type *xt = ir_typeof(g, x);
  int64_t *ids = malloc((size_t)n * sizeof *ids);
  if (!ids) return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
  for (int i = 0; i < n; i++) ids[i] = i;
  ir_replica_groups rg = {ids, n / gs, gs, 0};
  tpuc_status *s = NULL;
  ir_reducer r = IR_RED_SUM;
  switch (d->kind) {
    case TPUC_COLL_ALL_REDUCE:
      s = reducer_of(d->op, xt->dtype, &r);
      if (s) break;
      *out = ir_all_reduce(g, x, r, &rg);
      if (d->op == TPUC_REDUCE_AVG) *out = divide_by(g, *out, gs);
      break;
    case TPUC_COLL_REDUCE_SCATTER:
      if (d->dim < 0 || d->dim >= xt->ndim) {
        s = bad("%s: dim %d is out of range for rank %d", "reduce_scatter", d->dim, xt->ndim);
        break;
      }
      if (xt->dims[d->dim] % gs) {
        s = bad("%s: size %d of the scattered dim does not divide by the group size %d",
                "reduce_scatter", (int)xt->dims[d->dim], gs);
        break;
      }
      s = reducer_of(d->op, xt->dtype, &r);
      if (s) break;
      *out = ir_reduce_scatter(g, x, d->dim, r, &rg);
      if (d->op == TPUC_REDUCE_AVG) *out = divide_by(g, *out, gs);
      break;
    case TPUC_COLL_ALL_GATHER:
      if (d->dim < 0 || d->dim >= xt->ndim) {
        s = bad("%s: dim %d is out of range for rank %d", "all_gather", d->dim, xt->ndim);
        break;
      }
      *out = ir_all_gather(g, x, d->dim, &rg);
      break;
    case TPUC_COLL_ALL_TO_ALL:
      if (d->dim < 0 || d->dim >= xt->ndim || d->concat_dim < 0 || d->concat_dim >= xt->ndim) {
        s = bad("%s: dims %d / %d are out of range", "all_to_all", d->dim, d->concat_dim);
        break;
      }
      if (xt->dims[d->dim] % gs) {
        s = bad("%s: size %d of the split dim does not divide by the group size %d",
                "all_to_all", (int)xt->dims[d->dim], gs);
        break;
      }
      *out = ir_all_to_all(g, x, d->dim, d->concat_dim, &rg);
      break;
    case TPUC_COLL_PERMUTE: {
      if (d->npairs < 1 || !d->pairs) {
        s = bad("%s: no (source, target) pairs (%d, %d)", "permute", d->npairs, 0);
        break;
      }
      int np = d->npairs * (n / gs);
      int64_t *pairs = malloc((size_t)(2 * np) * sizeof *pairs);
      if (!pairs) {
        s = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "out of host memory");
        break;
      }
      for (int k = 0; k < d->npairs && !s; k++) {
        int src = d->pairs[2 * k], dst = d->pairs[2 * k + 1];
        if (src < 0 || src >= gs || dst < 0 || dst >= gs)
          s = bad("%s: pair (%d, %d) names a rank outside the group", "permute", src, dst);
        for (int j = 0; j < k && !s; j++)
          if (d->pairs[2 * j] == src || d->pairs[2 * j + 1] == dst)
            s = bad("%s: rank %d sends or rank %d receives twice", "permute", src, dst);
      }
      for (int grp = 0, k = 0; grp < n / gs && !s; grp++)
        for (int p = 0; p < d->npairs; p++, k++) {
          pairs[2 * k] = grp * gs + d->pairs[2 * p];
          pairs[2 * k + 1] = grp * gs + d->pairs[2 * p + 1];
        }
      if (!s) *out = ir_collective_permute(g, x, pairs, np, 0);
      free(pairs);
      break;
    }
    case TPUC_COLL_BROADCAST:
      if (d->root < 0 || d->root >= gs) {
        s = bad("%s: root %d is outside the group of %d", "broadcast", d->root, gs);
        break;
      }
      *out = lower_broadcast(g, x, d->root, gs, &rg);
      break;
    default:
      s = bad("%s: unknown collective kind %d (%d)", "collective", (int)d->kind, 0);
  }
  free(ids);
  if (!s && ir_error(g))
    s = tpuc_status_make(TPUC_ERR_INTERNAL, "building a collective: %s", ir_error(g));
  return s;
}
