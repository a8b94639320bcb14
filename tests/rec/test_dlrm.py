"""A TorchRec DLRM (EmbeddingBagCollection over a KeyedJaggedTensor, dense
MLP, pairwise interaction, BCE loss) trains on "tpu" as on the CPU, runs its
ops on the device, and a malformed KJT gives a clear error."""
from __future__ import annotations

import os
import sys
import warnings

import pytest
import torch

pytest.importorskip("torchrec", reason="torchrec is not installed (make rec-setup)")

import tpuc  # noqa: E402,F401

sys.path.insert(0, os.path.dirname(__file__))
import dlrm_setup as d  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor  # noqa: E402

STEPS = 4
SHAPE = d.Shape()
# Ops that still run on the CPU in a DLRM step, with the reason (docs/torchrec.md).
EXPECTED_FALLBACKS: dict[str, str] = {}


@pytest.fixture(autouse=True)
def _quiet() -> None:
    warnings.filterwarnings("ignore", message="tpuc: .* runs on the CPU")


def _bound_ok(tpu: torch.Tensor, cpu: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """|tpu - f64| <= 8 |cpu_f32 - f64| + 64 eps32 (|f64| + max |f64|), elementwise:
    the device may round differently from the CPU (another summation order),
    by a few times the CPU's own float32 error or a few dozen ulps."""
    eps = torch.finfo(torch.float32).eps
    tpu, cpu = tpu.double(), cpu.double()
    scale = ref.abs() + ref.abs().max()
    return (tpu - ref).abs() <= 8 * (cpu - ref).abs() + 64 * eps * scale


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu() for n, p in model.named_parameters()}


def test_dlrm_trains_like_cpu() -> None:
    runs = {}
    for name, device, dtype in (("tpu", "tpu", torch.float32), ("cpu", "cpu", torch.float32),
                                ("f64", "cpu", torch.float64)):
        model = d.build(SHAPE, seed=0, dtype=dtype)
        losses = d.train(model, SHAPE, STEPS, device, dtype)
        runs[name] = (torch.tensor(losses, dtype=torch.float64), _params(model))
    (l_tpu, p_tpu), (l_cpu, p_cpu), (l_ref, p_ref) = runs["tpu"], runs["cpu"], runs["f64"]
    ok = _bound_ok(l_tpu, l_cpu, l_ref)
    assert ok.all(), f"losses tpu {l_tpu.tolist()} cpu {l_cpu.tolist()} f64 {l_ref.tolist()}"
    assert p_tpu.keys() == p_ref.keys()
    for name, ref in p_ref.items():
        tpu, cpu = p_tpu[name], p_cpu[name]
        assert tpu.shape == ref.shape, name
        ok = _bound_ok(tpu, cpu, ref)
        worst = ((tpu.double() - ref).abs().max().item(), (cpu.double() - ref).abs().max().item())
        assert ok.all(), f"{name}: {int((~ok).sum())} elements out of bounds; max err tpu/cpu {worst}"
    # every parameter moved from its initial value by far more than the bound allows,
    # embedding tables included (a skipped update or a dropped gradient cannot pass)
    init = {n: p.detach().double() for n, p in d.build(SHAPE, seed=0).named_parameters()}
    for name, ref in p_ref.items():
        moved = (ref - init[name]).abs().max().item()
        allowed = (8 * (p_cpu[name].double() - ref).abs() + 64 * torch.finfo(torch.float32).eps
                   * (ref.abs() + ref.abs().max())).max().item()
        assert moved > 10 * allowed, (name, moved, allowed)


def test_dlrm_step_runs_on_device() -> None:
    """Steps 3+ compile nothing and nothing runs on the CPU (or only the listed ops)."""
    model = d.build(SHAPE, seed=1)
    marks: dict[int, dict] = {}

    def mark(step: int) -> None:
        s = torch.tpu.stats()
        marks[step] = {"compiles": s["compiles"], "fallbacks": dict(s["fallbacks"])}

    torch.tpu.reset_stats()
    d.train(model, SHAPE, 6, "tpu", torch.float32, after_step=mark)
    first, last = marks[2], marks[5]
    assert last["compiles"] == first["compiles"], (
        f"{last['compiles'] - first['compiles']} compiles in steps 3-5; "
        f"reasons {torch.tpu.stats()['recompile_reasons']}")
    fell = {op: n for op, n in last["fallbacks"].items() if n}
    assert set(fell) <= set(EXPECTED_FALLBACKS), f"ops on the CPU: {fell}"


def _kjt(lengths: list[int], nvalues: int, device: str) -> KeyedJaggedTensor:
    return KeyedJaggedTensor(keys=d.keys(SHAPE), values=torch.zeros(nvalues, dtype=torch.int64, device=device),
                             lengths=torch.tensor(lengths, dtype=torch.int64, device=device))


@pytest.mark.parametrize("extra", [-1, 2])
def test_kjt_lengths_not_matching_values(extra: int) -> None:
    """More or fewer values than the lengths add up to: a clear error naming both
    counts, and the device keeps working."""
    from tpuc.integrations.torchrec import check_kjt

    model = d.build(SHAPE, seed=2).to("tpu")
    lengths = [1] * (len(SHAPE.rows) * SHAPE.batch)
    bad = _kjt(lengths, len(lengths) + extra, "tpu")
    dense = torch.zeros(SHAPE.batch, SHAPE.dense_in, device="tpu")
    with pytest.raises(ValueError, match=rf"lengths add up to {len(lengths)}.*{len(lengths) + extra} values"):
        check_kjt(bad)
    with pytest.raises(ValueError, match=rf"lengths add up to {len(lengths)}.*{len(lengths) + extra} values"):
        model(dense, bad)  # EmbeddingBagCollection's own check (the shim)
    good = _kjt(lengths, len(lengths), "tpu")
    check_kjt(good)
    assert model(dense, good).shape == (SHAPE.batch, 1)


def _kjt_from(lengths: list[int], values: list[int]) -> KeyedJaggedTensor:
    return KeyedJaggedTensor(keys=d.keys(SHAPE), values=torch.tensor(values, device="tpu"),
                             lengths=torch.tensor(lengths, dtype=torch.int64, device="tpu"))


@pytest.mark.parametrize("case", ["negative_length", "lengths_not_a_batch_per_key"])
def test_malformed_kjt_through_the_model(case: str) -> None:
    """Malformed lengths whose total still matches the values: a negative length balanced by
    a longer bag (unchecked, the bags pool silently wrong ids), and a lengths count that is not
    a whole batch per key (unchecked, a reshape error naming no KJT). Both are refused by the
    model's own forward with a message naming the KJT's fault; a good batch then runs."""
    model = d.build(SHAPE, seed=2).to("tpu")
    dense = torch.zeros(SHAPE.batch, SHAPE.dense_in, device="tpu")
    n = len(SHAPE.rows) * SHAPE.batch
    if case == "negative_length":
        lengths, match = [2, -1] + [1] * (n - 2), r"a negative length \(-1\)"
    else:
        lengths, match = [1] * (n - 1), rf"{n - 1} lengths for {len(SHAPE.rows)} keys"
    with pytest.raises(ValueError, match=match):
        model(dense, _kjt_from(lengths, [0] * sum(lengths)))
    assert model(dense, _kjt_from([1] * n, [0] * n)).shape == (SHAPE.batch, 1)


def test_kjt_id_outside_its_table_with_bounds_checks() -> None:
    """An id >= the table's rows: the CPU raises (torch's embedding_bag); on "tpu" the gather does not check by default
    (docs/torchrec.md "Limits"), and with bounds checks on (TPUC_CHECK_BOUNDS=1 /
    torch.tpu.set_check_bounds) the step raises PyTorch's IndexError at the next read."""
    model = d.build(SHAPE, seed=2)
    n = len(SHAPE.rows) * SHAPE.batch
    bad = [SHAPE.rows[0]] + [0] * (n - 1)  # the first table's row count: one past its end
    dense = torch.zeros(SHAPE.batch, SHAPE.dense_in)
    with pytest.raises(RuntimeError, match="not in the valid range"):
        model(dense, KeyedJaggedTensor(keys=d.keys(SHAPE), values=torch.tensor(bad),
                                       lengths=torch.ones(n, dtype=torch.int64)))
    model = model.to("tpu")
    prev = torch.tpu.check_bounds()
    torch.tpu.set_check_bounds(True)
    try:
        with pytest.raises(IndexError, match=rf"index {SHAPE.rows[0]}, dimension 0 with size {SHAPE.rows[0]}"):
            model(dense.to("tpu"), _kjt_from([1] * n, bad)).cpu()
    finally:
        torch.tpu.set_check_bounds(prev)
    assert model(dense.to("tpu"), _kjt_from([1] * n, [0] * n)).cpu().shape == (SHAPE.batch, 1)
