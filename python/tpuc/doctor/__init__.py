"""``tpuc doctor -- python train.py ...``: runs a program unchanged under
instrumentation and says, with the program's own file:line, what keeps it
from running well on the device: ops that fell back to the CPU, recompiles
(and the bucket sizes that would remove them), torch.compile graph breaks,
host- vs device-bound time, the programs with the most device time, peak
memory and what holds it, and hardware advice for the target (TPU: 128-wide
matrix units, (8, 128) tiles, bf16).

Outputs: text on stderr, ``doctor.json`` and ``doctor.html`` in ``--out``
(default ``./tpuc-doctor``). How it works: the doctor starts the command with
``PYTHONPATH`` led by a ``sitecustomize`` that loads the probe (probe.py) in
every Python process of the command; each writes its raw record at exit, and
analyze.py turns them into findings.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
from typing import Any

from . import analyze as _analyze
from . import report as _report

__all__ = ["main", "run", "analyze_dir"]


def _hook_dir() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "hook")


def run(command: list[str], out_dir: str, env: dict[str, str] | None = None,
        timeout: float | None = None) -> int:
    """Runs `command` instrumented; its raw records land in `out_dir`."""
    os.makedirs(out_dir, exist_ok=True)
    for old in glob.glob(os.path.join(out_dir, "raw-*.json")):
        os.remove(old)
    e = dict(os.environ if env is None else env)
    e["TPUC_DOCTOR_OUT"] = os.path.abspath(out_dir)
    e["PYTHONPATH"] = os.pathsep.join([_hook_dir()] + [p for p in [e.get("PYTHONPATH")] if p])
    e.setdefault("TPUC_FALLBACK", "silent")  # the doctor reports them, with their lines
    if command and command[0].endswith(".py"):
        command = [sys.executable] + command
    return subprocess.call(command, env=e, timeout=timeout)


def analyze_dir(out_dir: str, target: str | None = None) -> dict[str, Any]:
    """Merges the raw records of `out_dir` (one per process; the one with the
    most device work first) and analyzes them."""
    raws = []
    for p in sorted(glob.glob(os.path.join(out_dir, "raw-*.json"))):
        with open(p) as f:
            raws.append(json.load(f))
    if not raws:
        raise RuntimeError(
            f"tpuc doctor: no process of the command reported to {out_dir}: was it a Python "
            "program using torch? (a process that exits through os._exit skips the report)")
    raws.sort(key=lambda r: -(r.get("stats", {}).get("executions", 0)))
    rep = _analyze.analyze(raws[0], target)
    rep["processes"] = len(raws)
    return rep


def write(rep: dict[str, Any], out_dir: str, html: bool = True) -> None:
    with open(os.path.join(out_dir, "doctor.json"), "w") as f:
        json.dump(rep, f, indent=1)
    if html:
        with open(os.path.join(out_dir, "doctor.html"), "w") as f:
            f.write(_report.html_page(rep))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="tpuc doctor",
        description="Run a PyTorch program on 'tpu' under instrumentation and report what to "
                    "change: tpuc doctor [options] -- python train.py [args]")
    ap.add_argument("--out", default="tpuc-doctor", help="folder for doctor.json / doctor.html")
    ap.add_argument("--target", choices=["tpu", "cpu", "cuda"], default=None,
                    help="hardware to advise for (default: the active plugin's platform)")
    ap.add_argument("--no-html", action="store_true", help="skip the HTML report")
    ap.add_argument("--timeout", type=float, default=None, help="seconds before the program is stopped")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the program: -- python train.py ...")
    a = ap.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no program given: tpuc doctor -- python train.py [args]")
    if not shutil.which(cmd[0]) and not os.path.exists(cmd[0]):
        ap.error(f"cannot find {cmd[0]!r}")
    rc = run(cmd, a.out, timeout=a.timeout)
    try:
        rep = analyze_dir(a.out, a.target)
    except RuntimeError as e:
        print(str(e), file=sys.stderr)
        return rc or 2
    rep["returncode"] = rc
    write(rep, a.out, html=not a.no_html)
    print(_report.text(rep), file=sys.stderr)
    print(f"tpuc doctor: wrote {os.path.join(a.out, 'doctor.json')}"
          + ("" if a.no_html else f" and {os.path.join(a.out, 'doctor.html')}"), file=sys.stderr)
    return rc
