"""SGLang on "tpu" side by side with vLLM on "tpu" (and SGLang's own CPU backend where it
starts): requests/s, output tokens/s and time to first token at concurrency 1, 8 and 32 on the
tests' tiny Llama (built offline once, the same directory for every engine), rounds alternating
between the engines, medians.

Each engine runs in its own worker process holding one offline engine: ``sglang.Engine`` in the
torch-2.14.1 venv (SGLang picks its platform once per process: the "tpu" one through tpuc's
plugin, the CPU one with ``SGLANG_USE_CPU_ENGINE=1``, which makes the plugin decline), and
``vllm.LLM`` in the serving venv (.venv-serve, torch 2.13.0, engine in-process, eager; skipped
with its reason when that venv is absent). The parent sends "generate c requests" to the workers
in turn (A B C A B C ...) after a warm-up round per concurrency (compiles), and each worker
times its round: c prompts of 8 distinct tokens (the same ids for every engine), 16 new tokens
each, greedy, EOS ignored, submitted at once (SGLang: one ``generate`` call with the c prompts,
streamed, its prefix cache flushed first; vLLM: c ``add_request`` then ``step()`` until done,
prefix caching off), the time of each request's first output token recorded as it arrives.
Needs SGLang: run in the torch-2.14.1 venv, ``make bench-sglang`` (not one of bench.run's
default cases). Writes bench/results/sglang_serving.json; bench/own_pages.py renders it into
docs/sglang.md.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

COMMAND = "make bench-sglang"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVE_PY = os.path.join(ROOT, ".venv-serve", "bin", "python")
CONCURRENCY = (1, 8, 32)
PROMPT_LEN = 8
NEW_TOKENS = 16
ENGINES = ("sglang_tpu", "vllm_tpu", "sglang_cpu")
READY_TIMEOUT_S = 600


def _prompts(c: int, round_no: int) -> list[list[int]]:
    # distinct per request and per round (no prefix-cache hits), ids inside the tiny vocabulary
    return [[2 + (round_no * 97 + i * 13 + j * 7) % 380 for j in range(PROMPT_LEN)]
            for i in range(c)]


def _sglang(model_dir: str, device: str):  # type: ignore[no-untyped-def]
    import sglang

    eng = sglang.Engine(model_path=model_dir, device=device, dtype="float32",
                        context_length=128, max_total_tokens=4096, max_running_requests=32,
                        skip_server_warmup=True, random_seed=0, log_level="error")
    params = {"temperature": 0.0, "max_new_tokens": NEW_TOKENS, "ignore_eos": True}

    def round_(prompts: list[list[int]]) -> dict:
        eng.flush_cache()
        n = len(prompts)
        first: list[float | None] = [None] * n
        outs: list[list[int]] = [[] for _ in range(n)]
        t0 = time.perf_counter()
        for chunk in eng.generate(input_ids=prompts, sampling_params=params, stream=True):
            now = time.perf_counter()
            i = chunk.get("index", 0) if n > 1 else 0
            ids = chunk.get("output_ids") or []
            if ids and first[i] is None:
                first[i] = now - t0
            outs[i] = list(ids) if len(ids) >= len(outs[i]) else outs[i] + list(ids)
        dt = time.perf_counter() - t0
        return {"seconds": dt, "tokens": sum(map(len, outs)), "ttft": first, "outputs": outs}

    return round_, eng.shutdown


def _vllm(model_dir: str):  # type: ignore[no-untyped-def]
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process
    import vllm
    from vllm import SamplingParams

    llm = vllm.LLM(model=model_dir, dtype="float32", max_model_len=128, max_num_seqs=32,
                   max_num_batched_tokens=512, kv_cache_memory_bytes=64 << 20,
                   enforce_eager=True, enable_prefix_caching=False, seed=0)
    eng = llm.llm_engine
    sp = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    count = [0]

    def round_(prompts: list[list[int]]) -> dict:
        count[0] += 1
        ids = [f"r{count[0]}-{i}" for i in range(len(prompts))]
        first: dict[str, float] = {}
        outs: dict[str, list[int]] = {}
        t0 = time.perf_counter()
        for rid, p in zip(ids, prompts):
            eng.add_request(rid, {"prompt_token_ids": p}, sp)
        while eng.has_unfinished_requests():
            for o in eng.step():
                now = time.perf_counter()
                got = list(o.outputs[0].token_ids)
                if got and o.request_id not in first:
                    first[o.request_id] = now - t0
                outs[o.request_id] = got
        dt = time.perf_counter() - t0
        return {"seconds": dt, "tokens": sum(len(outs[r]) for r in ids),
                "ttft": [first.get(r) for r in ids], "outputs": [outs[r] for r in ids]}

    return round_, lambda: None


def worker(model_dir: str, engine: str) -> None:
    """Line protocol on stdin/stdout: "<c> <round>" -> {"seconds", "tokens", "ttft", "outputs"};
    "quit"."""
    if engine == "vllm_tpu":
        round_, stop = _vllm(model_dir)
    else:
        round_, stop = _sglang(model_dir, "tpu" if engine == "sglang_tpu" else "cpu")
    print(json.dumps({"ready": engine}), flush=True)
    try:
        for line in sys.stdin:
            if line.strip() == "quit":
                break
            c, r = (int(x) for x in line.split())
            print(json.dumps(round_(_prompts(c, r))), flush=True)
    finally:
        stop()


def _start(model_dir: str, engine: str, log: str) -> subprocess.Popen:
    env = dict(os.environ)
    if engine == "sglang_cpu":
        env["SGLANG_USE_CPU_ENGINE"] = "1"
    py = SERVE_PY if engine == "vllm_tpu" else sys.executable
    with open(log, "w") as err:
        return subprocess.Popen([py, "-m", "bench.cases.sglang_serving", "--worker",
                                 model_dir, engine], cwd=ROOT, env=env, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                start_new_session=True)


def _last_error(log: str) -> str:
    with open(log, errors="replace") as f:
        lines = [ln.strip() for ln in f if "Error" in ln and not ln.startswith(" ")]
    return lines[-1] if lines else ""


def _ask(p: subprocess.Popen, c: int, r: int) -> dict:
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(f"{c} {r}\n")
    p.stdin.flush()
    while True:
        line = p.stdout.readline()
        if not line:
            raise RuntimeError(f"worker exited (rc {p.poll()})")
        if line.startswith("{"):
            return json.loads(line)


def _ready(p: subprocess.Popen) -> None:
    assert p.stdout is not None
    t0 = time.time()
    while time.time() - t0 < READY_TIMEOUT_S:
        line = p.stdout.readline()
        if not line:
            raise RuntimeError(f"worker exited before it was ready (rc {p.poll()})")
        if line.startswith('{"ready"'):
            return
    raise TimeoutError("worker not ready")


def _stop(p: subprocess.Popen) -> None:
    try:
        if p.poll() is None and p.stdin is not None:
            p.stdin.write("quit\n")
            p.stdin.flush()
            p.wait(timeout=60)
    except Exception:
        pass
    if p.poll() is None:
        os.killpg(p.pid, 9)
        p.wait()


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def run(quick: bool = False) -> dict:
    sys.path.insert(0, os.path.join(ROOT, "tests", "serving"))
    import tiny_models

    repeats = 3 if quick else 7
    out: dict = {"title": "SGLang on \"tpu\" vs vLLM on \"tpu\" (tiny Llama)",
                 "command": COMMAND, "quick": quick, "prompt_tokens": PROMPT_LEN,
                 "new_tokens": NEW_TOKENS, "repeats": repeats, "rows": [], "errors": {}}
    out["notes"] = (f"Tiny Llama (2 layers, hidden 128, float32); c prompts of {PROMPT_LEN} "
                    f"tokens, {NEW_TOKENS} new tokens each, greedy, EOS ignored, all c submitted "
                    f"at once and streamed; {repeats} rounds per engine and concurrency, the "
                    "engines alternating round by round after a warm-up round each; medians over "
                    "rounds (TTFT: each round's median over its requests, then the median over "
                    "rounds). SGLang: `sglang.Engine` (its scheduler in a subprocess), prefix "
                    "cache flushed per round; vLLM: `vllm.LLM` in-process, eager, prefix caching "
                    "off. Neither uses device graphs on \"tpu\".")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = tiny_models.build("llama", tmp, seed=0)
        workers: dict[str, subprocess.Popen] = {}
        try:
            for e in ENGINES:
                if e == "vllm_tpu" and not os.path.exists(SERVE_PY):
                    out["errors"][e] = "no serving venv (.venv-serve): run `make serve-setup`"
                    continue
                log = os.path.join(tmp, f"{e}.log")
                p = _start(model_dir, e, log)
                try:
                    _ready(p)
                    workers[e] = p
                except Exception as ex:  # e.g. SGLang's CPU engine needs sgl-kernel's CPU build
                    _stop(p)
                    out["errors"][e] = f"{type(ex).__name__}: {ex}; {_last_error(log)}"
            for c in CONCURRENCY:
                for p in workers.values():
                    _ask(p, c, 0)  # warm-up: compiles on "tpu"
            got: dict[tuple[str, int], list[dict]] = {}
            for r in range(1, repeats + 1):
                for c in CONCURRENCY:
                    for e, p in workers.items():
                        got.setdefault((e, c), []).append(_ask(p, c, r))
            same = total = 0
            for c in CONCURRENCY:
                row: dict = {"concurrency": c}
                for e in ENGINES:
                    rounds = got.get((e, c))
                    if not rounds:
                        continue
                    row[f"{e}_tokens_per_s"] = round(_median(
                        [x["tokens"] / x["seconds"] for x in rounds]), 1)
                    row[f"{e}_requests_per_s"] = round(_median(
                        [c / x["seconds"] for x in rounds]), 3)
                    row[f"{e}_ttft_ms"] = round(1e3 * _median(
                        [_median([t for t in x["ttft"] if t is not None]) for x in rounds]), 2)
                    row[f"{e}_tokens_per_round"] = rounds[0]["tokens"]
                if "sglang_tpu_tokens_per_s" in row and "vllm_tpu_tokens_per_s" in row:
                    row["sglang_over_vllm_tokens"] = round(row["sglang_tpu_tokens_per_s"] /
                                                           row["vllm_tpu_tokens_per_s"], 3)
                    row["sglang_over_vllm_ttft"] = round(row["sglang_tpu_ttft_ms"] /
                                                         row["vllm_tpu_ttft_ms"], 3)
                    for a, b in zip(got[("sglang_tpu", c)], got[("vllm_tpu", c)]):
                        for x, y in zip(a["outputs"], b["outputs"]):
                            total += 1
                            same += x == y
                out["rows"].append(row)
            if total:
                out["outputs_match"] = f"{same} of {total} requests token for token"
        finally:
            for p in workers.values():
                _stop(p)
    return out


def main() -> None:
    if len(sys.argv) >= 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
        return
    sys.path.insert(0, ROOT)
    from bench import env, own_pages

    result = run(quick="--quick" in sys.argv)
    result["case"] = "sglang_serving"
    result["machine"] = env.describe()
    result["machine"]["loadavg"] = list(os.getloadavg())
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "sglang_serving.json"), "w") as f:
        json.dump(result, f, indent=2, default=str)
    own_pages.render(ROOT)
    print(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
