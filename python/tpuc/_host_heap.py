"""Keeping freed host memory when the device is the host (the XLA CPU plugin).

On the XLA CPU plugin a device buffer and each program's scratch memory are
ordinary ``malloc`` blocks. glibc hands out blocks above 32 MiB (and blocks a
thread's own arena, capped at 64 MiB, cannot hold) as fresh ``mmap`` regions
and unmaps them on ``free``; the kernel then zero-fills every 4 KiB page on
first touch. A training step compiled as one program has ~170 MB of scratch
for the 5M example model: 42,000 page faults per step, measured, and a fifth
of the step's time.

So, when tpuc loads and the plugin is the CPU one, it asks glibc to serve big
blocks from the main heap (``M_MMAP_MAX=0`` with one arena, ``M_ARENA_MAX=1``)
and to keep up to 2 GiB of freed memory at the heap's top instead of returning
it (``M_TRIM_THRESHOLD``): for host memory, what a device caching allocator
does on a GPU. The price is the one a caching allocator has: the process's
resident memory stays at its peak, and its threads share one malloc arena.
``TPUC_HOST_HEAP=system`` leaves malloc as it is; ``keep`` applies the
setting with any plugin. It must run before the plugin's threads first
allocate, which is why it runs when tpuc registers (``import torch``).
"""
from __future__ import annotations

import ctypes
import os

# mallopt parameter numbers from glibc's <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
_KEEP_BYTES = 2**31 - 1  # mallopt takes an int: 2 GiB

_state = "not decided"


def decide(plugin_is_cpu: bool) -> tuple[bool, str]:
    """Whether to keep freed memory, and why (for ``tpuc info``)."""
    choice = os.environ.get("TPUC_HOST_HEAP", "auto").strip().lower() or "auto"
    if choice == "system":
        return False, "system malloc (TPUC_HOST_HEAP=system)"
    if choice not in ("auto", "keep"):
        return False, f"system malloc (TPUC_HOST_HEAP={choice!r} is not auto, keep or system)"
    if choice == "auto" and not plugin_is_cpu:
        return False, "system malloc (the plugin's memory is not the host heap)"
    return True, f"freed memory kept, up to 2 GiB (TPUC_HOST_HEAP={choice})"


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 — present only in glibc
        return libc
    except (OSError, AttributeError):
        return None


def apply(plugin_is_cpu: bool) -> str:
    """Applies the decision once per process; returns the state it leaves."""
    global _state
    if _state != "not decided":
        return _state
    keep, why = decide(plugin_is_cpu)
    if keep:
        libc = _glibc()
        if libc is None:
            why = "system malloc (not glibc)"
        else:
            ok = (libc.mallopt(_M_ARENA_MAX, 1) and libc.mallopt(_M_MMAP_MAX, 0)
                  and libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES))
            if not ok:
                why = "system malloc (mallopt refused the setting)"
    _state = why
    return _state


def state() -> str:
    """What this process's malloc does with freed memory (see the module)."""
    return _state
