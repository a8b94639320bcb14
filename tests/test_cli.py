"""`tpuc info`: the command a user runs first to see what stands behind "tpu"."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def _tpuc(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "tpuc", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
    )


def test_info_json_reports_platform_and_devices() -> None:
    r = _tpuc("info", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    for key in ("plugin", "platform", "pjrt_api_version", "devices"):
        assert key in info
    assert isinstance(info["devices"], list) and len(info["devices"]) >= 1
    assert info["platform"]  # "cpu" here, "tpu" on a TPU VM
    assert os.path.exists(info["plugin"])
    major, minor = (int(x) for x in info["pjrt_api_version"].split("."))
    assert major == 0 and minor >= 57
    assert info["devices"][0]["index"] == 0


def test_info_text_names_plugin_and_devices() -> None:
    r = _tpuc("info")
    assert r.returncode == 0, r.stderr
    assert "platform:" in r.stdout
    assert "tpu:0" in r.stdout
    assert "PJRT API version" in r.stdout


def test_cpu_device_count_is_honoured() -> None:
    r = _tpuc("info", "--json", env={"TPUC_CPU_DEVICE_COUNT": "3"})
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    if info["platform"] != "cpu":
        pytest.skip("TPUC_CPU_DEVICE_COUNT only applies to the XLA CPU plugin")
    assert len(info["devices"]) == 3


@pytest.mark.parametrize("path", ["/nonexistent/plugin.so", "/etc/hostname"])
def test_bad_plugin_path_exits_2_and_names_it(path: str) -> None:
    r = _tpuc("info", env={"TPUC_PJRT_PLUGIN": path})
    assert r.returncode == 2
    err_lines = [l for l in r.stderr.splitlines() if l.startswith("tpuc: error:")]
    assert len(err_lines) == 1
    assert path in err_lines[0]
    assert "TPUC_PJRT_PLUGIN" in err_lines[0]


def test_not_a_plugin_library_is_explained() -> None:
    r = _tpuc("info", env={"TPUC_PJRT_PLUGIN": "libm.so.6"})
    assert r.returncode == 2
    assert "GetPjrtApi" in r.stderr


def test_unknown_platform_is_explained() -> None:
    r = _tpuc("info", env={"TPUC_PLATFORM": "quantum"})
    assert r.returncode == 2
    assert "TPUC_PLATFORM" in r.stderr
