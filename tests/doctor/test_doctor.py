"""tpuc doctor: each check on a program that has the problem and on one that
does not (tests/doctor/programs/sick.py with and without its flags). Each
finding must point at the program's own line (marked in its source)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

PROG = Path(__file__).parent / "programs" / "sick.py"
SRC = PROG.read_text().splitlines()


def line_of(marker: str) -> int:
    return next(i + 1 for i, s in enumerate(SRC) if marker in s)


def doctor(tmp: Path, *flags: str, target: str | None = None) -> dict[str, Any]:
    out = tmp / ("run" + "".join(flags).replace("-", "_"))
    cmd = [sys.executable, "-m", "tpuc.doctor", "--out", str(out)]
    if target:
        cmd += ["--target", target]
    cmd += ["--", sys.executable, str(PROG), *flags]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    assert (out / "doctor.html").exists()
    rep = json.loads((out / "doctor.json").read_text())
    rep["_stderr"] = p.stderr
    rep["_out"] = str(out)
    return rep


def findings(rep: dict[str, Any], check: str) -> list[dict[str, Any]]:
    return [f for f in rep["findings"] if f["check"] == check]


def sites_at(f: dict[str, Any], marker: str) -> bool:
    want = f"{PROG}:{line_of(marker)}"
    return any(want in s for s in f["sites"])


@pytest.fixture(scope="module")
def sick_eager(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return doctor(tmp_path_factory.mktemp("d"), "--fallback", "--varying", "--hw-bad", target="tpu")


@pytest.fixture(scope="module")
def healthy_eager(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return doctor(tmp_path_factory.mktemp("d"), target="tpu")


def test_fallback_found_at_its_line(sick_eager: dict[str, Any]) -> None:
    fs = findings(sick_eager, "fallback")
    uniq = [f for f in fs if f["data"]["op"] == "aten::_unique2"]
    assert uniq, sick_eager["findings"]
    assert uniq[0]["data"]["count"] == 4  # one per step
    assert sites_at(uniq[0], "FALLBACK-HERE")
    assert "torch.unique" in uniq[0]["advice"]
    # the terminal report names the line too
    assert f"sick.py:{line_of('FALLBACK-HERE')}" in sick_eager["_stderr"]


def test_no_fallback_when_absent(healthy_eager: dict[str, Any]) -> None:
    assert findings(healthy_eager, "fallback") == []
    assert healthy_eager["summary"]["fallbacks"] == 0


def test_recompiles_with_buckets(sick_eager: dict[str, Any]) -> None:
    fs = [f for f in findings(sick_eager, "recompile") if "sizes" in f["data"]]
    assert fs, sick_eager["findings"]
    seqs = [16 + 8 * i for i in range(4)]
    f = next(f for f in fs if set(seqs) <= set(f["data"]["sizes"]))
    assert f["data"]["dim"] == 1
    buckets = f["data"]["buckets"]
    # every size seen fits a bucket; the target is a TPU: multiples of 128
    assert all(any(b >= s for b in buckets) for s in f["data"]["sizes"])
    assert all(b % 128 == 0 for b in buckets) and len(buckets) < len(seqs)
    assert any("sick.py" in s for s in f["sites"])


def test_no_recompiles_when_shapes_fixed(healthy_eager: dict[str, Any]) -> None:
    assert findings(healthy_eager, "recompile") == []


def test_hardware_advice(sick_eager: dict[str, Any], healthy_eager: dict[str, Any]) -> None:
    hd = findings(sick_eager, "hw_head_dim")
    assert hd and hd[0]["data"]["head_dims"] == [50] and sites_at(hd[0], "ATTENTION-HERE")
    dims = findings(sick_eager, "hw_dims")
    assert dims and 200 in dims[0]["data"]["dims"]
    assert findings(sick_eager, "hw_f32")
    for check in ("hw_head_dim", "hw_dims", "hw_f32"):
        assert findings(healthy_eager, check) == [], check


def test_no_tpu_advice_for_the_cpu_target(sick_eager: dict[str, Any]) -> None:
    """The same run, advised for the CPU: no TPU advice; buckets in multiples of 8."""
    from tpuc.doctor import analyze_dir

    rep = analyze_dir(sick_eager["_out"], target="cpu")
    assert not [f for f in rep["findings"] if f["check"].startswith("hw_")]
    rec = next(f for f in findings(rep, "recompile") if "buckets" in f["data"])
    assert rec["data"]["buckets"] == [16, 32, 64]  # sizes 16..40: powers of two covering them


def test_time_memory_and_top_ops(sick_eager: dict[str, Any], healthy_eager: dict[str, Any]) -> None:
    for rep in (sick_eager, healthy_eager):
        t = rep["time"]
        assert t["wall"] > 0 and 0 < t["device_busy"] <= t["wall"] * 1.05
        assert findings(rep, "bound")[0]["data"]["bound"] in ("host-bound", "device-bound")
        rows = rep["top_ops"]
        assert rows and all(r["seconds"] >= 0 for r in rows)
        assert rows == sorted(rows, key=lambda r: -r["seconds"])
        mem = findings(rep, "memory")[0]["data"]
        # the parameters alone are alive at exit; the peak holds at least them
        assert mem["live_at_exit"]["parameters"] > 0
        assert mem["peak_bytes"] >= mem["live_at_exit"]["parameters"]
    # many shapes: many more recompiles than one shape
    assert sick_eager["summary"]["recompiles"] > healthy_eager["summary"]["recompiles"]


def test_thresholds_of_time_checks() -> None:
    """compile_time and bound from the numbers the probe records (the
    programs above may hit a warm disk cache, so these are checked here)."""
    from tpuc.doctor.analyze import analyze

    def raw(compile_s: float, device_s: float) -> dict[str, Any]:
        return {"wall_seconds": 10.0, "observer": {
            "by_kind": {"compile": {"count": 5, "seconds": compile_s, "bytes": 0}},
            "device_by_name": {"aten::mm.out": {"count": 3, "seconds": device_s, "bytes": 0}}}}

    slow = analyze(raw(6.0, 1.0))
    assert findings(slow, "compile_time")[0]["severity"] == "high"
    assert findings(slow, "bound")[0]["data"]["bound"] == "host-bound"
    fast = analyze(raw(0.5, 9.0))
    assert findings(fast, "compile_time") == []
    assert findings(fast, "bound")[0]["data"]["bound"] == "device-bound"
    assert fast["top_ops"][0] == {"program": "aten::mm.out", "count": 3, "seconds": 9.0, "share": 1.0}


def test_graph_breaks_under_compile(tmp_path: Path) -> None:
    bad = doctor(tmp_path, "--compile", "--graph-break", "--steps", "3")
    fs = findings(bad, "graph_break")
    assert fs, bad["findings"]
    assert sites_at(fs[0], "GRAPH-BREAK-HERE"), fs[0]
    good = doctor(tmp_path, "--compile", "--steps", "3")
    assert findings(good, "graph_break") == []
    assert good["summary"]["dynamo_graphs"] >= 1


def test_html_has_plots(sick_eager: dict[str, Any]) -> None:
    from tpuc.doctor import report

    page = report.html_page(sick_eager)
    assert page.count("data:image/png;base64,") >= 2
    assert "aten::_unique2" in page


def test_cli_entry(tmp_path: Path) -> None:
    """`tpuc doctor` is the same command."""
    out = tmp_path / "o"
    p = subprocess.run([sys.executable, "-m", "tpuc", "doctor", "--out", str(out), "--no-html",
                        "--", sys.executable, str(PROG), "--steps", "1"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads((out / "doctor.json").read_text())["summary"]["executions"] > 0
    assert not (out / "doctor.html").exists()
