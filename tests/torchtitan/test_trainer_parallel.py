"""llama3 debugmodel through TorchTitan 0.3.0's stock Trainer on "tpu": TP, FSDP x TP, DCP
resume, --compile.enable, activation checkpointing and bf16 mixed precision.

Launched as a user would (``torchrun -m tpuc.integrations.torchtitan.train``, TorchTitan's own
flags, nothing of torchtitan edited); every run starts from one seed checkpoint TorchTitan
writes on the CPU (trainer_runs.Runner). Bounds, per step, as in test_trainer.py: "tpu" follows
a float64 CPU run of the same recipe and layout within 4x the CPU float32 run's own error
against it plus 64 float32 roundings of the loss.

CI (``make test``): FSDP x TP on a 2 x 2 mesh (4 processes, 3 steps) against the CPU runs of
FSDP=2 (the same data and math; test_fsdp_x_tp_loss_matches_cpu), and DCP save/resume at one
process. ``make test-titan-long`` (TPUC_TITAN_LONG=1) adds TP=2, the
compiled step, activation checkpointing (full, none) and bf16 mixed precision.
"""
from __future__ import annotations

import os

import pytest

from test_trainer import EPS32, check_against_reference, check_steady_state
from trainer_runs import Runner, device_run, layout_references, one_process_runs

LONG = os.environ.get("TPUC_TITAN_LONG") == "1"
long_only = pytest.mark.skipif(not LONG, reason="long TorchTitan run: make test-titan-long")

# TorchTitan 0.3.0's default SPMD backend (spmd_types) fails before step 1 with more than one
# rank on torch 2.13, on the CPU as on "tpu" (docs/torchtitan.md); its DTensor backend works.
DTENSOR = ["--parallelism.spmd_backend", "partial_dtensor"]
ONE = ["--parallelism.data_parallel_shard_degree", "1"]


@pytest.fixture(scope="module")
def root(titan_session_root):
    return titan_session_root  # the session's seed checkpoints and references (conftest.py)


_refs: dict[tuple, tuple[list[dict], list[dict]]] = {}


def cpu_references(runner: Runner, nproc: int, layout: list[str]) -> tuple[list[dict], list[dict]]:
    """(float64, float32) CPU runs of ``layout``, launched once per module and layout."""
    key = (runner.recipe, nproc, tuple(layout))
    if key not in _refs:  # one launch for both (--tpuc.runs)
        _refs[key] = tuple(runner.run_many(nproc, [
            runner.plan(nproc, *layout, device="cpu", dtype="float64"),
            runner.plan(nproc, *layout, device="cpu")]))
    return _refs[key]


FSDP2 = ["--parallelism.data_parallel_shard_degree", "2", *DTENSOR]


def test_fsdp_x_tp_loss_matches_cpu(root):
    """2 x 2 mesh: FSDP over 2 ranks x TP over 2 ranks, 4 processes on "tpu", against the
    CPU references of FSDP=2 (test_trainer.py's llama3 FSDP=2 case shares them). TP splits
    each data-parallel rank's computation, not its data: the 2 x 2 mesh trains on the same
    two data-parallel shards, from the same seed, as FSDP=2, so its exact losses are FSDP=2's
    and the float64 run of either layout is the reference of both (they differ by float64
    roundings only; make test-titan-long's resharded resume runs the CPU at 2 x 2 too and
    checks that). The float32 CPU run sets the bound's scale, the float32 error of this
    computation. One 4-process launch (the CPU's own 2 x 2 launch was as long as it)."""
    layout = ["--parallelism.data_parallel_shard_degree", "2",
              "--parallelism.tensor_parallel_degree", "2", *DTENSOR]
    refs = layout_references(root, "llama3", 2, FSDP2)
    dev = device_run(root, "llama3", 4, layout)
    check_against_reference(dev, refs["cpu"], refs["ref"])
    check_steady_state(dev)


@long_only
def test_tp2_loss_matches_cpu(root):
    runner = Runner(root, "llama3")
    layout = ["--parallelism.data_parallel_shard_degree", "1",
              "--parallelism.tensor_parallel_degree", "2", *DTENSOR]
    ref, cpu = cpu_references(runner, 2, layout)
    dev = runner.run(2, *layout)
    check_against_reference(dev, cpu, ref)
    check_steady_state(dev)


def test_checkpoint_resume_continues_exactly(root):
    """N = 4 steps with a DCP checkpoint every 2 steps; a second run with the same flags
    resumes from step 2 (``--checkpoint.load_step 2``: model, AdamW state, LR schedule,
    dataloader position) and must reproduce steps 3 and 4 bit for bit: the same programs run
    on the same device from the same saved float32 state, so nothing may differ. Both are the
    llama3 one-process "tpu" launch of test_trainer.py (trainer_runs.one_process_runs: the
    full run is also the one compared with the CPU; the resumed one is a second Trainer in the
    same processes, loading from disk)."""
    runs = one_process_runs(root, "llama3")
    folder, full, resumed = runs["folder"], runs["dev"], runs["resumed"]
    assert (folder / "step-2").is_dir(), "the interval checkpoint at step 2 was not written"
    assert [r["step"] for r in full] == [1, 2, 3, 4]
    assert [r["step"] for r in resumed] == [3, 4], "the resumed run did not start at step 3"
    for a, b in zip(full[2:], resumed):
        assert (a["loss"], a["grad_norm"]) == (b["loss"], b["grad_norm"]), (a, b)


@long_only
def test_compiled_step_matches_eager_and_cpu(root):
    """``--compile.enable --compile.backend tpu`` (TorchTitan compiles each block with the
    backend "tpu"): within the eager bound of the same float64 CPU reference, and neither
    Dynamo nor the device compiles anything after step 2."""
    runner = Runner(root, "llama3")
    ref, cpu = cpu_references(runner, 1, ONE)
    eager = runner.run(1, *ONE)
    comp = runner.run(1, *ONE, "--compile.enable", "--compile.backend", "tpu")
    check_against_reference(eager, cpu, ref)
    check_against_reference(comp, cpu, ref)
    check_steady_state(comp)
    assert comp[-1]["dynamo_graphs"] > 0, "nothing was compiled by Dynamo"
    assert comp[-1]["dynamo_graphs"] == comp[1]["dynamo_graphs"], comp


@long_only
@pytest.mark.parametrize("mode", ["full", "none"])
def test_activation_checkpointing_matches_cpu(root, mode):
    """The recipe's default is selective AC (every run above); full and none recompute or keep
    the same activations, so each follows the same float64 reference within the same bound."""
    runner = Runner(root, "llama3")
    ref, cpu = cpu_references(runner, 1, ONE)
    dev = runner.run(1, *ONE, subcommand=f"activation-checkpoint:{mode}")
    check_against_reference(dev, cpu, ref)
    check_steady_state(dev)


@long_only
def test_bf16_mixed_precision_matches_cpu(root):
    """``--training.mixed_precision_param bfloat16`` (FSDP2's param_dtype; float32 reduction).
    Both devices round to bf16 at the same places but may round an intermediate differently,
    so "tpu" must be as close to the float64 run as the CPU bf16 run is, within a small
    multiple of the CPU's own bf16 error: |tpu - f64| <= 4 max_steps |cpu_bf16 - f64| + 64
    eps32 |f64| (the maximum over the steps, so that a step where the CPU's error happens to
    cancel does not set the scale)."""
    runner = Runner(root, "llama3")
    ref, _ = cpu_references(runner, 1, ONE)
    bf16 = ["--training.mixed_precision_param", "bfloat16"]
    cpu = runner.run(1, *ONE, *bf16, device="cpu")
    dev = runner.run(1, *ONE, *bf16)
    assert [r["step"] for r in dev] == [r["step"] for r in ref] == [r["step"] for r in cpu]
    cpu_err = max(abs(c["loss"] - r["loss"]) for c, r in zip(cpu, ref))
    for d, r in zip(dev, ref):
        bound = 4 * cpu_err + 64 * EPS32 * abs(r["loss"])
        assert abs(d["loss"] - r["loss"]) <= bound, (d, r, bound)
    # bf16 must be in effect: the CPU bf16 run differs from the float32 one by more than
    # float32 roundings (else the flag was ignored and the bound above proves nothing)
    _, cpu32 = cpu_references(runner, 1, ONE)
    assert any(abs(a["loss"] - b["loss"]) > 64 * EPS32 * abs(b["loss"]) for a, b in zip(cpu, cpu32))
    check_steady_state(dev)


def test_attention_swap_keeps_the_tp_sharding_config():
    """Under TP, TorchTitan gives each FlexAttention a sharding_config whose local_map hands
    the kernel local q/k/v; the swap must keep it (a plain replacement is skipped by
    Module.parallelize and SDPA then fails on DTensor inputs, test_tp2/fsdp_x_tp above)."""
    import torch
    from torchtitan.models.llama3 import model_registry
    from torchtitan.models.llama3.sharding import set_llama3_sharding_config
    from torchtitan.protocols.module import Module

    from tpuc.integrations.torchtitan import swaps

    cfg = model_registry("debugmodel").model
    set_llama3_sharding_config(cfg, enable_sp=True)
    with torch.device("meta"):
        model = cfg.build()
    before = [m._sharding_config for m in model.modules() if type(m).__name__ == "FlexAttention"]
    assert before and all(c is not None for c in before)
    assert swaps.swap_attention_modules(model) == len(before)
    after = [m for m in model.modules() if isinstance(m, swaps.DeviceAttention)]
    assert all(isinstance(m, Module) for m in after)
    assert [m._sharding_config for m in after] == before


@long_only
def test_checkpoint_saved_at_fsdp2_resumes_at_fsdp_x_tp(root):
    """DCP resharding on load: save at FSDP=2 (2 processes, checkpoint at step 2 of 4), resume
    from step 2 at FSDP 2 x TP 2 (4 processes; the same 2 data-parallel ranks, so the saved
    dataloader positions apply, with the weights and AdamW state now also split over TP).
    The CPU (gloo) does the same save and resume in float64 and float32. The layouts reduce in
    different orders, so the CPU's resumed steps are not bit for bit its uninterrupted ones;
    per step, as everywhere here: |tpu - f64| <= 4 |cpu32 - f64| + 64 eps32 |f64|, for the
    saving run and the resumed one. And the resumed run continues the saved curve: its steps
    3 and 4 follow the uninterrupted FSDP=2 run's within 64 float32 roundings of the loss plus
    4x the CPU's own resume difference (a load that silently fell back to the seed would be
    off by the loss's change over two steps)."""
    runner = Runner(root, "llama3", steps=4)
    save = ["--parallelism.data_parallel_shard_degree", "2", *DTENSOR, "--checkpoint.interval", "2"]
    resume = ["--parallelism.data_parallel_shard_degree", "2", "--parallelism.tensor_parallel_degree", "2",
              *DTENSOR, "--checkpoint.interval", "2", "--checkpoint.load_step", "2"]
    runs = {}
    for device, dtype in (("cpu", "float64"), ("cpu", "float32"), ("tpu", "float32")):
        folder = root / f"reshard-{device}-{dtype}"
        full = runner.run(2, *save, device=device, dtype=dtype, checkpoint_folder=folder)
        assert (folder / "step-2").is_dir(), "the interval checkpoint at step 2 was not written"
        resumed = runner.run(4, *resume, device=device, dtype=dtype, checkpoint_folder=folder)
        assert [r["step"] for r in full] == [1, 2, 3, 4]
        assert [r["step"] for r in resumed] == [3, 4], "the resumed run did not start at step 3"
        runs[device, dtype] = full, resumed
    (ref_full, ref_res), (cpu_full, cpu_res), (dev_full, dev_res) = (
        runs["cpu", "float64"], runs["cpu", "float32"], runs["tpu", "float32"])
    check_against_reference(dev_full, cpu_full, ref_full)
    check_against_reference(dev_res, cpu_res, ref_res)
    for d, df, c, cf, r in zip(dev_res, dev_full[2:], cpu_res, cpu_full[2:], ref_res):
        bound = 4 * abs(c["loss"] - cf["loss"]) + 64 * EPS32 * abs(r["loss"])
        assert abs(d["loss"] - df["loss"]) <= bound, (d, df, c, cf, bound)
    for r, rf in zip(ref_res, ref_full[2:]):  # float64: the layouts differ by f64 roundings only
        assert abs(r["loss"] - rf["loss"]) <= 64 * EPS32 * abs(rf["loss"]), (r, rf)
    check_steady_state(dev_full)


def test_kept_process_group_skips_only_the_final_sleep(monkeypatch):
    """Between the runs of --tpuc.runs (the group kept) the trainer's final 2 s sleep is a
    no-op and every other ``time`` function is the module's; the last run (the group
    destroyed) sleeps as TorchTitan does, and the module is restored after each run."""
    import time

    import torch.distributed as dist
    import torchtitan.trainer as titan_trainer

    from tpuc.integrations.torchtitan.train import _keep_process_group

    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    destroy = dist.destroy_process_group
    with _keep_process_group(True):
        assert titan_trainer.time is not time and titan_trainer.time.perf_counter is time.perf_counter
        titan_trainer.time.sleep(2)
        assert dist.destroy_process_group is not destroy
    assert slept == []
    assert titan_trainer.time is time and dist.destroy_process_group is destroy
    with _keep_process_group(False):
        titan_trainer.time.sleep(2)
        assert dist.destroy_process_group is destroy
    assert slept == [2]
