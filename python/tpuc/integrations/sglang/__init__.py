"""SGLang on the device "tpu": a platform plugin for SGLang 0.5.23 (entry-point group
``sglang.srt.platforms``, name ``tpuc``). SGLang 0.5.23 pins torch 2.14.1: it runs in that venv
(``make sglang-setup``); what runs and its limits are in docs/sglang.md. Modules: ``platform``
(the SRT platform), ``validate`` (out-of-vocabulary token ids refused), ``stats`` (the scheduler
process's ``torch.tpu.stats()`` over SGLang's RPC)."""
from __future__ import annotations

PLATFORM = "tpuc.integrations.sglang.platform.TpuSRTPlatform"


def register() -> str | None:
    """Entry point of ``sglang.srt.platforms``: the platform's name when "tpu" is available."""
    try:
        import torch

        import tpuc  # noqa: F401

        if not torch.tpu.is_available():
            return None
    except Exception:
        return None
    return PLATFORM
