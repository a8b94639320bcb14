"""One process of the memory-sharing check: it takes the device, holds a buffer, says so
(a file READY_DIR/NAME.ready with what it sees), waits until the driver has looked at the
GPU's memory with both processes alive (READY_DIR/go), then allocates more and computes.

usage: memprobe.py NAME {tpu,cuda,cpu} READY_DIR MIB_FIRST MIB_SECOND

The CUDA PJRT plugin preallocates 75% of the GPU for its client unless its create options
say otherwise (tpuc says preallocate=false: csrc/core/runtime/client_options.c), so a second
client (another tpuc process, or PyTorch's CUDA caching allocator beside it) would find no
memory left: that is what this measures. Prints one line
`RESULT {json}`.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any


def _free_total(torch: Any, device: str) -> tuple[int, int] | None:
    try:
        if device == "cuda":
            return tuple(torch.cuda.mem_get_info())  # the driver's view: every process counts
        if device == "tpu":
            return tuple(torch.tpu.mem_get_info())  # tpuc's accounting of its own buffers
    except Exception:  # noqa: BLE001 — a plugin without a memory size
        return None
    return None


def _mib_tensor(torch: Any, device: str, mib: int) -> Any:
    n = mib * 2**20 // 4
    side = int(n ** 0.5)
    return torch.ones(side, side, device=device)


def main(name: str, device: str, ready_dir: str, mib1: int, mib2: int) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "device": device, "pid": os.getpid()}
    t0 = time.perf_counter()
    import torch

    if device == "tpu":
        import tpuc  # noqa: F401

    a = _mib_tensor(torch, device, mib1)
    s = float((a @ a[:, :8]).sum().item())
    out.update(first_mib=mib1, first_ok=s > 0, up_s=round(time.perf_counter() - t0, 2),
               free_total_ready=_free_total(torch, device))
    with open(os.path.join(ready_dir, name + ".ready"), "w") as f:
        json.dump(out, f)
    go = os.path.join(ready_dir, "go")
    t_wait = time.perf_counter()
    while not os.path.exists(go):
        if time.perf_counter() - t_wait > 120:
            raise TimeoutError("the driver never said go")
        time.sleep(0.05)
    b = _mib_tensor(torch, device, mib2)
    s2 = float((b[:512] @ b[:, :8]).sum().item())
    out.update(second_mib=mib2, second_ok=s2 > 0, free_total_end=_free_total(torch, device))
    return out


if __name__ == "__main__":
    name, device, ready_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    mib1, mib2 = int(sys.argv[4]), int(sys.argv[5])
    try:
        res = main(name, device, ready_dir, mib1, mib2)
        res["ok"] = True
    except Exception as e:  # noqa: BLE001 — an out-of-memory error is the finding
        res = {"name": name, "device": device, "ok": False,
               "error": f"{type(e).__name__}: {e}"[:800],
               "traceback": traceback.format_exc()[-1200:]}
        try:  # the partner must not wait for a process that is gone
            with open(os.path.join(ready_dir, name + ".ready"), "w") as f:
                json.dump(res, f)
        except OSError:
            pass
    print("RESULT " + json.dumps(res), flush=True)
    sys.exit(0 if res["ok"] else 1)
