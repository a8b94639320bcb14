"""The 5M training step's matmuls, one shape at a time: XLA's dot (a strict tpu mm on
the XLA CPU plugin) against PyTorch's CPU mm (MKL), interleaved, medians.

Not a bench case (CI does not run it): the measurement behind docs/execution.md,
"The same bench on an Intel Xeon". Every Linear of the example model at 8 x 128 tokens
(M = 1024; K x N = 256 x 256 for wq/wk/wv/wo and the output head, 256 x 688 for w1/w3,
688 x 256 for w2) in the three forms its forward and backward run: y = x @ W^T,
dX = dY @ W, dW = dY^T @ X; and the attention's two batched forms (64 heads x 128 x 32),
which PyTorch runs inside its flash attention and XLA as dots.

Each contender is its own process (XLA reads XLA_FLAGS once, at the plugin's start), so
`--flags` variants run side by side with the baseline: the driver asks each process in
turn for one round (every form, `--calls` calls each), A B C A B C ..., and reports per
form and contender the median over `--rounds` of the CPU time per call (all threads of
that process) and of the wall time per call. Under `OMP_NUM_THREADS=1 taskset -c 1` (the
processes inherit both) CPU time is the load-robust measure of the work; with two cores
wall time says how each side uses the second core.

    OMP_NUM_THREADS=1 taskset -c 1 python bench/matmul_shapes.py
    python bench/matmul_shapes.py --flags "--xla_cpu_multi_thread_eigen=false"
    python bench/matmul_shapes.py --json bench/results/matmul_shapes.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics as st
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
M = 1024
LINEARS = [(256, 256), (256, 688), (688, 256)]  # (in, out) of the example's Linears


def _forms():
    """(name, flops, shapes of the two operands, the op) for every measured matmul."""
    import torch

    out = []
    for k, n in LINEARS:
        out.append((f"x@W^T {M}x{k} -> {n}", 2 * M * k * n, ((M, k), (n, k)),
                    lambda a, b: torch.mm(a, b.t())))
        out.append((f"dY@W {M}x{n} -> {k}", 2 * M * k * n, ((M, n), (n, k)),
                    lambda a, b: torch.mm(a, b)))
        out.append((f"dY^T@X {n}x{M} . {M}x{k}", 2 * M * k * n, ((M, n), (M, k)),
                    lambda a, b: torch.mm(a.t(), b)))
    h, s, d = 64, 128, 32  # batch 8 x 8 heads, sequence 128, head dim 32
    out.append((f"bmm Q@K^T {h}x{s}x{d}", 2 * h * s * s * d, ((h, s, d), (h, s, d)),
                lambda a, b: torch.bmm(a, b.transpose(1, 2))))
    out.append((f"bmm P@V {h}x{s}x{s}", 2 * h * s * s * d, ((h, s, s), (h, s, d)),
                lambda a, b: torch.bmm(a, b)))
    return out


def _worker(device: str, calls: int) -> None:
    """Serves rounds on stdin: each line "go" runs every form `calls` times, one JSON line
    back ({form: [CPU s per call, wall s per call]})."""
    import torch

    torch.manual_seed(0)
    forms = []
    for name, _, (sa, sb), op in _forms():
        a, b = torch.randn(*sa).to(device), torch.randn(*sb).to(device)
        forms.append((name, op, a, b))
    sync = torch.tpu.synchronize if device == "tpu" else (lambda: None)
    for _, op, a, b in forms:  # compile, warm
        for _ in range(3):
            c = op(a, b)
        sync()
    print(json.dumps({"ready": device, "threads": torch.get_num_threads(),
                      "xla_flags": os.environ.get("XLA_FLAGS")}), flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        res = {}
        for name, op, a, b in forms:
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(calls):
                c = op(a, b)  # kept alive: synchronize waits for the live results
            sync()
            res[name] = [(time.process_time() - c0) / calls, (time.perf_counter() - t0) / calls]
        del c
        print(json.dumps(res), flush=True)


def _spawn(name: str, device: str, xla_flags: str | None,
           calls: int) -> tuple[str, subprocess.Popen, dict]:
    env = dict(os.environ)
    if xla_flags is not None:
        env["XLA_FLAGS"] = xla_flags
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", device,
                          "--calls", str(calls)], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    ready = json.loads(p.stdout.readline())
    assert ready.get("ready") == device, ready
    return name, p, ready


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--flags", action="append", default=[],
                    help="an XLA_FLAGS variant to run beside the baseline (repeatable)")
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return _worker(a.worker, a.calls)

    base = os.environ.get("XLA_FLAGS", "")
    procs = [_spawn("torch cpu", "cpu", None, a.calls),
             _spawn("xla" + (f" [{base}]" if base else ""), "tpu", base, a.calls)]
    procs += [_spawn(f"xla [{f}]", "tpu", f"{base} {f}".strip(), a.calls) for f in a.flags]
    samples: dict[str, list[dict]] = {n: [] for n, _, _ in procs}
    load = [os.getloadavg()[0]]
    for _ in range(a.rounds):  # interleaved: one round of each contender in turn
        for n, p, _ in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
            samples[n].append(json.loads(p.stdout.readline()))
    load.append(os.getloadavg()[0])
    for _, p, _ in procs:
        p.stdin.close()
        p.wait()

    sys.path.insert(0, os.path.dirname(HERE))
    from bench import env

    rows = []
    for form, flops, _, _ in _forms():
        med = {n: [st.median(s[form][i] for s in samples[n]) for i in (0, 1)] for n in samples}
        for n, (cpu, wall) in med.items():
            rows.append({"form": form, "contender": n, "cpu_ms": cpu * 1e3, "wall_ms": wall * 1e3,
                         "gflops_cpu": flops / cpu / 1e9,
                         "cpu_vs_torch": cpu / med["torch cpu"][0],
                         "wall_vs_torch": wall / med["torch cpu"][1]})
    out = {"machine": env.describe(), "affinity": sorted(os.sched_getaffinity(0)),
           "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "rounds": a.rounds,
           "calls": a.calls, "load_average": load,
           "contenders": {n: {"threads": r["threads"], "xla_flags": r["xla_flags"]}
                          for n, _, r in procs}, "rows": rows}
    print(f"{out['machine']['date']}, {out['machine']['cpu']}, cores {out['affinity']}, "
          f"OMP_NUM_THREADS={out['omp_num_threads']}, load average {load[0]:.1f} -> {load[1]:.1f}")
    print(f"{'form':28s} {'contender':40s} {'CPU ms':>7s} {'GFLOP/s':>7s} {'wall ms':>7s} "
          f"{'CPU/torch':>9s} {'wall/torch':>10s}")
    for r in rows:
        print(f"{r['form']:28s} {r['contender'][:40]:40s} {r['cpu_ms']:7.3f} {r['gflops_cpu']:7.1f} "
              f"{r['wall_ms']:7.3f} {r['cpu_vs_torch']:9.2f} {r['wall_vs_torch']:10.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
