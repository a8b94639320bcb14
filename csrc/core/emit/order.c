/* order.c — ordering a donated parameter's reads before its in-place update.
 *
 * A result aliased with a parameter (ir_alias) is written into that
 * parameter's buffer. XLA keeps the old value in a copy unless every read of
 * the parameter is an ancestor of the instruction that writes the result:
 * its copy insertion orders instructions by their data dependencies only. In
 * a whole training step that is not so: the backward reads a weight W for the
 * gradient of the layer below (dX = dY W^T), which nothing in the update
 * W' = f(W, dW, state) depends on, so XLA copied every such weight.
 * stablehlo.optimization_barrier does not help there: XLA's CPU compiler
 * removes barriers (OptimizationBarrierExpander) before copy insertion.
 *
 * ir_order_plan finds, for each aliased pair (P, D = the node of P's
 * result), the reads of P that D does not depend on ("free" readers: the
 * users of P, followed through elementwise and layout ops that XLA may fuse
 * into their consumer), and for them "tokens": graph outputs they flow into
 * (live until the program ends anyway, so waiting for them costs no memory;
 * so is a value that an output only reshapes).
 * The update's own chain G (D and the nodes only D needs, e.g. AdamW's
 * denominator for this parameter) then reads one of its inputs, `via`, as
 * select(p, 0, via), where p is a predicate computed from one element of
 * each token that is never true ((bits & 0x7fffffff) == -1): the value is
 * via's, bit for bit, but XLA cannot fold the dependency away, so it computes
 * G after every free reader and updates P in place. Tokens are taken among
 * nodes before D, so every added dependency goes from a lower to a higher
 * node index: no cycle can form. A read that no such token orders (it flows
 * only into D's descendants) is left as it was (XLA copies, as before). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "order.h"

typedef struct {
  int *start, *list; /* users of node v: list[start[v] .. start[v+1]) */
} users_t;

static bool build_users(const ir_graph *g, users_t *u) {
  int n = g->n;
  u->start = calloc((size_t)n + 1, sizeof *u->start);
  size_t edges = 0;
  for (int v = 0; v < n; v++) edges += (size_t)g->nodes[v].nops;
  u->list = malloc((edges + 1) * sizeof *u->list);
  int *fill = calloc((size_t)n + 1, sizeof *fill);
  if (!u->start || !u->list || !fill) {
    free(fill);
    return false;
  }
  for (int v = 0; v < n; v++)
    for (int i = 0; i < g->nodes[v].nops; i++) u->start[g->nodes[v].ops[i] + 1]++;
  for (int v = 0; v < n; v++) u->start[v + 1] += u->start[v];
  for (int v = 0; v < n; v++)
    for (int i = 0; i < g->nodes[v].nops; i++) {
      int o = g->nodes[v].ops[i];
      u->list[u->start[o] + fill[o]++] = v;
    }
  free(fill);
  return true;
}

/* Kinds that XLA may fuse into their consumer (or that only relabel a
 * buffer): a reader through them reads the parameter's buffer. */
static bool passes_through(int kind) {
  switch (kind) {
    case N_UNARY: case N_BINARY: case N_COMPARE: case N_SELECT: case N_CLAMP: case N_CONVERT:
    case N_BITCAST: case N_RESHAPE: case N_TRANSPOSE: case N_BROADCAST: case N_SLICE:
    case N_CONCAT: case N_PAD: case N_REVERSE: case N_DSLICE: case N_GET:
      return true;
    default:
      return false;
  }
}

void ir_order_free(ir_order *o) {
  if (!o) return;
  for (int k = 0; k < o->nbar; k++) free(o->ops[k]);
  free(o->ops);
  free(o->nops);
  free(o->pos);
  free(o->via);
  free(o->gate);
  memset(o, 0, sizeof *o);
}

typedef struct {
  const ir_graph *g;
  users_t u;
  int *anc, *sel, *rd, *seen, *outidx; /* epoch marks; outidx: output number or -1 */
  char *live; /* an output (2: donated), or a value an undonated output only reshapes */
  int *stack, *buf;
  int epoch;
  ir_order *o;
  int cap;
} planner;

/* Marks the ancestors of d (operands, and through a dependency its tokens). */
static void mark_ancestors(planner *p, tv d) {
  int top = 0;
  p->anc[d] = p->epoch;
  p->stack[top++] = d;
  while (top) {
    tv v = p->stack[--top];
    const ir_node *n = &p->g->nodes[v];
    int k = p->o->gate[v];
    int nb = k >= 0 ? p->o->nops[k] : 0;
    for (int i = 0; i < n->nops + nb; i++) {
      tv w = i < n->nops ? n->ops[i] : p->o->ops[k][i - n->nops];
      if (p->anc[w] != p->epoch) {
        p->anc[w] = p->epoch;
        p->stack[top++] = w;
      }
    }
  }
}

static bool push_dep(planner *p, int pos, tv via, const tv *ops, int nops) {
  ir_order *o = p->o;
  if (o->nbar == p->cap) {
    int cap = p->cap ? 2 * p->cap : 16;
    int *np = realloc(o->pos, (size_t)cap * sizeof *np);
    if (np) o->pos = np;
    int *nn = realloc(o->nops, (size_t)cap * sizeof *nn);
    if (nn) o->nops = nn;
    tv **no = realloc(o->ops, (size_t)cap * sizeof *no);
    if (no) o->ops = no;
    tv *nv = realloc(o->via, (size_t)cap * sizeof *nv);
    if (nv) o->via = nv;
    if (!np || !nn || !no || !nv) return false;
    p->cap = cap;
  }
  tv *copy = malloc((size_t)nops * sizeof *copy);
  if (!copy) return false;
  memcpy(copy, ops, (size_t)nops * sizeof *copy);
  o->pos[o->nbar] = pos;
  o->via[o->nbar] = via;
  o->nops[o->nbar] = nops;
  o->ops[o->nbar] = copy;
  o->nbar++;
  return true;
}

/* Plans the dependency for parameter `param` whose result is node d. */
static bool plan_pair(planner *p, tv param, tv d) {
  const ir_graph *g = p->g;
  const int *ul = p->u.list, *us = p->u.start;
  if (d == param || g->nodes[d].kind == N_PARAM || p->o->gate[d] >= 0) return true;
  p->epoch++;
  mark_ancestors(p, d);
  /* free readers: followed from the parameter through fusible ops */
  int top = 0, nfree = 0;
  p->rd[param] = p->epoch;
  p->stack[top++] = param;
  while (top) {
    tv v = p->stack[--top];
    for (int i = us[v]; i < us[v + 1]; i++) {
      tv w = ul[i];
      if (p->rd[w] == p->epoch) continue;
      p->rd[w] = p->epoch;
      if (p->anc[w] != p->epoch && w != d && w < d) p->buf[nfree++] = w;
      if (passes_through(g->nodes[w].kind)) p->stack[top++] = w;
    }
  }
  if (!nfree) return true;
  /* S: the nodes that only D (through S) needs */
  for (tv v = d - 1; v >= 0; v--) {
    const ir_node *n = &g->nodes[v];
    if (p->anc[v] != p->epoch || n->kind == N_PARAM || n->kind == N_GET || n->nresults > 1 ||
        p->outidx[v] >= 0 || p->o->gate[v] >= 0 || us[v] == us[v + 1])
      continue;
    bool only = true;
    for (int i = us[v]; i < us[v + 1] && only; i++)
      only = ul[i] == d || p->sel[ul[i]] == p->epoch;
    if (only) p->sel[v] = p->epoch;
  }
  /* tokens: the first outputs the free readers flow into, before D */
  int ntok = 0;
  tv *tok = p->buf + nfree;
  for (int f = 0; f < nfree; f++) {
    p->seen[p->buf[f]] = p->epoch;
    p->stack[top++] = p->buf[f];
  }
  while (top) {
    tv v = p->stack[--top];
    if (p->live[v] && p->sel[v] != p->epoch) {
      tok[ntok++] = v;
      continue;
    }
    for (int i = us[v]; i < us[v + 1]; i++) {
      tv w = ul[i];
      if (w >= d || p->seen[w] == p->epoch) continue;
      p->seen[w] = p->epoch;
      p->stack[top++] = w;
    }
  }
  if (!ntok) return true;
  /* G = S + {D}: its inputs from outside G fix the point q after which G
   * can run; G reads one of them, `via` (the smallest), through a select
   * that depends on the tokens; G's nodes before q are emitted after it
   * (their users are all in G) */
  int q = -1;
  tv via = IR_NONE;
  p->epoch++; /* `seen` now marks G's inputs; S is marked epoch - 1 */
  for (tv v = 0; v <= d; v++) {
    if (v != d && p->sel[v] != p->epoch - 1) continue;
    const ir_node *n = &g->nodes[v];
    for (int i = 0; i < n->nops; i++) {
      tv w = n->ops[i];
      if (p->sel[w] == p->epoch - 1 || p->seen[w] == p->epoch) continue;
      p->seen[w] = p->epoch;
      if (w > q) q = w;
      if (via == IR_NONE || ir_numel(&g->nodes[w].type) < ir_numel(&g->nodes[via].type))
        via = w;
    }
  }
  if (via == IR_NONE) return true; /* D reads nothing (a constant): nothing to order */
  for (int t = 0; t < ntok; t++)
    if (tok[t] > q) q = tok[t];
  int k = p->o->nbar;
  if (!push_dep(p, q, via, tok, ntok)) return false;
  for (tv v = 0; v <= d; v++)
    if (v == d || p->sel[v] == p->epoch - 1) p->o->gate[v] = k;
  return true;
}

bool ir_order_plan(const ir_graph *g, ir_order *o) {
  memset(o, 0, sizeof *o);
  bool any = false;
  for (int v = 0; v < g->n && !any; v++) any = g->nodes[v].kind == N_PARAM && g->nodes[v].sub;
  if (!any) return true;
  planner p = {.g = g, .o = o};
  int n = g->n;
  size_t sz = (size_t)n + 1;
  o->gate = malloc(sz * sizeof *o->gate);
  p.anc = calloc(sz, sizeof(int));
  p.sel = calloc(sz, sizeof(int));
  p.rd = calloc(sz, sizeof(int));
  p.seen = calloc(sz, sizeof(int));
  p.outidx = malloc(sz * sizeof(int));
  p.live = calloc(sz, 1);
  /* the stack holds each node once per search; buf holds the free readers
   * and the tokens of one pair */
  p.stack = malloc(sz * sizeof(int));
  p.buf = malloc(2 * sz * sizeof(int));
  bool ok = o->gate && p.anc && p.sel && p.rd && p.seen && p.outidx && p.live && p.stack &&
            p.buf && build_users(g, &p.u);
  if (ok) {
    for (int v = 0; v < n; v++) o->gate[v] = p.outidx[v] = -1;
    for (int i = g->nout - 1; i >= 0; i--) p.outidx[g->outputs[i]] = i;
    /* with rank-1 storage buffers (TPUC_FLAT_BUFFERS) an output is often a
     * reshape of the value computed, appended after every other node: the
     * value it reshapes is live as long, and it is the token to wait for.
     * Not what a donated output reshapes: that value is its own pair's
     * update, which the pair's ordering may emit later than its index. */
    for (int v = 0; v < n; v++) p.live[v] = p.outidx[v] >= 0;
    for (int v = 0; v < n; v++) {
      const ir_node *pn = &g->nodes[v];
      if (pn->kind == N_PARAM && pn->sub && pn->sub - 1 < g->nout)
        p.live[g->outputs[pn->sub - 1]] = 2;
    }
    for (int v = n - 1; v >= 0; v--)
      if (p.live[v] == 1 && g->nodes[v].kind == N_RESHAPE) p.live[g->nodes[v].ops[0]] = 1;
    for (int v = 0; v < n && ok; v++) {
      const ir_node *pn = &g->nodes[v];
      if (pn->kind == N_PARAM && pn->sub && pn->sub - 1 < g->nout)
        ok = plan_pair(&p, v, g->outputs[pn->sub - 1]);
    }
  }
  free(p.anc);
  free(p.sel);
  free(p.rd);
  free(p.seen);
  free(p.outidx);
  free(p.live);
  free(p.stack);
  free(p.buf);
  free(p.u.start);
  free(p.u.list);
  if (!ok) ir_order_free(o);
  return ok;
}

/* The printed name of value v (as the StableHLO printer names it). */
static void name_of(const ir_graph *g, tv v, char *buf, size_t cap) {
  const ir_node *n = &g->nodes[v];
  if (n->kind == N_GET) snprintf(buf, cap, "%%v%d#%lld", n->ops[0], (long long)n->i);
  else snprintf(buf, cap, "%%v%d", v);
}

static void type_of(FILE *f, const ir_type *t, tpuc_dtype d, bool ones) {
  fprintf(f, "tensor<");
  for (int i = 0; i < t->ndim; i++) fprintf(f, "%lldx", ones ? 1LL : (long long)t->dims[i]);
  fprintf(f, "%s>", tpuc_dtype_mlir_name(d));
}

/* %o<k>_<i><tag> = "op"(nm) : (tensor<in>) -> tensor<out>; nm becomes the result. */
static void step(FILE *f, int k, int i, char tag, const char *op, char *nm, size_t cap,
                 tpuc_dtype in, tpuc_dtype out) {
  fprintf(f, "    %%o%d_%d%c = \"%s\"(%s) : (tensor<%s>) -> tensor<%s>\n", k, i, tag, op, nm,
          tpuc_dtype_mlir_name(in), tpuc_dtype_mlir_name(out));
  snprintf(nm, cap, "%%o%d_%d%c", k, i, tag);
}

static void array_of(FILE *f, const char *name, int n, int value) {
  fprintf(f, "%s = array<i64%s", name, n ? ": " : "");
  for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", value);
  fprintf(f, ">");
}

char *ir_order_text(const ir_graph *g, const ir_order *o, int k) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return NULL;
  for (int i = 0; i < o->nops[k]; i++) {
    const ir_type *tt = &g->nodes[o->ops[k][i]].type;
    tpuc_dtype d = tt->dtype;
    char nm[48];
    name_of(g, o->ops[k][i], nm, sizeof nm);
    if (tt->ndim) { /* its first element, as a scalar */
      fprintf(f, "    %%o%d_%de = \"stablehlo.slice\"(%s) {", k, i, nm);
      array_of(f, "start_indices", tt->ndim, 0);
      fprintf(f, ", ");
      array_of(f, "limit_indices", tt->ndim, 1);
      fprintf(f, ", ");
      array_of(f, "strides", tt->ndim, 1);
      fprintf(f, "} : (");
      type_of(f, tt, d, false);
      fprintf(f, ") -> ");
      type_of(f, tt, d, true);
      fprintf(f, "\n    %%o%d_%ds = \"stablehlo.reshape\"(%%o%d_%de) : (", k, i, k, i);
      type_of(f, tt, d, true);
      fprintf(f, ") -> tensor<%s>\n", tpuc_dtype_mlir_name(d));
      snprintf(nm, sizeof nm, "%%o%d_%ds", k, i);
    }
    if (ir_is_complex(d)) {
      tpuc_dtype r = d == TPUC_C64 ? TPUC_F32 : TPUC_F64;
      step(f, k, i, 'r', "stablehlo.real", nm, sizeof nm, d, r);
      d = r;
    }
    if (ir_is_float(d)) { /* its bits: defined for every value, NaN included */
      tpuc_dtype bits = d == TPUC_F64 ? TPUC_S64 : d == TPUC_F32 ? TPUC_S32 : TPUC_S16;
      step(f, k, i, 'b', "stablehlo.bitcast_convert", nm, sizeof nm, d, bits);
      d = bits;
    }
    if (d != TPUC_S32) step(f, k, i, 'i', "stablehlo.convert", nm, sizeof nm, d, TPUC_S32);
    if (i)
      fprintf(f, "    %%o%d_%do = \"stablehlo.or\"(%%o%d_%do, %s) : (tensor<i32>, tensor<i32>) -> "
                 "tensor<i32>\n", k, i, k, i - 1, nm);
    else
      fprintf(f, "    %%o%d_%do = \"stablehlo.and\"(%s, %s) : (tensor<i32>, tensor<i32>) -> "
                 "tensor<i32>\n", k, i, nm, nm);
  }
  const ir_type *vt = &g->nodes[o->via[k]].type;
  tpuc_dtype vd = vt->dtype;
  char via[48];
  name_of(g, o->via[k], via, sizeof via);
  fprintf(f,
          "    %%o%d_c = \"stablehlo.constant\"() {value = dense<2147483647> : tensor<i32>} : () -> "
          "tensor<i32>\n"
          "    %%o%d_n = \"stablehlo.constant\"() {value = dense<-1> : tensor<i32>} : () -> "
          "tensor<i32>\n"
          "    %%o%d_m = \"stablehlo.and\"(%%o%d_%do, %%o%d_c) : (tensor<i32>, tensor<i32>) -> "
          "tensor<i32>\n"
          "    %%o%d_p = \"stablehlo.compare\"(%%o%d_m, %%o%d_n) {comparison_direction = "
          "#stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type SIGNED>} "
          ": (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
          "    %%o%d_q = \"stablehlo.broadcast_in_dim\"(%%o%d_p) {broadcast_dimensions = "
          "array<i64>} : (tensor<i1>) -> ",
          k, k, k, k, o->nops[k] - 1, k, k, k, k, k, k);
  type_of(f, vt, TPUC_PRED, false);
  const char *zero = vd == TPUC_PRED ? "false" : ir_is_complex(vd) ? "(0.0, 0.0)"
                     : ir_is_float(vd) ? "0.0" : "0";
  fprintf(f, "\n    %%o%d_z = \"stablehlo.constant\"() {value = dense<%s> : ", k, zero);
  type_of(f, vt, vd, false);
  fprintf(f, "} : () -> ");
  type_of(f, vt, vd, false);
  fprintf(f, "\n    %%o%d = \"stablehlo.select\"(%%o%d_q, %%o%d_z, %s) : (", k, k, k, via);
  type_of(f, vt, TPUC_PRED, false);
  fprintf(f, ", ");
  type_of(f, vt, vd, false);
  fprintf(f, ", ");
  type_of(f, vt, vd, false);
  fprintf(f, ") -> ");
  type_of(f, vt, vd, false);
  fprintf(f, "\n");
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  return text;
}
