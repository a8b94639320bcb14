"""SGLang on "tpu" vs SGLang's own CPU backend: greedy generation tokens/s at concurrency 1, 8
and 32 on the tests' tiny Llama (built offline), interleaved rounds, medians.

Each backend runs in its own worker process (SGLang picks its platform once per process: the
"tpu" one through tpuc's plugin, the CPU one with ``SGLANG_USE_CPU_ENGINE=1``, which makes the
plugin decline), holding one ``sglang.Engine``; the parent sends "generate c requests" to the
workers in turn (A B A B ...) after a warm-up round per concurrency (compiles), and times each
round in the worker. A round: c prompts of 8 distinct tokens, 16 new tokens each (EOS ignored),
submitted as one ``Engine.generate`` call (SGLang batches them), prefix cache flushed first.
Needs SGLang: run in the torch-2.14.1 venv, ``make bench-sglang`` (not one of bench.run's
default cases). Writes bench/results/sglang_serving.json.
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
CONCURRENCY = (1, 8, 32)
PROMPT_LEN = 8
NEW_TOKENS = 16
BACKENDS = ("tpu", "cpu")
READY_TIMEOUT_S = 600


def _engine(model_dir: str, backend: str):  # type: ignore[no-untyped-def]
    import sglang

    return sglang.Engine(model_path=model_dir, device=backend, dtype="float32",
                         context_length=128, max_total_tokens=4096, max_running_requests=32,
                         skip_server_warmup=True, random_seed=0, log_level="error")


def _prompts(c: int, round_no: int) -> list[list[int]]:
    # distinct per request and per round (no prefix-cache hits), ids inside the tiny vocabulary
    return [[2 + (round_no * 97 + i * 13 + j * 7) % 380 for j in range(PROMPT_LEN)]
            for i in range(c)]


def worker(model_dir: str, backend: str) -> None:
    """Line protocol on stdin/stdout: "<c> <round>" -> {"seconds", "tokens"}; "quit"."""
    eng = _engine(model_dir, backend)
    params = {"temperature": 0.0, "max_new_tokens": NEW_TOKENS, "ignore_eos": True}
    print(json.dumps({"ready": backend}), flush=True)
    try:
        for line in sys.stdin:
            if line.strip() == "quit":
                break
            c, r = (int(x) for x in line.split())
            eng.flush_cache()
            t0 = time.perf_counter()
            outs = eng.generate(input_ids=_prompts(c, r), sampling_params=params)
            dt = time.perf_counter() - t0
            toks = sum(len(o["output_ids"]) for o in outs)
            print(json.dumps({"seconds": dt, "tokens": toks}), flush=True)
    finally:
        eng.shutdown()


def _start(model_dir: str, backend: str, log: str) -> subprocess.Popen:
    env = dict(os.environ)
    if backend == "cpu":
        env["SGLANG_USE_CPU_ENGINE"] = "1"
    with open(log, "w") as err:
        return subprocess.Popen([sys.executable, "-m", "bench.cases.sglang_serving", "--worker",
                                 model_dir, backend], cwd=ROOT, env=env, text=True,
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


def run(quick: bool = False) -> dict:
    sys.path.insert(0, os.path.join(ROOT, "tests", "serving"))
    import tiny_models

    repeats = 3 if quick else 7
    out: dict = {"title": "SGLang tokens/s: \"tpu\" vs SGLang's CPU backend (tiny Llama)",
                 "command": COMMAND, "prompt_tokens": PROMPT_LEN, "new_tokens": NEW_TOKENS,
                 "repeats": repeats, "rows": [], "errors": {}}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = tiny_models.build("llama", tmp, seed=0)
        workers: dict[str, subprocess.Popen] = {}
        try:
            for b in BACKENDS:
                log = os.path.join(tmp, f"{b}.log")
                p = _start(model_dir, b, log)
                try:
                    _ready(p)
                    workers[b] = p
                except Exception as e:  # e.g. SGLang's CPU engine needs sgl-kernel's CPU build
                    _stop(p)
                    out["errors"][b] = f"{type(e).__name__}: {e}; {_last_error(log)}"
            times: dict[tuple[str, int], list[float]] = {}
            for c in CONCURRENCY:
                for b, p in workers.items():
                    _ask(p, c, 0)  # warm-up: compiles on "tpu"
            for r in range(1, repeats + 1):
                for c in CONCURRENCY:
                    for b, p in workers.items():
                        res = _ask(p, c, r)
                        times.setdefault((b, c), []).append(res["tokens"] / res["seconds"])
            for c in CONCURRENCY:
                row: dict = {"concurrency": c}
                for b in BACKENDS:
                    if (b, c) in times:
                        row[f"{b}_tokens_per_s"] = round(statistics.median(times[(b, c)]), 1)
                if "tpu_tokens_per_s" in row and "cpu_tokens_per_s" in row:
                    row["tpu_over_cpu"] = round(row["tpu_tokens_per_s"] /
                                                row["cpu_tokens_per_s"], 3)
                out["rows"].append(row)
        finally:
            for p in workers.values():
                _stop(p)
    return out


def main() -> None:
    if len(sys.argv) >= 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
        return
    sys.path.insert(0, ROOT)
    from bench import env

    result = run(quick="--quick" in sys.argv)
    result["case"] = "sglang_serving"
    result["machine"] = env.describe()
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "sglang_serving.json"), "w") as f:
        json.dump(result, f, indent=2, default=str)
    print(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
