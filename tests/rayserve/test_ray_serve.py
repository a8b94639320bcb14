"""Ray Serve on "tpu" (tpuc.integrations.ray.serve, issue 33): vLLM on tpuc's platform as a Ray
Serve deployment of 2 replicas on a local Ray cluster on 127.0.0.1 (bounded CPUs, no dashboard),
started and stopped here, every wait bounded, and no Ray process left behind (checked).

- greedy completions through the OpenAI route equal one vLLM engine on "tpu" without Ray and a
  float64 greedy decode by transformers on the CPU;
- concurrent requests are answered by both replicas (the x-tpuc-replica header);
- one replica's actor killed (ray.kill) while 8 requests are in flight: every request keeps
  succeeding under the client retry policy below, and Serve has 2 RUNNING replicas again, one of them new, within REPLACE_TIMEOUT.

Client retry policy (what a client of a Serve deployment needs when a replica dies): a request
that fails with a connection error or HTTP 5xx (a request in flight on the killed replica, or
routed to it before the router learnt of its death) is sent again, at most RETRIES times,
0.5 s apart. Needs ray[serve] in the serving venv (make serve-ray-setup); make test-ray-serve.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed in this Python: make serve-setup")
pytest.importorskip("fastapi", reason="FastAPI is not installed in this Python: make serve-setup")
ray = pytest.importorskip("ray", reason="Ray is not installed in this Python: make serve-ray-setup")
pytest.importorskip("ray.serve", reason="Ray Serve is not installed: make serve-ray-setup")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "serving"))
sys.path.insert(0, str(ROOT / "tests"))
import ray_cluster  # noqa: E402
from http_json import free_port  # noqa: E402

APP = "tpuc-llm"
MODEL_NAME = "tiny-llama"
MAX_TOKENS = 12
PROMPTS = [[0, 5, 17, 42, 99, 3], [0, 200, 201, 202], [0, 7] * 9,
           [0, 300, 12, 12, 12, 12, 12, 77, 250, 251, 3]]
START_TIMEOUT = 300.0    # seconds for serve.run (2 replicas import vLLM and build engines)
REPLACE_TIMEOUT = 240.0  # seconds for Serve to have 2 RUNNING replicas after one is killed
RETRIES = 20
FAILED: list[int] = []  # the HTTP status (0: no answer) of every failed try, for the report


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    import tiny_models

    return tiny_models.build("llama", tmp_path_factory.mktemp("models"), seed=0)


@pytest.fixture(scope="module")
def single_engine(model_dir: str, tmp_path_factory) -> Iterator[subprocess.Popen]:
    """The single-engine reference, started first so it runs while Ray starts."""
    tmp = tmp_path_factory.mktemp("single")
    (tmp / "prompts.json").write_text(json.dumps(PROMPTS))
    log = open(tmp / "log.txt", "w")
    p = subprocess.Popen([sys.executable, str(HERE / "run_single.py"), model_dir,
                          str(tmp / "prompts.json"), str(MAX_TOKENS), str(tmp / "out.json")],
                         stdout=log, stderr=subprocess.STDOUT, env=_env())
    p.out, p.log = tmp / "out.json", tmp / "log.txt"  # type: ignore[attr-defined]
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        log.close()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TPUC_CACHE_DIR", str(ROOT / "build" / "serving-cache"))
    return env


@pytest.fixture(scope="module")
def server(model_dir: str, single_engine: subprocess.Popen) -> Iterator[str]:
    """Ray on 127.0.0.1 (3 CPUs: a replica takes 1), Serve's proxy on a free port, the app of 2
    replicas; its base URL. serve.shutdown and ray.shutdown on the way out."""
    from ray import serve

    from tpuc.integrations.ray.serve import build_app

    port = free_port()
    with ray_cluster.local_cluster("tpuc-rs-", {"TPUC_CACHE_DIR": _env()["TPUC_CACHE_DIR"]},
                                   num_cpus=3, object_store_memory=256 << 20):
        try:
            serve.start(http_options={"host": "127.0.0.1", "port": port})
            t0 = time.monotonic()
            _run_bounded(lambda: serve.run(build_app(model_dir, 2, served_model_name=MODEL_NAME),
                                           name=APP, route_prefix="/"), START_TIMEOUT)
            print(f"serve.run with 2 replicas: {time.monotonic() - t0:.0f} s")
            yield f"http://127.0.0.1:{port}"
        finally:
            serve.shutdown()


def _run_bounded(fn: Any, timeout: float) -> Any:
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        fut = ex.submit(fn)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            pytest.fail(f"did not finish within {timeout:.0f} s")


def _request(url: str, body: dict | None = None, timeout: float = 60) -> tuple[int, dict, str]:
    """(status, JSON body, replica header); error statuses included."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read()), r.headers.get("x-tpuc-replica", "")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw), e.headers.get("x-tpuc-replica", "")
        except ValueError:
            return e.code, {"raw": raw.decode(errors="replace")}, ""


def _complete(base: str, prompt: list[int], retries: int = 0) -> tuple[list[int], str, int]:
    """Greedy completion's token ids, the replica, and the number of retries it took."""
    body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True}
    for attempt in range(retries + 1):
        try:
            status, out, replica = _request(f"{base}/v1/completions", body)
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            status, out, replica = 0, {"error": repr(e)}, ""
        if status == 200:
            return out["choices"][0]["token_ids"], replica, attempt
        FAILED.append(status)
        if attempt == retries or 0 < status < 500:
            raise AssertionError(f"completion failed ({status}) after {attempt} retries: {out}")
        time.sleep(0.5)
    raise AssertionError("unreachable")


def _hf_greedy(model_dir: str) -> list[list[int]]:
    """transformers on the CPU in float64, greedy by argmax over the full sequence each step."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float64).eval()
    outs = []
    with torch.no_grad():
        for p in PROMPTS:
            ids = torch.tensor([p])
            for _ in range(MAX_TOKENS):
                nxt = model(ids).logits[0, -1].argmax()
                ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
            outs.append(ids[0, len(p):].tolist())
    return outs


def _serve_status() -> Any:
    from ray import serve

    return serve.status().applications[APP].deployments["TpuLLMServer"]


def test_models_route(server: str) -> None:
    status, out, replica = _request(f"{server}/v1/models")
    assert status == 200 and replica
    assert [m["id"] for m in out["data"]] == [MODEL_NAME]


def test_greedy_equals_single_engine_and_transformers(server: str, model_dir: str,
                                                      single_engine: subprocess.Popen) -> None:
    got = [_complete(server, p)[0] for p in PROMPTS]
    hf = _hf_greedy(model_dir)
    single_engine.wait(timeout=START_TIMEOUT)
    assert single_engine.returncode == 0, single_engine.log.read_text()[-4000:]
    single = json.loads(single_engine.out.read_text())
    assert got == single
    assert got == hf


def test_openai_forms_and_errors(server: str) -> None:
    body = {"model": MODEL_NAME, "prompt": [PROMPTS[0], PROMPTS[1]], "max_tokens": 4,
            "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    status, out, _ = _request(f"{server}/v1/completions", body)
    assert status == 200 and out["object"] == "text_completion"
    assert [c["index"] for c in out["choices"]] == [0, 1]
    assert all(len(c["token_ids"]) == 4 and c["finish_reason"] == "length"
               for c in out["choices"])
    assert out["usage"] == {"prompt_tokens": len(PROMPTS[0]) + len(PROMPTS[1]),
                            "completion_tokens": 8, "total_tokens": len(PROMPTS[0])
                            + len(PROMPTS[1]) + 8}
    status, out, _ = _request(f"{server}/v1/completions",
                              {"model": MODEL_NAME, "prompt": "the quick brown fox",
                               "max_tokens": 5, "temperature": 0, "ignore_eos": True})
    assert status == 200 and isinstance(out["choices"][0]["text"], str)
    assert out["usage"]["completion_tokens"] == 5
    for bad in ({"stream": True}, {"n": 2}, {"prompt": 5}, {"model": "other"}):
        status, _, _ = _request(f"{server}/v1/completions",
                                dict({"model": MODEL_NAME, "prompt": "a"}, **bad))
        assert status in (400, 404), (bad, status)


def _spread(base: str, n: int = 16) -> dict[str, int]:
    """n concurrent greedy requests; how many each replica answered (every answer checked)."""
    with concurrent.futures.ThreadPoolExecutor(n) as ex:
        res = list(ex.map(lambda i: _complete(base, PROMPTS[i % len(PROMPTS)]), range(n)))
    counts: dict[str, int] = {}
    for _, replica, _ in res:
        counts[replica] = counts.get(replica, 0) + 1
    return counts


def _both(base: str) -> dict[str, int]:
    """Rounds of concurrent requests (at most 3) until both replicas answered; the counts."""
    seen: dict[str, int] = {}
    for _ in range(3):  # Serve routes by power of two choices: both are near certain at once
        for k, v in _spread(base).items():
            seen[k] = seen.get(k, 0) + v
        if len(seen) == 2:
            break
    return seen


def test_concurrent_requests_reach_both_replicas(server: str) -> None:
    seen = _both(server)
    assert len(seen) == 2 and "" not in seen, seen


def test_killed_replica_is_replaced_and_requests_keep_succeeding(server: str) -> None:
    expected = [_complete(server, p)[0] for p in PROMPTS]
    replicas = set(_both(server))
    assert len(replicas) == 2, replicas
    victim = sorted(replicas)[0]
    # Serve names a replica's actor SERVE_REPLICA::<app>#<deployment>#<replica id> in the
    # namespace "serve" (ray/serve/_private/common.py ReplicaID.to_full_id_str, Ray 2.60.0)
    handle = ray.get_actor(f"SERVE_REPLICA::{APP}#TpuLLMServer#{victim}", namespace="serve")
    # requests in flight while the replica dies (some on it): each must succeed, retried
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        inflight = [ex.submit(_complete, server, PROMPTS[k % len(PROMPTS)], RETRIES)
                    for k in range(8)]
        time.sleep(0.05)
        ray.kill(handle, no_restart=True)
        t0 = time.monotonic()
        done = [f.result(timeout=RETRIES * 61) for f in inflight]
    assert [d[0] for d in done] == [expected[k % len(PROMPTS)] for k in range(8)]
    answered: set[str] = {d[1] for d in done}
    retried, i = sum(d[2] for d in done), 0
    while not answered - replicas:
        assert time.monotonic() - t0 < REPLACE_TIMEOUT, (
            f"not replaced within {REPLACE_TIMEOUT:.0f} s: {_serve_status()}, "
            f"answered by {answered}")
        ids, replica, attempts = _complete(server, PROMPTS[i % len(PROMPTS)], RETRIES)
        assert ids == expected[i % len(PROMPTS)]
        answered.add(replica)
        retried += attempts
        i += 1
        st = _serve_status()
        if st.replica_states.get("RUNNING", 0) == 2 and st.status == "HEALTHY":
            for k in _spread(server, 8):  # both running: the new one answers some of these
                answered.add(k)
        else:
            time.sleep(0.2)
    print(f"replaced in {time.monotonic() - t0:.0f} s; {i} + 8 requests, {retried} retries "
          f"(failed tries' HTTP status, 0 = no answer: {sorted(FAILED)})")
    new = answered - replicas
    assert len(new) == 1, answered
    st = _serve_status()
    assert st.replica_states.get("RUNNING", 0) == 2, st
    counts = _spread(server)
    assert victim not in counts and set(counts) <= replicas | new, counts
