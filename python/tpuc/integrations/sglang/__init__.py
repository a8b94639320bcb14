"""SGLang on the device "tpu": a platform plugin for SGLang 0.5.23 (entry-point group
``sglang.srt.platforms``, name ``tpuc``). SGLang 0.5.23 pins torch 2.14.1 and installs next to
tpuc's torch 2.13 only with ``pip install --no-deps``; what runs and what stops an end-to-end run
is in docs/serving.md ("SGLang")."""
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
