"""``SGLangEngine``: SGLang 0.5.23 as the rollout engine, in its own process (torch-2.14.1 venv).

    from tpuc.post_training.sglang_engine import SGLangEngine
    from tpuc.post_training.engine import SamplingSpec

    with SGLangEngine("/path/hf_dir", device="tpu") as engine:     # spawns the engine process
        outs = engine.generate([[1, 5, 7]], SamplingSpec(n=4, max_tokens=8))
        stats = engine.update_weights(model.named_parameters())    # HF names, any device

SGLang pins torch 2.14.1 and lives in ``.venv-torch-2.14.1`` (``make sglang-setup``); the trainer
may run in any venv. The engine process is ``python -m tpuc.integrations.sglang.sync_server`` in
that venv's Python (``python=``, default ``$TPUC_SGLANG_PYTHON`` or
``<repo>/.venv-torch-2.14.1/bin/python``): it drives ``sglang.Engine(model_path=...,
device="tpu")`` and loads each weight update with SGLang's own ``update_weights_from_tensor``
(the module says why the tensors cross on tpuc's socket first). Everything else -- the
authenticated connect-back, streaming, ``detach``/``attach``, reaping the process on ``close``
or on any failure -- is :class:`~tpuc.post_training.vllm_engine.VLLMEngine`'s.

The model directory needs only config.json and the weights (``skip_tokenizer_init``: token ids
in, token ids out). Limits (docs/post_training.md): ``SamplingSpec.seed`` is not applied; one
update is handed to SGLang as one list (the engine process holds a full host copy of the model
while it loads).
"""
from __future__ import annotations

import os
from pathlib import Path

from .vllm_engine import _REPO, VLLMEngine

SGLANG_VENV = ".venv-torch-2.14.1"


def default_sglang_python() -> str:
    """``$TPUC_SGLANG_PYTHON``, else the torch-2.14.1 venv beside the checkout (the source
    tree's, or the current directory's for an installed tpuc)."""
    env = os.environ.get("TPUC_SGLANG_PYTHON")
    if env:
        return env
    for root in (_REPO, Path.cwd()):
        p = root / SGLANG_VENV / "bin" / "python"
        if p.exists():
            return str(p)
    return str(_REPO / SGLANG_VENV / "bin" / "python")


class SGLangEngine(VLLMEngine):
    """A :class:`~tpuc.post_training.engine.RolloutEngine` served by SGLang in another process."""

    def __init__(self, model_dir: str | os.PathLike, *, device: str = "tpu",
                 python: str | None = None, context_length: int = 256, seed: int = 0,
                 dtype: str = "float32", max_running_requests: int = 16,
                 max_total_tokens: int = 4096, start_timeout: float = 900.0,
                 request_timeout: float = 600.0, env: dict[str, str] | None = None,
                 log_path: str | None = None, host: str = "127.0.0.1",
                 secret: str | None = None) -> None:
        if device != "tpu":
            # SGLang 0.5.23's own CPU engine imports sgl_kernel's CPU build, which PyPI does not
            # have (docs/sglang.md "Benchmark"): "tpu" is the only device it starts on here
            raise ValueError(f'SGLangEngine runs on device "tpu" only, not {device!r}')
        self._prepare(device, model_dir, python or default_sglang_python(), request_timeout,
                      secret, log_path, log_prefix="tpuc-sglang",
                      missing_python=("SGLang's venv Python {python} does not exist: run "
                                      f"`make sglang-setup` (SGLang lives in {SGLANG_VENV}) or "
                                      "pass python= / set TPUC_SGLANG_PYTHON"))
        argv = ["--model", self.model_dir, "--device", device, "--dtype", dtype,
                "--context-length", str(context_length),
                "--max-running-requests", str(max_running_requests),
                "--max-total-tokens", str(max_total_tokens), "--seed", str(seed)]
        self._spawn("tpuc.integrations.sglang.sync_server", argv, host=host,
                    start_timeout=start_timeout, env=env)

    def __enter__(self) -> "SGLangEngine":
        return self
