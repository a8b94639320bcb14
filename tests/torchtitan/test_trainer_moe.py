"""Qwen 3 MoE (``--module qwen3 --config qwen3_moe_debug``, the debugmodel_moe flavour) and
Qwen 3 dense through TorchTitan 0.3.0's stock Trainer on "tpu", against the same recipe on the
CPU (gloo), from one seed checkpoint (tests/torchtitan/test_trainer.py's scheme and bound).

All behind ``make test-titan-long`` (TPUC_TITAN_LONG=1): the recipe has 0.3B parameters and
each test launches TorchTitan four times, over ``make test``'s budget on 2 cores (its MoE
lowering is checked in CI by tests/core/test_lower_grouped_mm.py). The MoE recipe at one
process, 3 steps of 1 x 16 tokens (64 experts, top-8: every step routes 128 rows through
``aten::_grouped_mm``, token dispatch and combine on the device); steady state (after step 2):
no compile, and no CPU fallback but RoPE's position check. Expert parallelism (EP=2 with FSDP=2
on two processes: all_to_all with uneven splits through tpu_dist) and qwen3 dense at FSDP=2.
"""
from __future__ import annotations

import os
import shutil

import pytest

from test_trainer import check_against_reference, check_mode_steady_state, check_steady_state
from trainer_runs import ONE, Runner

LONG = os.environ.get("TPUC_TITAN_LONG") == "1"
# The experts run in bf16 (TorchTitan casts x and the expert weights with .bfloat16()): "tpu"
# and the CPU may round one expert input differently, so the bound adds half a bf16 ulp of the loss.
BF16_HALF_ULP = 2.0**-9


# The recipe has 0.3B parameters (64 experts x 8 layers): a checkpoint is GBs on disk. The runs
# load the seed and save nothing (load_only), and the module's files are removed at its end.
NO_SAVE = ["--checkpoint.load_only"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = tmp_path_factory.mktemp("titan_moe")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _compare(runner: Runner, nproc: int, *layout: str, extra_rel: float) -> None:
    ref = runner.run(nproc, *layout, *NO_SAVE, device="cpu", dtype="float64")
    cpu = runner.run(nproc, *layout, *NO_SAVE, device="cpu")
    dev = runner.run(nproc, *layout, *NO_SAVE)
    check_against_reference(dev, cpu, ref, extra_rel=extra_rel)
    check_steady_state(dev)


@pytest.mark.skipif(not LONG, reason="0.3B parameters, four launches (seed, CPU f64, CPU f32, tpu): "
                    "over make test's budget on 2 cores; make test-titan-long (TPUC_TITAN_LONG=1)")
def test_qwen3_moe_one_process_matches_cpu(root):
    runner = Runner(root, "qwen3_moe", steps=3, seq_len=16, batch=1)
    _compare(runner, 1, "--parallelism.data_parallel_shard_degree", "1", extra_rel=BF16_HALF_ULP)


# The compiled step (``--compile.enable --compile.backend tpu``: TorchTitan compiles each block,
# fullgraph, with Dynamo backend "tpu"), at the CI sizes (2 of 8 blocks, 1 x 16 tokens), without
# activation checkpointing on both sides. Why not the recipe's selective AC: TorchTitan counts
# each expert's tokens in the forward (a buffer add_) and, when the block is recomputed, halves
# the count before the expert-bias update (``tokens // 2``, its "double counting" hack); under
# torch.compile it sets ``skip_fwd_side_effects_in_bwd_under_checkpoint``, so the count is made
# once and still halved, and the bias update (from step 2 on) differs from eager's on any backend.
# Measured on "tpu" with selective AC: step 1 equal, steps 2-3 off the float64 reference by
# 1.1e-3 / 2.2e-3 (eager: 6e-5 / 1.5e-4); without AC compiled follows it as eager does.
COMPILED = ["--compile.enable", "--compile.backend", "tpu"]
AC_NONE = "activation-checkpoint:none"


@pytest.mark.skipif(not LONG, reason="two launches (seed + CPU f64/f32, compiled tpu), ~3 min: "
                    "make test-titan-long (TPUC_TITAN_LONG=1)")
def test_qwen3_moe_compiled_step_matches_cpu(root):
    """Within the eager MoE bound of the float64 CPU reference (eager, same recipe and AC mode);
    no CPU fallback at all; Dynamo compiles nothing after step 1, the device nothing after step 2."""
    runner = Runner(root, "qwen3_moe", steps=3, seq_len=16, batch=1, layers=2)
    ref, cpu = runner.run_many(1, [
        runner.seed_plan(),
        runner.plan(1, *ONE, *NO_SAVE, device="cpu", dtype="float64", subcommand=AC_NONE),
        runner.plan(1, *ONE, *NO_SAVE, device="cpu", subcommand=AC_NONE)])[1:]
    comp = runner.run(1, *ONE, *NO_SAVE, *COMPILED, subcommand=AC_NONE)
    check_against_reference(comp, cpu, ref, extra_rel=BF16_HALF_ULP)
    # programs first used in step 2 (zero_ / add.out per parameter shape, as eager's) may come
    # from the disk cache or be compiled; after step 2 neither happens
    check_mode_steady_state(comp, "compiled")
    print("compiled MoE: tpu", [r["loss"] for r in comp], "f64", [r["loss"] for r in ref],
          "compiles", comp[-1]["compiles"], "dynamo graphs", comp[-1]["dynamo_graphs"])


# Expert parallelism, as TorchTitan 0.3.0 lays it out (ParallelDims: efsdp = fsdp * tp / ep):
# 2 ranks, FSDP=2 and EP=2 -> experts sharded over "ep", efsdp 1; dense parts FSDP over 2.
# The standard AllToAllTokenDispatcher moves each rank's routed rows with all_to_all_single of
# uneven splits (exchanged counts, then a host read of them: TorchTitan's own CPU sync).
# CUDA graphs are TorchTitan's default and refuse that dispatcher: disabled (CUDA-only anyway).
EP_LAYOUT = ["--parallelism.data_parallel_shard_degree", "2",
             "--parallelism.expert_parallel_degree", "2",
             "--parallelism.spmd_backend", "partial_dtensor",
             "--training.disable_cuda_graphs"]


@pytest.mark.skipif(not LONG, reason="two processes x 3 launches: make test-titan-long (TPUC_TITAN_LONG=1)")
def test_qwen3_moe_expert_parallel_matches_cpu(root):
    runner = Runner(root, "qwen3_moe", steps=3, seq_len=16, batch=1)
    ref = runner.run(2, *EP_LAYOUT, *NO_SAVE, device="cpu", dtype="float64")
    cpu = runner.run(2, *EP_LAYOUT, *NO_SAVE, device="cpu")
    dev = runner.run(2, *EP_LAYOUT, *NO_SAVE)
    check_against_reference(dev, cpu, ref, extra_rel=BF16_HALF_ULP)
    check_ep_steady_state(dev)


def check_ep_steady_state(dev: list[dict]) -> None:
    """EP: no fallback after step 2 (compiles: see docs/torchtitan.md)."""
    first, last = dev[1], dev[-1]
    new = {k: v - first["fallbacks"].get(k, 0) for k, v in last["fallbacks"].items()}
    assert not {k for k, v in new.items() if v}, new


@pytest.mark.skipif(not LONG, reason="two processes x 3 launches: make test-titan-long (TPUC_TITAN_LONG=1)")
def test_qwen3_dense_fsdp2_matches_cpu(root):
    runner = Runner(root, "qwen3", steps=3, seq_len=32, batch=1)
    _compare(runner, 2, "--parallelism.data_parallel_shard_degree", "2",
             "--parallelism.spmd_backend", "partial_dtensor", extra_rel=0.0)


# EP on 4 ranks. TorchTitan 0.3.0 (ParallelDims) needs dp_shard * cp * tp divisible by ep and
# lays the experts over "ep" with efsdp = dp_shard * cp * tp / ep: EP=4 with FSDP=4 (efsdp 1)
# and EP=2 with FSDP=4 (efsdp 2, the experts FSDP-sharded too) are its 4-rank layouts without TP.
# EP=2 x FSDP=4 (efsdp 2: the experts sharded over "ep" and FSDP-sharded over "efsdp", the
# mesh groups {0,1},{2,3} and {0,2},{1,3}): its "tpu" run's first step is compile time (371
# programs per rank with a cold compile cache, 195 s of XLA compile on rank 0 at load ~23;
# docs/torchtitan.md, "MoE expert parallel layouts (new)").
# The recipe cut to 2 of its 8 blocks (--tpuc.layers=2; 64 experts, top-8, the same blocks):
# the full 0.3B model's float64 reference alone needs ~10 GiB of parameter, gradient and AdamW
# state over the 4 ranks, more than the tests may take of a shared machine.
EP4_LAYOUTS = {
    "ep4-fsdp4": ["--parallelism.data_parallel_shard_degree", "4",
                  "--parallelism.expert_parallel_degree", "4"],
    "ep2-fsdp4": ["--parallelism.data_parallel_shard_degree", "4",
                  "--parallelism.expert_parallel_degree", "2"],
    # EP with TP as TorchTitan 0.3.0 has it (no expert TP): experts over "ep" (efsdp 2), the
    # dense parts TP=2 x FSDP=2, the experts' input the sequence-parallel activation
    "ep2-tp2-fsdp2": ["--parallelism.data_parallel_shard_degree", "2",
                      "--parallelism.tensor_parallel_degree", "2",
                      "--parallelism.expert_parallel_degree", "2"],
}
EP_COMMON = ["--parallelism.spmd_backend", "partial_dtensor", "--training.disable_cuda_graphs"]
# The CPU references keep TorchTitan's stock all-to-all dispatcher (uneven splits); "tpu" runs
# the moe swap's fixed-capacity dispatcher (ep_dispatch.py), so the comparison also checks the
# swap against the block it replaces through the whole trainer.
STOCK_DISPATCH = ["--tpuc.swaps=attention"]


@pytest.fixture(scope="module")
def root_ep4(tmp_path_factory):
    path = tmp_path_factory.mktemp("titan_moe_ep4")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _ep4_runner(root) -> Runner:
    runner = Runner(root, "qwen3_moe", steps=4, seq_len=16, batch=1)
    runner.common += ["--tpuc.layers=2"]  # the seed too
    return runner


_ep4_refs: dict[str, tuple[list[dict], list[dict]]] = {}


def ep4_references(root) -> dict[str, tuple[list[dict], list[dict]]]:
    """EP=4 x FSDP=4 on the CPU (gloo, TorchTitan's stock dispatcher), 4 steps: the float64
    and float32 runs with the recipe's selective activation checkpointing and without any
    (``activation-checkpoint:none``, the compiled step's references), all four in one 4-process
    launch (``--tpuc.runs``), once per session."""
    if not _ep4_refs:
        runner = _ep4_runner(root)
        flags = [*EP4_LAYOUTS["ep4-fsdp4"], *EP_COMMON, *NO_SAVE, *STOCK_DISPATCH]
        plans = {ac: (runner.plan(4, *flags, device="cpu", dtype="float64", subcommand=sub),
                      runner.plan(4, *flags, device="cpu", subcommand=sub))
                 for ac, sub in (("selective", None), ("none", AC_NONE))}
        got = runner.run_many(4, [p for pair in plans.values() for p in pair])
        _ep4_refs.update({"selective": (got[0], got[1]), "none": (got[2], got[3])})
    return _ep4_refs


@pytest.mark.skipif(not LONG, reason="four processes x 3 launches: make test-titan-long (TPUC_TITAN_LONG=1)")
@pytest.mark.parametrize("layout", list(EP4_LAYOUTS))
def test_qwen3_moe_ep_on_4_ranks_matches_cpu(root_ep4, layout):
    """4 steps; the bound of test_trainer.py plus half a bf16 ulp; steady state (after step 2)
    on "tpu": no compile after step 1, no fallback but RoPE's check."""
    runner = _ep4_runner(root_ep4)
    flags = [*EP4_LAYOUTS[layout], *EP_COMMON, *NO_SAVE]
    if layout == "ep4-fsdp4":  # shared with the fused and compiled tests below
        ref, cpu = ep4_references(root_ep4)["selective"]
    else:
        ref = runner.run(4, *flags, *STOCK_DISPATCH, device="cpu", dtype="float64")
        cpu = runner.run(4, *flags, *STOCK_DISPATCH, device="cpu")
    dev = runner.run(4, *flags, "--tpuc.swaps=attention,moe")
    check_against_reference(dev, cpu, ref, extra_rel=BF16_HALF_ULP)
    check_steady_state(dev)
    assert dev[-1]["compiles"] == dev[0]["compiles"], [r["compiles"] for r in dev]  # none after step 1
    print(f"{layout}: tpu compiles per step", [r["compiles"] for r in dev])


# The two other "tpu" execution modes at EP=4 x FSDP=4, through the stock Trainer with the moe
# swap's fixed-capacity dispatcher: fused eager mode (TPUC_EAGER=fused, the recipe's selective
# AC) and TorchTitan's compiled blocks (--compile.enable --compile.backend tpu; no AC on both
# sides, for the expert-bias count that TorchTitan halves under compiled AC: the one-process
# compiled test above). Each against the CPU (stock dispatcher) in the same layout and AC mode.
EP4_MODES = {"fused": ({"TPUC_EAGER": "fused"}, [], "selective"),
             "compiled": ({}, COMPILED, "none")}


@pytest.mark.skipif(not LONG, reason="four processes: one CPU launch (4 runs, shared) and one tpu "
                    "launch each, ~6.5 GiB: make test-titan-long (TPUC_TITAN_LONG=1)")
@pytest.mark.parametrize("mode", list(EP4_MODES))
def test_qwen3_moe_ep4_fused_and_compiled_match_cpu(root_ep4, mode, monkeypatch):
    """EP=4 x FSDP=4, 4 steps: within the eager MoE bound of the float64 CPU reference in the
    same layout and AC mode; no CPU fallback at all; no device compile after step 2 (fused:
    programs first used in step 2 may still compile then); compiled: no new Dynamo graph after
    step 1 and no disk-cache load after step 2."""
    env, flags, ac = EP4_MODES[mode]
    ref, cpu = ep4_references(root_ep4)[ac]
    for k, v in env.items():
        monkeypatch.setenv(k, v)  # the launch's processes inherit it
    runner = _ep4_runner(root_ep4)
    dev = runner.run(4, *EP4_LAYOUTS["ep4-fsdp4"], *EP_COMMON, *NO_SAVE, "--tpuc.swaps=attention,moe",
                     *flags, subcommand=AC_NONE if ac == "none" else None)
    assert len(dev) == 4
    check_against_reference(dev, cpu, ref, extra_rel=BF16_HALF_ULP)
    check_mode_steady_state(dev, mode)
    print(f"EP=4 {mode}: tpu", [r["loss"] for r in dev], "f64", [r["loss"] for r in ref],
          "compiles per step", [r["compiles"] for r in dev], "dynamo graphs", dev[-1]["dynamo_graphs"])
