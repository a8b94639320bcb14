"""``torch.tpu.nvtx``: ``torch.cuda.nvtx``'s ranges, as torch.profiler ranges.

NVTX marks a CUDA program's timeline for Nsight. A program ported to "tpu" keeps
its ``range_push``/``range_pop``/``range`` calls; here they open and close
``torch.profiler.record_function`` ranges, so they show in a torch.profiler
trace (and cost a few microseconds when no profiler runs)."""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["range_push", "range_pop", "range_start", "range_end", "mark", "range"]

_local = threading.local()
_open: dict[int, Any] = {}
_open_lock = threading.Lock()
_next_id = [0]


def _stack() -> list[Any]:
    s = getattr(_local, "stack", None)
    if s is None:
        s = _local.stack = []
    return s


def range_push(msg: str) -> int:
    """Opens a nested range on this thread; returns its depth (0 for the outermost)."""
    r = torch.profiler.record_function(msg)
    r.__enter__()
    s = _stack()
    s.append(r)
    return len(s) - 1


def range_pop() -> int:
    """Closes this thread's innermost range; returns its depth, or -1 when none is open."""
    s = _stack()
    if not s:
        return -1
    s.pop().__exit__(None, None, None)
    return len(s)


def range_start(msg: str) -> int:
    """Opens a range that any thread may close with ``range_end(id)``; returns its id."""
    r = torch.profiler.record_function(msg)
    r.__enter__()
    with _open_lock:
        _next_id[0] += 1
        _open[_next_id[0]] = r
        return _next_id[0]


def range_end(range_id: int) -> None:
    with _open_lock:
        r = _open.pop(range_id, None)
    if r is not None:
        r.__exit__(None, None, None)


def mark(msg: str) -> None:
    """An instant: a range of no length."""
    with torch.profiler.record_function(msg):
        pass


@contextlib.contextmanager
def range(msg: str, *args: Any, **kwargs: Any) -> Iterator[None]:
    """``with torch.tpu.nvtx.range("step {}", i):`` (the message is formatted with args)."""
    range_push(msg.format(*args, **kwargs))
    try:
        yield
    finally:
        range_pop()
