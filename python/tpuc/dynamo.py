"""The torch.compile backend "tpu".

AOTAutograd splits a captured function into a forward and a backward graph of
core ATen ops (decomposed with PyTorch's core-ATen table); an optimizer step
compiled with the model is a third, inference graph whose updates of
parameters and state stay inside the graph (``keep_inference_input_mutations``).

**Replay** (the default, ``TPUC_GRAPH_REPLAY=replay``): the first call of a
graph records its ops through the same op path as eager mode (the engine's
GRAPH mode) into one program of its own, runs it, and keeps it
(``_C._replay_capture``): which storage of the program is which input or
output, and the guards (each input's dtype, shape, strides, offset, storage
size and storage sharing, non-tensor inputs' values). Later calls launch that
executable on the new arguments' buffers without recording any op
(``_Replay.launch``): parameters and optimizer state are donated as when
recorded, and the device generator advances exactly as recording would have
advanced it. A call whose arguments fail the guards records the graph again
(a second program is kept, up to 8 per graph); a graph that cannot be
replayed (an op in it fell back to the CPU, it reads a tensor that is not one
of its inputs, ...) is recorded on every call. ``torch.tpu.stats()`` counts
``graph_records``, ``graph_replays`` and ``graph_rerecords``, keeps the
last 64 ``graph_replay_reasons`` and counts every reason noted in
``graph_replay_notes`` (the difference of two readings says how many of the
list's last entries are new).

With compile-ahead on (``TPUC_COMPILE_AHEAD``: GPU and TPU plugins by default), a graph's
first call is recorded and cut without waiting for its compile (``_C._flush_cut``): the
program compiles in the pool while the next graph (the backward's next part) is recorded, and
the second call records again, finds the same program compiled, and keeps it.

``TPUC_GRAPH_REPLAY=record`` records every call into the same standalone
program (what replay must match bit for bit); ``join`` is the joined mode:
graphs are deferred, a graph joins the ops already pending and stays pending
after it returns, so the forward, the backward and the optimizer step of one
training step become ONE program, re-recorded op by op on every step and
launched when a result is read, when an eager op uses a result, at
``torch.tpu.synchronize()``, or when a graph already recorded since the last
launch starts again (the next step).

The backward graph is launched as consecutive programs
(``TPUC_BACKWARD_PROGRAMS``, default 6; ``_split_runner``), cut where the
fewest bytes cross (``_cut_points``, constants made again in each part), so
that the saved activations only its first part reads are freed before the
rest runs, and the forward/backward split is AOTAutograd's min-cut partitioner, with the
random bits of a checkpointed region kept rather than drawn again
(``_partition``): the compiled step's peak stays at or below strict eager's,
and checkpointed dropout is replayed.

Eager code around graph breaks runs in the current eager mode; in "debug"
mode each graph is recorded and runs as soon as it is recorded, so errors
surface at once. A new input shape makes dynamo recompile (its guards), which
the backend counts in ``torch.tpu.stats()["dynamo_compiles"]``.
"""
from __future__ import annotations

import collections
import operator
import os
import threading
from typing import Any, Callable

import numpy as np
import torch

_lock = threading.Lock()
_graphs_compiled = 0  # graphs the backend was given (dynamo_compiles)
_programs_made = 0  # graph runners, a split backward's parts each (graph ids)
_GRAPH = 3
_DEBUG = 1
_MODES = ("replay", "record", "join")
_MAX_PLANS = 8  # programs kept per graph (input signatures)
# ids of the graphs recorded since the pending ops last ran (join mode)
_recorded: list[int] = []
_counts = {"graph_records": 0, "graph_replays": 0, "graph_rerecords": 0, "graph_replay_notes": 0}
_reasons: collections.deque[str] = collections.deque(maxlen=64)


def _mode_from_env() -> str:
    v = os.environ.get("TPUC_GRAPH_REPLAY", "replay").strip().lower()
    v = {"1": "replay", "on": "replay", "0": "record", "off": "record"}.get(v, v)
    if v not in _MODES:
        raise ValueError(f"TPUC_GRAPH_REPLAY={v!r}: expected one of {', '.join(_MODES)}")
    return v


_replay_mode = _mode_from_env()


def graphs_compiled() -> int:
    return _graphs_compiled


def set_graph_replay(mode: str) -> None:
    """How compiled graphs run: "replay" (record once, launch the kept program
    again), "record" (record every call into the same standalone program) or
    "join" (record every call, joined with the step's other graphs)."""
    global _replay_mode
    if mode not in _MODES:
        raise ValueError(f"graph replay mode {mode!r}: expected one of {', '.join(_MODES)}")
    _replay_mode = mode


def graph_replay() -> str:
    return _replay_mode


def replay_stats() -> dict[str, Any]:
    with _lock:
        out: dict[str, Any] = dict(_counts)
        out["graph_replay_reasons"] = list(_reasons)
    return out


def _note(counter: str | None, reason: str | None = None) -> None:
    with _lock:
        if counter:
            _counts[counter] += 1
        if reason:
            _reasons.append(reason)
            _counts["graph_replay_notes"] += 1  # all reasons ever noted: the list keeps 64


def _device_of(values: Any) -> int | None:
    for v in values:
        if isinstance(v, torch.Tensor) and v.device.type == "tpu":
            return v.device.index or 0
    return None


def _fallback_total(_C: Any) -> int:
    return sum(_C._fallback_counts().values())


def _restoring_hops() -> tuple[Any, ...]:
    from torch._prims import rng_prims

    return (rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state)


def _pair(a: Any, b: Any) -> tuple[Any, Any]:
    return (a, b)


def _unwrap_deterministic_rng(gm: torch.fx.GraphModule) -> None:
    """Activation checkpointing wraps every op tagged as random into
    run_and_save_rng_state / run_with_rng_state, the fused attention op
    too; without dropout it draws nothing, so it is called directly (the
    saved state becomes an empty tensor on its device) and the graph stays
    replayable."""
    save, run_with = _restoring_hops()
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    changed = False
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target not in (save, run_with):
            continue
        k = 0 if n.target is save else 1
        op, args, kwargs = n.args[k], tuple(n.args[k + 1:]), dict(n.kwargs)
        p = args[3] if len(args) > 3 else kwargs.get("dropout_p", 0.0)
        dev = getattr(args[0], "meta", {}).get("val") if args else None
        if op is not flash or p != 0.0 or not isinstance(dev, torch.Tensor):
            continue
        with gm.graph.inserting_before(n):
            out = gm.graph.call_function(op, args, kwargs)
            if n.target is save:
                state = gm.graph.call_function(
                    torch.ops.aten.empty.memory_format, ([0],),
                    {"dtype": torch.uint8, "device": dev.device})
                out = gm.graph.call_function(_pair, (state, out))
        n.replace_all_uses_with(out)
        gm.graph.erase_node(n)
        changed = True
    if changed:
        gm.recompile()


def _graph_runner(gm: torch.fx.GraphModule, example_inputs: list[Any],
                  part: bool = False) -> Callable:
    global _graphs_compiled, _programs_made
    from . import _C

    _unwrap_deterministic_rng(gm)

    with _lock:
        if not part:
            _graphs_compiled += 1
        _programs_made += 1
        gid = _programs_made
    plans: list[Any] = []  # kept programs, the last one used first
    recorded_once: list[bool] = []  # (compile-ahead) the first call was recorded and queued
    never: list[str] = []  # why this graph cannot be replayed (once known)

    def run_joined(args: list[Any]) -> Any:
        with _lock:
            if _C._pending_ops() == 0:
                _recorded.clear()
            if gid in _recorded:  # the next iteration begins: run the last one
                _C._flush(-1)
                _recorded.clear()
            _recorded.append(gid)
        prev = _C._get_mode()
        _C._set_mode(_GRAPH)  # records; leaves what is pending in place
        try:
            out = gm(*args)
        finally:
            _C._set_mode(prev)
        if prev == _DEBUG:
            _C._flush(-1)
        return out

    def record(args: list[Any], capture: bool, cut: bool = False) -> Any:
        # cut: the program may wait in the compile-ahead queue (the first call)
        flush = _C._flush_cut if cut else _C._flush
        flush(-1)  # the graph becomes a program of its own
        device = _device_of(args)
        if capture and device is not None:
            seed, offset = _C._get_rng_state(device)
            fallbacks = _fallback_total(_C)
            flushes = _C._runtime_stats()["flushes"]
        prev = _C._get_mode()
        _C._set_mode(_GRAPH)
        try:
            out = gm(*args)
        finally:
            _C._set_mode(prev)
        _note("graph_records")
        if not capture:
            flush(-1)
            return out
        why = None
        if device is None:
            device = _device_of(out if isinstance(out, (list, tuple)) else [out])
            why = "the graph has no tpu tensor input"
        elif _fallback_total(_C) != fallbacks:
            why = "an op of the graph ran on the CPU (fallback)"
        elif _C._runtime_stats()["flushes"] != flushes:
            why = "the graph's ops were run before it ended (a host read or a fallback)"
        if why is None:
            res = _C._replay_capture(device, args, out, seed, offset)
            if isinstance(res, str):
                why = res
            else:
                plans.insert(0, res)
                del plans[_MAX_PLANS:]
        if why is not None:
            _C._flush(-1)
            never.append(why)
            _note(None, f"graph {gid}: not replayed: {why}")
        return out

    if any(n.op == "call_function" and n.target in _restoring_hops() for n in gm.graph.nodes):
        # activation checkpointing: the graph saves or restores a generator
        # state as a CPU tensor, whose value a kept program cannot follow
        never.append("the graph saves or restores a generator state (activation checkpointing)")
        _note(None, f"graph {gid}: not replayed: {never[0]}")

    def run(args: list[Any]) -> Any:
        mode = _replay_mode
        eager = _C._get_mode()
        if mode == "join" or eager in (_GRAPH, _DEBUG):
            return run_joined(args)
        if mode == "record" or never:
            return record(args, capture=False)
        if not plans and not recorded_once and _compile_ahead():
            # the first call queues behind its compile (compile-ahead): the
            # graphs of a first step (the forward, each backward part, the
            # optimizer's) compile side by side while the host records the
            # next; the second call records again and captures the program,
            # compiled by then (the same program: recording makes the same)
            recorded_once.append(True)
            return record(args, capture=False, cut=True)
        why = None
        for i, plan in enumerate(plans):
            out = plan.launch(args)
            if not isinstance(out, str):
                if i:
                    plans.insert(0, plans.pop(i))
                _note("graph_replays")
                return out
            why = out
        if why is not None:
            _note("graph_rerecords", f"graph {gid}: recorded again: {why}")
        return record(args, capture=True)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


_ahead_on: list[bool] = []


def _compile_ahead() -> bool:
    """Whether the runtime queues chunks behind their compiles (TPUC_COMPILE_AHEAD: on by
    default on GPU and TPU plugins, off on the XLA CPU plugin)."""
    if not _ahead_on:
        from . import _C

        _ahead_on.append(bool(_C._runtime_info()["compile_ahead"]))
    return _ahead_on[0]


def _draws_random_bits(n: torch.fx.Node) -> bool:
    """A node of a seeded random op that really draws (PyTorch's CPU flash attention, which
    scaled_dot_product_attention picks on tpu, is tagged as seeded but draws nothing without
    dropout; csrc/torch/fallback.cpp gives it no generator)."""
    tags = getattr(n.target, "tags", ())
    if n.op != "call_function" or torch.Tag.nondeterministic_seeded not in tags:
        return False
    if n.target is torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default:
        p = n.args[3] if len(n.args) > 3 else n.kwargs.get("dropout_p", 0.0)
        return p != 0.0
    return True


def _is_backward(n: torch.fx.Node) -> bool:
    return n.meta.get("partitioner_tag") == "is_backward"


def _save_random_bits(joint: torch.fx.GraphModule, n: torch.fx.Node) -> None:
    """A random op in a recomputed region: its bits are kept for the backward
    instead of drawn again. native_dropout keeps only its bool mask: the
    backward's uses of its output read `native_dropout_backward(x, mask,
    scale)`, recomputed from the region's recomputed input (the same values
    as the forward's output, up to the sign of dropped zeros)."""
    from torch.utils.checkpoint import CheckpointPolicy

    users = list(n.users)
    n.meta.pop("recompute", None)  # drawn once, in the forward
    if n.target is torch.ops.aten.native_dropout.default and len(n.args) >= 2:
        outs = {u.args[1]: u for u in users if u.target is operator.getitem}
        x, p = n.args[0], float(n.args[1])
        q = np.float32(1.0) - np.float32(p)  # the scale as the lowering computes it
        scale = 0.0 if q == 0 else float(np.float32(1.0) / q)
        for k, u in outs.items():  # the output is the forward's; the mask is kept
            if k == 1:
                u.meta["recompute"] = CheckpointPolicy.MUST_SAVE
            else:
                u.meta.pop("recompute", None)
        if 0 in outs and 1 in outs:
            y, mask = outs[0], outs[1]
            late = [u for u in y.users if _is_backward(u)]
            if late:
                with joint.graph.inserting_after(mask):
                    r = joint.graph.call_function(
                        torch.ops.aten.native_dropout_backward.default, (x, mask, scale))
                r.meta = {k: v for k, v in y.meta.items()}
                r.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
                for u in late:
                    u.replace_input_with(y, r)
            return
    if isinstance(n.meta.get("val"), (tuple, list)):
        for u in users:
            u.meta["recompute"] = CheckpointPolicy.MUST_SAVE
    else:
        n.meta["recompute"] = CheckpointPolicy.MUST_SAVE


def _partition(joint: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
    """AOTAutograd's min-cut partitioner (the backward recomputes what is
    cheaper to recompute than to keep, e.g. elementwise chains, where the
    default partitioner saves every intermediate). In a checkpointed region a
    random op's bits are saved instead of drawn again (_save_random_bits):
    PyTorch's recompute restores the generator from a CPU state tensor
    (run_with_rng_state), which a kept program cannot follow, so such graphs
    could not be replayed; everything else in the region is recomputed.
    Repeated computations are merged first by _fx_cse (PyTorch's pass imports
    Inductor: 0.7 s of a process's first compiled graph)."""
    from . import _fx_cse  # here: it imports symbolic shapes, which `import tpuc` need not
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch.utils.checkpoint import CheckpointPolicy

    recompute = (CheckpointPolicy.MUST_RECOMPUTE, CheckpointPolicy.PREFER_RECOMPUTE)
    changed = False
    for n in list(joint.graph.nodes):
        if n.meta.get("recompute") in recompute and _draws_random_bits(n):
            _save_random_bits(joint, n)
            changed = True
    if changed:
        joint.recompile()
    if not _fx_cse.enabled():  # PyTorch's own pass, inside the partitioner (imports Inductor)
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)
    joint.graph = _fx_cse.merge_common(joint.graph)  # the setter recompiles
    with torch._functorch.config.patch(cse=False):
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)


def _backward_parts() -> int:
    v = os.environ.get("TPUC_BACKWARD_PROGRAMS", "6").strip()
    try:
        n = int(v)
    except ValueError:
        raise ValueError(f"TPUC_BACKWARD_PROGRAMS={v!r}: expected a whole number >= 1") from None
    if n < 1:
        raise ValueError(f"TPUC_BACKWARD_PROGRAMS={v!r}: expected a whole number >= 1")
    return n


def _nbytes(n: torch.fx.Node) -> int:
    """A node's tensor bytes from its traced value (0 for a tuple: its
    getitems count; a symbolic size by its hint)."""
    v = n.meta.get("val")
    if not isinstance(v, torch.Tensor):
        return 0
    k = v.numel()
    if isinstance(k, torch.SymInt):
        k = k.node.hint
    return int(k) * v.element_size() if isinstance(k, int) else 0


def _cut_points(gm: torch.fx.GraphModule, compute: list[torch.fx.Node], parts: int,
                consts: set[torch.fx.Node]) -> list[int]:
    """The first node (an index into ``compute``) of each of ``parts`` parts.

    Each cut sits near an equal share of the nodes (within half a share) at
    the place where the fewest bytes cross it: the tensors made before the cut
    and read after it (saved activations still to be read, recomputed
    activations, gradients of activations). A part's arguments and the
    values it hands on stay allocated for its whole launch, next to its
    scratch, so a cut inside a block's recompute (its intermediates crossing)
    raises both neighbours' peaks; between blocks only the activation
    gradient and the saved tensors not yet read cross. The backward's
    outputs (parameter gradients) are left out: they stay allocated to the
    end whichever part makes them. Constants (``consts``) cross nothing: each
    part makes its own (_remake_constants)."""
    nodes = list(gm.graph.nodes)
    index = {n: i for i, n in enumerate(compute)}
    outs = set(nodes[-1].all_input_nodes) if nodes and nodes[-1].op == "output" else set()
    m = len(compute)
    # delta[c]: change of the bytes crossing the cut before compute[c]
    delta = [0] * (m + 1)
    for n in nodes:
        if n.op == "output" or n in outs or n in consts:
            continue
        uses = [index[u] for u in n.users if u in index]
        if not uses:
            continue
        first = index[n] + 1 if n in index else 0  # a placeholder crosses from the start
        last = max(uses)
        if last >= first:
            b = _nbytes(n)
            delta[first] += b
            delta[last + 1] -= b
    cross, acc = [], 0
    for c in range(m):
        acc += delta[c]
        cross.append(acc)
    starts = [0]
    half = max(1, m // (2 * parts))
    for k in range(1, parts):
        ideal = k * m // parts
        lo, hi = max(starts[-1] + 1, ideal - half), min(m - (parts - k), ideal + half)
        best = None
        for c in range(lo, hi + 1):
            if compute[c].target is operator.getitem:
                continue  # stays with its producer
            key = (cross[c], abs(c - ideal))
            if best is None or key < best[0]:
                best = (key, c)
        starts.append(best[1] if best is not None else max(starts[-1] + 1, ideal))
    return starts


def _constants(compute: list[torch.fx.Node]) -> set[torch.fx.Node]:
    """The nodes whose value depends on no input: factory ops (full, empty,
    scalar_tensor, ...) that draw nothing, and ops reading only those (e.g.
    the backward's `full_like(empty_permuted(...), 1)`, the ones of every
    block's SiLU backward, which CSE made one tensor for all blocks)."""
    consts: set[torch.fx.Node] = set()
    for n in compute:
        if (n.op == "call_function" and isinstance(n.meta.get("val"), torch.Tensor)
                and torch.Tag.nondeterministic_seeded not in getattr(n.target, "tags", ())
                and all(a in consts for a in n.all_input_nodes)):
            consts.add(n)
    return consts


def _remake_constants(gm: torch.fx.GraphModule, consts: set[torch.fx.Node],
                      part: dict[torch.fx.Node, int]) -> None:
    """A constant read by a later part is made again in that part instead of
    handed to it: handed on, it stays allocated through every part between
    (2.8 MB of ones at the 5M example, from the first part to the last); made
    in the part, XLA fuses it into its readers."""
    made: dict[tuple[torch.fx.Node, int], torch.fx.Node] = {}

    def copy(c: torch.fx.Node, p: int, before: torch.fx.Node) -> torch.fx.Node:
        if part[c] == p:
            return c
        if (c, p) not in made:
            args = torch.fx.node.map_arg(c.args, lambda a: copy(a, p, before))
            kwargs = torch.fx.node.map_arg(c.kwargs, lambda a: copy(a, p, before))
            with gm.graph.inserting_before(before):
                r = gm.graph.call_function(c.target, args, kwargs)  # type: ignore[arg-type]
            r.meta = dict(c.meta)
            part[r] = p
            made[(c, p)] = r
        return made[(c, p)]

    changed = False
    for n in list(gm.graph.nodes):
        if n in consts or n not in part:
            continue
        for a in n.all_input_nodes:
            if a in consts and part[a] != part[n]:
                n.replace_input_with(a, copy(a, part[n], n))
                changed = True
    if changed:
        for n in reversed(list(gm.graph.nodes)):
            if n in consts and not n.users:
                gm.graph.erase_node(n)
        gm.recompile()


def _is_collective(n: torch.fx.Node) -> bool:
    """A functional collective (``_c10d_functional.*``: all_to_all_single, wait_tensor, ...)."""
    return n.op == "call_function" and getattr(n.target, "namespace", None) == "_c10d_functional"


def _split_runner(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    """The backward graph launched as consecutive programs (each recorded and
    replayed like any graph): the saved activations that only the first part
    reads are freed before the next part runs, as eager autograd frees each
    saved tensor after its last use, instead of staying alive next to every
    gradient and the whole backward's scratch memory.

    A backward with a functional collective in it (expert parallelism's all_to_all under
    ``--compile.enable``) stays one program: split, the EP=4 MoE recipe's gradients came out
    wrong (step-1 grad norm 1.5e-3 off the CPU's, eager 1.4e-5; docs/torchtitan.md), cause not
    found yet."""
    from torch.fx.node import map_arg

    from ._torch_compat import split_module_tuple_return

    parts = _backward_parts()
    _unwrap_deterministic_rng(gm)
    compute = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    parts = min(parts, len(compute))
    if parts <= 1 or any(_is_collective(n) for n in compute):
        return _graph_runner(gm, example_inputs)
    # node order is a topological order: the part numbers never decrease
    # along a dependency, so the parts run one after the other. A getitem stays
    # in its producer's part: cut between them, a part would take the
    # producer's whole tuple (e.g. native_dropout's (out, mask)) as one
    # argument, which a program cannot (found with TPUC_BACKWARD_PROGRAMS=6).
    consts = _constants(compute)
    starts = _cut_points(gm, compute, parts, consts)
    part: dict[torch.fx.Node, int] = {}
    k = 0
    for i, n in enumerate(compute):
        while k + 1 < len(starts) and starts[k + 1] <= i:
            k += 1
        src = n.args[0] if n.target is operator.getitem and n.args else None
        part[n] = part[src] if isinstance(src, torch.fx.Node) and src in part else k
    _remake_constants(gm, consts, part)
    top = split_module_tuple_return(gm, lambda n: part[n])
    global _graphs_compiled
    with _lock:
        _graphs_compiled += 1  # one graph for dynamo_compiles, whatever its parts
    runners = {name: _graph_runner(sub, [], part=True) for name, sub in top.named_children()}
    nodes = list(top.graph.nodes)
    last: dict[torch.fx.Node, int] = {}
    for i, n in enumerate(nodes):
        for a in n.all_input_nodes:
            last[a] = i

    def run(args: list[Any]) -> Any:
        inputs = list(reversed(args))  # popped one by one: nothing else holds them
        args.clear()  # boxed call: the saved tensors are ours to drop
        env: dict[torch.fx.Node, Any] = {}
        out = None
        for i, n in enumerate(nodes):
            if n.op == "placeholder":
                env[n] = inputs.pop()
            elif n.op == "call_module":
                env[n] = runners[n.target]([env[a] for a in n.args])
            elif n.op == "call_function":
                fa = map_arg(n.args, lambda a: env[a])
                env[n] = n.target(*fa, **n.kwargs)
            elif n.op == "output":
                out = map_arg(n.args[0], lambda a: env[a])
            for a in n.all_input_nodes:
                if last[a] == i:
                    del env[a]
        return out

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _make_backend() -> Callable:
    from torch._decomp import core_aten_decompositions
    from torch._dynamo.backends.common import aot_autograd

    decompositions = core_aten_decompositions()
    # attention stays one op: the core lowers the fused CPU attention op and its
    # backward (PyTorch's decomposition of it returns a logsumexp the native
    # backward cannot use, and saves the whole probability matrix)
    decompositions.pop(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default, None)
    return aot_autograd(
        partition_fn=_partition,
        fw_compiler=_graph_runner,
        bw_compiler=_split_runner,
        inference_compiler=_graph_runner,
        decompositions=decompositions,
        # an optimizer step's in-place updates stay in its graph (no eager copy_ after it)
        keep_inference_input_mutations=True,
    )


def tpu_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    """torch.compile(model, backend="tpu")."""
    from . import _rng_hops

    _rng_hops.install()  # torch.utils.checkpoint in compiled models (idempotent)
    return _make_backend()(gm, example_inputs)


def register() -> None:
    """Makes the backend name "tpu" known to Dynamo without importing Dynamo.

    The package declares it as an entry point (group ``torch_dynamo_backends``,
    pyproject.toml): Dynamo reads that group the first time a name it does not
    know is looked up, so ``import torch`` (which imports tpuc) no longer
    imports ``torch._dynamo`` (1.2 s on the CPU here). Only where that entry
    point is missing (tpuc imported from a source tree, not installed) is the
    name registered at once, importing Dynamo."""
    from importlib import metadata

    try:
        points = metadata.distribution("tpuc").entry_points
    except metadata.PackageNotFoundError:
        points = []
    if any(e.group == "torch_dynamo_backends" and e.name == "tpu" for e in points):
        return
    from torch._dynamo import list_backends, register_backend

    if "tpu" not in list_backends(exclude_tags=()):
        register_backend(name="tpu", compiler_fn=tpu_backend)
