"""Merges repeated computations of a joint graph (forward and backward in one FX graph) before
AOTAutograd's min-cut partitioner splits it, without importing Inductor.

Why: the partitioner merges them itself when functorch's ``config.cse`` is on (the default),
through ``torch._functorch.compile_utils.fx_graph_cse``, which imports
``torch._inductor.pattern_matcher`` for two small helpers and with it Inductor's lowering
tables: 0.7 s of the first compiled graph of every process (torch 2.13, 2.14), a third of a
small model's warm first step. ``tpu_backend`` never uses Inductor, so ``dynamo._partition``
runs this pass and calls the partitioner with ``config.cse`` off.

What it merges, as PyTorch's pass does: a ``call_function`` node whose target and arguments
(after the merges before it) equal an earlier node's, within the same mutation region (the
nodes between two mutating ops). What it never merges: impure calls (FX's ``is_impure``:
mutating, effectful, random: every op tagged as seeded, attention included, as PyTorch 2.14's
pass has it; 2.13's merged two equal attention calls), uninitialised allocations, nodes on
different streams, nodes whose storage a graph output shares (two outputs computed
alike are still two tensors), and values with unbacked symbols. It is stricter than PyTorch's
pass where that costs nothing: ``0.0`` and ``-0.0`` are different arguments here, and a call
of anything but an ATen op, ``operator.getitem`` or Python's arithmetic on sizes starts a new
region.
``TPUC_OWN_CSE=0`` uses PyTorch's pass instead (tests/test_fx_cse.py checks both give the
same graph)."""
from __future__ import annotations

import operator
import os
import re
from typing import Any

import torch
import torch.fx as fx
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_flatten

_aten = torch.ops.aten
# random ops whose every overload is not tagged as seeded, and allocations whose contents are
# undefined: never merged
_NEVER = {_aten.dropout, _aten.rrelu, _aten.empty, _aten.empty_like, _aten.empty_strided,
          _aten.new_empty, _aten.new_empty_strided}
_STATEFUL_WORDS = {"set", "enter", "exit", "seed"}


def enabled() -> bool:
    return os.environ.get("TPUC_OWN_CSE", "1").strip() != "0"


def _mutating_name(name: str) -> bool:
    """An in-place name (one trailing underscore: ``add_``, not ``__add__``) or a stateful
    one (set, enter, exit or seed as one of its words)."""
    if name.endswith("_") and not name.endswith("__"):
        return True
    return not _STATEFUL_WORDS.isdisjoint(re.split(r"[^a-z0-9]+", name.lower()))


def _mutates(n: fx.Node) -> bool:
    t = n.target
    if isinstance(t, torch._ops.OpOverload):
        return t._schema.is_mutable
    if n.op == "call_function":
        if t is operator.getitem:
            return False
        if not isinstance(t, torch._ops.OpOverloadPacket) and not _is_pure_python(t):
            return True  # a higher-order op or anything unknown: a region of its own
        if _mutating_name(getattr(t, "__name__", "")):
            return True
    elif n.op == "call_method" and _mutating_name(str(t)):
        return True
    return n.kwargs.get("out") is not None


def _is_pure_python(t: Any) -> bool:
    """operator.*, math and builtins on Python values, torch.sym_* (symbolic sizes)."""
    module = getattr(t, "__module__", None)
    return module in ("_operator", "operator", "math", "builtins") or (
        module == "torch" and getattr(t, "__name__", "").startswith("sym_"))


def _never_merged(n: fx.Node) -> bool:
    """Impure calls (FX's judgement: mutating, effectful or random, every op tagged as seeded
    included), random ops PyTorch's own pass lists, allocations."""
    t = n.target
    if n.is_impure():
        return True
    if isinstance(t, torch._ops.OpOverload):
        return t.overloadpacket in _NEVER
    return isinstance(t, torch._ops.OpOverloadPacket) and t in _NEVER


def _unbacked(v: Any) -> bool:
    return isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) and bool(
        free_unbacked_symbols(v))


def _storage(n: fx.Node) -> StorageWeakRef | None:
    v = n.meta.get("val")
    if not isinstance(v, torch.Tensor):
        return None
    try:
        return StorageWeakRef(v.untyped_storage())
    except NotImplementedError:  # no storage (e.g. a sparse or nested tensor)
        return None


def _leaf(v: Any, env: dict[fx.Node, fx.Node]) -> Any:
    if isinstance(v, fx.Node):
        return env[v]
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("sym", v.node)
    if isinstance(v, torch.Tensor):
        return ("tensor", id(v))  # by identity (a tensor's == is elementwise)
    if isinstance(v, float):
        return (float, repr(v))  # -0.0 is not 0.0; nan equals nan here
    return (type(v), v)  # 1, 1.0 and True are different arguments


def _key(n: fx.Node, env: dict[fx.Node, fx.Node]) -> tuple | None:
    args, args_spec = tree_flatten(n.args)
    kwargs, kwargs_spec = tree_flatten(n.kwargs)
    custom = n.meta.get("custom") or {}  # a stream or memory pool the node is annotated with
    context = (custom.get("stream", 0), custom.get("mempool"), custom.get("mempool_device"))
    key = (n.target, tuple(_leaf(a, env) for a in args), str(args_spec),
           tuple(_leaf(a, env) for a in kwargs), str(kwargs_spec), repr(context))
    try:
        hash(key)
    except TypeError:
        return None  # an argument that cannot be compared: never merged
    return key


def merge_common(graph: fx.Graph) -> fx.Graph:
    """A copy of ``graph`` in which each repeated computation is computed once."""
    nodes = list(graph.nodes)
    out = nodes[-1]
    if out.op != "output":
        raise ValueError(f"a graph ends with its output node, this one with {out.op!r}")
    kept = {s for s in (_storage(m) for m in out.all_input_nodes) if s is not None}
    new = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    seen: dict[tuple, tuple[fx.Node, int]] = {}  # key -> (its node in `new`, its region)
    region = 0
    for n in nodes:
        if _mutates(n):
            region += 1
        key = None
        if (n.op == "call_function" and not _never_merged(n)
                and not _unbacked(n.meta.get("val"))
                and _storage(n) not in kept):  # (kept holds no None)
            key = _key(n, env)
        if key is not None:
            hit = seen.get(key)
            if hit is not None and hit[1] == region:
                env[n] = hit[0]
                continue
        env[n] = new.node_copy(n, lambda a: env[a])
        if key is not None:
            seen[key] = (env[n], region)  # a later region's duplicates merge into this one
    return new
