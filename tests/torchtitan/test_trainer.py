"""TorchTitan 0.3.0's stock Trainer on "tpu" against the same recipe on the CPU (gloo).

Launched as a user would (``torchrun -m tpuc.integrations.torchtitan.train``, TorchTitan's own
flags), no torchtitan file edited. Each layout's "tpu" losses must follow a float64 CPU run of
the same recipe (``--tpuc.dtype=float64``: same seed checkpoint, data, layout) within a small
multiple of the CPU float32 run's own error against it, plus a few float32 roundings of the
loss. In steady state (after step 2) nothing compiles and nothing falls back to the CPU
(RoPE's position check ``aten::_assert_async.msg`` is a deferred device-side assert,
docs/torchtitan.md).

The CI slice runs llama3, qwen3 dense and qwen3 debugmodel_moe (2 of their 8 blocks each, at
the same token shapes: trainer_runs.CI_SIZES) at one process and llama3 at FSDP=2, sharing one seed checkpoint and one set of CPU references per
recipe and layout for the session (trainer_runs.one_process_runs / layout_runs, also used by
test_trainer_parallel.py's DCP resume); ``make test-titan-long`` (TPUC_TITAN_LONG=1) adds qwen3
dense and MoE at FSDP=2.
"""
from __future__ import annotations

import os

import pytest

from trainer_runs import DTENSOR, layout_runs, one_process_runs

EPS32 = 2.0**-24
LONG = os.environ.get("TPUC_TITAN_LONG") == "1"
ALLOWED_FALLBACKS: set[str] = set()  # none (RoPE's _assert_async runs on the device)


def check_against_reference(dev: list[dict], cpu: list[dict], ref: list[dict], extra_rel: float = 0.0):
    assert [r["step"] for r in dev] == [r["step"] for r in ref] == [r["step"] for r in cpu]
    for d, c, r in zip(dev, cpu, ref):
        bound = 4 * abs(c["loss"] - r["loss"]) + 64 * EPS32 * abs(r["loss"]) + extra_rel * abs(r["loss"])
        assert abs(d["loss"] - r["loss"]) <= bound, (
            f"step {d['step']}: tpu {d['loss']} cpu32 {c['loss']} f64 {r['loss']} (bound {bound:.3g})")


def check_steady_state(dev: list[dict]):
    first, last = dev[1], dev[-1]  # after step 2
    assert last["compiles"] == first["compiles"], (first, last)
    new = {k: v - first["fallbacks"].get(k, 0) for k, v in last["fallbacks"].items()}
    assert {k for k, v in new.items() if v} <= ALLOWED_FALLBACKS, new


def check_mode_steady_state(dev: list[dict], mode: str):
    """check_steady_state, and for a fused or compiled run: no CPU fallback at all, nothing
    loaded from the disk cache after step 2, and compiled: Dynamo made its graphs in step 1
    and none after."""
    check_steady_state(dev)
    assert not any(dev[-1]["fallbacks"].values()), dev[-1]["fallbacks"]
    assert dev[-1]["disk_hits"] == dev[1]["disk_hits"], dev
    if mode == "compiled":
        assert dev[-1]["dynamo_graphs"] > 0, "nothing was compiled by Dynamo"
        assert [r["dynamo_graphs"] for r in dev] == [dev[0]["dynamo_graphs"]] * len(dev), dev


# make test: every language recipe at one process (qwen3_moe: 2 of its 8 blocks, see
# trainer_runs.CI_SIZES) and llama3 at FSDP=2; the long target adds the other FSDP=2 runs.
CASES = [("llama3", 1), ("llama3", 2), ("qwen3", 1), ("qwen3_moe", 1)]
if LONG:
    CASES += [("qwen3", 2), ("qwen3_moe", 2)]


@pytest.mark.parametrize("recipe,nproc", CASES, ids=[f"{r}-fsdp{n}" for r, n in CASES])
def test_stock_trainer_loss_matches_cpu(titan_session_root, recipe, nproc):
    """Launches per case (trainer_runs): one process -- a CPU launch (seed, float64, float32)
    and a "tpu" launch; FSDP=2 -- a 2-process CPU launch (float64, float32) and a "tpu" one."""
    if nproc == 1:
        runs = one_process_runs(titan_session_root, recipe)
    else:
        # TorchTitan 0.3.0's default spmd_types backend needs the model's parameters as
        # DTensors on the full mesh before FSDP, which its parallelize_llama does not give on
        # torch 2.13 (ValueError "When dp_mesh_dims is provided, all parameters must be
        # DTensors ..."; on the CPU as on "tpu"): the DTensor backend is TorchTitan's other one.
        layout = ["--parallelism.data_parallel_shard_degree", str(nproc), *DTENSOR]
        runs = layout_runs(titan_session_root, recipe, nproc, layout)
    # MoE experts run in bf16 (TorchTitan's choice): the sides may round an input differently.
    check_against_reference(runs["dev"], runs["cpu"], runs["ref"],
                            extra_rel=2.0**-9 if "moe" in recipe else 0.0)
    check_steady_state(runs["dev"])
    assert len(runs["dev"]) >= 3
