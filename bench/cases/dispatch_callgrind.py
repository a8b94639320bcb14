"""Instructions per cached strict op, counted by valgrind's callgrind: a
load-independent measure of the dispatch path (the same build gives the same
count on a busy machine, to a fraction of a percent).

    python -m bench.cases.dispatch_callgrind            # a + b, 8 float32 elements
    python -m bench.cases.dispatch_callgrind --top 40   # and where they go

Not part of `make bench` (a run takes 4-5 minutes under valgrind). Each run is
a fresh process under callgrind with instrumentation off until the op has been
warmed up (compiled, cached); then the loop is counted alone (callgrind_control
turns instrumentation on, and dumps after the loop's synchronize). Two loop
lengths are counted and the difference is divided by the difference of their
lengths, so what the counted window holds besides the loop cancels out. The
compile cache is a fresh directory: valgrind's CPU has no AVX-512, and
programs compiled for the host would not run under it. --top lists the
inclusive count per op of the heaviest functions of the longer run."""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

_CHILD = r"""
import os, sys, time, torch, tpuc
n, d = int(sys.argv[1]), sys.argv[2]
torch.tpu.set_eager_mode("strict")
a = torch.randn(8, device="tpu"); b = torch.randn(8, device="tpu")
for _ in range(300): c = a + b
torch.tpu.synchronize()
def wait(name):
    while not os.path.exists(os.path.join(d, name)): time.sleep(0.05)
open(os.path.join(d, "ready"), "w").close(); wait("go")
for _ in range(n): c = a + b
torch.tpu.synchronize()
open(os.path.join(d, "done"), "w").close(); wait("stop")
"""


def _wait_for(path: str, proc: subprocess.Popen, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None:
            raise RuntimeError(f"the process under callgrind exited ({proc.returncode})")
        if time.monotonic() > end:
            raise TimeoutError(f"no {os.path.basename(path)} after {timeout:.0f} s")
        time.sleep(0.5)


def count(n: int, work: str) -> tuple[int, str]:
    """Instructions of n cached `a + b` (plus a constant), and the dump's path."""
    sync = tempfile.mkdtemp(dir=work)
    out = os.path.join(work, f"cg.{n}")
    env = dict(os.environ, TPUC_CACHE_DIR=os.path.join(work, "cache"))
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
         sys.executable, "-c", _CHILD, str(n), sync],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(os.path.join(sync, "ready"), proc, 900)
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True,
                       stdout=subprocess.DEVNULL)
        open(os.path.join(sync, "go"), "w").close()
        _wait_for(os.path.join(sync, "done"), proc, 900)
        subprocess.run(["callgrind_control", "-d", "loop", str(proc.pid)], check=True,
                       stdout=subprocess.DEVNULL)
        open(os.path.join(sync, "stop"), "w").close()
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    dumps = [p for p in glob.glob(out + ".*") if re.search(r"\.\d+\.1$", p)]
    if not dumps:
        raise RuntimeError("callgrind wrote no dump of the loop")
    with open(dumps[0]) as f:
        total = next(int(line.split()[1]) for line in f if line.startswith("totals:"))
    return total, dumps[0]


def top(dump: str, n_ops: int, k: int) -> list[tuple[float, str]]:
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", dump], check=True,
                          capture_output=True, text=True).stdout
    rows = []
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(\S.*)$", line)
        if m and "PROGRAM TOTALS" not in line:
            rows.append((int(m.group(1).replace(",", "")) / n_ops, m.group(2)[:150]))
    return rows[:k]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--short", type=int, default=2000, help="ops in the shorter loop")
    ap.add_argument("--long", type=int, default=6000, help="ops in the longer loop")
    ap.add_argument("--top", type=int, default=0, help="list the heaviest functions")
    args = ap.parse_args()
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is not installed")
    work = tempfile.mkdtemp(prefix="tpuc-callgrind-")
    try:
        short, _ = count(args.short, work)
        long_, dump = count(args.long, work)
        per_op = (long_ - short) / (args.long - args.short)
        print(f"a + b, 8 float32 elements, strict, cache hit: {per_op:.0f} instructions per op "
              f"(callgrind, {args.short} and {args.long} ops)")
        for ir, name in top(dump, args.long, args.top):
            print(f"{ir:9.0f}  {name}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
