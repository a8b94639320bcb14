"""Multi-step training parity (issue 29): fixed architectures (tests/difftest/parity.py)
train several steps on "tpu" in strict, fused and compiled mode, with host reads and
in-place parameter edits between the steps, and every loss, gradient and parameter of
every step stays within the derived bound of the float64 CPU run (tests/difftest/run.py).
Also: the checker itself catches a lost in-place update, and the differential tester's
CI slice (random programs, time-boxed) finds nothing."""
from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import torch

import tpuc  # noqa: F401

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
from tests.difftest import parity, run  # noqa: E402


@pytest.mark.parametrize("mode", run.MODES)
@pytest.mark.parametrize("name", sorted(parity.PROGRAMS))
def test_training_matches_float64(name: str, mode: str) -> None:
    found = run.check(parity.PROGRAMS[name], (mode,))
    assert found is not None, "the CPU rejected a fixed program"
    assert not found, "\n".join(f.summary() for f in found)


def test_checker_catches_a_lost_inplace_update() -> None:
    """The bound is not vacuous: a run that misses one in-place weight update (what a stale
    read looks like) fails it, though its loss at step 0 is right."""
    prog = parity.PROGRAMS["linear_128_512_inplace"]
    ref = run.run(prog, "cpu", torch.float64)
    cpu = run.run(prog, "cpu", torch.float32)
    stale = copy.deepcopy(prog)
    stale["steps"][1] = [a for a in stale["steps"][1] if a != "param_add"]
    dev = run.run(stale, "tpu", torch.float32)
    bad = run.compare(dev, cpu, ref, run.largest(prog, ref))
    assert bad is not None and bad[0].startswith("s1."), bad  # steps 0 and 0's update agree
    assert run.compare(run.run(prog, "tpu", torch.float32), cpu, ref, run.largest(prog, ref)) is None


# Every rewrite and fast path of the engine off at once (docs/execution.md, "Switches").
SWITCHES_OFF = {"TPUC_DOT_REWRITE": "0", "TPUC_SLICE_INPLACE": "0", "TPUC_SCALAR_CACHE": "0",
                "TPUC_SUM_BLOCK": "0",
                "TPUC_UNBOXED": "0", "TPUC_FUSED_OPTIM": "0", "TPUC_DONATE": "0",
                "TPUC_FUSED_REPLAY": "0", "TPUC_GRAPH_REPLAY": "record", "TPUC_CANONICAL": "0",
                "TPUC_FLAT_BUFFERS": "0", "TPUC_FUSED_HOIST_FILLS": "0"}


@pytest.mark.parametrize("switches", ["on", "off"])
def test_difftest_slice(switches: str) -> None:
    """The differential tester's CI slice: random programs from fixed seeds for a bounded
    time (make difftest runs the long budget), with the engine's rewrites on (the default)
    and all off. A finding prints its program."""
    seconds = os.environ.get("TPUC_DIFFTEST_SECONDS", "45" if switches == "on" else "20")
    env = dict(os.environ, **(SWITCHES_OFF if switches == "off" else {}))
    seed = "20291" if switches == "on" else "40291"
    r = subprocess.run([sys.executable, "-m", "tests.difftest", "--seed", seed, "--seconds",
                        seconds, "--no-shrink"], cwd=ROOT, capture_output=True, text=True,
                       timeout=float(seconds) + 240, env=env)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "programs ran" in r.stdout and " 0 programs ran" not in r.stdout, r.stdout


@pytest.mark.parametrize("path", sorted(
    os.path.join(ROOT, "tests", "difftest", "findings", f)
    for f in os.listdir(os.path.join(ROOT, "tests", "difftest", "findings"))
    if f.endswith(".json")))
def test_saved_findings_stay_fixed(path: str) -> None:
    """Each shrunk finding of the tester (tests/difftest/findings/) is a regression test."""
    import json

    with open(path) as f:
        prog = json.load(f)
    found = run.check(prog)
    assert found is not None and not found, "\n".join(x.summary() for x in found or [])
