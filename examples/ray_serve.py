"""Ray Serve on "tpu": vLLM on tpuc's platform as a Ray Serve deployment of N replicas behind
an OpenAI-compatible /v1/completions route, on a local Ray cluster (127.0.0.1). Sends a few
concurrent completions and prints which replica answered each.

    make serve-setup serve-ray-setup
    .venv-serve/bin/python examples/ray_serve.py --replicas 2          # a tiny model built here
    .venv-serve/bin/python examples/ray_serve.py --model /path/to/local/model

docs/ray.md "Ray Serve" explains the pieces."""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import sys
import tempfile
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def complete(url: str, model: str, prompt: str, max_tokens: int) -> tuple[str, str]:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    req = urllib.request.Request(f"{url}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.headers["x-tpuc-replica"], json.loads(r.read())["choices"][0]["text"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="a local Hugging Face model directory (default: a tiny "
                                    "Llama built offline, tests/serving/tiny_models.py)")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=16)
    a = ap.parse_args()
    model, tmp = a.model, None
    if model is None:
        sys.path.insert(0, os.path.join(HERE, "..", "tests", "serving"))
        import tiny_models

        tmp = tempfile.mkdtemp(prefix="tpuc-tiny-")
        model = tiny_models.build("llama", tmp, seed=0)

    import ray
    from ray import serve

    from tpuc.integrations.ray.serve import build_app

    ray.init(address="local", num_cpus=a.replicas + 1, include_dashboard=False,
             _node_ip_address="127.0.0.1")
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": a.port})
        serve.run(build_app(model, a.replicas, served_model_name="model"), name="tpuc-llm",
                  route_prefix="/")
        url = f"http://127.0.0.1:{a.port}"
        prompts = [f"the quick brown fox {i}" for i in range(a.requests)]
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as ex:
            outs = list(ex.map(lambda p: complete(url, "model", p, a.max_tokens), prompts))
        for p, (replica, text) in zip(prompts, outs):
            print(f"[{replica}] {p!r} -> {text!r}")
        print("replicas that answered:", sorted({r for r, _ in outs}))
    finally:
        serve.shutdown()
        ray.shutdown()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
