"""Eager execution modes of the device "tpu".

- ``"strict"`` (default): one program per op, launched asynchronously; the host
  waits only when it reads data.
- ``"debug"``: every op waits for the device, so an error is raised by the op
  that caused it (also ``TPUC_LAUNCH_BLOCKING=1``).
- ``"fused"``: ops are recorded and run as one program when their results are
  needed (``.item()``, ``.cpu()``, printing, saving, ``torch.tpu.synchronize()``),
  at a size cap, or at loop boundaries detected from the repeating op sequence,
  so that steady-state training steps reuse a few cached programs.

Select with ``TPUC_EAGER=fused``, ``torch.tpu.set_eager_mode("fused")`` or
``with torch.tpu.eager_mode("fused"): ...``. PyTorch's semantics are the same in
every mode: results, in-place ops and views, random numbers and exceptions.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

_MODES = {"strict": 0, "debug": 1, "fused": 2, "graph": 3}
_NAMES = {v: k for k, v in _MODES.items()}


def _core():
    from . import _C

    return _C


def set_eager_mode(mode: str) -> None:
    """Selects "strict", "debug" or "fused" for the whole process."""
    if mode not in ("strict", "debug", "fused"):
        raise ValueError(f"unknown eager mode {mode!r}: use 'strict', 'debug' or 'fused'")
    _core()._set_mode(_MODES[mode])


def get_eager_mode() -> str:
    return _NAMES.get(_core()._get_mode(), "strict")


@contextlib.contextmanager
def eager_mode(mode: str) -> Iterator[None]:
    """Runs the block in `mode`, then restores the previous mode."""
    prev = get_eager_mode()
    set_eager_mode(mode)
    try:
        yield
    finally:
        set_eager_mode(prev)


def set_fused_replay(on: bool) -> None:
    """Fused mode: launch a chunk whose ops repeat a recently recorded chunk's
    from that chunk's program without signing and checking each op (the
    default; ``TPUC_FUSED_REPLAY=0`` turns it off), or record every chunk.
    ``torch.tpu.stats()`` counts ``fused_replays`` and
    ``fused_replay_fallbacks`` with the last ``fused_replay_reasons``."""
    _core()._set_fused_replay(bool(on))


def flush() -> None:
    """Runs the ops recorded in fused mode now (a no-op in other modes)."""
    _core()._flush(-1)


def apply_environment() -> None:
    """Applies TPUC_EAGER from the environment (called when tpuc loads)."""
    mode = os.environ.get("TPUC_EAGER", "").strip().lower()
    if mode:
        set_eager_mode(mode)
