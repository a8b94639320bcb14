"""`accelerate launch --multi_gpu --num_processes 2` (torchrun underneath; 127.0.0.1) on "tpu": PartialState picks
DistributedType.MULTI_CPU with tpuc's "tpu_dist" backend (the shim in
tpuc.integrations.accelerate; accelerate 1.15 would answer NO and train each process
alone), each process on tpu:LOCAL_RANK, and a data-parallel loop through
`accelerator.prepare` ends with the parameters of one process training on the whole
batch (checked against a float64 CPU reference, within a multiple of the CPU's own
float32 error)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .accelerate_common import STEPS, data, make_model

pytest.importorskip("accelerate", reason="accelerate is installed by make setup")
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reference(dtype: torch.dtype) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = make_model().to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = data()
    x, y = x.to(dtype), y.to(dtype)
    for _ in range(STEPS):
        for i in range(0, 8, 4):  # the two processes' batches of 2 together
            loss = torch.nn.functional.mse_loss(model(x[i:i + 4]), y[i:i + 4])
            loss.backward()
            opt.step()
            opt.zero_grad()
    return [p.detach() for p in model.parameters()]


def test_accelerate_torchrun_two_processes_match_one(tmp_path: Path) -> None:
    env = dict(os.environ, TPUC_TEST_OUT=str(tmp_path), OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TPUC_CPU_DEVICE_COUNT", None)  # tpuc sizes it from LOCAL_WORLD_SIZE
    # `accelerate launch --multi_gpu` starts the processes through torchrun; without
    # --multi_gpu accelerate 1.15 starts one process when no CUDA-like device is found
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes=2",
           "--num_machines=1", "--mixed_precision=no", "--dynamo_backend=no",
           "--main_process_ip=127.0.0.1", f"--main_process_port={_free_port()}",
           str(Path(__file__).with_name("accelerate_script.py"))]
    p = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        log = p.communicate(timeout=240)[0]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    assert p.returncode == 0, log[-4000:]
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    ref64, ref32 = _reference(torch.float64), _reference(torch.float32)
    for r, g in enumerate(got):
        assert g["distributed_type"] == "MULTI_CPU" and g["backend"] == "tpu_dist", g
        assert g["num_processes"] == 2 and g["process_index"] == r, g
        assert g["device"] == f"tpu:{r}" and g["batch_devices"] == ["tpu"], g
        assert g["ddp"] == "DistributedDataParallel" and g["steps"] == 2 * STEPS, g
        for p_tpu, p64, p32 in zip(g["params"], ref64, ref32):
            t = torch.tensor(p_tpu, dtype=torch.float64)
            cpu_err = (p32.double() - p64).abs().max().item()
            ulp = torch.finfo(torch.float32).eps * p64.abs().max().item()
            assert (t - p64).abs().max().item() <= 4 * cpu_err + 16 * ulp, (r, t, p64)
    assert got[0]["params"] == got[1]["params"]  # DDP keeps the replicas identical
