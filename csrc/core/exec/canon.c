/* canon.c — canonical calls for pointwise ops: fewer programs to compile.
 *
 * A pointwise op (the elementwise family: each output element is a function
 * of the inputs' elements at the same broadcast position) computes the same
 * elements whatever shape its operands are seen at, as long as every operand
 * is seen at the same one. So before its signature is formed, a strict-mode
 * call is rewritten: output dims of size 1 are dropped, and neighbouring dims
 * merged where every operand either spans both contiguously (stride of the
 * outer = stride * size of the inner) or broadcasts over both. silu on
 * [4, 64, 344] and on [256, 344], mul of [4, 64, 128] by [128] and of
 * [256, 128] by [128], zero_ of [128, 344] and of [344, 128] then share one
 * signature and one program. The rewritten views address the same elements
 * in the same order, so results are bit for bit those of the call as given
 * (tests/test_canonical.py checks it against TPUC_CANONICAL=0).
 *
 * 0-d operands stay 0-d and operands with dims keep at least one: PyTorch's
 * type promotion tells the two apart (elementwise.c, ew_result_type). Calls
 * the rule does not cover (rank 0 or 1 already, an empty output, outputs of
 * different shapes, shapes that do not broadcast: the lowering reports
 * those) are left as they are. Strict mode's single-op programs are rewritten
 * here (plan_single) and so are the calls a fused chunk or compiled graph
 * records (op_run.c): there the point is an in-place update's chain staying
 * rank 1 up to its output, so that XLA computes it once and updates the
 * donated buffer without a copy (docs/execution.md, "Fewer programs"). */
#include "plan.h"

/* per operand and output dim: 0 the dim is broadcast (absent, size 1), 1 it is spanned */
static bool spans(const tpuc_tensor *t, int r, int d, const int64_t *osz) {
  int k = d - (r - t->ndim);
  return k >= 0 && t->sizes[k] == osz[d] && osz[d] > 1;
}

static int64_t stride_at(const tpuc_tensor *t, int r, int d) {
  return t->strides[d - (r - t->ndim)];
}

bool canon_call_make(const tpuc_runtime *rt, const tpuc_op_call *c, canon_call *cc) {
  if (!rt->canonical || !tpuc_op_is_pointwise(c->op)) return false;
  if (c->ntensors > CANON_MAX_TENSORS || c->noutputs < 1 || c->noutputs > CANON_MAX_OUTPUTS)
    return false;
  const tpuc_tensor *o0 = NULL;
  for (int j = 0; j < c->noutputs && !o0; j++)
    if (c->outputs[j].storage) o0 = &c->outputs[j];
  if (!o0 || o0->ndim <= 1) return false;
  int r = o0->ndim;
  const int64_t *osz = o0->sizes;
  int64_t numel = 1;
  for (int d = 0; d < r; d++) numel *= osz[d];
  if (numel <= 0) return false;
  /* every operand: outputs at the output's shape, inputs broadcasting to it */
  const tpuc_tensor *ops[CANON_MAX_TENSORS + CANON_MAX_OUTPUTS];
  int n = 0;
  for (int j = 0; j < c->noutputs; j++) {
    const tpuc_tensor *o = &c->outputs[j];
    if (!o->storage) continue;
    if (o->ndim != r || memcmp(o->sizes, osz, (size_t)r * sizeof *osz)) return false;
    ops[n++] = o;
  }
  for (int i = 0; i < c->ntensors; i++) {
    const tpuc_tensor *t = &c->tensors[i];
    if (!t->storage) continue;
    if (t->ndim > r) return false;
    for (int k = 0; k < t->ndim; k++) {
      int64_t s = t->sizes[k], want = osz[k + r - t->ndim];
      if (s != want && s != 1) return false;
    }
    ops[n++] = t;
  }
  /* groups of kept dims: group g spans dims first[g] .. last[g] */
  int first[TPUC_MAX_DIMS], last[TPUC_MAX_DIMS], ng = 0;
  for (int d = 0; d < r; d++) {
    if (osz[d] == 1) continue;
    bool join = ng > 0;
    for (int k = 0; k < n && join; k++) {
      const tpuc_tensor *t = ops[k];
      int p = last[ng - 1];
      bool sp = spans(t, r, p, osz), sd = spans(t, r, d, osz);
      join = sp == sd && (!sd || stride_at(t, r, p) == stride_at(t, r, d) * osz[d]);
    }
    if (join) {
      last[ng - 1] = d;
    } else {
      first[ng] = last[ng] = d;
      ng++;
    }
  }
  int R = ng ? ng : 1;
  if (R == r) return false; /* nothing merged, nothing dropped */
  cc->call = *c;
  for (int i = 0; i < c->ntensors; i++) cc->tensors[i] = c->tensors[i];
  for (int j = 0; j < c->noutputs; j++) cc->outputs[j] = c->outputs[j];
  cc->call.tensors = cc->tensors;
  cc->call.outputs = cc->outputs;
  for (int i = 0; i < c->ntensors + c->noutputs; i++) {
    tpuc_tensor *t = i < c->ntensors ? &cc->tensors[i] : &cc->outputs[i - c->ntensors];
    const tpuc_tensor *src = i < c->ntensors ? &c->tensors[i] : &c->outputs[i - c->ntensors];
    if (!t->storage || t->ndim == 0) continue;
    t->ndim = R;
    for (int g = 0; g < R; g++) {
      t->sizes[g] = 1;
      t->strides[g] = 0;
      if (g < ng && spans(src, r, first[g], osz)) {
        for (int d = first[g]; d <= last[g]; d++) t->sizes[g] *= osz[d];
        t->strides[g] = stride_at(src, r, last[g]);
      }
    }
  }
  return true;
}
