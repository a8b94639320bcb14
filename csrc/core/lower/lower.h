/* lower.h — the contract between the op engine (exec/op_run.c) and the
 * lowerings: one lowering per ATen op, shared by every execution mode.
 *
 * The engine gives a lowering an IR graph in which every tensor argument is
 * already a value of exactly the tensor's sizes and dtype (views read out of
 * their storages), every runtime scalar is a rank-0 value, and the types the
 * outputs must have (from the caller's meta computation). The lowering adds
 * ops and sets cx->results[i] to a value of exactly cx->out_types[i] for each
 * output. It returns NULL, or a status: TPUC_ERR_UNIMPLEMENTED for argument
 * combinations it does not handle (the caller then falls back to the CPU). */
#ifndef TPUC_LOWER_H
#define TPUC_LOWER_H

#include "../ir/ir.h"
#include "tpuc.h"

/* Run-time checks: each is an s64[2] value {failed (0/1), the first
 * offending index} computed inside the program and returned as an extra
 * result; exec/checks.c turns a failure into PyTorch's error. Bounds checks
 * of index values are added only when checks are on (debug mode,
 * TPUC_CHECK_BOUNDS=1: tpuc_checks.bounds); the check of torch._assert_async
 * (lower/assert.c) always, as it is the op's whole effect. */
typedef enum {
  TPUC_CHECK_DIM_INDEX,   /* IndexError: index V is out of bounds for dimension D with size N */
  TPUC_CHECK_DIM_RUNTIME, /* RuntimeError: the same words (gather, scatter) */
  TPUC_CHECK_IN_SELF,     /* IndexError: index out of range in self (embedding, index_select, index_add) */
  TPUC_CHECK_FLAT,        /* IndexError: out of range: tried to access index V on a tensor of N elements */
  TPUC_CHECK_COPY,        /* IndexError: index_copy_(): index V is out of bounds for dimension D ... */
  TPUC_CHECK_TARGET,      /* IndexError: Target V is out of bounds. (nll_loss, cross_entropy) */
  TPUC_CHECK_ASSERT       /* RuntimeError: msg (torch._assert_async's condition was zero) */
} tpuc_check_kind;

typedef struct {
  tv value; /* s64[2] */
  tpuc_check_kind kind;
  int dim;
  int64_t size;
  const char *op; /* the op's name, set by the engine after the lowering */
  const char *msg; /* TPUC_CHECK_ASSERT: the message (NULL: the op had none); lives
                    * as long as the call (the check set copies it) */
} tpuc_check;

typedef struct {
  tpuc_check *v;
  int n, cap;
  bool oom;
  bool bounds; /* index bounds checks wanted (lx_check_index adds nothing otherwise) */
} tpuc_checks;

typedef struct {
  ir_graph *g;
  const tpuc_op_call *call;
  const tv *tensor_vals;   /* per call->tensors[i] */
  /* per call->args[i]: a rank-0 value (f64, s64, pred or c128 by scalar kind)
   * for TPUC_ARG_SCALAR, a u64[2] (seed, offset) value for TPUC_ARG_RNG, else
   * IR_NONE */
  const tv *scalar_vals;
  const ir_type *out_types; /* per output */
  tv *results;             /* per output, set by the lowering */
  int noutputs;
  tpuc_checks *checks;     /* where run-time checks go; NULL: none can be kept */
} tpuc_lower_ctx;

typedef tpuc_status *(*tpuc_lower_fn)(tpuc_lower_ctx *cx);

/* An entry of a family's table; tables end with {NULL, NULL}. */
typedef struct {
  const char *name; /* "aten::add.Tensor" (overload "" is written "aten::relu") */
  tpuc_lower_fn fn;
  /* Bit i: Scalar argument i is a compile-time constant when its value is a
   * small special one (tpuc_scalar_is_static): the lowering sees a splat it
   * can specialise on (x ** 2 -> x * x). Other values stay runtime values. */
  unsigned static_scalars;
} tpuc_lowering;

/* True when argument i of `c` is a Scalar baked into the program. */
bool tpuc_scalar_is_static(const tpuc_op_call *c, int i);

/* One table per family (lower/<family>.c). registry.c lists them. */
extern const tpuc_lowering tpuc_lowerings_elementwise[];
extern const tpuc_lowering tpuc_lowerings_reduce[];
extern const tpuc_lowering tpuc_lowerings_linalg[];
extern const tpuc_lowering tpuc_lowerings_shape[];
extern const tpuc_lowering tpuc_lowerings_index[];
extern const tpuc_lowering tpuc_lowerings_nn[];
extern const tpuc_lowering tpuc_lowerings_random[];
extern const tpuc_lowering tpuc_lowerings_copy[];
extern const tpuc_lowering tpuc_lowerings_sort[];

/* registry.c: the name and function behind a tpuc_op. */
const char *tpuc_op_name_of(const tpuc_op *op);
tpuc_lower_fn tpuc_op_lowering(const tpuc_op *op);
/* Whether op is of the elementwise family, all of whose ops are pointwise:
 * each output element depends only on the inputs' elements at its broadcast
 * position (exec/canon.c relies on it). */
bool tpuc_op_is_pointwise(const tpuc_op *op);

/* ---- argument access (lower/util.c) ---- */
const tpuc_arg *lx_arg(const tpuc_lower_ctx *cx, int i); /* NULL when i >= nargs */
bool lx_is_none(const tpuc_lower_ctx *cx, int i);         /* absent or NONE */
tv lx_tensor(const tpuc_lower_ctx *cx, int i);            /* TENSOR arg i */
int lx_tensors(const tpuc_lower_ctx *cx, int i, tv *out, int max); /* TENSORS arg i */
const tpuc_tensor *lx_tensor_desc(const tpuc_lower_ctx *cx, int i);
int64_t lx_int(const tpuc_lower_ctx *cx, int i, int64_t dflt);  /* INT/BOOL, dflt if absent */
int lx_ints(const tpuc_lower_ctx *cx, int i, const int64_t **v); /* INTS: count, -1 if absent */
bool lx_bool(const tpuc_lower_ctx *cx, int i, bool dflt);
/* SCALAR arg i as a rank-0 value of `dtype` (converted); IR_NONE if absent. */
tv lx_scalar(const tpuc_lower_ctx *cx, int i, tpuc_dtype dtype);

/* ---- building blocks (lower/util.c) ---- */
ir_type lx_out(const tpuc_lower_ctx *cx, int i);
ir_type ir_type_of(const ir_graph *g, tv v);
ir_type ir_with_dtype(ir_type t, tpuc_dtype d);
ir_type ir_scalar_type(tpuc_dtype d);
tv lx_convert(ir_graph *g, tv x, tpuc_dtype d);            /* no-op when equal */
/* Numpy-style broadcast of x to type t's shape (x's dtype kept). */
tv lx_broadcast_to(ir_graph *g, tv x, int ndim, const int64_t *dims);
/* Convert to t.dtype and broadcast to t's shape. */
/* x in dtype `to` as PyTorch's CPU converts (float -> uint8/int8/int16
 * wraps as its x86-64 build does, util.c); lx_coerce also broadcasts. */
tv lx_convert_cpu(ir_graph *g, tv x, tpuc_dtype to);
tv lx_coerce(ir_graph *g, tv x, ir_type t);
tv lx_splat_like(ir_graph *g, tv like, double value);
/* Normalises a possibly negative dim for rank `ndim`. */
int64_t lx_dim(int64_t dim, int ndim);
/* The dtype used to compute in: f32 for f16/bf16 (PyTorch's CPU upcasts
 * reductions and many unary ops), else the dtype itself. */
tpuc_dtype lx_compute_dtype(tpuc_dtype d);

/* lower/bounds.c: adds a check that every element of the integer index
 * `idx` lies in [-size, size) (allow_negative) or [0, size), reported as
 * `kind` naming dimension `dim`. A no-op when checks are off. */
void lx_check_index(tpuc_lower_ctx *cx, tv idx, int64_t size, bool allow_negative,
                    tpuc_check_kind kind, int dim);
/* The same for a loss's class targets: every element of `target` lies in
 * [0, classes) or equals `ignore` (ignore_index), reported as
 * TPUC_CHECK_TARGET. A no-op when checks are off. */
void lx_check_target(tpuc_lower_ctx *cx, tv target, int64_t classes, int64_t ignore);
/* lower/bounds.c: adds the check {failed, value} (s64 scalar values; value
 * IR_NONE: 0), whatever checks.bounds says; false when out of memory or the
 * context keeps no checks. */
bool lx_add_check(tpuc_lower_ctx *cx, tv failed, tv value, tpuc_check_kind kind, int dim,
                  int64_t size, const char *msg);

tpuc_status *lx_unimplemented(const tpuc_lower_ctx *cx, const char *why);

#endif /* TPUC_LOWER_H */
