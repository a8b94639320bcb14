"""The torch.compile backend "tpu".

AOTAutograd splits a captured function into a forward and a backward graph of
core ATen ops (decomposed with PyTorch's core-ATen table). Each graph runs
through the same op path as eager mode, recorded in the engine's GRAPH mode
and cut exactly at the graph's ends, so each graph is one XLA program: built
and compiled on the first call (or loaded from the disk cache), taken from the
signature cache afterwards. Eager code around graph breaks runs in the current
eager mode. A new input shape makes dynamo recompile (its guards), which the
backend counts in ``torch.tpu.stats()["dynamo_compiles"]``.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import torch

_lock = threading.Lock()
_graphs_compiled = 0
_GRAPH = 3


def graphs_compiled() -> int:
    return _graphs_compiled


def _graph_runner(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    global _graphs_compiled
    from . import _C

    with _lock:
        _graphs_compiled += 1

    def run(args: list[Any]) -> Any:
        prev = _C._get_mode()
        _C._set_mode(_GRAPH)  # flushes what eager code left pending
        try:
            out = gm(*args)
            _C._flush(-1)
        finally:
            _C._set_mode(prev)
        return out

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _make_backend() -> Callable:
    from torch._decomp import core_aten_decompositions
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(
        fw_compiler=_graph_runner,
        bw_compiler=_graph_runner,
        inference_compiler=_graph_runner,
        decompositions=core_aten_decompositions(),
    )


def tpu_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    """torch.compile(model, backend="tpu")."""
    return _make_backend()(gm, example_inputs)


def register() -> None:
    """Registers the backend name "tpu" with dynamo (idempotent)."""
    from torch._dynamo import list_backends, register_backend

    if "tpu" not in list_backends(exclude_tags=()):
        register_backend(name="tpu", compiler_fn=tpu_backend)
