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
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tpuc.integrations.torchtitan.assets import ensure_assets
from tpuc.integrations.torchtitan.procs import free_port as _port
from tpuc.integrations.torchtitan.procs import kill_tree as _kill_tree

_RUN_IDS = itertools.count(1)
TIMEOUT_S = int(os.environ.get("TPUC_TITAN_RUN_TIMEOUT", "900"))

RECIPES = {
    "llama3": ["--module", "llama3", "--config", "llama3_debugmodel"],
    "qwen3": ["--module", "qwen3", "--config", "qwen3_debugmodel"],
    "qwen3_moe": ["--module", "qwen3", "--config", "qwen3_moe_debug"],  # the debugmodel_moe flavour
    "flux": ["--module", "flux", "--config", "flux_debugmodel"],  # flux-debug (test_trainer_flux.py)
}


# every launch of this pytest process: (log name, nproc, runs, wall seconds, CPU seconds of
# the launch's processes); printed by conftest.py at the end of the session
LAUNCH_TIMES: list[tuple[str, int, int, float, float]] = []


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def launch(nproc: int, args: list[str], cwd: Path, log: Path) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
           "--master_addr=127.0.0.1", f"--master_port={_port()}",
           "-m", "tpuc.integrations.torchtitan.train", *args]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    t0, cpu0 = time.monotonic(), _children_cpu_s()
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _kill_tree(p.pid)  # the workers too (each in its own session)
            p.wait()
            raise AssertionError(f"torchtitan run timed out after {TIMEOUT_S}s: {log}")
    runs = len(json.loads(Path(args[1]).read_text())) if args[:1] == ["--tpuc.runs"] else 1
    LAUNCH_TIMES.append((log.name, nproc, runs, time.monotonic() - t0, _children_cpu_s() - cpu0))
    if rc != 0:
        tail = log.read_text()[-4000:]
        raise AssertionError(f"torchtitan run failed (rc {rc}): {' '.join(cmd)}\n{tail}")


@dataclass
class Plan:
    """One run's launcher arguments and where it records its steps (None: the seed run)."""
    name: str
    args: list[str]
    record: Path | None
    loads_seed: bool = False


class Runner:
    """Runs one recipe in several layouts from one seed checkpoint under ``root``."""

    def __init__(self, root: Path, recipe: str, steps: int = 3, seq_len: int = 64, batch: int = 2,
                 layers: int | None = None):
        """``layers``: keep the model's first N blocks (``--tpuc.layers``), in every run and
        the seed checkpoint (its own folder)."""
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
        if layers is not None:
            self.common.append(f"--tpuc.layers={layers}")
        self.seed = root / (f"{recipe}-seed" if layers is None else f"{recipe}-l{layers}-seed")
        self._n = 0

    def seed_plan(self) -> Plan | None:
        """The seed checkpoint's run (CPU, one process), or None when it exists already."""
        if (self.seed / "step-0").exists():
            return None
        return Plan(f"{self.seed.name}", [
            *self.common, "--tpuc.device=cpu", "--checkpoint.enable",
            "--checkpoint.create_seed_checkpoint", "--checkpoint.folder", str(self.seed),
            "--parallelism.data_parallel_shard_degree", "1",
            "--dump_folder", str(self.root / f"{self.seed.name}-dump")], None)

    def ensure_seed(self) -> Path:
        plan = self.seed_plan()
        if plan is not None:
            launch(1, plan.args, self.root, self.root / f"{plan.name}.log")
        return self.seed / "step-0"

    def run(self, nproc: int, *extra: str, device: str = "tpu", dtype: str = "float32",
            checkpoint_folder: Path | None = None, load_seed: bool = True,
            subcommand: str | None = None) -> list[dict]:
        """``subcommand``: a TorchTitan (tyro) subcommand such as ``activation-checkpoint:full``,
        placed after every flag (tyro reads the flags after it as the subcommand's own)."""
        plan = self.plan(nproc, *extra, device=device, dtype=dtype,
                         checkpoint_folder=checkpoint_folder, load_seed=load_seed,
                         subcommand=subcommand)
        if load_seed:
            self.ensure_seed()
        launch(nproc, plan.args, self.root, self.root / f"{plan.name}.log")
        return _read_record(plan)

    def run_many(self, nproc: int, plans: list[Plan | None]) -> list[list[dict]]:
        """Several runs in one launch (``--tpuc.runs``: one after another in the same
        processes, imports and process group shared), all on one device; a seed plan first
        when the others load it. Returns each plan's recorded steps ([] for the seed); None
        entries (a seed that exists) are skipped and answer []."""
        todo = [p for p in plans if p is not None]
        if todo and any(p.loads_seed for p in todo) and all(p.record is not None for p in todo):
            self.ensure_seed()  # no seed plan in this launch: write it first
        launch_plans(self.root, nproc, todo)
        return [_read_record(p) if p is not None else [] for p in plans]

    def plan(self, nproc: int, *extra: str, device: str = "tpu", dtype: str = "float32",
             checkpoint_folder: Path | None = None, load_seed: bool = True,
             subcommand: str | None = None) -> Plan:
        """A run's arguments (as :meth:`run` launches them), for :meth:`run_many`."""
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
            args += ["--checkpoint.initial_load_path", str(self.seed / "step-0")]
        if dtype != "float32":
            args.append(f"--tpuc.dtype={dtype}")
        if subcommand is not None:
            args.append(subcommand)
        return Plan(name, args, record, loads_seed=load_seed)


def launch_plans(root: Path, nproc: int, plans: list[Plan]) -> None:
    """One launch of ``plans`` in order (``--tpuc.runs``), whichever Runners made them (all on
    one device). Raises as :func:`launch` does when any run fails."""
    if not plans:
        return
    name = f"{plans[-1].name}-x{len(plans)}"
    runs = root / f"{name}-runs.json"
    runs.write_text(json.dumps([p.args for p in plans]))
    launch(nproc, ["--tpuc.runs", str(runs)], root, root / f"{name}.log")


def _read_record(plan: Plan) -> list[dict]:
    if plan.record is None:
        return []
    return [json.loads(line) for line in plan.record.read_text().splitlines()]


# ---- runs shared by several tests of one session (make test's TorchTitan slice) -------------

ONE = ["--parallelism.data_parallel_shard_degree", "1"]
# TorchTitan 0.3.0's default SPMD backend (spmd_types) fails before step 1 with more than one
# rank on torch 2.13, on the CPU as on "tpu" (docs/torchtitan.md); its DTensor backend works.
DTENSOR = ["--parallelism.spmd_backend", "partial_dtensor"]
# comparison runs load the seed and save nothing (a checkpoint at the last step is only cost)
NO_SAVE = ["--checkpoint.load_only"]

# Each recipe's sizes in make test. llama3: 4 steps, so that the DCP resume (checkpoint at
# step 2) continues two steps. qwen3_moe: debugmodel_moe cut to its first 2 of 8 blocks
# (--tpuc.layers=2; 75M parameters: a float64 CPU reference of all 8 blocks needs ~10 GiB);
# make test-titan-long runs all 8 (test_trainer_moe.py). qwen3 dense: its first 2 of 8
# blocks at the MoE run's 1 x 16 tokens: the two flavours have the same attention (dim 256,
# 16 query / 8 KV heads of 128), norms, embedding and output, so at the same token shapes
# the MoE run reuses the dense run's compiled programs instead of compiling its own (most of
# the "tpu" launch's time is compiling, docs/torchtitan.md "Tests"); make test-titan-long
# runs all 8 dense blocks at FSDP=2 and the whole model without the Trainer.
CI_SIZES: dict[str, dict] = {
    "llama3": dict(steps=4),
    "qwen3": dict(steps=3, seq_len=16, batch=1, layers=2),
    "qwen3_moe": dict(steps=3, seq_len=16, batch=1, layers=2),
}

_shared: dict[tuple, dict[str, list[dict]]] = {}


# the recipes of make test's one-process launches, in launch order
ONE_PROCESS_RECIPES = ("llama3", "qwen3", "qwen3_moe")


def one_process_runs(root: Path, recipe: str) -> dict[str, list[dict]]:
    """``recipe`` at one process (CI sizes), shared by the session. All of
    ONE_PROCESS_RECIPES run in two launches (each launch ~50 s of torchrun + imports on a
    loaded 2-core machine, more than a run of these models): one CPU launch with each
    recipe's seed checkpoint, float64 and float32 references, and one "tpu" launch. For
    llama3 the "tpu" run saves a DCP checkpoint every 2 steps and a second run in the same
    launch resumes it from step 2 (``resumed``; ``folder``: the checkpoints). When a launch
    fails, the recipes whose runs all finished keep their results and the others raise the
    launch's error."""
    if recipe not in _shared_one:
        _one_process_launches(root, [r for r in ONE_PROCESS_RECIPES if r not in _shared_one]
                              if recipe in ONE_PROCESS_RECIPES else [recipe])
    got = _shared_one[recipe]
    if isinstance(got, Exception):
        raise got
    return got


_shared_one: dict[str, object] = {}


def _one_process_launches(root: Path, recipes: list[str]) -> None:
    plans: dict[str, dict[str, Plan]] = {}
    for recipe in recipes:
        runner = Runner(root, recipe, **CI_SIZES[recipe])
        p = {"ref": runner.plan(1, *ONE, *NO_SAVE, device="cpu", dtype="float64"),
             "cpu": runner.plan(1, *ONE, *NO_SAVE, device="cpu")}
        seed = runner.seed_plan()
        if seed is not None:
            p["seed"] = seed
        if recipe == "llama3":
            folder = root / "llama3-resume-ck"
            flags = [*ONE, "--checkpoint.interval", "2"]
            p["dev"] = runner.plan(1, *flags, checkpoint_folder=folder)
            p["resumed"] = runner.plan(1, *flags, "--checkpoint.load_step", "2",
                                       checkpoint_folder=folder)
        else:
            p["dev"] = runner.plan(1, *ONE, *NO_SAVE)
        plans[recipe] = p
    errors: list[Exception] = []
    for device, keys in (("cpu", ("seed", "ref", "cpu")), ("tpu", ("dev", "resumed"))):
        try:
            launch_plans(root, 1, [plans[r][k] for r in recipes for k in keys if k in plans[r]])
        except AssertionError as e:
            errors.append(e)
            if device == "cpu":
                break  # the "tpu" runs need the seeds
    for recipe in recipes:
        p = plans[recipe]
        try:
            got: dict = {k: _read_record(v) for k, v in p.items() if k != "seed"}
        except OSError:  # a run that never started
            got = {}
        steps = CI_SIZES[recipe]["steps"]
        want = {k: steps - (2 if k == "resumed" else 0) for k in p if k != "seed"}
        if errors and any(len(got.get(k, [])) != n for k, n in want.items()):
            _shared_one[recipe] = errors[-1]
            continue
        if recipe == "llama3":
            got["folder"] = root / "llama3-resume-ck"
        _shared_one[recipe] = got


def layout_references(root: Path, recipe: str, nproc: int, layout: list[str]) -> dict[str, list[dict]]:
    """The float64 and float32 CPU references of ``recipe`` on ``nproc`` processes in
    ``layout`` (CI sizes but 3 steps), one CPU launch per session (and the seed, if not
    written yet)."""
    key = ("cpu", recipe, nproc, tuple(layout))
    if key not in _shared:
        runner = Runner(root, recipe, **dict(CI_SIZES[recipe], steps=3))
        ref = runner.plan(nproc, *layout, *NO_SAVE, device="cpu", dtype="float64")
        cpu = runner.plan(nproc, *layout, *NO_SAVE, device="cpu")
        ref_steps, cpu_steps = runner.run_many(nproc, [ref, cpu])
        _shared[key] = {"ref": ref_steps, "cpu": cpu_steps}
    return _shared[key]


def device_run(root: Path, recipe: str, nproc: int, layout: list[str]) -> list[dict]:
    """The "tpu" run of ``recipe`` on ``nproc`` processes in ``layout`` (CI sizes but 3
    steps), one launch per session."""
    key = ("tpu", recipe, nproc, tuple(layout))
    if key not in _shared:
        runner = Runner(root, recipe, **dict(CI_SIZES[recipe], steps=3))
        _shared[key] = {"dev": runner.run(nproc, *layout, *NO_SAVE)}
    return _shared[key]["dev"]


def layout_runs(root: Path, recipe: str, nproc: int, layout: list[str]) -> dict[str, list[dict]]:
    """The recipe on ``nproc`` processes in ``layout`` (CI sizes but 3 steps), once per
    session: the seed (if not written yet), one CPU launch (float64 and float32 references),
    one "tpu" launch."""
    return {**layout_references(root, recipe, nproc, layout),
            "dev": device_run(root, recipe, nproc, layout)}
