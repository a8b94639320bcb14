"""One training contender of the GPU check: examples/llama.py's model, AdamW, a few steps on one
device in one mode. After every step it rewrites its JSON result (--result PATH), so that a
contender killed by its timeout still says how far it got (the first step's time, if any).

usage: bench_one.py --device {tpu,cuda,cpu} --mode {strict,fused,compile,eager}
                    --size NAME --steps N --dtype {f32,bf16} --result PATH [--backend NAME]

--mode compile is torch.compile(step, backend=...): "tpu" on the device "tpu", --backend
(inductor by default) on the reference. Model, data and seed are the same for every contender,
so the loss curves compare step by step.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

T_PROCESS = time.perf_counter()  # before torch's import: startup counts it

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checklib as common  # noqa: E402


def _write(path: str, res: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f)
    os.replace(tmp, path)


def _tpu_stats(torch: Any) -> dict[str, Any]:
    st = torch.tpu.stats()
    keep = ("compiles", "cached_executables", "disk_hits", "preloaded", "disk_misses", "disk_writes",
            "compile_seconds", "load_seconds", "executions", "flushes", "dynamo_compiles",
            "recompiles", "fused_replays", "graph_replays", "ahead_ops", "ahead_chunks",
            "hoisted_fills")
    out = {k: st.get(k) for k in keep}
    out["fallbacks"] = sum(st.get("fallbacks", {}).values())
    out["fallback_ops"] = sorted(st.get("fallbacks", {}))[:12]
    out["recompile_reasons"] = list(st.get("recompile_reasons", []))[:4]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", required=True, choices=("tpu", "cuda", "cpu"))
    ap.add_argument("--mode", required=True, choices=("strict", "fused", "compile", "eager"))
    ap.add_argument("--size", required=True, choices=sorted(common.SIZES))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--dtype", default="f32", choices=("f32", "bf16"))
    ap.add_argument("--backend", default="inductor")
    ap.add_argument("--result", required=True)
    a = ap.parse_args()
    size = common.SIZES[a.size]
    res: dict[str, Any] = dict(device=a.device, mode=a.mode, size=a.size, dtype=a.dtype,
                               steps_asked=a.steps, status="starting", losses=[], step_s=[])
    _write(a.result, res)

    src = common.settings().src
    sys.path.insert(0, os.path.join(src, "examples"))
    import torch
    from llama import Llama, LlamaConfig

    res["import_s"] = round(time.perf_counter() - T_PROCESS, 3)
    dev = a.device
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, dim=size.dim, n_layers=size.layers, n_heads=size.heads,
                      hidden_dim=size.hidden, max_seq_len=size.seq)
    model = Llama(cfg)  # initialised on the CPU: the same weights for every contender
    n_params = model.num_parameters()
    res.update(params=n_params, tokens_per_step=size.tokens,
               flops_per_step=common.flops_per_step(n_params, size))
    if dev == "tpu":
        torch.tpu.set_eager_mode("fused" if a.mode == "fused" else "strict")
    model = model.to(dev)
    compiled = a.mode == "compile"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, capturable=compiled)
    amp = a.dtype == "bf16"

    def step(x: Any, y: Any) -> Any:
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=amp):
            _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    run: Callable[[Any, Any], Any] = step
    if compiled:
        res["backend"] = "tpu" if dev == "tpu" else a.backend
        run = torch.compile(step, backend=res["backend"])
    if dev == "tpu":
        res["device_name"] = torch.tpu.get_device_name()
    elif dev == "cuda":
        res["device_name"] = torch.cuda.get_device_name()
    else:
        res["device_name"] = "CPU"
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, 256, (size.batch, size.seq + 1), generator=g) for _ in range(4)]
    res["setup_s"] = round(time.perf_counter() - T_PROCESS, 3)  # process start -> step 0
    res["status"] = "running"
    _write(a.result, res)
    for i in range(a.steps):
        t0 = time.perf_counter()
        d = data[i % len(data)].to(dev)
        loss = run(d[:, :-1], d[:, 1:])
        res["losses"].append(float(loss.item()))  # .item() waits for the device
        res["step_s"].append(round(time.perf_counter() - t0, 5))
        if i == 0:
            res["first_step_s"] = res["step_s"][0]
            res["to_first_loss_s"] = round(time.perf_counter() - T_PROCESS, 3)
        if dev == "tpu":
            res["tpu_stats"] = _tpu_stats(torch)
        _write(a.result, res)
        print(f"step {i} {res['step_s'][-1]:.4f}s loss {res['losses'][-1]:.5f}", file=sys.stderr,
              flush=True)
    steady = res["step_s"][len(res["step_s"]) // 2:]  # the second half: past warm-up
    if steady:
        med = statistics.median(steady)
        res.update(steady_s=round(med, 5), steady_min_s=round(min(steady), 5),
                   steady_n=len(steady), tok_s=round(size.tokens / med),
                   tflops=round(res["flops_per_step"] / med / 1e12, 3))
    if dev == "cuda":
        res["peak_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
    res["status"] = "ok"
    _write(a.result, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
