"""Micro benchmarks of one device: the host cost of one small op (`a + b` on 1024 floats,
strict mode on "tpu") and a K^3 matmul's rate in bf16 and f32 (the MFU figures' sanity
check: a measured rate above the peak used would say the peak is wrong).

usage: micro.py DEVICE K ADD_ITERS     prints one line `RESULT {json}`
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable


def main(dev: str, k: int, n_add: int) -> dict[str, Any]:
    import torch

    if dev == "tpu":
        torch.tpu.set_eager_mode("strict")
        sync: Callable[[], None] = torch.tpu.synchronize
    elif dev == "cuda":
        sync = torch.cuda.synchronize
    else:
        def sync() -> None:
            return None
    out: dict[str, Any] = {"device": dev, "k": k}
    a = torch.randn(1024, device=dev)
    b = torch.randn(1024, device=dev)
    for _ in range(50):
        c = a + b
    sync()
    t0 = time.perf_counter()
    for _ in range(n_add):
        c = a + b
    sync()
    out["add_us"] = round((time.perf_counter() - t0) / n_add * 1e6, 2)
    del c
    for dt, name in ((torch.bfloat16, "bf16"), (torch.float32, "f32")):
        x = torch.randn(k, k, device=dev, dtype=dt)
        w = torch.randn(k, k, device=dev, dtype=dt)
        for _ in range(2):
            y = x @ w
        sync()
        reps = 5
        t0 = time.perf_counter()
        for _ in range(reps):
            y = x @ w
        sync()
        out[f"mm_{name}_tflops"] = round(2 * k**3 * reps / (time.perf_counter() - t0) / 1e12, 3)
        ref = x[:16].double().cpu() @ w.double().cpu()
        out[f"mm_{name}_relerr"] = float((y[:16].double().cpu() - ref).abs().max() / ref.abs().max())
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))), flush=True)
