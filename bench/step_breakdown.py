"""Where a replayed compiled training step's time goes, against PyTorch CPU eager.

Not a bench case (CI does not run it): the measurement behind docs/execution.md,
"Where a replayed step's time goes". The example model's step runs on the CPU
(PyTorch eager) and as torch.compile(backend="tpu") replayed, interleaved one
step each in turn, and reports per contender the medians of wall time, host time
until the step returns and CPU time of the process (all threads); per compiled
graph (forward, the backward's parts, AdamW) its wall and CPU time, each launch
waited for; per thread the CPU time of the measured steps (which pool does the
work); and, with --phases, PyTorch CPU eager's forward / backward / optimizer CPU
time and its torch.profiler op table. CPU time with one core
(`OMP_NUM_THREADS=1 taskset -c 1`) is the load-robust measure of each side's
work; wall time with two cores is the one the issue asks about and depends on the
machine's load (printed).

    python bench/step_breakdown.py --size 5M --steps 8
    OMP_NUM_THREADS=1 taskset -c 1 python bench/step_breakdown.py --phases
    XLA_FLAGS=... TPUC_CACHE_DIR=off python bench/step_breakdown.py --who replay
"""
from __future__ import annotations

import argparse
import os
import statistics as st
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "examples"), HERE]

import torch  # noqa: E402


def _thread_cpu() -> dict[str, tuple[str, int]]:
    """Each thread's name and CPU time in clock ticks (utime + stime)."""
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            s = open(f"/proc/self/task/{t}/stat").read()
        except FileNotFoundError:
            continue
        f = s[s.rindex(")") + 2:].split()
        out[t] = (s[s.index("(") + 1:s.rindex(")")], int(f[11]) + int(f[12]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="5M", choices=["5M", "50M"])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--who", default="cpu,replay", help="cpu and/or replay, comma-separated")
    ap.add_argument("--phases", action="store_true", help="CPU eager's phases and op table")
    a = ap.parse_args()

    import torch._dynamo.config as dcfg
    import tpuc  # noqa: F401
    from cases.common import example_step
    from cases.replay import _configs
    from tpuc import dynamo

    dcfg.recompile_limit = 64
    cfg = _configs(False)[a.size]
    batch, seq = 8, 128
    graph_times: list[list[tuple[float, float]]] = []
    runner = dynamo._graph_runner

    def timed_runner(gm, example_inputs, *args, **kw):
        run = runner(gm, example_inputs, *args, **kw)
        mine: list[tuple[float, float]] = []
        graph_times.append(mine)

        def timed(xs):
            t0, c0 = time.perf_counter(), time.process_time()
            out = run(xs)
            torch.tpu.synchronize()
            mine.append((time.perf_counter() - t0, time.process_time() - c0))
            return out

        timed._boxed_call = True  # type: ignore[attr-defined]
        return timed

    dynamo._graph_runner = timed_runner

    def make(name: str):
        dev = "cpu" if name == "cpu" else "tpu"
        m, opt, x, y, step = example_step(cfg, dev, batch, seq, capturable=dev == "tpu")
        return (m, opt, x, y), (torch.compile(step, backend="tpu") if dev == "tpu" else step)

    names = a.who.split(",")
    made = {n: make(n) for n in names}
    res: dict[str, list[tuple[float, float, float]]] = {n: [] for n in names}
    warm = 3
    for i in range(warm + a.steps):
        if i == warm:
            before = _thread_cpu()
        for n, (_, f) in made.items():
            t0, c0 = time.perf_counter(), time.process_time()
            loss = f()
            t1 = time.perf_counter()
            loss.item()
            t2, c2 = time.perf_counter(), time.process_time()
            if i >= warm:
                res[n].append((t1 - t0, t2 - t0, c2 - c0))
    after = _thread_cpu()
    print(f"{a.size}, batch {batch} x {seq}, {a.steps} steps, torch threads "
          f"{torch.get_num_threads()}, load average {os.getloadavg()}")
    for n, r in res.items():
        print(f"{n:7s} host {st.median(x[0] for x in r) * 1e3:8.1f} ms  step "
              f"{st.median(x[1] for x in r) * 1e3:8.1f} ms [{min(x[1] for x in r) * 1e3:.1f}, "
              f"{max(x[1] for x in r) * 1e3:.1f}]  CPU {st.median(x[2] for x in r) * 1e3:8.1f} ms")
    for g, r in enumerate(graph_times):
        r = r[warm:]
        if r:
            print(f"graph {g}: wall {st.median(x[0] for x in r) * 1e3:8.1f} ms  CPU "
                  f"{st.median(x[1] for x in r) * 1e3:8.1f} ms")
    tick = 1e3 / os.sysconf("SC_CLK_TCK")
    order = sorted(after.items(), key=lambda kv: before.get(kv[0], ("", 0))[1] - kv[1][1])
    for t, (name, v) in order:
        d = (v - before.get(t, ("", 0))[1]) * tick / a.steps
        if d:
            print(f"thread {t} {name}: {d:.0f} ms CPU per step (all contenders)")
    if a.phases and "cpu" in made:
        (m, opt, x, y), _ = made["cpu"]
        ph: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": []}
        for _ in range(a.steps):
            c0 = time.process_time()
            _, loss = m(x, y)
            c1 = time.process_time()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            c2 = time.process_time()
            opt.step()
            c3 = time.process_time()
            for k, v in zip(ph, (c1 - c0, c2 - c1, c3 - c2)):
                ph[k].append(v)
        print("cpu eager CPU ms:", {k: round(st.median(v) * 1e3, 1) for k, v in ph.items()})
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as p:
            for _ in range(2):
                _, loss = m(x, y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=12,
                                     max_name_column_width=45))


if __name__ == "__main__":
    main()
