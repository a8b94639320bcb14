"""The GPU check (tools/gpu_check, `make gpu-check`) tested on this machine through its CPU dry
run: "tpu" is the XLA CPU plugin, the reference is torch on the CPU. A lent GPU's minutes are
few; the script must not first fail there.

- test_report_*: report.py on hand-written records (no processes; fast).
- test_dry_run_quick: run.sh end to end with a subset (machine, coexist, train at the small
  size, strict mode cold and warm): 26 s here, 40 s with the 2 cores busy, 74 s in a CI run
  beside other work. Part of the normal run. Its deadline is a ceiling, not a duration: a
  deadline of 75 s once left the last contender 10 s on a slow CI machine (timed out), so it
  is 180 s; the run still ends as soon as its work does.
- test_dry_run_full: every phase and contender (2-3 min on 2 cores): only with
  TPUC_GPU_CHECK_FULL=1 (`make gpu-check-dry` runs the same thing).
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "gpu_check")
sys.path.insert(0, TOOL)
import checklib as common  # noqa: E402

# report.py by path, under a name no other test's module has
_spec = importlib.util.spec_from_file_location("gpu_check_report", os.path.join(TOOL, "report.py"))
assert _spec and _spec.loader
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)


def _train(contender: str, **kw: Any) -> dict[str, Any]:
    size, dev, mode, *cache = contender.split("/")
    return {"kind": "train", "t": 1.0, "contender": contender, "size": size,
            "device": "tpu" if dev == "tpu" else dev.split("-")[1], "mode": mode,
            "cache": cache[0] if cache else "", "status": "ok", **kw}


def _records() -> list[dict[str, Any]]:
    ref = [5.6, 5.2, 4.9, 4.7]
    return [
        {"kind": "machine", "t": 1.0, "dry": False, "device_name": "NVIDIA H200",
         "nvidia_smi": "NVIDIA H200, 143771 MiB, 580.1", "steps": 4, "dtype": "f32",
         "loss_rtol": 1e-3, "deadline_s": 480, "packages": {"tpuc": "0.1.0"}},
        _train("small/torch-cuda/eager", first_step_s=2.0, steady_s=0.01, steady_min_s=0.009,
               tflops=33.5, tok_s=200000, losses=ref),
        _train("small/tpu/strict/cold", first_step_s=0.025, steady_s=0.01, tflops=33.5,
               losses=[5.6, 5.2, 4.9, 4.7], tpu_stats={"compiles": 80, "disk_hits": 0, "fallbacks": 0},
               loss_vs_ref={"max_rel_diff": 0.0, "within_rtol": True}),
        _train("small/tpu/strict/warm", first_step_s=0.02, steady_s=0.01, losses=ref,
               loss_vs_ref={"max_rel_diff": 0.0, "within_rtol": True}),
        _train("small/tpu/fused/cold", first_step_s=9.0, steady_s=0.01, losses=[5.6, 5.3],
               loss_vs_ref={"max_rel_diff": 0.019, "within_rtol": False}),
        _train("small/tpu/fused/warm", status="timeout after 40s", losses=[]),
        {"kind": "done", "t": 2.0, "elapsed_s": 300.0},
    ]


def test_report_targets_mfu_and_agreement() -> None:
    md = report.render(_records())
    rows = {ln.split("|")[2].strip() + "/" + ln.split("|")[3].strip(): ln
            for ln in md.splitlines() if ln.startswith("| small | tpu ")}
    assert "≤ 3x: met" in rows["tpu strict/cold"]          # 0.025 / 0.01 = 2.5x
    assert "≤ 1.2x: missed" in rows["tpu strict/warm"]     # 2.0x
    assert "≤ 3x: missed" in rows["tpu fused/cold"]        # 900x
    assert "not measured (timeout after 40s)" in rows["tpu fused/warm"]
    # MFU against the H200's dense f32 peak of 67 TFLOP/s: 33.5 / 67 = 50%
    assert "| 50.0% |" in md
    assert "1.9e-02 ✗" in md and "losses agree with torch CUDA eager: 2/3 (not: small/tpu/fused/cold)" in md
    assert md.startswith("## On a GPU")


def test_report_peaks() -> None:
    assert common.peak_for("NVIDIA H200", "bf16")[0] == 989.5e12
    assert common.peak_for("NVIDIA H200 NVL", "f32")[0] == 60e12
    assert common.peak_for("Tesla T4", "f32")[0] is None


def test_report_torn_line(tmp_path: Any) -> None:
    """A run killed mid-write leaves a torn last line: the report still renders."""
    with open(tmp_path / "results.jsonl", "w") as f:
        for r in _records():
            f.write(json.dumps(r) + "\n")
        f.write('{"kind": "train", "contend')
    assert report.main([str(tmp_path)]) == 0
    assert "### Training, small" in (tmp_path / "report.md").read_text()


def _dry_run(tmp_path: Any, deadline: int, **env: str) -> tuple[list[dict[str, Any]], str, float]:
    out = tmp_path / "out"
    e = dict(os.environ, GPU_CHECK_DRY="1", OUT=str(out), GPU_CHECK_PYTHON=sys.executable,
             GPU_CHECK_DEADLINE=str(deadline), **env)
    for k in ("TPUC_PLATFORM", "TPUC_PJRT_PLUGIN", "TPUC_CACHE_DIR", "GPU_CHECK_C_BUILD"):
        e.pop(k, None)
    t0 = time.time()
    p = subprocess.run(["bash", os.path.join(TOOL, "run.sh")], env=e, capture_output=True,
                       text=True, timeout=deadline + 90)
    took = time.time() - t0
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    recs = []
    with open(out / "results.jsonl") as f:
        for line in f:
            recs.append(json.loads(line))  # every line whole: nothing killed mid-write
    md = (out / "report.md").read_text()
    assert (out / "log.txt").stat().st_size > 0
    return recs, md, took


def _check_training(recs: list[dict[str, Any]], md: str, n_tpu: int) -> None:
    m = next(r for r in recs if r["kind"] == "machine")
    assert m["dry"] and m["torch"] and m["plugin"]
    train = [r for r in recs if r["kind"] == "train"]
    ref = next(r for r in train if r["mode"] == "eager")
    assert ref["status"] == "ok" and len(ref["losses"]) == m["steps"]
    tpu = [r for r in train if r["device"] == "tpu"]
    assert len(tpu) == n_tpu
    for r in tpu:
        assert r["status"] == "ok", r
        assert len(r["losses"]) == m["steps"] and r["first_step_s"] > 0 and r["steady_s"] > 0
        # the same model, weights and batches in f32: XLA's CPU compiler and torch's CPU
        # kernels sum in other orders, nothing more (measured: <= 3e-7 relative)
        assert r["loss_vs_ref"]["max_rel_diff"] <= m["loss_rtol"], r["loss_vs_ref"]
        assert r["tpu_stats"]["fallbacks"] == 0, r["tpu_stats"]
    cold = next(r for r in tpu if r["cache"] == "cold")
    warm = next(r for r in tpu if r["cache"] == "warm" and r["mode"] == cold["mode"])
    assert cold["tpu_stats"]["compiles"] > 0
    loaded = warm["tpu_stats"]["disk_hits"] + (warm["tpu_stats"].get("preloaded") or 0)
    assert warm["tpu_stats"]["compiles"] == 0 and loaded > 0  # warm = warm
    assert "### First step against steady step" in md and "| dry-small | tpu strict | cold |" in md
    assert recs[-1]["kind"] == "done"


def test_dry_run_quick(tmp_path: Any) -> None:
    deadline = 180
    recs, md, took = _dry_run(tmp_path, deadline, GPU_CHECK_SIZES="small", GPU_CHECK_MODES="strict",
                              GPU_CHECK_PHASES="machine,coexist,train")
    _check_training(recs, md, n_tpu=3)  # strict cold, warm, and cold without the compile-ahead queue
    co = {r["case"]: r for r in recs if r["kind"] == "coexist"}
    assert set(co) == {"ref", "tpu", "both"} and all(c["status"] == "pass" for c in co.values()), co
    assert co["tpu"]["loss_vs_ref"]["within_rtol"]
    assert "| coexistence (issue 31) | ref: pass, tpu: pass, both: pass |" in md
    assert took < deadline + 30


@pytest.mark.skipif(os.environ.get("TPUC_GPU_CHECK_FULL") != "1",
                    reason="every phase of the dry run (2-3 min): TPUC_GPU_CHECK_FULL=1")
def test_dry_run_full(tmp_path: Any) -> None:
    recs, md, took = _dry_run(tmp_path, 240)
    kinds = {r["kind"] for r in recs}
    assert {"machine", "build", "info", "coexist", "memory", "train", "pytest", "micro", "done"} <= kinds
    assert all(r["status"] == "pass" for r in recs if r["kind"] == "memory"), \
        [r for r in recs if r["kind"] == "memory"]
    _check_training(recs, md, n_tpu=len([r for r in recs if r["kind"] == "train"
                                         and r["device"] == "tpu"]))
    assert took < 240 + 30
