"""XLA options tpuc gives the XLA CPU plugin, unless the user's XLA_FLAGS names them.

XLA's plugins read their compiler options once, from the environment variable
``XLA_FLAGS``. With the CPU plugin on a CPU that has AVX-512, tpuc puts
``--xla_cpu_prefer_vector_width=512`` in front of the user's ``XLA_FLAGS`` when it
registers (before the plugin compiles anything): XLA's default of 256-bit vectors for
its generated (fused elementwise, reduction) kernels leaves half of each AVX-512
register unused. Measured on an Intel Xeon with AVX-512 (docs/execution.md, "Where
the Xeon's gap is"): the replayed 5M training step's programs take 0.94x the CPU time
of the default's on one core (median of 7 runs each, alternating); the matmuls (oneDNN's kernels, chosen at run time) are
unaffected.

A user's ``XLA_FLAGS`` that names the option (any value) wins: nothing is added.
``TPUC_XLA_DEFAULTS=off`` adds nothing. Another plugin (libtpu, CUDA) gets nothing.
The disk compile cache keys programs by ``XLA_FLAGS`` (csrc/core/runtime/disk_cache.c),
so a program compiled under other options is never loaded for these.
"""
from __future__ import annotations

import os

# (option, value, the CPU feature flag it needs)
_CPU_DEFAULTS: list[tuple[str, str, str]] = [
    ("xla_cpu_prefer_vector_width", "512", "avx512f"),
]

_state = "not decided"


def cpu_flags(path: str = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags (Linux's /proc/cpuinfo); empty where unreadable."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _named(user: str, option: str) -> bool:
    """Whether the user's XLA_FLAGS sets `option` (``--option=v`` or ``--option``)."""
    for word in user.split():
        name = word.lstrip("-").split("=", 1)[0]
        if name in (option, "no" + option):
            return True
    return False


def decide(plugin_is_cpu: bool, user: str | None, features: set[str],
           setting: str | None = None) -> tuple[str | None, str]:
    """The XLA_FLAGS to set (None: leave it as it is) and why, for ``tpuc info``."""
    setting = (setting or "auto").strip().lower() or "auto"
    if setting in ("off", "0", "none"):
        return None, f"none added (TPUC_XLA_DEFAULTS={setting})"
    if setting != "auto":
        return None, f"none added (TPUC_XLA_DEFAULTS={setting!r} is not auto or off)"
    if not plugin_is_cpu:
        return None, "none added (not the XLA CPU plugin)"
    user = user or ""
    added, kept = [], False
    for option, value, needs in _CPU_DEFAULTS:
        if needs not in features:
            continue
        if _named(user, option):
            kept = True
        else:
            added.append(f"--{option}={value}")
    if not added:
        return None, "none added" + (" (XLA_FLAGS sets them)" if kept else
                                      " (the CPU has no AVX-512)")
    return " ".join(added + ([user] if user else [])), " ".join(added) + " (TPUC_XLA_DEFAULTS=auto)"


def apply(plugin_is_cpu: bool) -> str:
    """Applies the decision once per process (before the plugin compiles anything);
    returns what was decided."""
    global _state
    if _state != "not decided":
        return _state
    flags, why = decide(plugin_is_cpu, os.environ.get("XLA_FLAGS"), cpu_flags(),
                        os.environ.get("TPUC_XLA_DEFAULTS"))
    if flags is not None:
        os.environ["XLA_FLAGS"] = flags
    _state = why
    return why


def state() -> str:
    return _state
