"""Runs the benchmark cases and regenerates docs/performance.md and its plots.

    python -m bench.run                 # every case, full size (make bench)
    python -m bench.run --quick         # every case, briefly (make bench BENCH=quick)
    python -m bench.run --cases dispatch,roofline
    python -m bench.run --quick --jobs 2  # CI: quick cases two at a time (numbers not comparable)
"""
from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import json
import os
import subprocess
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
    ap.add_argument("--jobs", type=int, default=1,
                    help="with --quick: run this many cases at once, each in its own process "
                         "(CI's check that every case still runs; the cases then compete for the "
                         "cores, so their numbers are marked and compare with nothing)")
    args = ap.parse_args(argv)
    if args.jobs > 1:
        if not args.quick:
            ap.error("--jobs > 1 only with --quick: a full-size run measures, one case at a time")
        return _run_parallel(args)

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
        if os.environ.get("TPUC_BENCH_CONCURRENT"):
            result["concurrent"] = int(os.environ["TPUC_BENCH_CONCURRENT"])
        result["machine"] = machine
        result["seconds"] = time.perf_counter() - t0
        with open(os.path.join(RESULTS, f"{name}.json"), "w") as f:
            json.dump(result, f, indent=2, default=str)
        print(f"      done in {result['seconds']:.0f} s", flush=True)
    if not args.no_report:
        report.write(ROOT, machine, quick=args.quick)
    return 1 if failed else 0


def _run_parallel(args: argparse.Namespace) -> int:
    """Each case in a child `python -m bench.run --quick --cases NAME --no-report`, `jobs` at a
    time; a child's output is printed whole when it ends; the report is written once at the end."""
    names = [c for c in args.cases.split(",") if c]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"unknown case(s) {unknown}; cases: {', '.join(CASES)}", file=sys.stderr)
        return 2
    env = dict(os.environ, TPUC_BENCH_CONCURRENT=str(args.jobs))

    def one(name: str) -> tuple[str, int, str, float]:
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "bench.run", "--quick", "--cases", name,
                            "--no-report"], cwd=ROOT, env=env, capture_output=True, text=True)
        return name, r.returncode, r.stdout + r.stderr, time.perf_counter() - t0

    failed = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for name, rc, out, secs in pool.map(one, names):
            print(f"== {name}: rc={rc}, {secs:.0f} s\n{out.rstrip()}", flush=True)
            if rc:
                failed.append(name)
    if not args.no_report:
        import torch  # noqa: F401  (loads tpuc through its entry point)

        from . import env as bench_env, report
        report.write(ROOT, bench_env.describe(), quick=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
