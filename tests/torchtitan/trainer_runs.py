"""Launching TorchTitan's stock trainer (tpuc's launcher under torchrun) for the tests.

Every run: 127.0.0.1, a free port, a wall-clock bound, the whole process group killed on
timeout; rank 0 records each step (``--tpuc.record``). All runs of one recipe start from one
seed checkpoint written by TorchTitan itself on the CPU (``--checkpoint.create_seed_checkpoint``),
so "tpu" and the CPU train the same initial weights on the same data.
"""
from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tpuc.integrations.torchtitan.assets import ensure_assets

_RUN_IDS = itertools.count(1)
TIMEOUT_S = int(os.environ.get("TPUC_TITAN_RUN_TIMEOUT", "900"))

RECIPES = {
    "llama3": ["--module", "llama3", "--config", "llama3_debugmodel"],
    "qwen3": ["--module", "qwen3", "--config", "qwen3_debugmodel"],
    "qwen3_moe": ["--module", "qwen3", "--config", "qwen3_moe_debug"],  # the debugmodel_moe flavour
    "flux": ["--module", "flux", "--config", "flux_debugmodel"],  # flux-debug (test_trainer_flux.py)
}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc). torchrun starts each worker in a session
    of its own, so killing torchrun's process group alone leaves the workers running."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _kill_tree(pid: int) -> None:
    for c in _descendants(pid):
        try:
            os.kill(c, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.killpg(pid, signal.SIGKILL)


def launch(nproc: int, args: list[str], cwd: Path, log: Path) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
           "--master_addr=127.0.0.1", f"--master_port={_port()}",
           "-m", "tpuc.integrations.torchtitan.train", *args]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _kill_tree(p.pid)  # the workers too (each in its own session)
            p.wait()
            raise AssertionError(f"torchtitan run timed out after {TIMEOUT_S}s: {log}")
    if rc != 0:
        tail = log.read_text()[-4000:]
        raise AssertionError(f"torchtitan run failed (rc {rc}): {' '.join(cmd)}\n{tail}")


class Runner:
    """Runs one recipe in several layouts from one seed checkpoint under ``root``."""

    def __init__(self, root: Path, recipe: str, steps: int = 3, seq_len: int = 64, batch: int = 2):
        self.root = root
        self.recipe = recipe
        self.assets = ensure_assets(str(root / "assets"))
        self.common = [
            *RECIPES[recipe],
            "--hf_assets_path", self.assets["tokenizer"],
            "--dataloader.dataset_path", self.assets["c4_test"],
            "--training.steps", str(steps), "--training.seq_len", str(seq_len),
            "--training.local_batch_size", str(batch),
            "--training.mixed_precision_param", "float32",
            "--validator.no-enable", "--metrics.log_freq", "1",
        ]
        self.seed = root / f"{recipe}-seed"
        self._n = 0

    def ensure_seed(self) -> Path:
        if not (self.seed / "step-0").exists():
            launch(1, [*self.common, "--tpuc.device=cpu", "--checkpoint.enable",
                       "--checkpoint.create_seed_checkpoint", "--checkpoint.folder", str(self.seed),
                       "--parallelism.data_parallel_shard_degree", "1",
                       "--dump_folder", str(self.root / "seed-dump")],
                   self.root, self.root / f"{self.recipe}-seed.log")
        return self.seed / "step-0"

    def run(self, nproc: int, *extra: str, device: str = "tpu", dtype: str = "float32",
            checkpoint_folder: Path | None = None, load_seed: bool = True,
            subcommand: str | None = None) -> list[dict]:
        """``subcommand``: a TorchTitan (tyro) subcommand such as ``activation-checkpoint:full``,
        placed after every flag (tyro reads the flags after it as the subcommand's own)."""
        # numbered per process, not per Runner: two Runners under one root must never share a
        # record (appended to) or a checkpoint folder (TorchTitan would resume from it)
        self._n = next(_RUN_IDS)
        name = f"{self.recipe}-{device}-{dtype}-{nproc}p-{self._n}"
        record = self.root / f"{name}.jsonl"
        record.unlink(missing_ok=True)
        ck = checkpoint_folder or (self.root / f"{name}-ck")
        args = [*self.common, "--checkpoint.enable", "--checkpoint.folder", str(ck),
                "--dump_folder", str(self.root / f"{name}-dump"),
                f"--tpuc.device={device}", f"--tpuc.record={record}", *extra]
        if load_seed:
            args += ["--checkpoint.initial_load_path", str(self.ensure_seed())]
        if dtype != "float32":
            args.append(f"--tpuc.dtype={dtype}")
        if subcommand is not None:
            args.append(subcommand)
        launch(nproc, args, self.root, self.root / f"{name}.log")
        return [json.loads(line) for line in record.read_text().splitlines()]
