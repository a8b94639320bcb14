/* ir.h — the core's graph IR: one function of SSA values, each value a
 * tensor type (dtype + static shape), each op a StableHLO-level primitive.
 *
 * The one control-flow construct is the counted loop (ir_loop_begin/_end,
 * ir/loop.c), whose body is a graph of its own.
 *
 * Lowerings build graphs with these calls; emit.c prints a graph as
 * StableHLO text. Builders never fail loudly: a type error (a bug in a
 * lowering) or an allocation failure records a message in the graph, later
 * calls return IR_NONE, and ir_error() reports the first message. Operands of
 * elementwise ops must already have identical types (lowerings broadcast and
 * convert first; see lower/util.h). */
#ifndef TPUC_IR_H
#define TPUC_IR_H

#include <stdbool.h>
#include <stdint.h>

#include "tpuc.h"

typedef int32_t tv; /* a value id; IR_NONE is no value */
#define IR_NONE ((tv)-1)

typedef struct {
  tpuc_dtype dtype;
  int ndim;
  int64_t dims[TPUC_MAX_DIMS];
} ir_type;

typedef struct ir_graph ir_graph;

ir_graph *ir_graph_create(void);
void ir_graph_destroy(ir_graph *g);
/* Whether the graph is lowered for XLA's CPU compiler (the "cpu" PJRT plugin):
 * a lowering may then pick a form that compiler runs faster (linalg.c's mm).
 * A runtime has one platform, so its programs' signatures need not say it. */
void ir_graph_set_xla_cpu(ir_graph *g, bool on);
bool ir_graph_xla_cpu(const ir_graph *g);
/* Largest count of elements a float sum adds in one pass (lower/reduce.c's
 * blocked sums: longer sums add blocks of it, then the blocks' sums); 0: one
 * pass, whatever the count (TPUC_SUM_BLOCK). */
void ir_graph_set_sum_block(ir_graph *g, int64_t n);
int64_t ir_graph_sum_block(const ir_graph *g);
/* With `on`, every floating-point dot_general's right operand passes through an
 * identity XLA cannot see through (a select on replica_id), so that it is never a
 * bare parameter of the program. XLA's CPU runtime, when it runs a dot through
 * XNNPACK, packs a parameter right operand once and reuses the packing while the
 * parameter's address is unchanged; tpuc rewrites buffers in place (donation) and
 * reuses freed memory, so the same address holds new values (issue 29). Set by
 * plan.c when XNNPACK may be on (XLA_FLAGS does not turn it off). */
void ir_graph_set_guard_dot_rhs(ir_graph *g, bool on);
/* b through an identity XLA cannot see through: select(replica_id == UINT32_MAX, 0, b).
 * The result is a new value (a new buffer) that always equals b. */
tv ir_opaque_identity(ir_graph *g, tv b);
/* Whether v is computed from `on` elementwise-fusably: transitively, not counting paths
 * through the nodes in stop[0..nstop) nor through reductions, dots, convolutions, sorts
 * and collectives (XLA computes those into buffers of their own before a consumer). */
bool ir_depends_on(const ir_graph *g, tv v, tv on, const tv *stop, int nstop);
/* The value v is a reshape, bitcast, convert or transpose of (followed to the end). */
tv ir_source(const ir_graph *g, tv v);
/* The first error recorded, or NULL. */
const char *ir_error(const ir_graph *g);
void ir_fail(ir_graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

const ir_type *ir_typeof(const ir_graph *g, tv v);
ir_type ir_make_type(tpuc_dtype dtype, int ndim, const int64_t *dims);
int64_t ir_numel(const ir_type *t);
bool ir_is_float(tpuc_dtype t);   /* f16 bf16 f32 f64 */
bool ir_is_complex(tpuc_dtype t); /* c64 c128 */
bool ir_is_int(tpuc_dtype t);     /* signed or unsigned integers, not pred */
bool ir_is_unsigned(tpuc_dtype t);

/* ---- leaves ---- */
tv ir_param(ir_graph *g, ir_type t); /* parameters are numbered in creation order */
/* True (and its value in *out) when v is a splat constant. */
bool ir_splat_value(const ir_graph *g, tv v, double *out);
/* x, unchanged, behind a stablehlo.optimization_barrier: XLA's algebraic
 * simplifier does not rewrite across it (the CPU compiler removes barriers
 * later, before fusion and copy insertion, so it orders nothing at run time). */
tv ir_barrier(ir_graph *g, tv x);
/* True (and the transposed value in *src) when v is the transpose of a rank-2 value. */
bool ir_transposed_2d(const ir_graph *g, tv v, tv *src);
/* A constant of type t with every element `value` (converted to t.dtype;
 * pred: value != 0). */
tv ir_splat(ir_graph *g, ir_type t, double value);
tv ir_splat_i64(ir_graph *g, ir_type t, int64_t value); /* exact for 64-bit ints */
/* A rank-1 i64 constant. */
tv ir_const_i64s(ir_graph *g, const int64_t *v, int n);
/* Values 0, 1, ... along `dim` of type t. */
tv ir_iota(ir_graph *g, ir_type t, int dim);

/* ---- elementwise (operands of identical type) ---- */
typedef enum {
  IR_ABS, IR_NEG, IR_EXP, IR_EXPM1, IR_LOG, IR_LOG1P, IR_SQRT, IR_RSQRT, IR_CBRT, IR_TANH,
  IR_LOGISTIC, IR_SIN, IR_COS, IR_TAN, IR_FLOOR, IR_CEIL, IR_ROUND_EVEN, IR_ROUND_AFZ, IR_SIGN,
  IR_NOT, IR_IS_FINITE, IR_REAL, IR_IMAG, IR_POPCNT,
  /* chlo ops (decomposed by the plugin) */
  IR_ERF, IR_ERFC, IR_ERF_INV, IR_LGAMMA, IR_DIGAMMA, IR_ASIN, IR_ACOS, IR_ATAN, IR_SINH, IR_COSH,
  IR_ASINH, IR_ACOSH, IR_ATANH, IR_UNARY_COUNT
} ir_unary_op;

typedef enum {
  IR_ADD, IR_SUB, IR_MUL, IR_DIV, IR_REM, IR_POW, IR_MAX, IR_MIN, IR_ATAN2, IR_AND, IR_OR,
  IR_XOR, IR_SHL, IR_SHR_ARITH, IR_SHR_LOGICAL, IR_COMPLEX,
  IR_POLYGAMMA, /* chlo.polygamma(n, x), n a float of x's type */
  IR_ZETA,      /* chlo.zeta(s, q): Hurwitz zeta, sum_k (q + k)^-s */
  IR_BINARY_COUNT
} ir_binary_op;

typedef enum { IR_EQ, IR_NE, IR_LT, IR_LE, IR_GT, IR_GE } ir_cmp;

/* IR_IS_FINITE returns pred; IR_REAL / IR_IMAG return the component type;
 * IR_COMPLEX builds a complex value from two float values. */
tv ir_unary(ir_graph *g, ir_unary_op op, tv x);
tv ir_binary(ir_graph *g, ir_binary_op op, tv a, tv b);
tv ir_compare(ir_graph *g, ir_cmp dir, tv a, tv b); /* -> pred of the same shape */
tv ir_select(ir_graph *g, tv pred, tv on_true, tv on_false);
tv ir_clamp(ir_graph *g, tv lo, tv x, tv hi); /* lo/hi: same type as x, or rank 0 */

/* ---- types and shapes ---- */
tv ir_convert(ir_graph *g, tv x, tpuc_dtype to);
tv ir_bitcast(ir_graph *g, tv x, ir_type to); /* same element size: same shape */
tv ir_reshape(ir_graph *g, tv x, int ndim, const int64_t *dims);
tv ir_transpose(ir_graph *g, tv x, const int64_t *perm);
/* Result type `t`; operand dim i maps to result dim bdims[i]. */
tv ir_broadcast_in_dim(ir_graph *g, tv x, ir_type t, const int64_t *bdims);
tv ir_slice(ir_graph *g, tv x, const int64_t *start, const int64_t *limit, const int64_t *stride);
tv ir_concat(ir_graph *g, const tv *xs, int n, int dim);
tv ir_pad(ir_graph *g, tv x, tv pad_value, const int64_t *lo, const int64_t *hi,
          const int64_t *interior); /* pad_value: rank 0 */
tv ir_reverse(ir_graph *g, tv x, const int64_t *dims, int ndims);
/* starts: rank-0 integer values, one per dim. */
tv ir_dynamic_slice(ir_graph *g, tv x, const tv *starts, const int64_t *sizes);
tv ir_dynamic_update_slice(ir_graph *g, tv x, tv update, const tv *starts);

/* ---- reductions ---- */
typedef enum { IR_RED_SUM, IR_RED_PROD, IR_RED_MAX, IR_RED_MIN, IR_RED_AND, IR_RED_OR, IR_RED_XOR } ir_reducer;

/* Reduces `dims` of x with `init` (rank 0, x's dtype); the dims disappear. */
tv ir_reduce(ir_graph *g, tv x, tv init, ir_reducer r, const int64_t *dims, int ndims);
/* Index of the max (or min) along `dim` (first occurrence; NaN counts as the
 * max, as PyTorch), and the value. Index dtype `index_dtype`. */
void ir_argreduce(ir_graph *g, tv x, int dim, bool is_max, tpuc_dtype index_dtype, tv *values,
                  tv *indices);
/* Windowed reduction (pooling, cumulative sums). Arrays have x's rank;
 * padding is lo/hi pairs per dim (2*rank values) or NULL. */
tv ir_reduce_window(ir_graph *g, tv x, tv init, ir_reducer r, const int64_t *window,
                    const int64_t *strides, const int64_t *padding);

/* ---- linear algebra ---- */
tv ir_dot_general(ir_graph *g, tv a, tv b, const int64_t *a_batch, const int64_t *b_batch,
                  int nbatch, const int64_t *a_contract, const int64_t *b_contract, int ncontract,
                  tpuc_dtype out_dtype);
/* ir/linalg.c: StableHLO's fft over the trailing n (1-3) dims with fft
 * lengths `lengths`: FFT/IFFT complex -> complex (IFFT divides by the
 * product of the lengths), RFFT real -> complex (last dim lengths[n-1]/2+1),
 * IRFFT complex (last dim lengths[n-1]/2+1) -> real. */
typedef enum { IR_FFT_FFT, IR_FFT_IFFT, IR_FFT_RFFT, IR_FFT_IRFFT } ir_fft_kind;
tv ir_fft(ir_graph *g, tv x, ir_fft_kind kind, const int64_t *lengths, int n);
/* ir/linalg.c: the Cholesky factor of each [..., M, M] matrix of a (f32, f64,
 * complex): lower (L L^H = a, reading a's lower triangle) or upper (U^H U = a).
 * The other triangle of the result is unspecified: callers mask it. A matrix
 * that is not positive definite gives NaN (XLA) from its failing column on. */
tv ir_cholesky(ir_graph *g, tv a, bool lower);
/* ir/linalg.c: x with op(a) x = b (left) or x op(a) = b; a [..., M, M]
 * triangular (only the `lower` or upper triangle read), b [..., M, N] (left)
 * or [..., N, M]; the same batch dims. */
typedef enum { IR_TRANSPOSE_NO, IR_TRANSPOSE_T, IR_TRANSPOSE_ADJOINT } ir_transpose_kind;
tv ir_triangular_solve(ir_graph *g, tv a, tv b, bool left, bool lower, bool unit_diagonal,
                       ir_transpose_kind transpose_a);
/* Convolution over nsp (2 or 3) spatial dims: N C <spatial> input, O I
 * <spatial> weight (feature_group_count groups). stride, lhs_dilation and
 * rhs_dilation: nsp each; padding: lo, hi per spatial dim (may be negative). */
#define IR_CONV_MAX_SPATIAL 3
tv ir_conv(ir_graph *g, tv input, tv weight, int nsp, const int64_t *stride,
           const int64_t *padding, const int64_t *lhs_dilation, const int64_t *rhs_dilation,
           int64_t groups, tpuc_dtype out_dtype);

/* ---- indexing ---- */
typedef struct {
  int64_t offset_dims[TPUC_MAX_DIMS];
  int n_offset_dims;
  int64_t collapsed_slice_dims[TPUC_MAX_DIMS];
  int n_collapsed;
  int64_t start_index_map[TPUC_MAX_DIMS];
  int n_start_index_map;
  int64_t index_vector_dim;
  int64_t slice_sizes[TPUC_MAX_DIMS]; /* operand rank entries */
} ir_gather_dims;
tv ir_gather(ir_graph *g, tv operand, tv indices, const ir_gather_dims *d, ir_type result);

typedef struct {
  int64_t update_window_dims[TPUC_MAX_DIMS];
  int n_update_window_dims;
  int64_t inserted_window_dims[TPUC_MAX_DIMS];
  int n_inserted;
  int64_t scatter_dims_to_operand_dims[TPUC_MAX_DIMS];
  int n_scatter_dims;
  int64_t index_vector_dim;
} ir_scatter_dims;
/* combine: IR_SCATTER_REPLACE or a reducer's operation (sum, max, ...). */
#define IR_SCATTER_REPLACE ((ir_reducer)-1)
tv ir_scatter(ir_graph *g, tv operand, tv indices, tv updates, const ir_scatter_dims *d,
              ir_reducer combine);

/* Sorts x along `dim` (stable); also returns the permutation as s64 indices
 * when `indices` is not NULL. */
void ir_sort(ir_graph *g, tv x, int dim, bool descending, tv *sorted, tv *indices);

/* ---- random ----
 * Philox-based bits from a u64[2] state value (seed, offset): returns u32 or
 * u64 bits of `shape` (dtype u32 / u64) and the new state. */
void ir_rng_bits(ir_graph *g, tv state, ir_type bits_type, tv *bits, tv *new_state);

/* ---- collectives ----
 * For programs compiled for several replicas (tpuc_compile_replicated): each
 * replica runs the same program on its own device, and these ops exchange
 * data between them. `groups` lists ngroups x group_size replica ids (the
 * StableHLO replica_groups); channel > 0 emits a channel handle with that id
 * (cross-replica-and-partition mode), 0 none (cross-replica mode). */
typedef struct {
  const int64_t *groups; /* ngroups * group_size replica ids, row-major */
  int ngroups, group_size;
  int64_t channel;
} ir_replica_groups;

/* Elementwise reduction of x across each group (same type as x). */
tv ir_all_reduce(ir_graph *g, tv x, ir_reducer r, const ir_replica_groups *rg);
/* The group's values concatenated along `dim` in group order. */
tv ir_all_gather(ir_graph *g, tv x, int dim, const ir_replica_groups *rg);
/* The all_reduce split along `dim` into group_size blocks; replica k of a
 * group gets block k. dims[dim] must divide by group_size. */
tv ir_reduce_scatter(ir_graph *g, tv x, int dim, ir_reducer r, const ir_replica_groups *rg);
/* x split along split_dim into group_size blocks, block j sent to member j;
 * the received blocks are concatenated along concat_dim in member order. */
tv ir_all_to_all(ir_graph *g, tv x, int split_dim, int concat_dim, const ir_replica_groups *rg);
/* (source, target) replica pairs, each source and each target at most once;
 * a replica no pair targets receives zeros. */
tv ir_collective_permute(ir_graph *g, tv x, const int64_t *pairs, int npairs, int64_t channel);
/* This replica's id, a rank-0 ui32. */
tv ir_replica_id(ir_graph *g);

/* ---- counted loops (ir/loop.c) ----
 * for (i = 0; i < trips; i++) vals = body(i, vals), emitted as one stablehlo.while
 * (a program of constant size however many trips). ir_loop_begin opens the body: a graph
 * of its own (l->body, with g's lowering flags) whose parameters are the counter i
 * (l->counter: s32, rank 0) and the carried values (l->vals[0..n): the types of
 * init[0..n), values of g). Build the body in l->body with the usual builders from its
 * parameters only (a value of g is read by carrying it); then ir_loop_end gives the next
 * trip's values next[0..n) (values of l->body, the same types) and puts in results[0..n)
 * the values of g after the last trip. The body belongs to g from ir_loop_begin on; an
 * error in it is reported in g. false (error in g) when the loop cannot be opened. */
#define IR_LOOP_MAX 16
typedef struct {
  ir_graph *body;
  tv counter;
  tv vals[IR_LOOP_MAX];
  int n;
  tv node; /* the loop's node in g */
} ir_loop;
bool ir_loop_begin(ir_graph *g, ir_loop *l, const tv *init, int n);
void ir_loop_end(ir_graph *g, ir_loop *l, int64_t trips, const tv *next, tv *results);
/* The s32 rank-0 constant v (a loop bound, a dynamic_slice start). */
tv ir_s32(ir_graph *g, int64_t v);

/* ---- the function ---- */
void ir_output(ir_graph *g, tv v); /* results, in order */
/* Lets result `output_index` reuse parameter `param`'s buffer when the caller
 * donates it at launch (same type required; emitted as tf.aliasing_output). */
void ir_alias(ir_graph *g, tv param, int output_index);
int ir_num_params(const ir_graph *g);
int ir_num_outputs(const ir_graph *g);

/* StableHLO text of the graph as `module @name { func.func public @main }`;
 * malloc'ed (caller frees), or NULL with ir_error() set. */
char *ir_emit(ir_graph *g, const char *name, size_t *len);

#endif /* TPUC_IR_H */
