"""``TpuWorker``: vLLM's GPU ``Worker`` with its device set to "tpu" and ``TpuModelRunner``.

The inherited worker does the rest as on a GPU: it loads the model through vLLM's model loader
onto ``self.device``, answers the engine's RPCs (``execute_model``, ``sample_tokens``,
``reload_weights``, ``collective_rpc``), and runs the KV-cache set-up. Changed here: device
initialisation, how much memory the KV cache gets (PJRT reports no memory size for the XLA CPU
plugin, so ``kv_cache_memory_bytes`` or ``DEFAULT_KV_CACHE_BYTES`` decides), and sleep mode
(vLLM's CUDA memory pool has no "tpu" counterpart).

Live weight updates (docs/serving.md): ``reload_weights(weights_iterator=...)`` is vLLM's own
in-place reload; ``update_weights_from_state_dict`` is the same from a plain ``{name: tensor}``
(what a trainer has), callable through ``LLM.collective_rpc`` from the process that owns the
engine or, over vLLM's IPC, from the front-end process while the engine runs in another one;
``update_weights_from_path`` loads what another process (a trainer) saved as safetensors.
"""
from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from vllm.config import set_current_vllm_config
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.workspace import init_workspace_manager

from .platform import TpuPlatform

logger = logging.getLogger(__name__)

DEFAULT_KV_CACHE_BYTES = 1 << 30


class TpuWorker(Worker):
    def init_device(self) -> None:
        from vllm.utils.torch_utils import set_random_seed

        if not torch.tpu.is_available():
            raise RuntimeError(f'device "tpu" unavailable: {torch.tpu.unavailable_reason()}')
        self.device = torch.device("tpu", self.local_rank)
        torch.tpu.set_device(self.device)
        TpuPlatform.check_if_supports_dtype(self.model_config.dtype)
        init_worker_distributed_environment(
            self.vllm_config, self.rank, self.distributed_init_method, self.local_rank,
            TpuPlatform.dist_backend)
        set_random_seed(self.model_config.seed)
        init_workspace_manager(self.device, 1, 1)
        from .model_runner import TpuModelRunner

        self.model_runner = TpuModelRunner(self.vllm_config, self.device)

    def _maybe_get_memory_pool_context(self, tag: str) -> AbstractContextManager:
        return nullcontext()  # vLLM's CuMem pool (sleep mode) has no "tpu" counterpart

    def determine_available_memory(self) -> int:
        explicit = self.cache_config.kv_cache_memory_bytes
        if explicit:
            return int(explicit)
        total = torch.tpu.get_device_properties(self.device).total_memory
        if total:
            util = self.cache_config.gpu_memory_utilization
            return max(0, int(total * util) - torch.tpu.memory_allocated(self.device))
        logger.info("the device reports no memory size; %d bytes for the KV cache "
                    "(set kv_cache_memory_bytes to change)", DEFAULT_KV_CACHE_BYTES)
        return DEFAULT_KV_CACHE_BYTES

    def compile_or_warm_up_model(self) -> Any:
        from vllm.utils.torch_utils import set_random_seed
        from vllm.v1.worker.worker_base import CompilationTimes

        set_random_seed(self.model_config.seed)
        return CompilationTimes(language_model=0.0, encoder=0.0)

    def sleep(self, level: int = 1) -> None:
        logger.warning('sleep mode is not supported on "tpu"; ignored')

    def wake_up(self, tags: list[str] | None = None) -> None:
        logger.warning('sleep mode is not supported on "tpu"; ignored')

    # -- live weight updates ---------------------------------------------------------------
    def update_weights_from_state_dict(self, state_dict: dict[str, torch.Tensor]) -> int:
        """Loads checkpoint-format weights ({name: tensor}, any device) into the running
        model in place; returns the number of tensors loaded. The next step uses them."""
        with set_current_vllm_config(self.vllm_config):
            self.model_runner.reload_weights(weights_iterator=list(state_dict.items()))
        torch.tpu.synchronize()
        return len(state_dict)

    def update_weights_from_path(self, path: str) -> int:
        """The same from a safetensors file (or a directory of them) that another process -- a
        trainer -- wrote; the OpenAI server exposes it as POST /collective_rpc
        {"method": "update_weights_from_path", "args": [path]} (VLLM_SERVER_DEV_MODE=1)."""
        import glob
        import os

        from safetensors.torch import load_file

        files = sorted(glob.glob(os.path.join(path, "*.safetensors"))) if os.path.isdir(path) else [path]
        if not files:
            raise FileNotFoundError(f"no .safetensors file at {path}")
        state: dict[str, torch.Tensor] = {}
        for f in files:
            state.update(load_file(f))
        return self.update_weights_from_state_dict(state)

    def tpu_step_shapes(self) -> list[tuple[int, ...]]:
        """The model runner's recent steps: (requests, tokens, token bucket, request bucket,
        context bucket, programs compiled during the step)."""
        return list(self.model_runner.step_shapes)

    def tpu_buckets(self) -> dict[str, list[int]]:
        """The shape buckets in use (docs/serving.md "Shapes and compiles")."""
        return {"tokens": list(self.model_runner.token_buckets),
                "requests": list(self.model_runner.request_buckets)}

    def tpu_stats(self) -> dict[str, Any]:
        """tpuc's counters in the worker's process (compiles, fallbacks, ...)."""
        s = torch.tpu.stats()
        return {k: v for k, v in s.items() if k != "recompile_reasons"} | {
            "recompile_reasons": list(s["recompile_reasons"])}
