"""torchrun launches: one machine with two processes, and two "nodes" on
loopback (two torchrun agents, --nnodes=2 --node_rank, rendezvous on
127.0.0.1). Each process uses tpu:LOCAL_RANK; a compiled function holding
functional collectives gives the eager result."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

SCRIPT = str(Path(__file__).with_name("launch_script.py"))
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmds: list[list[str]], out: Path, timeout: float = 240) -> None:
    env = dict(os.environ, TPUC_TEST_OUT=str(out), OMP_NUM_THREADS="1")
    env.pop("TPUC_CPU_DEVICE_COUNT", None)  # tpuc sizes it from LOCAL_WORLD_SIZE
    procs = [subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for c in cmds]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-4000:]


def _check(out: Path, world: int, local_ranks: list[int]) -> None:
    got = [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]
    for r, g in enumerate(got):
        assert g["world"] == world and g["backend"] == "tpu_dist", g
        assert g["local_rank"] == local_ranks[r] and g["device"] == f"tpu:{local_ranks[r]}", g
        assert g["all_reduce"] == [float(sum(range(1, world + 1)))] * 4, g
        # y = sum_r 2 * (arange(3) + r); gathered (y + 1) from every rank
        y = [2 * sum(i + q for q in range(world)) + 1.0 for i in range(3)]
        assert g["eager"] == y * world, g
        assert g["compiled"] == g["eager"] and g["compiled_device"].startswith("tpu"), g


def test_torchrun_one_node_two_processes(tmp_path: Path) -> None:
    port = _free_port()
    _run([TORCHRUN + ["--nproc_per_node=2", "--master_addr=127.0.0.1", f"--master_port={port}",
                      SCRIPT]], tmp_path)
    _check(tmp_path, 2, [0, 1])


def test_torchrun_two_nodes_on_loopback(tmp_path: Path) -> None:
    port = _free_port()
    cmds = [TORCHRUN + ["--nnodes=2", f"--node_rank={n}", "--nproc_per_node=1",
                        "--master_addr=127.0.0.1", f"--master_port={port}", SCRIPT] for n in range(2)]
    _run(cmds, tmp_path)
    _check(tmp_path, 2, [0, 0])
