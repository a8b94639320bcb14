/* view.h — strided views as IR (view.c). */
#ifndef TPUC_VIEW_H
#define TPUC_VIEW_H

#include "../ir/ir.h"
#include "../runtime/internal.h"

int64_t tpuc_view_numel(const tpuc_tensor *t);
bool tpuc_view_is_contiguous(const tpuc_tensor *t);
/* offset 0, contiguous, and exactly the storage's bytes */
bool tpuc_view_covers_storage(const tpuc_tensor *t, size_t storage_nbytes);
/* The elements of view `t` of the storage whose buffer value is `base`. */
tpuc_status *tpuc_view_read(ir_graph *g, tv base, const tpuc_tensor *t, tv *out);
/* The new buffer value after writing `value` (t's sizes and dtype) into the
 * view `t` of the buffer value `base`; same type as base. */
tpuc_status *tpuc_view_write(ir_graph *g, tv base, const tpuc_tensor *t, tv value, tv *out);

/* An op that reads a contiguous view and writes the same view (an in-place op
 * on a slice of a bigger storage: x[a:b].mul_(2), FSDP's gradients, which are
 * views into one flat buffer) should read it with a dynamic_slice and write it
 * with a dynamic_update_slice at the same start, a value XLA cannot fold to a
 * constant: XLA then updates the buffer in place, touching the view's
 * elements only. With a constant start XLA turns the read into a static
 * slice, and a fusion that reads its parameter through a slice and updates it
 * is emitted as a loop over the whole buffer (every element copied: the cost
 * of the storage, not of the view). tpuc_view_opaque_start gives that start
 * (the offset, selected by a predicate on the replica id that is never true);
 * the _at variants take it (IR_NONE: as tpuc_view_read / tpuc_view_write). */
bool tpuc_view_same_region(const tpuc_tensor *a, const tpuc_tensor *b);
tv tpuc_view_opaque_start(ir_graph *g, int64_t offset);
tpuc_status *tpuc_view_read_at(ir_graph *g, tv base, const tpuc_tensor *t, tv at, tv *out);
tpuc_status *tpuc_view_write_at(ir_graph *g, tv base, const tpuc_tensor *t, tv value, tv at,
                                tv *out);

static inline ir_type ir_with_dtype_(ir_type t, tpuc_dtype d) {
  t.dtype = d;
  return t;
}

#endif
