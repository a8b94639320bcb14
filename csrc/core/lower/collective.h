/* collective.h — the collective lowering family (collective.c): the IR of
 * one collective over replicas, shared by tpuc_collective (exec/collective.c)
 * and any graph that contains collectives. */
#ifndef TPUC_LOWER_COLLECTIVE_H
#define TPUC_LOWER_COLLECTIVE_H

#include "../ir/ir.h"

/* Builds the collective `d` (whose devices/dtype/dims are only read for
 * ndevices and group_size) applied to x, replica r being participant r.
 * Returns a status naming what is invalid (INVALID_ARGUMENT) or not
 * supported (UNIMPLEMENTED); *out is the result value. */
tpuc_status *tpuc_lower_collective(ir_graph *g, const tpuc_collective_desc *d, tv x, tv *out);

/* The group size `d` implies (ndevices when d->group_size is 0). */
int tpuc_collective_group_size(const tpuc_collective_desc *d);

#endif
