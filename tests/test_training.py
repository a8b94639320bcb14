"""An MLP and a small decoder-only transformer train 20 steps with AdamW on
"tpu" exactly as on the CPU, in strict and in debug mode: per-step losses
within 1e-4 (relative), the same parameters afterwards, no op leaving the
device, and no compile after the second step."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(kind: str, mode: str) -> dict:
    env = dict(os.environ)
    env["TPUC_LAUNCH_BLOCKING"] = "1" if mode == "debug" else "0"
    r = subprocess.run([sys.executable, os.path.join(HERE, "train_check.py"), kind],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["strict", "debug"])
@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_training_matches_cpu(kind: str, mode: str) -> None:
    rep = _run(kind, mode)
    assert len(rep["tpu_losses"]) == 20
    assert rep["max_rel_loss_diff"] < 1e-4, (rep["cpu_losses"], rep["tpu_losses"])
    assert rep["max_rel_param_diff"] < 1e-3
    assert sum(rep["tpu_losses"][-4:]) < 0.9 * sum(rep["tpu_losses"][:4])  # it learns
    assert rep["fallbacks"] == {}, rep["fallbacks"]
    compiles = rep["compiles_per_step"]
    assert all(c == compiles[1] for c in compiles[2:]), compiles
