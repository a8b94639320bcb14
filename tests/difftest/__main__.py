"""The differential tester: random programs on "tpu" in every mode against the CPU.

    python -m tests.difftest --seconds 300                 # make difftest (DIFFTEST_SECONDS)
    python -m tests.difftest --seed 7 --count 1            # one program, by its seed
    python -m tests.difftest --replay finding.json         # a saved (shrunk) finding
    TPUC_DOT_REWRITE=0 python -m tests.difftest ...        # the same with a rewrite turned off

Program i of a run with --seed S is generated from seed S + i, so a finding's seed
replays it. The programs run in worker processes of --per-process programs each: one
process compiles thousands of programs, and on the XLA CPU plugin every compiled
program keeps memory mappings for its code until the process ends (tpuc caches every
executable); past the kernel's vm.max_map_count (65530 by default) XLA's compiler
fails with "LLVM compilation error: Cannot allocate memory" (docs/testing.md). A finding is shrunk (tests/difftest/run.py: shrink) and written, with its
program, to --out (JSON lines) for a regression test (tests/difftest/findings/).
docs/testing.md describes what is generated and the bound.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

import tpuc  # noqa: F401  (registers "tpu")

from . import gen, run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.difftest")
    ap.add_argument("--seed", type=int, default=0, help="first program's seed")
    ap.add_argument("--count", type=int, default=None, help="programs to run (at most)")
    ap.add_argument("--seconds", type=float, default=None,
                    help="time budget (default: 60 s without --count, none with it)")
    ap.add_argument("--modes", default=",".join(run.MODES), help="strict,fused,compiled")
    ap.add_argument("--kind", choices=["train", "ops"], default=None)
    ap.add_argument("--replay", default=None, help="a JSON file of one program")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--out", default=None, help="append findings here (JSON lines)")
    ap.add_argument("--per-process", type=int, default=25,
                    help="programs per worker process (0: all in this process)")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    if a.seconds is None:
        a.seconds = 60.0 if a.count is None else float("inf")
    modes = tuple(m for m in a.modes.split(",") if m)
    if a.replay:
        with open(a.replay) as f:
            prog = json.load(f)
        found = run.check(prog, modes)
        for fd in found or []:
            print(fd.summary())
        print("skipped: the CPU rejects it" if found is None else f"{len(found)} finding(s)")
        return 1 if found else 0
    if a.per_process > 0 and (a.count is None or a.count > a.per_process):
        return _supervise(a, argv if argv is not None else sys.argv[1:])
    t0 = time.monotonic()
    n = ran = skipped = 0
    findings: list[run.Finding] = []
    while True:
        if a.count is not None and n >= a.count:
            break
        if time.monotonic() - t0 > a.seconds:
            break
        seed = a.seed + n
        n += 1
        prog = gen.program(seed, a.kind)
        found = run.check(prog, modes)
        if found is None:
            skipped += 1
            continue
        ran += 1
        for fd in found:
            if not a.no_shrink and fd.what == "mismatch":
                small = run.shrink(prog, fd.mode)
                again = [f for f in run.check(small, (fd.mode,)) or []]
                if again:
                    fd = again[0]
            findings.append(fd)
            print(f"seed {seed}: {fd.summary()}\n  program: {json.dumps(fd.prog)}", flush=True)
            if a.out:
                with open(a.out, "a") as f:
                    f.write(json.dumps({"seed": seed, "mode": fd.mode, "what": fd.what,
                                        "name": fd.name, "detail": fd.detail,
                                        "program": fd.prog}) + "\n")
        if n % 10 == 0:
            print(f"[{time.monotonic() - t0:6.0f} s] {n} programs, {ran} ran, {skipped} skipped, "
                  f"{len(findings)} finding(s)", file=sys.stderr, flush=True)
    print(f"difftest: seeds {a.seed}..{a.seed + n - 1}: {ran} programs ran in modes {modes}, "
          f"{skipped} skipped (the CPU rejects them), {len(findings)} finding(s), "
          f"{time.monotonic() - t0:.0f} s")
    print("SUMMARY " + json.dumps({"n": n, "ran": ran, "skipped": skipped,
                                   "findings": len(findings)}), flush=True)
    return 1 if findings else 0


def _drop(args: list[str], flag: str, has_value: bool = True) -> list[str]:
    out, skip = [], False
    for x in args:
        if skip:
            skip = False
            continue
        if x == flag:
            skip = has_value
            continue
        if x.startswith(flag + "="):
            continue
        out.append(x)
    return out


def _supervise(a: argparse.Namespace, argv: list[str]) -> int:
    """Runs the programs in worker processes of a.per_process programs each."""
    import subprocess

    base = argv
    for flag in ("--seed", "--count", "--seconds", "--per-process"):
        base = _drop(base, flag)
    t0 = time.monotonic()
    seed, total = a.seed, {"n": 0, "ran": 0, "skipped": 0, "findings": 0}
    while True:
        left = a.count - total["n"] if a.count is not None else a.per_process
        spent = time.monotonic() - t0
        if left <= 0 or spent > a.seconds:
            break
        count = min(left, a.per_process)
        cmd = [sys.executable, "-m", "tests.difftest", *base, "--seed", str(seed), "--count",
               str(count), "--per-process", "0"]
        if a.seconds != float("inf"):  # the worker stops at the budget too
            cmd += ["--seconds", str(max(1.0, a.seconds - spent))]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        lines = r.stdout.splitlines()
        for line in lines:
            if not line.startswith(("SUMMARY ", "difftest: ")):
                print(line, flush=True)
        got = [json.loads(x[8:]) for x in lines if x.startswith("SUMMARY ")]
        if not got:  # the worker died: a finding of its own
            print(f"seeds {seed}..{seed + count - 1}: the worker process ended with "
                  f"{r.returncode} before its summary", flush=True)
            total["findings"] += 1
            total["n"] += count
        else:
            for k in total:
                total[k] += got[0][k]
        seed = a.seed + total["n"]
        print(f"[{time.monotonic() - t0:6.0f} s] {total['n']} programs, {total['ran']} ran, "
              f"{total['skipped']} skipped, {total['findings']} finding(s)", file=sys.stderr,
              flush=True)
    print(f"difftest: seeds {a.seed}..{a.seed + total['n'] - 1}: {total['ran']} programs ran "
          f"in modes ({a.modes}), {total['skipped']} skipped (the CPU rejects them), "
          f"{total['findings']} finding(s), {time.monotonic() - t0:.0f} s")
    return 1 if total["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
