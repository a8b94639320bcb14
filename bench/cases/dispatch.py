"""Host time per op on tiny tensors: what dispatching an op costs."""
from __future__ import annotations

import torch

from ..timing import interleave
from .common import fused_available, sync, tpu_available, eager_mode

COMMAND = "make bench BENCH_CASES=dispatch"


def _ops():
    def chain(x, y):
        for _ in range(10):
            x = x * y
            x = x + y
        return x

    return {
        "add": (lambda a, b: a + b, (8,)),
        "mul": (lambda a, b: a * b, (8,)),
        "matmul 8x8": (lambda a, b: a @ b, (8, 8)),
        "20-op elementwise chain": (chain, (8,)),
    }


def _reported(part, quick: bool) -> dict:
    """One optional part of the case; a failure is reported in the results, not hidden."""
    try:
        return part(quick)
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        return {"skipped": f"{type(e).__name__}: {e}"[:300]}


def run(quick: bool) -> dict:
    n = 50 if quick else 400
    repeats = 3 if quick else 9
    contenders = ["cpu eager"]
    if tpu_available():
        contenders.append("tpu strict")
    if fused_available():
        contenders.append("tpu fused")
    rows = []
    for name, (fn, shape) in _ops().items():
        ops_per_call = 20 if "chain" in name else 1
        timers = {}
        for c in contenders:
            dev = "cpu" if c.startswith("cpu") else "tpu"
            a, b = torch.randn(*shape, device=dev), torch.randn(*shape, device=dev)
            mode = c.split()[-1]

            def loop(fn=fn, a=a, b=b, dev=dev, mode=mode):
                if dev == "tpu":
                    with eager_mode(mode):
                        for _ in range(n):
                            fn(a, b)
                        sync(dev)
                else:
                    for _ in range(n):
                        fn(a, b)

            timers[c] = loop
        res = interleave(timers, repeats)
        for c in contenders:
            s = res[c].summary(scale=1e6 / (n * ops_per_call))
            rows.append({"op": name, "contender": c, "us_per_op": s,
                         "ops_per_s": 1e6 / s["median"]})
    prof = robust = None
    if tpu_available():
        from .dispatch_profile import profile
        from .dispatch_robust import measure

        prof, robust = _reported(profile, quick), _reported(measure, quick)
    return {
        "robust": robust,
        "profile": prof,
        "title": "Dispatch: host time per op on tiny tensors",
        "command": COMMAND,
        "rows": rows,
        "notes": "µs per op (median, [min, max]) over repetitions of a loop of ops, including "
                 "one synchronize per loop on tpu; lower is better.",
    }
