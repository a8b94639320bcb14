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

static inline ir_type ir_with_dtype_(ir_type t, tpuc_dtype d) {
  t.dtype = d;
  return t;
}

#endif
