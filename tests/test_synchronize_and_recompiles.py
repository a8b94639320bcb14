"""Recompile reasons name what changed in a signature; torch.tpu.synchronize() waits for every program launched so far — also
those whose results were freed before it was called (timing code relies on
it) — and reports a device error of such work."""
from __future__ import annotations

import torch


def test_synchronize_returns_after_work_whose_results_are_gone() -> None:
    a = torch.randn(256, 256, device="tpu")
    for _ in range(4):
        torch.mm(a, a)  # results dropped at once; the programs still run
    torch.tpu.synchronize()  # waits for their completion events
    torch.tpu.synchronize()  # nothing left: returns at once, no error
    assert torch.tpu.stats()["executions"] >= 4


def test_synchronize_in_fused_mode_runs_pending_ops() -> None:
    prev = torch.tpu.get_eager_mode()
    torch.tpu.set_eager_mode("fused")
    try:
        x = torch.ones(4, device="tpu")
        y = x * 3
        before = torch.tpu.stats()["flushes"]
        torch.tpu.synchronize()
        assert torch.tpu.stats()["flushes"] == before + 1
        assert torch.equal(y.cpu(), torch.full((4,), 3.0))
    finally:
        torch.tpu.set_eager_mode(prev)


def test_recompile_reasons_name_what_changed() -> None:
    before = torch.tpu.stats()["recompiles"]
    for n in (5, 9):  # the second shape recompiles aten::add.Tensor (or its out= form)
        a = torch.randn(n, 3, device="tpu")
        (a + a).cpu()
    s = torch.tpu.stats()
    assert s["recompiles"] > before
    assert any("shape [5, 3] -> [9, 3]" in r for r in s["recompile_reasons"]), s["recompile_reasons"]
