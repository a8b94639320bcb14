"""Matrix-multiply throughput of "tpu" against this machine's own peak, both
measured in the same run."""
from __future__ import annotations

import time

import torch

from .common import machine_peak, sync, tpu_available

COMMAND = "make bench BENCH_CASES=roofline"


def _tpu_mm(n: int, dtype: torch.dtype, batch: int | None, repeats: int) -> float:
    shape = (batch, n, n) if batch else (n, n)
    a = torch.randn(*shape).to(dtype).to("tpu")
    b = torch.randn(*shape).to(dtype).to("tpu")
    op = torch.bmm if batch else torch.mm
    c = op(a, b)
    sync("tpu")
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        c = op(a, b)  # kept alive: synchronize waits for the live results
        sync("tpu")
        best = min(best, time.perf_counter() - t0)
    del c
    return 2 * n**3 * (batch or 1) / best


def run(quick: bool) -> dict:
    peaks = {"float32": machine_peak(torch.float32, quick),
             "bfloat16": machine_peak(torch.bfloat16, quick)}
    rows = [{"what": "machine peak (CPU mm, best of torch and numpy)", "dtype": d,
             "gflops": p / 1e9, "fraction": 1.0} for d, p in peaks.items()]
    if tpu_available():
        sizes = [256, 512] if quick else [256, 512, 1024, 2048, 4096]
        for dtype, dname in [(torch.float32, "float32"), (torch.bfloat16, "bfloat16")]:
            for n in sizes:
                for batch in (None, 4):
                    if batch and n > 2048:
                        continue
                    f = _tpu_mm(n, dtype, batch, 2 if quick else 3)
                    rows.append({"what": f"tpu {'bmm 4x' if batch else 'mm '}{n}", "dtype": dname,
                                 "gflops": f / 1e9, "fraction": f / peaks[dname]})
    return {
        "title": "Roofline: matmul throughput as a fraction of the machine's measured peak",
        "command": COMMAND,
        "rows": rows,
        "peaks_gflops": {d: p / 1e9 for d, p in peaks.items()},
        "notes": "Peak = the best of PyTorch CPU mm and numpy matmul at the largest size, "
                 "measured in the same run. Fraction = tpu throughput / that peak.",
    }
