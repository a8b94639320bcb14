"""The SGLang rollout-engine process (torch-2.14.1 venv): ``python -m tpuc.integrations.sglang.sync_server``.

    python -m tpuc.integrations.sglang.sync_server --connect 127.0.0.1:PORT --model DIR \
        [--device tpu|cpu] [--context-length N] [--seed S] ...

Started by :class:`tpuc.post_training.sglang_engine.SGLangEngine` (the trainer's side, any venv),
which hands it the job's secret in ``TPUC_WIRE_SECRET``. It builds one ``sglang.Engine`` (SGLang
0.5.23; its scheduler runs in SGLang's own subprocess) and answers the trainer over
:mod:`tpuc.post_training.wire` (:func:`tpuc.post_training.engine_server.run_child`).

Weights: the trainer streams ``tensor`` frames (Hugging Face names, host bytes) into this
process; :meth:`SGLangSession.update` hands them to SGLang's own
``Engine.update_weights_from_tensor``, which serializes them to the scheduler process and loads
them through the model's ``load_weights`` (q/k/v and gate/up stacked by SGLang's loaders), then
flushes the prefix cache. Why through this process and not ``update_weights_from_tensor`` from
the trainer: SGLang lives only in the torch-2.14.1 venv, and a trainer in another venv (torch
2.13.0) cannot import it; the tensors' bytes cross the process boundary once on tpuc's socket.
Nothing goes through the disk (``update_weights_from_disk`` would write and re-read a
checkpoint per step).

``--device cpu`` asks for SGLang's own CPU engine (``SGLANG_USE_CPU_ENGINE=1``, tpuc's platform
declines); SGLang 0.5.23's needs sgl_kernel's CPU build, which PyPI does not have, so
``SGLangEngine`` refuses it (docs/sglang.md "Benchmark").
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from typing import Any, Iterator

import torch

logger = logging.getLogger(__name__)


class SGLangSession:
    """One ``sglang.Engine`` answering one trainer (see the module docstring)."""

    def __init__(self, model: str, *, device: str, dtype: str = "float32",
                 context_length: int = 256, max_running_requests: int = 16,
                 max_total_tokens: int = 4096, seed: int = 0) -> None:
        if device == "cpu":
            os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
        import sglang

        self.device = device
        self.engine = sglang.Engine(
            model_path=model, device=device, dtype=dtype, context_length=context_length,
            max_total_tokens=max_total_tokens, max_running_requests=max_running_requests,
            skip_tokenizer_init=True, skip_server_warmup=True, random_seed=seed,
            log_level="error")
        self.updates = 0

    def generate(self, prompts: list[list[int]], spec: dict[str, Any]) -> list[list[dict]]:
        """``n`` completions per prompt: each prompt is sent ``n`` times (SGLang's radix cache
        prefills it once); SGLang ignores the end-of-sequence token as vLLM's session does
        (``stop_token_ids`` stop), and ``seed`` is not applied (SGLang 0.5.23 has no per-request
        seed without its deterministic mode)."""
        n = int(spec.get("n", 1))
        params = {"max_new_tokens": int(spec.get("max_tokens", 16)),
                  "temperature": float(spec.get("temperature", 1.0)),
                  "top_p": float(spec.get("top_p", 1.0)), "ignore_eos": True}
        stops = [int(t) for t in spec.get("stop_token_ids", ())]
        if stops:
            params["stop_token_ids"] = stops
        logprobs = bool(spec.get("logprobs", False))
        flat = [[int(t) for t in p] for p in prompts for _ in range(n)]
        if not flat:
            return [[] for _ in prompts]
        outs = self.engine.generate(input_ids=flat, sampling_params=params,
                                    return_logprob=logprobs)
        res: list[list[dict]] = []
        for i in range(len(prompts)):
            group = []
            for o in outs[i * n:(i + 1) * n]:
                ids = [int(t) for t in o["output_ids"]]
                lps = None
                if logprobs:
                    lps = [float(e[0]) for e in o["meta_info"]["output_token_logprobs"]]
                group.append({"token_ids": ids, "logprobs": lps})
            res.append(group)
        return res

    def update(self, tensors: Iterator[tuple[str, torch.Tensor]]) -> None:
        """Loads ``tensors`` (checkpoint names) through SGLang's ``update_weights_from_tensor``
        (the whole update at once: SGLang serializes the list to its scheduler)."""
        named = list(tensors)
        self._wait_idle()  # the update's own cache flush then finds the scheduler idle
        self.engine.begin_weight_update()
        try:
            ok, msg = self.engine.update_weights_from_tensor(named)
        finally:
            self.engine.end_weight_update()
        if not ok:
            raise RuntimeError(f"SGLang refused the weights: {msg}")
        self._wait_idle()  # cached prefixes hold keys/values of the old weights
        self.updates += 1

    def _wait_idle(self, timeout: float = 60.0) -> None:
        """Flushes the prefix cache. SGLang refuses a flush while a request is still in its
        running batch, and an answer can reach the caller one scheduler step before its request
        leaves it: retry until the flush succeeds."""
        deadline = time.monotonic() + timeout
        while not self.engine.flush_cache().success:
            if time.monotonic() > deadline:
                raise RuntimeError(f"SGLang's scheduler did not become idle in {timeout:.0f} s")
            time.sleep(0.05)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"updates": self.updates, "device": self.device}
        if self.device == "tpu":
            from . import stats

            with tempfile.TemporaryDirectory() as d:
                s = stats.read(self.engine, os.path.join(d, "stats.json"))
            out.update({k: v for k, v in s.items() if isinstance(v, (int, float))})
        return out

    def shutdown(self) -> None:
        self.engine.shutdown()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tpuc.integrations.sglang.sync_server")
    ap.add_argument("--connect", required=True, help="HOST:PORT the trainer listens on")
    ap.add_argument("--model", required=True, help="Hugging Face directory (config + weights)")
    ap.add_argument("--device", default="tpu", choices=["tpu", "cpu"])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--context-length", type=int, default=256)
    ap.add_argument("--max-running-requests", type=int, default=16)
    ap.add_argument("--max-total-tokens", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--listen-host", default="127.0.0.1",
                    help="interface of this engine's own listener (attach); loopback by default")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[sglang engine %(process)d] %(message)s")
    from tpuc.post_training.engine_server import run_child

    def make() -> SGLangSession:
        return SGLangSession(a.model, device=a.device, dtype=a.dtype,
                             context_length=a.context_length,
                             max_running_requests=a.max_running_requests,
                             max_total_tokens=a.max_total_tokens, seed=a.seed)

    rc = run_child(a.connect, a.listen_host, a.device, make, shutdown=lambda s: s.shutdown())
    sys.stdout.flush()
    sys.stderr.flush()
    return rc


if __name__ == "__main__":
    sys.exit(main())
