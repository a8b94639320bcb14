"""F.ctc_loss on "tpu" without the CPU fallback (python/tpuc/ctc.py, csrc/core/lower/nn_ctc.c):
the forward-backward recursion as one stablehlo.while over time, the lengths as run-time
tensors.

References: PyTorch's CPU kernel on the same inputs. float64: the loss and the gradient of the
log-probabilities within 1e-10 (the same recursion, the same log-sum-exp form; only the sum
over states per class is a matmul here). float32: as accurate as the CPU's float32 kernel
against the float64 one (tpu_testing.assert_as_accurate). Cases: padded and concatenated
targets, every reduction, repeated labels (the skip rule), empty targets, an impossible
alignment (infinite loss) with and without zero_infinity, input lengths below T; strict and
fused mode; other lengths reuse the compiled programs; a few training steps of a small
acoustic model against the CPU, and the same steps with the kernels switched off
(TPUC_CTC_KERNEL=0, the CPU fallback)."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from tpu_testing import (assert_as_accurate, fallback_counts, kernels_on_and_off, new_fallbacks,
                         quiet_fallback_warnings)  # noqa: F401

T, N, C, S = 12, 3, 6, 4
CTC_OPS = ("aten::_ctc_loss", "aten::_ctc_loss_backward")

CASES = {
    "padded": {},
    "concatenated": {"flat": True},
    "sum": {"reduction": "sum"},
    "none": {"reduction": "none"},
    "repeated_labels": {"targets": [[1, 1, 2, 2], [3, 3, 3, 3], [1, 2, 3, 4]], "tl": [4, 4, 4]},
    "impossible_zero_infinity": {"il": [12, 2, 5], "tl": [4, 3, 0], "zero_infinity": True},
    "impossible": {"il": [12, 2, 5], "tl": [4, 3, 0], "reduction": "none"},
    "blank_last": {"blank": C - 1, "targets": [[0, 1, 2, 3], [4, 4, 0, 0], [2, 2, 2, 1]]},
}


def _run(device: str, dtype: torch.dtype, flat: bool = False, reduction: str = "mean",
         zero_infinity: bool = False, il: list[int] | None = None, tl: list[int] | None = None,
         targets: list[list[int]] | None = None,
         blank: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    lp = torch.randn(T, N, C, generator=g, dtype=torch.float64).log_softmax(2).to(dtype)
    tl = tl or [4, 2, 0]
    il = il or [12, 9, 5]
    tg = torch.tensor(targets) if targets is not None else torch.randint(1, C, (N, S), generator=g)
    if flat:
        tg = torch.cat([tg[n, : tl[n]] for n in range(N)])
    x = lp.to(device).requires_grad_(True)
    loss = F.ctc_loss(x, tg.to(device), torch.tensor(il).to(device), torch.tensor(tl).to(device),
                      blank=blank, reduction=reduction, zero_infinity=zero_infinity)
    (grad,) = torch.autograd.grad(loss.sum(), x)
    return loss.detach().cpu(), grad.cpu()


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("case", list(CASES))
def test_float64_matches_the_cpu(case: str, mode: str) -> None:
    before = fallback_counts()
    with torch.tpu.eager_mode(mode):
        got = _run("tpu", torch.float64, **CASES[case])
    assert not new_fallbacks(before)
    ref = _run("cpu", torch.float64, **CASES[case])
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("case", ["padded", "concatenated", "repeated_labels", "blank_last"])
def test_float32_as_accurate_as_the_cpu(case: str) -> None:
    got = _run("tpu", torch.float32, **CASES[case])
    cpu = _run("cpu", torch.float32, **CASES[case])
    exact = _run("cpu", torch.float64, **CASES[case])
    for g, c, e in zip(got, cpu, exact):
        assert g.dtype == torch.float32
        assert_as_accurate(g, c, e)


def test_other_lengths_reuse_the_programs() -> None:
    _run("tpu", torch.float32, il=[12, 9, 5], tl=[4, 2, 0])
    before = torch.tpu.stats()["compiles"]
    _run("tpu", torch.float32, il=[7, 12, 11], tl=[1, 4, 3])
    assert torch.tpu.stats()["compiles"] == before


class _Acoustic(torch.nn.Module):
    """A tiny CTC model: a 1-d convolution over frames, then per-frame class scores."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [N, 4, T] -> [T, N, C]
        return self.head(torch.relu(self.conv(x)).transpose(1, 2)).log_softmax(2).transpose(0, 1)


def _train(device: str, steps: int = 4) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = _Acoustic().double().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(steps):
        x = torch.randn(N, 4, T, generator=g, dtype=torch.float64).to(device)
        tl = [4 - i % 2, 3, 1 + i % 3]
        il = [T, T - 1 - i, T - 3]
        tg = torch.randint(1, C, (sum(tl),), generator=g).to(device)
        loss = F.ctc_loss(model(x), tg, torch.tensor(il).to(device), torch.tensor(tl).to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.detach().cpu())
    return out + [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_training_matches_the_cpu(mode: str) -> None:
    before = fallback_counts()
    with torch.tpu.eager_mode(mode):
        got = _train("tpu")
    assert not new_fallbacks(before)
    for a, b in zip(got, _train("cpu")):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_switched_off_it_is_the_cpu_fallback(tmp_path) -> None:
    on, off = kernels_on_and_off("TPUC_CTC_KERNEL", "test_ctc_loss", "_train('tpu')", CTC_OPS,
                                 str(tmp_path), globals())
    for a, b in zip(on, off):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("bad", ["input_too_long", "negative_target_length", "targets_too_short"])
def test_bad_lengths_raise_the_cpus_error(bad: str) -> None:
    lp = torch.randn(T, 2, C).log_softmax(2)
    tg, il, tl = torch.tensor([[1, 2], [3, 4]]), [T, T], [2, 1]
    if bad == "input_too_long":
        il = [T + 1, T]
    elif bad == "negative_target_length":
        tl = [2, -1]
    else:
        tl = [3, 1]
    with pytest.raises(RuntimeError) as cpu:
        torch.ops.aten._ctc_loss(lp, tg, il, tl)
    with pytest.raises(RuntimeError, match=re.escape(str(cpu.value).split(" (while")[0])):
        torch.ops.aten._ctc_loss(lp.to("tpu"), tg.to("tpu"), il, tl)
