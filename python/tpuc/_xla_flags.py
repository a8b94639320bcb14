"""XLA options tpuc gives the XLA CPU plugin, unless the user's XLA_FLAGS names them.

XLA's plugins read their compiler options once, from the environment variable
``XLA_FLAGS``. With the CPU plugin tpuc puts its options in front of the user's
``XLA_FLAGS`` when it registers (before the plugin compiles anything):

- ``--xla_cpu_use_xnnpack=false``, on every CPU. **Correctness** (issue 29): XLA's CPU
  runtime runs some matmuls through XNNPACK (on AMD Rome/Milan, f32 dots whose sizes a
  small cost model picks, and bf16 dots on CPUs with AVX512-BF16), and when the dot's
  right operand is a parameter of the program it packs that operand once and reuses
  the packing on later runs while the parameter's *address* is unchanged
  (xnn_fusion_thunk.cc, "Reuse XNN executable": the captured arguments are compared by
  address, not content). tpuc updates buffers in place (donation: an optimizer's
  ``param.add_`` writes the new weight into the old memory) and the host heap hands a
  freed buffer's memory to the next one, so the same address holds new values: a
  Linear layer's input gradient was computed from the weight before the update.
  Without XNNPACK, XLA's own dot (Eigen) reads its operands on every run.
- ``--xla_cpu_prefer_vector_width=512`` on a CPU that has AVX-512: XLA's default of
  256-bit vectors for its generated (fused elementwise, reduction) kernels leaves half
  of each AVX-512 register unused. Measured on an Intel Xeon with AVX-512
  (docs/execution.md, "Where the Xeon's gap is"): the replayed 5M training step's
  programs take 0.94x the CPU time of the default's on one core (median of 7 runs each,
  alternating); the matmuls (oneDNN's kernels, chosen at run time) are unaffected.

A user's ``XLA_FLAGS`` that names an option (any value) wins: that one is not added.
``TPUC_XLA_DEFAULTS=off`` adds nothing (then the core guards every dot's right operand
instead: csrc/core/lower/linalg.c). Another plugin (libtpu, CUDA) gets nothing. The
disk compile cache keys programs by ``XLA_FLAGS`` (csrc/core/runtime/disk_cache.c), so
a program compiled under other options is never loaded for these.
"""
from __future__ import annotations

import os

# (option, value, the CPU feature flag it needs or None)
_CPU_DEFAULTS: list[tuple[str, str, str | None]] = [
    ("xla_cpu_use_xnnpack", "false", None),
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
        if needs is not None and needs not in features:
            continue
        if _named(user, option):
            kept = True
        else:
            added.append(f"--{option}={value}")
    if not added:
        return None, "none added" + (" (XLA_FLAGS sets them)" if kept else "")
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
