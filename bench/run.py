"""Runs the benchmark cases and regenerates docs/performance.md and its plots.

    python -m bench.run                 # every case, full size (make bench)
    python -m bench.run --quick         # every case, briefly (make bench BENCH=quick)
    python -m bench.run --cases dispatch,roofline
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
CASES = ["dispatch", "roofline", "train_step", "compile_time", "first_step", "memory", "host_heap",
         "op_profile",
         "collectives_core",
         "torchtitan",
         "titan_trainer",
         "replay",
         "collectives",
         "dist_train",
         "decode",
         "bounds",
         "fft_linalg",
         "tuning",
         "serving",
         "grpo",
         "weight_sync",
         ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="run every case briefly")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--no-report", action="store_true", help="write results/ only")
    args = ap.parse_args(argv)

    import torch  # noqa: F401  (loads tpuc through its entry point)

    from . import env, report

    os.makedirs(RESULTS, exist_ok=True)
    names = [c for c in args.cases.split(",") if c]
    machine = env.describe()
    failed = []
    for i, name in enumerate(names, 1):
        if name not in CASES:
            print(f"unknown case {name!r}; cases: {', '.join(CASES)}", file=sys.stderr)
            return 2
        print(f"[{i}/{len(names)}] {name} ...", flush=True)
        t0 = time.perf_counter()
        try:
            mod = importlib.import_module(f"bench.cases.{name}")
            result = mod.run(args.quick)
        except Exception as e:
            traceback.print_exc()
            result = {"title": name, "rows": [], "error": f"{type(e).__name__}: {e}"}
            failed.append(name)
        result["case"] = name
        result["quick"] = args.quick
        result["machine"] = machine
        result["seconds"] = time.perf_counter() - t0
        with open(os.path.join(RESULTS, f"{name}.json"), "w") as f:
            json.dump(result, f, indent=2, default=str)
        print(f"      done in {result['seconds']:.0f} s", flush=True)
    if not args.no_report:
        report.write(ROOT, machine, quick=args.quick)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
