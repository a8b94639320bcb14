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
``graph_records``, ``graph_replays`` and ``graph_rerecords`` and keeps the
last 64 ``graph_replay_reasons``.

``TPUC_GRAPH_REPLAY=record`` records every call into the same standalone
program (what replay must match bit for bit); ``join`` is the joined mode:
graphs are deferred, a graph joins the ops already pending and stays pending
after it returns, so the forward, the backward and the optimizer step of one
training step become ONE program, re-recorded op by op on every step and
launched when a result is read, when an eager op uses a result, at
``torch.tpu.synchronize()``, or when a graph already recorded since the last
launch starts again (the next step).

Eager code around graph breaks runs in the current eager mode; in "debug"
mode each graph is recorded and runs as soon as it is recorded, so errors
surface at once. A new input shape makes dynamo recompile (its guards), which
the backend counts in ``torch.tpu.stats()["dynamo_compiles"]``.
"""
from __future__ import annotations

import collections
import os
import threading
from typing import Any, Callable

import torch

_lock = threading.Lock()
_graphs_compiled = 0
_GRAPH = 3
_DEBUG = 1
_MODES = ("replay", "record", "join")
_MAX_PLANS = 8  # programs kept per graph (input signatures)
# ids of the graphs recorded since the pending ops last ran (join mode)
_recorded: list[int] = []
_counts = {"graph_records": 0, "graph_replays": 0, "graph_rerecords": 0}
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


def _graph_runner(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    global _graphs_compiled
    from . import _C

    _unwrap_deterministic_rng(gm)

    with _lock:
        _graphs_compiled += 1
        gid = _graphs_compiled
    plans: list[Any] = []  # kept programs, the last one used first
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

    def record(args: list[Any], capture: bool) -> Any:
        _C._flush(-1)  # the graph becomes a program of its own
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
            _C._flush(-1)
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


def _make_backend() -> Callable:
    from torch._decomp import core_aten_decompositions
    from torch._dynamo.backends.common import aot_autograd

    decompositions = core_aten_decompositions()
    # attention stays one op: the core lowers the fused CPU attention op and its
    # backward (PyTorch's decomposition of it returns a logsumexp the native
    # backward cannot use, and saves the whole probability matrix)
    decompositions.pop(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default, None)
    return aot_autograd(
        fw_compiler=_graph_runner,
        bw_compiler=_graph_runner,
        inference_compiler=_graph_runner,
        decompositions=decompositions,
        # an optimizer step's in-place updates stay in its graph (no eager copy_ after it)
        keep_inference_input_mutations=True,
    )


def tpu_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    """torch.compile(model, backend="tpu")."""
    return _make_backend()(gm, example_inputs)


def register() -> None:
    """Registers the backend name "tpu" with dynamo (idempotent)."""
    from torch._dynamo import list_backends, register_backend

    if "tpu" not in list_backends(exclude_tags=()):
        register_backend(name="tpu", compiler_fn=tpu_backend)
    from . import _rng_hops

    _rng_hops.install()  # torch.utils.checkpoint in compiled models
