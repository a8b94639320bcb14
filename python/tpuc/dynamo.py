"""The torch.compile backend "tpu".

AOTAutograd splits a captured function into a forward and a backward graph of
core ATen ops (decomposed with PyTorch's core-ATen table); an optimizer step
compiled with the model is a third, inference graph whose updates of
parameters and state stay inside the graph (``keep_inference_input_mutations``).
Each graph runs through the same op path as eager mode, recorded in the
engine's GRAPH mode. Graphs are deferred: a graph joins the ops already
pending and stays pending after it returns, so the forward, the backward and
the optimizer step of one training step become ONE XLA program, launched when
a result is read (``loss.item()``), when an eager op uses a result, at
``torch.tpu.synchronize()``, or when a graph already recorded since the last
launch starts again (the next step). Parameters and optimizer state updated
by that program are donated: the program writes the new values into the old
buffers' memory. Programs are compiled once and cached (memory and disk).

Eager code around graph breaks runs in the current eager mode; in "debug"
mode each graph runs as soon as it is recorded, so errors surface at once. A
new input shape makes dynamo recompile (its guards), which the backend counts
in ``torch.tpu.stats()["dynamo_compiles"]``.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import torch

_lock = threading.Lock()
_graphs_compiled = 0
_GRAPH = 3
_DEBUG = 1
# ids of the graphs recorded since the pending ops last ran
_recorded: list[int] = []


def graphs_compiled() -> int:
    return _graphs_compiled


def _graph_runner(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    global _graphs_compiled
    from . import _C

    with _lock:
        _graphs_compiled += 1
        gid = _graphs_compiled

    def run(args: list[Any]) -> Any:
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
