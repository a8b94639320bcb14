"""docs/tuning.md's worked example: the mis-shaped training loop of
examples/tuning/train.py before and after following `tpuc doctor`'s advice
(pad sequences to the bucket sizes it names; replace the op it reports as a
CPU fallback). Each version runs in a fresh process with its own empty
compile cache (a first run, as a user sees it); the versions alternate, and
the medians are reported. The full mode also runs the doctor on the first
version and records what it said."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

from .common import tpu_available

COMMAND = "python -m bench.run --cases tuning --no-report"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "tuning", "train.py")


def _run(tuned: bool, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TPUC_CACHE_DIR=cache, TPUC_FALLBACK="silent")
        cmd = [sys.executable, SCRIPT, "--json", "--steps", str(steps)] + (["--tuned"] if tuned else [])
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def _doctor(steps: int) -> dict:
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, TPUC_CACHE_DIR="off")
        r = subprocess.run([sys.executable, "-m", "tpuc.doctor", "--out", out, "--no-html", "--",
                            sys.executable, SCRIPT, "--steps", str(steps)],
                           capture_output=True, text=True, timeout=1200, env=env)
        if r.returncode != 0:
            raise RuntimeError(r.stderr[-2000:])
        with open(os.path.join(out, "doctor.json")) as f:
            rep = json.load(f)
    said = []
    for f in rep["findings"]:
        if f["check"] in ("recompile", "fallback"):
            said.append({"check": f["check"], "title": f["title"],
                         "site": f["sites"][0] if f["sites"] else "",
                         "buckets": f["data"].get("buckets"), "op": f["data"].get("op")})
    return {"findings": said, "summary": rep["summary"]}


def run(quick: bool) -> dict:
    if not tpu_available():
        return {"title": "Tuning", "command": COMMAND, "rows": [],
                "notes": "tpu unavailable on this install"}
    steps, reps = (6, 1) if quick else (10, 3)
    runs: dict[bool, list[dict]] = {False: [], True: []}
    for _ in range(reps):
        for tuned in (False, True):
            runs[tuned].append(_run(tuned, steps))
    rows = []
    for tuned in (False, True):
        rs = runs[tuned]
        rows.append({
            "version": "tuned (doctor's advice)" if tuned else "first version",
            "seconds": statistics.median(r["seconds"] for r in rs),
            "compiles": rs[0]["compiles"], "recompiles": rs[0]["recompiles"],
            "fallbacks": rs[0]["fallbacks"],
        })
    first, tuned = runs[False][0], runs[True][0]
    loss_diff = max(abs(a - b) for a, b in zip(first["losses"], tuned["losses"]))
    result = {
        "title": "Tuning: a mis-shaped training loop before and after tpuc doctor's advice",
        "command": COMMAND,
        "steps": steps,
        "repetitions": reps,
        "rows": rows,
        "speedup": rows[0]["seconds"] / max(rows[1]["seconds"], 1e-9),
        "same_metric": first["distinct"] == tuned["distinct"],
        "max_loss_difference": loss_diff,
        "notes": "examples/tuning/train.py, strict mode, fresh process and empty compile cache "
                 "per run; seconds are the training loop's (model built, data on the host), "
                 "median of the repetitions.",
    }
    if not quick:
        result["doctor"] = _doctor(8)
    return result
