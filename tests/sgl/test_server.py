"""``python -m sglang.launch_server --device tpu`` on 127.0.0.1 with a tiny Qwen3 built offline:
greedy tokens through /generate equal transformers' greedy ``generate()`` on the CPU, concurrent
requests equal single ones, the OpenAI completions route answers, bad input gets a clear 400 and
the server keeps serving. The server runs under a time limit and is stopped (its whole process
group) at the end."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from sgl_common import CONTEXT, MAX_NEW, hf_greedy, prompt_ids
from sgl_common import models, needs_sglang  # noqa: F401 (fixtures)
from http_json import free_port, post  # tests/serving, on sys.path through sgl_common

pytestmark = needs_sglang

START_LIMIT_S = 240
GREEDY = {"temperature": 0.0, "max_new_tokens": MAX_NEW, "ignore_eos": True}

@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    port = free_port()
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    log = open(log_path, "w")
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", models["qwen3"],
           "--device", "tpu", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
           "--context-length", str(CONTEXT), "--max-total-tokens", "4096",
           "--max-running-requests", "16", "--skip-server-warmup", "--random-seed", "0",
           "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + START_LIMIT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the server exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.time() > deadline:
                pytest.fail(f"no /health within {START_LIMIT_S} s:\n{log_path.read_text()[-3000:]}")
            time.sleep(1)
        yield base
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        log.close()


def _gen(base: str, ids: list[int]) -> list[int]:
    code, out = post(base + "/generate", {"input_ids": ids, "sampling_params": GREEDY})
    assert code == 200, out
    return out["output_ids"]


def test_qwen3_greedy_single_and_concurrent_match_transformers(server, models):
    ids = prompt_ids(models["qwen3"])
    ref = hf_greedy(models["qwen3"], ids)
    assert [_gen(server, p) for p in ids] == ref
    with ThreadPoolExecutor(len(ids)) as pool:  # concurrent requests, batched by the scheduler
        assert list(pool.map(lambda p: _gen(server, p), ids)) == ref


def test_openai_completions_route(server, models):
    code, out = post(server + "/v1/completions",
                      {"model": models["qwen3"], "prompt": "the quick brown fox",
                       "max_tokens": 4, "temperature": 0})
    assert code == 200, out
    assert out["choices"][0]["text"] and out["usage"]["completion_tokens"] == 4


def test_bad_input_gets_clear_error_and_server_keeps_serving(server, models):
    code, out = post(server + "/generate",
                      {"input_ids": [5] * (CONTEXT + 10), "sampling_params": GREEDY})
    assert code == 400 and "context length" in json.dumps(out), (code, out)
    code, out = post(server + "/generate",
                      {"input_ids": [3, 10**6, 4], "sampling_params": GREEDY})
    assert code == 400 and "outside the model's vocabulary" in json.dumps(out), (code, out)
    ids = prompt_ids(models["qwen3"])[:1]
    assert [_gen(server, ids[0])] == hf_greedy(models["qwen3"], ids)


def test_bad_request_among_concurrent_good_ones_fails_alone(server, models):
    # the first id past the vocabulary (the boundary), a negative id and a too-long prompt sent
    # at the same time as good requests: each bad one gets its own 400, the good ones in the
    # same scheduler batches get transformers' tokens
    import json as _json
    from pathlib import Path

    vocab = _json.loads((Path(models["qwen3"]) / "config.json").read_text())["vocab_size"]
    ids = prompt_ids(models["qwen3"])[:2]
    ref = hf_greedy(models["qwen3"], ids)
    bodies = [ids[0], [3, vocab, 4], ids[1], [3, -1, 4], [5] * (CONTEXT + 1)]
    with ThreadPoolExecutor(len(bodies)) as pool:
        res = list(pool.map(lambda p: post(server + "/generate",
                                           {"input_ids": p, "sampling_params": GREEDY}), bodies))
    assert res[0] == (200, res[0][1]) and res[0][1]["output_ids"] == ref[0], res[0]
    assert res[2][0] == 200 and res[2][1]["output_ids"] == ref[1], res[2]
    assert res[1][0] == 400 and f"token id {vocab}, outside" in _json.dumps(res[1][1]), res[1]
    assert res[3][0] == 400 and "token id -1, outside" in _json.dumps(res[3][1]), res[3]
    assert res[4][0] == 400 and "context length" in _json.dumps(res[4][1]), res[4]
