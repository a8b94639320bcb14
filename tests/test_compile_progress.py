"""The compile progress lines (csrc/core/runtime/progress.c) as a user sees them: a script
whose compiles last longer than TPUC_COMPILE_PROGRESS seconds gets a progress line and a closing
line on stderr, naming the count and what the disk cache does for the next run; by default
(10 s) a quick script prints nothing. The timing of the lines is tested in C
(csrc/core/tests/test_progress.c)."""
from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import torch
x = torch.ones(8, device="tpu")
y = (x * 2 + 1).sum()
print(float(y))
"""


def _run(env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TPUC_COMPILE_PROGRESS", "RANK")}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120, env=env)


def test_lines_when_compiles_outlast_the_threshold(tmp_path) -> None:
    r = _run({"TPUC_COMPILE_PROGRESS": "0", "TPUC_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "24.0"
    assert "tpuc: compiling XLA programs: " in r.stderr
    closing = [ln for ln in r.stderr.splitlines() if ln.startswith("tpuc: compiled ")]
    assert len(closing) == 1, r.stderr[-2000:]
    n = int(closing[0].split()[2])
    assert n >= 1
    assert f"the compile cache ({tmp_path})" in closing[0]


def test_a_second_run_with_a_warm_cache_compiles_nothing_and_says_nothing(tmp_path) -> None:
    assert _run({"TPUC_CACHE_DIR": str(tmp_path)}).returncode == 0
    r = _run({"TPUC_COMPILE_PROGRESS": "0", "TPUC_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "tpuc: compil" not in r.stderr


def test_quiet_by_default_for_a_quick_script() -> None:
    r = _run({"TPUC_CACHE_DIR": "off"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "tpuc: compil" not in r.stderr
