"""Random programs for the differential tester: plain data, seeded, shrinkable.

Two kinds of program, both run for several steps with state that changes in place
between the steps (the case a single-step test never sees):

- ``train``: a model stacked from blocks (linear layers of many shapes, attention
  with a fused qkv projection, SwiGLU, embeddings, conv1d, norms, activations,
  residuals), an optimizer (SGD, SGD with momentum, Adam, AdamW: for-loop,
  foreach or fused), and per step a list of extra actions a training loop takes
  (host reads of parameters and gradients, grad-norm clipping, in-place edits of
  parameters and of slices of them, ``grad = None``). Observed: the loss, the
  input's gradient, every gradient and every parameter after every step.
- ``ops``: a straight-line body of tensor ops over a few leaf tensors (binary
  ops with broadcasting, unary ops, matmuls in every transpose form, views:
  slices, transposes, expands, overlapping ``as_strided`` reads, reshapes;
  in-place ops on clones and on their slices, ``out=``, reductions), its loss
  backpropagated; between steps the leaves are edited in place. Observed:
  every value the body defines and the leaves' gradients, each step.

Sizes are drawn from lists that straddle every size the engine switches on
(rows below and above the x @ W^T rewrite's N > M test, 0-d and empty tensors,
odd sizes), so that a threshold-dependent fast path meets both of its sides.
A program is a dict of lists: the shrinker (run.py) drops list items.
"""
from __future__ import annotations

import random
from typing import Any

Program = dict[str, Any]

# sizes around the engine's thresholds: 1, odd, powers of two and their neighbours
ROWS = [1, 3, 7, 16, 17, 64, 127, 128, 256, 511, 512, 520, 1024]
FEATS = [1, 5, 16, 31, 64, 96, 128, 130, 256, 344, 512]
# Adam's eps is 1e-3, not 1e-8: with 1e-8 an early step moves every parameter by about
# lr * sign(grad), so a gradient element near zero flips sign under any rounding and moves
# its parameter by 2 lr on one side only: the CPU's own float32 run shows such flips at
# random places, and no bound derived from it holds. A larger eps makes the update
# continuous in the gradient; the kernels run are the same.
_ADAM = {"eps": 1e-3}
OPTIMS = [("sgd", {}), ("sgd", {"momentum": 0.9}), ("adam", {"foreach": False, **_ADAM}),
          ("adamw", {"foreach": True, **_ADAM}), ("adamw", {"foreach": False, **_ADAM}),
          ("adamw", {"fused": True, **_ADAM}), ("sgd", {"momentum": 0.9, "foreach": True})]
ACTIONS = ["read_grad", "read_param", "clip", "param_add", "param_mul", "slice_zero",
           "slice_add", "grad_none", "item_loss"]


def _budget_rows(r: random.Random, dim: int, limit: int = 1 << 17) -> int:
    """Rows such that rows * dim stays small enough for a quick float64 reference."""
    rows = [x for x in ROWS if x * max(dim, 1) <= limit]
    return r.choice(rows or [1])


def train_program(r: random.Random) -> Program:
    dim = r.choice(FEATS[2:])
    tokens = r.random() < 0.25
    batch_shape = r.choice([[], [2], [4, 3]])  # extra leading dims: the 3-D linear of the issue
    rows = _budget_rows(r, dim * 4)
    if batch_shape:
        lead = 1
        for d in batch_shape:
            lead *= d
        rows = max(1, rows // lead)
    blocks: list[list[Any]] = []
    if tokens:
        blocks.append(["embedding", r.choice([7, 64, 100]), dim])
    width = dim
    for _ in range(r.randint(1, 4)):
        kind = r.choice(["linear", "linear", "linear", "attn", "swiglu", "norm", "act", "conv1d",
                         "residual"])
        if kind == "linear":
            out = r.choice(FEATS[1:])
            blocks.append(["linear", width, out, r.random() < 0.5])
            width = out
        elif kind == "attn" and width % 4 == 0 and width >= 16:
            blocks.append(["attn", width, r.choice([1, 2, 4])])
        elif kind == "swiglu":
            blocks.append(["swiglu", width, r.choice(FEATS[2:])])
        elif kind == "norm":
            blocks.append(["norm", width, r.choice(["layer", "rms"])])
        elif kind == "act":
            blocks.append(["act", r.choice(["gelu", "relu", "silu", "tanh"])])
        elif kind == "conv1d":
            blocks.append(["conv1d", width, r.choice([1, 3])])
        else:
            blocks.append(["residual", width, r.choice(FEATS[2:])])
    if width != dim or r.random() < 0.5:
        blocks.append(["linear", width, r.choice(FEATS[1:]), r.random() < 0.5])
    steps = []
    for _ in range(r.randint(2, 5)):
        steps.append(sorted(set(r.sample(ACTIONS, r.randint(0, 3)))))
    name, kw = r.choice(OPTIMS)
    return {"kind": "train", "seed": r.randrange(1 << 30), "dim": dim, "rows": rows,
            "batch_shape": batch_shape, "tokens": tokens, "blocks": blocks,
            "optim": [name, kw], "lr": r.choice([1e-3, 1e-2] if name != "sgd" else [1e-2, 0.1]),
            "steps": steps}


# ---- op programs ----------------------------------------------------------------------------

class _Vars:
    """Shapes of the values defined so far (the generator's view of the body)."""

    def __init__(self) -> None:
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.n = 0

    def new(self, shape: tuple[int, ...]) -> str:
        name = f"v{self.n}"
        self.n += 1
        self.shapes[name] = shape
        return name

    def pick(self, r: random.Random, ndim: int | None = None, min_numel: int = 0) -> str | None:
        names = [k for k, s in self.shapes.items()
                 if (ndim is None or len(s) == ndim) and _numel(s) >= min_numel]
        return r.choice(names) if names else None


def _numel(s: tuple[int, ...]) -> int:
    n = 1
    for d in s:
        n *= d
    return n


UNARY = ["torch.tanh({})", "torch.sigmoid({})", "torch.relu({})", "({}).neg()", "torch.sin({})",
         "torch.exp(torch.tanh({}))", "({}).abs()", "torch.nn.functional.gelu({})", "({}) * 0.5"]
BINARY = ["({}) + ({})", "({}) - ({})", "({}) * ({})", "({}) / (({}).abs() + 1)",
          "torch.maximum({}, {})", "torch.add({}, {}, alpha=0.5)"]


def _ops_line(r: random.Random, vs: _Vars) -> str | None:
    """One statement of the body, defining a new value (or rewriting one in place)."""
    k = r.random()
    a = vs.pick(r)
    if a is None:
        return None
    sa = vs.shapes[a]
    if k < 0.18:
        return f"{vs.new(sa)} = " + r.choice(UNARY).format(a)
    if k < 0.36:  # binary: same shape, a broadcast row/column, or a scalar-shaped value
        forms = [b for b, s in vs.shapes.items() if s == sa]
        if len(sa) == 2:
            forms += [f"{b}[:1]" for b, s in vs.shapes.items() if len(s) == 2 and s[1] == sa[1]]
            forms += [f"{b}[:, :1]" for b, s in vs.shapes.items() if len(s) == 2 and s[0] == sa[0]]
        forms += [b for b, s in vs.shapes.items() if s == ()]
        b = r.choice(forms)
        return f"{vs.new(sa)} = " + r.choice(BINARY).format(a, b)
    if k < 0.52 and len(sa) == 2:  # matmul, with either operand transposed
        m, kk = sa
        right = [(b, s) for b, s in vs.shapes.items() if len(s) == 2 and s[0] == kk]
        right_t = [(b, s) for b, s in vs.shapes.items() if len(s) == 2 and s[1] == kk]
        if right_t and (not right or r.random() < 0.6):
            b, s = r.choice(right_t)
            return f"{vs.new((m, s[0]))} = {a} @ {b}.t()"
        if right:
            b, s = r.choice(right)
            return f"{vs.new((m, s[1]))} = {a} @ {b}"
        # a fresh weight-like right operand from a leaf-sized shape is not defined: transpose a
        return f"{vs.new((kk, m))} = {a}.t() * 1.0"
    if k < 0.64 and len(sa) == 2:  # a view, then a use of it
        m, n = sa
        choice = r.randrange(5)
        if choice == 0 and m > 1:
            lo, hi = sorted(r.sample(range(m + 1), 2))
            return f"{vs.new((hi - lo, n))} = {a}[{lo}:{hi}] * 1.0"
        if choice == 1 and n > 1:
            return f"{vs.new((m, (n + 1) // 2))} = {a}[:, ::2] + 0.0"
        if choice == 2:
            return f"{vs.new((n, m))} = {a}.t().contiguous()"
        if choice == 3 and m >= 2:  # overlapping rows: a read-only as_strided view
            rows = m - 1
            return (f"{vs.new((rows, 2))} = torch.as_strided({a}, ({rows}, 2), (1, 1)) * 1.0"
                    if _numel(sa) >= rows + 1 else None)
        return f"{vs.new((2, m, n))} = {a}.unsqueeze(0).expand(2, {m}, {n}) * 1.0"
    if k < 0.80 and len(sa) == 2:  # in place on a clone: whole, a slice, out=
        m, n = sa
        c = vs.new(sa)
        choice = r.randrange(4)
        if choice == 0:
            return f"{c} = {a}.clone(); {c}.mul_(1.5).add_(0.25)"
        if choice == 1 and m > 1:
            lo = r.randrange(m)
            return f"{c} = {a}.clone(); {c}[{lo}:].mul_(2.0)"
        if choice == 2 and n > 1:
            return f"{c} = {a}.clone(); {c}[:, 1:].sub_({a}[:, :-1])"
        # out= takes no autograd: the operand is detached (the value is still compared)
        return f"{c} = torch.empty_like({a}); torch.mul({a}.detach(), 3.0, out={c})"
    if k < 0.92:  # reductions
        if len(sa) >= 1 and r.random() < 0.6:
            d = r.randrange(len(sa))
            shape = sa[:d] + sa[d + 1:]
            fn = r.choice(["sum", "mean", "amax"])
            if fn == "amax" and sa[d] == 0:
                fn = "sum"
            return f"{vs.new(shape)} = {a}.{fn}({d})"
        return f"{vs.new(())} = {a}.sum()"
    return f"{vs.new(sa)} = torch.where({a} > 0, {a}, {a} * 0.1)"


def ops_program(r: random.Random) -> Program:
    leaves = []
    vs = _Vars()
    for _ in range(r.randint(1, 3)):
        shape = (r.choice(ROWS[:9] + [0]), r.choice(FEATS[:7]))
        if r.random() < 0.15:
            shape = ()
        name = vs.new(shape)
        leaves.append([name, list(shape)])
    body = []
    for _ in range(r.randint(3, 10)):
        line = _ops_line(r, vs)
        if line:
            body.append(line)
    steps = [r.choice(["add", "mul", "slice", "none"]) for _ in range(r.randint(2, 4))]
    return {"kind": "ops", "seed": r.randrange(1 << 30), "leaves": leaves, "body": body,
            "steps": steps}


def program(seed: int, kind: str | None = None) -> Program:
    """The program for a seed; ``kind`` forces train or ops (else 60% train)."""
    r = random.Random(seed)
    if kind is None:
        kind = "train" if r.random() < 0.6 else "ops"
    return train_program(r) if kind == "train" else ops_program(r)
