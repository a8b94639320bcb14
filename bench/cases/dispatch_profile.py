"""Where a strict op's host time goes: `perf` samples of a loop of one cached
op (`a + b` on 8-element tensors), grouped by library, turned into µs per op
with the loop's own time. Used by the dispatch case when `perf` can run.

Each sample run is a fresh process that warms up, then turns perf's sampling
on through its control FIFO for the timed loop only (imports and compiles are
not counted), and also times PyTorch CPU eager's same op in the same process.
With TPUC_BENCH_BEFORE=<dir holding an older tpuc package> the same runs are
made with that build too, interleaved with the current one (before, after,
before, after, ...), so that the two columns come from one run."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

_CHILD = r"""
import os, sys, time, torch, tpuc
n = int(sys.argv[1])
torch.tpu.set_eager_mode("strict")
a = torch.randn(8, device="tpu"); b = torch.randn(8, device="tpu")
ca = torch.randn(8); cb = torch.randn(8)
for _ in range(2000): a + b
torch.tpu.synchronize()
ctl = os.environ.get("TPUC_PERF_CTL")
if ctl:
    with open(ctl, "w") as c: c.write("enable\n")
t = time.perf_counter()
for _ in range(n): a + b
torch.tpu.synchronize()
dt = time.perf_counter() - t
if ctl:
    with open(ctl, "w") as c: c.write("disable\n")
t = time.perf_counter()
for _ in range(n): ca + cb
cpu = time.perf_counter() - t
print("RESULT", dt / n * 1e6, cpu / n * 1e6, tpuc.__file__)
"""

# (label, test on "dso symbol"); the first that matches takes the sample
GROUPS = [
    ("Python interpreter", lambda d, s: "libpython" in d or d.startswith("python")),
    ("PyTorch: dispatcher, autograd, TensorIterator, TensorImpl",
     lambda d, s: d.startswith(("libtorch", "libc10"))),
    ("tpuc glue (csrc/torch: Meta cache, arguments, outputs)", lambda d, s: d.startswith("_C.")),
    ("tpuc core (csrc/core: signature, cache lookup, launch)",
     lambda d, s: d.startswith("libtpuc_core")),
    ("XLA CPU plugin: PJRT execute, buffers, events", lambda d, s: "pjrt" in d),
    ("libc malloc/free", lambda d, s: d.startswith("libc.") and re.search(
        r"malloc|free|calloc|realloc|memalign|consolidate|unlink_chunk", s) is not None),
    ("libc mutexes, libstdc++, TLS, kernel, other", lambda d, s: True),
]

_LINE = re.compile(r"^\s*([\d.]+)%\s+(\S+)\s+\[[.k]\]\s+(.*)$")


def perf_usable() -> str | None:
    """None when perf can sample this process tree; else why not."""
    if not shutil.which("perf"):
        return "perf is not installed"
    r = subprocess.run(["perf", "record", "-q", "-o", os.devnull, "--", "true"],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return "perf record failed: " + (r.stderr.strip().splitlines() or ["?"])[-1][:120]
    return None


def _one(python_path: str | None, n: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        ctl, data = os.path.join(d, "ctl"), os.path.join(d, "perf.data")
        os.mkfifo(ctl)
        env = dict(os.environ, TPUC_PERF_CTL=ctl)
        if python_path:
            env["PYTHONPATH"] = python_path + os.pathsep + env.get("PYTHONPATH", "")
        r = subprocess.run(["perf", "record", "-q", "-D", "-1", "--control", f"fifo:{ctl}",
                            "-F", "2000", "-o", data, "--", sys.executable, "-c", _CHILD, str(n)],
                           capture_output=True, text=True, env=env, timeout=600)
        line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT")), None)
        if r.returncode != 0 or not line:
            raise RuntimeError((r.stderr or r.stdout)[-300:])
        _, us, cpu_us, where = line.split()
        rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,sym",
                              "--stdio", "-g", "none", "--percent-limit", "0"],
                             capture_output=True, text=True, timeout=600)
    shares = {g: 0.0 for g, _ in GROUPS}
    for x in rep.stdout.splitlines():
        m = _LINE.match(x)
        if not m:
            continue
        pct, dso, sym = float(m.group(1)), m.group(2), m.group(3).strip()
        for g, test in GROUPS:
            if test(dso, sym):
                shares[g] += pct
                break
    total = sum(shares.values()) or 1.0
    us_f = float(us)
    return {"us_per_op": us_f, "cpu_us_per_op": float(cpu_us), "tpuc": where,
            "us_by_group": {g: us_f * v / total for g, v in shares.items()}}


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2]


def profile(quick: bool) -> dict:
    why = perf_usable()
    if why:
        return {"skipped": why}
    n, runs = (20000, 1) if quick else (100000, 3)
    builds = {"after": None}
    before = os.environ.get("TPUC_BENCH_BEFORE")
    if before:
        builds = {"before": before, "after": None}
    samples: dict[str, list[dict]] = {k: [] for k in builds}
    for _ in range(runs):  # interleaved: before, after, before, after, ...
        for k, path in builds.items():
            samples[k].append(_one(path, n))
    out = {}
    for k, ss in samples.items():
        out[k] = {
            "us_per_op": _median([s["us_per_op"] for s in ss]),
            "cpu_us_per_op": _median([s["cpu_us_per_op"] for s in ss]),
            "ratio_vs_cpu": _median([s["us_per_op"] / s["cpu_us_per_op"] for s in ss]),
            "us_by_group": {g: _median([s["us_by_group"][g] for s in ss]) for g, _ in GROUPS},
            "runs": len(ss),
        }
    return {"op": "a + b, 8 elements, strict, cache hit", "loop": n, "builds": out}
