"""SGLang on the device "tpu": a platform plugin for SGLang 0.5.23 (entry-point group
``sglang.srt.platforms``, name ``tpuc``). SGLang 0.5.23 pins torch 2.14.1: it runs in that venv
(``make sglang-setup``); what runs and its limits are in docs/sglang.md. Modules: ``platform``
(the SRT platform), ``validate`` (out-of-vocabulary token ids refused), ``stats`` (the scheduler
process's ``torch.tpu.stats()`` over SGLang's RPC)."""
from __future__ import annotations

PLATFORM = "tpuc.integrations.sglang.platform.TpuSRTPlatform"


def register() -> str | None:
    """Entry point of ``sglang.srt.platforms``: the platform's name when "tpu" is available.

    Declines when ``SGLANG_USE_CPU_ENGINE=1``: SGLang consults that switch only when no plugin
    activated, so without this an explicit request for SGLang's own CPU engine (the reference
    a benchmark compares against) could never be honoured while tpuc is installed."""
    import os

    if os.environ.get("SGLANG_USE_CPU_ENGINE", "0") == "1":
        return None
    try:
        import torch

        import tpuc  # noqa: F401

        if not torch.tpu.is_available():
            return None
    except Exception:
        return None
    return PLATFORM
