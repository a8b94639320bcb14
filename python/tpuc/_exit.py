"""Keeps PyTorch's autograd device threads out of Python while the interpreter finalizes.

PyTorch runs the backward of device tensors on a thread of its own per device index (the
autograd engine's device threads; CPU tensors use the calling thread), and that thread needs the
GIL now and then: to run a Python autograd Function or hook, and, since torch 2.x, to drop a
reference to any tensor or object Python can also see (the engine keeps such objects in each
backward's state and drops them after it has woken the caller). Once the script has ended and the
interpreter has started finalizing, Python ends a thread that asks for the GIL (``pthread_exit``)
or stops the process with a fatal error; ending a C++ thread unwinds through a ``noexcept``
destructor of the engine. Either way the process dies after the script finished:
"terminate called without an active exception" (exit status 134) or "Fatal Python error:
PyEval_SaveThread". Seen on "tpu" with torch 2.13 and Python 3.11 in about one of five fresh runs
of a script whose last statement was a backward, and every time when a background thread's
backward runs a Python Function at exit. CUDA's device threads share the race (PyTorch issues
38228 and 38230 describe its kind).

``park()`` runs at exit (``atexit``, before the finalizing starts): for each "tpu" device it
queues a backward of an empty tensor whose Python Function never returns, and waits (the GIL
released) until the device's thread has entered it. A device thread runs one task at a time, so by
then it has finished what it was doing, with the GIL available to it; from then on it waits on a
lock that is never released and does not touch Python again. PyTorch's engine would wait up to
10 s at exit for its threads to stop; ``TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT=0`` (PyTorch's own
variable, set here only when a thread was parked) tells it not to, and the parked threads end
with the process. ``TPUC_EXIT_PARK=0`` turns this off (docs/environment.md)."""
from __future__ import annotations

import os
import threading
from typing import Any

WAIT_S = 5.0  # the longest park() waits for a device thread busy with a backward
_parked = False  # a second park() would wait WAIT_S behind the parked threads


class _Park:
    """A backward that never returns; `entered` is set once a device thread runs it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.forever = threading.Event()  # never set


def _function(park: _Park) -> Any:
    import torch

    class Parked(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x.new_empty(0)

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            park.entered.set()
            park.forever.wait()
            return grad

    return Parked


def park() -> None:
    """Parks every "tpu" device's autograd thread; never raises."""
    global _parked
    if _parked or os.environ.get("TPUC_EXIT_PARK", "1") == "0":
        return
    try:
        import torch

        from . import _C

        if not _C._is_initialized():
            return  # nothing ran on "tpu": its device threads hold nothing of Python's
        _parked = True
        parked = 0
        for index in range(torch.tpu.device_count()):
            p = _Park()
            fn = _function(p)

            def run(index: int = index, fn: Any = fn) -> None:
                with torch.enable_grad():
                    x = torch.empty(0, device=f"tpu:{index}", requires_grad=True)
                    torch.autograd.backward(fn.apply(x), torch.empty(0, device=f"tpu:{index}"))

            threading.Thread(target=run, name=f"tpuc-exit-park-{index}", daemon=True).start()
            if p.entered.wait(WAIT_S):
                parked += 1
        if parked:
            os.environ["TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT"] = "0"
    except Exception:  # exiting: a failure here must not become the script's
        pass
