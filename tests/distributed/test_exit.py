"""How a tpu_dist program ends: two ranks of exit_script.py on 127.0.0.1.

test_exit_while_gloo_worker_holds_collective is the regression test of an
abort seen in CI ("terminate called without an active exception", SIGABRT):
gloo's worker thread dropped the last reference to a collective's host tensors
while the interpreter was finalizing (exit_script.py says how the test makes
that interleaving certain). Without tpu_dist's exit handling rank 0 aborts
every time."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

SCRIPT = str(Path(__file__).with_name("exit_script.py"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_two(mode: str, timeout: float = 120) -> list[tuple[int, str]]:
    port = _free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, MODE=mode, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK="0",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                   TPUC_DIST_CHECK="0")  # no signature exchange: rank 0 leaves its work unwaited
        env.pop("TPUC_CPU_DEVICE_COUNT", None)
        procs.append(subprocess.Popen([sys.executable, SCRIPT], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    out = []
    try:
        for p in procs:
            out.append((0, p.communicate(timeout=timeout)[0]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    return [(p.returncode, log) for p, (_, log) in zip(procs, out)]


def test_exit_while_gloo_worker_holds_collective() -> None:
    for rank, (rc, log) in enumerate(_run_two("late_worker")):
        assert rc == 0, f"rank {rank} exited with {rc}:\n{log[-3000:]}"
        assert "terminate called" not in log, log[-3000:]


def test_destroy_process_group_tears_gloo_down() -> None:
    for rank, (rc, log) in enumerate(_run_two("destroy")):
        assert rc == 0, f"rank {rank} exited with {rc}:\n{log[-3000:]}"
