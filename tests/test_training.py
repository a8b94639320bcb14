"""An MLP and a small decoder-only transformer train 20 steps with AdamW on
"tpu" exactly as on the CPU — in strict, debug and fused eager mode,
with the model compiled by torch.compile(backend="tpu"), and with the whole
training step (forward, backward, AdamW) compiled into one program whose
parameters and optimizer state are donated: per-step losses and the
final parameters as close to a float64 CPU run as the CPU's own float32 run is
(within a small factor, see `_within`), no op leaving the device, and no compile
once the loop is steady. Each run is a fresh process with an empty
compile cache, so the compile counts are real."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(kind: str, mode: str, cache_dir: str) -> dict:
    env = dict(os.environ)
    env["TPUC_LAUNCH_BLOCKING"] = "1" if mode == "debug" else "0"
    env["TPUC_CACHE_DIR"] = cache_dir
    env["TPUC_EAGER"] = "fused" if mode == "fused" else "strict"
    cmd = [sys.executable, os.path.join(HERE, "train_check.py"), kind]
    if mode == "compile":
        cmd.append("--compile")
    if mode == "compile-step":
        cmd.append("--compile-step")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


# float32's unit roundoff: the floor of any float32 result's relative error.
F32_EPS = 2.0 ** -24


def _within(tpu_err: float, cpu_err: float) -> bool:
    """The device's float32 error against the float64 reference is at most 8 times
    the CPU's float32 error (both are float32 evaluations of one computation in
    different orders: their errors are of the same size, the factor covers the
    spread between orders), or a few units of roundoff where the CPU happens to be
    nearly exact."""
    return tpu_err <= 8.0 * cpu_err + 64 * F32_EPS


@pytest.mark.parametrize("mode", ["strict", "debug", "fused", "compile", "compile-step"])
@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_training_matches_cpu(kind: str, mode: str, tmp_path) -> None:
    rep = _run(kind, mode, str(tmp_path))
    assert len(rep["tpu_losses"]) == 20
    assert _within(rep["tpu_loss_err"], rep["cpu_loss_err"]), rep
    assert _within(rep["tpu_param_err"], rep["cpu_param_err"]), rep
    assert sum(rep["tpu_losses"][-4:]) < 0.9 * sum(rep["tpu_losses"][:4])  # it learns
    assert rep["fallbacks"] == {}, rep["fallbacks"]
    compiles = rep["compiles_per_step"]
    assert compiles[0] > 0  # a fresh cache compiles ...
    steady = 2 if mode != "fused" else 6  # fused chunks settle on the loop's period
    assert all(c == compiles[steady - 1] for c in compiles[steady:]), compiles  # ... then never
    if mode == "fused":
        assert rep["eager_mode"] == "fused" and rep["chunk_hits"] > 0
    if mode == "compile":
        assert rep["dynamo_compiles"] >= 2  # a forward and a backward graph
    if mode == "compile-step":
        # forward, backward and AdamW are replayed as one program each per step,
        # the backward as TPUC_BACKWARD_PROGRAMS consecutive ones (plus the
        # one-op gradient seed autograd makes between the forward and the
        # backward; TPUC_GRAPH_REPLAY=join makes the graphs one) ...
        from tpuc.dynamo import _backward_parts

        ex = rep["executions_per_step"]
        per_step = [b - a for a, b in zip(ex[2:], ex[3:])]
        assert all(n <= 3 + _backward_parts() for n in per_step), per_step
        # ... and parameters and optimizer state are updated in place (donated)
        don = rep["donations_per_step"]
        n_params = rep["n_params"]
        assert all(b - a >= 3 * n_params for a, b in zip(don[2:], don[3:])), don
