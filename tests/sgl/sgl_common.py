"""Helpers and fixtures of the SGLang tests: tiny local models built offline, an ``sglang.Engine``
on "tpu", transformers' greedy references on the CPU. Test modules import the fixtures they use.

Not a conftest.py: tests/serving's tests import their ``conftest`` by name, and a second module
of that name would replace theirs in ``sys.modules`` when pytest collects both folders.

SGLang 0.5.23 pins torch 2.14.1 and lives in that venv (`make sglang-setup`; `make test-sglang`
runs these tests there). Under any other Python the tests are skipped with that reason.
The folder is tests/sgl, not tests/sglang: a folder named sglang on sys.path is a namespace
package that `find_spec("sglang")` finds where SGLang is not installed.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
HAVE_SGLANG = importlib.util.find_spec("sglang") is not None
SKIP_REASON = ("SGLang is not installed in this Python; the SGLang tests run in the torch-2.14.1 "
               "venv: make sglang-setup && make test-sglang")
PROMPTS = ["the quick brown fox", "hello world, how are you today?", "once upon a time",
           "a b c d e f g h i j k"]
MAX_NEW = 8
CONTEXT = 128  # the engines' context length (the tiny configs allow 512)
CHUNK = 16  # the Llama engine's chunked-prefill size: a longer prompt is prefilled in chunks
needs_sglang = pytest.mark.skipif(not HAVE_SGLANG, reason=SKIP_REASON)

sys.path.insert(0, str(HERE.parent / "serving"))  # tiny_models, http_json
os.environ.setdefault("TPUC_CACHE_DIR", str(HERE.parents[1] / "build" / "sglang-cache"))


def prompt_ids(model_dir: str) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    return [tok(p).input_ids for p in PROMPTS]


def hf_greedy(model_dir: str, ids: list[list[int]], n: int = MAX_NEW) -> list[list[int]]:
    """transformers' greedy generate() on the CPU, one prompt at a time, EOS ignored."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None  # run n tokens, EOS scored like any other token
    out = []
    with torch.no_grad():
        for p in ids:
            x = torch.tensor([p])
            y = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n,
                               do_sample=False, pad_token_id=1)
            out.append(y[0, len(p):].tolist())
    return out


def engine_kwargs(model_dir: str) -> dict:
    return dict(model_path=model_dir, device="tpu", dtype="float32", context_length=CONTEXT,
                max_total_tokens=4096, max_running_requests=16, skip_server_warmup=True,
                random_seed=0, log_level="error")


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> dict[str, str]:
    import tiny_models

    root = tmp_path_factory.mktemp("models")
    return {"llama": tiny_models.build("llama", root, seed=0),
            "llama_new": tiny_models.build("llama", root, seed=1),
            "qwen3": tiny_models.build("qwen3", root, seed=0),
            "root": str(root)}


@pytest.fixture(scope="session")
def llama_engine(models):
    import sglang

    eng = sglang.Engine(**engine_kwargs(models["llama"]), chunked_prefill_size=CHUNK)
    yield eng
    eng.shutdown()
