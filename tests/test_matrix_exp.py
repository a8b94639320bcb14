"""torch.linalg.matrix_exp on "tpu" (python/tpuc/matrix_exp.py): as accurate as the CPU's
kernel against a float64 reference, batches squared per matrix, NaN for non-finite input,
the CPU's errors, PyTorch's gradient through it, an orthogonally parametrized layer trained as
on the CPU, and no CPU fallback. TPUC_MATRIX_EXP_KERNEL=0 (the fallback) trains the same."""
from __future__ import annotations

import math

import pytest
import torch

from tpu_testing import (assert_as_accurate, assert_runs_as_on_the_cpu, fallback_counts,
                         kernels_on_and_off, new_fallbacks)

MODES = ("strict", "fused")
OP = "aten::linalg_matrix_exp"


def _matrices(dtype: torch.dtype, scale: float, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    real = torch.float64
    a = torch.randn(3, 6, 6, generator=g, dtype=real)
    if dtype.is_complex:
        a = torch.complex(a, torch.randn(3, 6, 6, generator=g, dtype=real))
    return (a * scale).to(dtype)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("scale", [1e-3, 0.3, 2.0, 8.0])
def test_as_accurate_as_the_cpu(mode: str, dtype: torch.dtype, scale: float) -> None:
    """Against the CPU's float64 result of the same (rounded) input: the derived bound."""
    a = _matrices(dtype, scale)
    exact = torch.linalg.matrix_exp(a.to(torch.complex128 if dtype.is_complex else torch.float64))
    before = fallback_counts()
    with torch.tpu.eager_mode(mode):
        got = torch.linalg.matrix_exp(a.to("tpu"))
    assert OP not in new_fallbacks(before)
    assert got.dtype == dtype
    cpu = torch.linalg.matrix_exp(a)
    if dtype.is_complex:  # real and imaginary parts side by side
        got, cpu, exact = (torch.view_as_real(t.cpu()) for t in (got, cpu, exact))
    assert_as_accurate(got, cpu, exact)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
@pytest.mark.parametrize("scale", [1e-3, 0.3, 2.0, 8.0])
def test_float64_within_the_squarings_bound(dtype: torch.dtype, scale: float) -> None:
    """float64 has no more precise reference here, so the bound is the method's own: the
    polynomial is within a few roundoffs and each of the s squarings can at most double the
    relative error, so |tpu - cpu| <= 2^(s+6) u max|exp(A)| (s from the largest 1-norm)."""
    a = _matrices(dtype, scale)
    cpu = torch.linalg.matrix_exp(a)
    got = torch.linalg.matrix_exp(a.to("tpu")).cpu()
    norm = a.abs().sum(-2).amax().item()
    s = max(0, math.ceil(math.log2(norm / 1.2)))
    bound = 2.0 ** (s + 6) * 2.0 ** -53 * cpu.abs().max().item()
    assert (got - cpu).abs().max().item() <= bound


def test_each_matrix_of_a_batch_is_squared_its_own_number_of_times() -> None:
    """A batch of a tiny, a moderate and a large matrix (0, about 3 and about 8 squarings):
    squaring the tiny one as often as the large one would cost it accuracy, not give NaN, so
    the check is its accuracy against its own float64 result."""
    g = torch.Generator().manual_seed(3)
    a = torch.randn(3, 4, 4, generator=g, dtype=torch.float64)
    a = a * torch.tensor([1e-4, 3.0, 60.0], dtype=torch.float64)[:, None, None]
    a32 = a.float()
    exact = torch.linalg.matrix_exp(a32.double())
    got = torch.linalg.matrix_exp(a32.to("tpu")).cpu()
    for i in range(3):
        assert_as_accurate(got[i], torch.linalg.matrix_exp(a32[i]), exact[i])


def test_edge_cases_and_errors_as_on_the_cpu() -> None:
    cases = [torch.zeros(0, 3, 3), torch.tensor([[[2.0]], [[-1.0]]]),
             torch.full((2, 2), math.nan), torch.tensor([[math.inf, 0.0], [0.0, 1.0]]),
             torch.zeros(4, 4)]
    for a in cases:
        want = torch.linalg.matrix_exp(a)
        got = torch.linalg.matrix_exp(a.to("tpu")).cpu()
        torch.testing.assert_close(got, want, equal_nan=True)
    for a in (torch.randn(2, 3), torch.ones(2, 2, dtype=torch.long), torch.randn(3)):
        with pytest.raises(RuntimeError) as cpu_error:
            torch.linalg.matrix_exp(a)
        with pytest.raises(RuntimeError) as tpu_error:
            torch.linalg.matrix_exp(a.to("tpu"))
        assert str(tpu_error.value) == str(cpu_error.value)
    half = torch.linalg.matrix_exp(torch.ones(2, 2, dtype=torch.bfloat16, device="tpu")).cpu()
    e2 = math.exp(2.0)  # exp([[1, 1], [1, 1]]) = [[(e^2 + 1) / 2, (e^2 - 1) / 2], ...]
    torch.testing.assert_close(half.float(), torch.tensor([[(e2 + 1) / 2, (e2 - 1) / 2],
                                                           [(e2 - 1) / 2, (e2 + 1) / 2]]),
                               rtol=8e-3, atol=0)


def test_gradient_matches_the_cpu() -> None:
    """PyTorch's backward takes the exponential of a 2n x 2n block matrix (which runs here)."""
    a = _matrices(torch.float64, 0.7)
    w = torch.linspace(-1, 1, 36, dtype=torch.float64).reshape(6, 6)
    grads = []
    for dev in ("cpu", "tpu"):
        x = a.detach().to(dev).requires_grad_(True)
        (torch.linalg.matrix_exp(x) * w.to(dev)).sum().backward()
        grads.append(x.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-12, atol=1e-12)


def _train(device: str, steps: int = 5) -> list[torch.Tensor]:
    """An orthogonally parametrized square layer (matrix_exp at every forward) and a head."""
    torch.manual_seed(0)
    rot = torch.nn.utils.parametrizations.orthogonal(torch.nn.Linear(5, 5), orthogonal_map="matrix_exp")
    model = torch.nn.Sequential(rot, torch.nn.Tanh(), torch.nn.Linear(5, 2)).to(device, torch.float64)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 5, generator=g, dtype=torch.float64).to(device)
    y = torch.randn(8, 2, generator=g, dtype=torch.float64).to(device)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        out.append(loss.detach().cpu().reshape(1))
    return out + [model[0].weight.detach().cpu()] + [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("mode", MODES)
def test_orthogonal_parametrization_trains_as_on_the_cpu(mode: str) -> None:
    """float64 on both sides (1e-10 relative: a wrong exponential or gradient is off by the
    learning rate's order, 5e-2)."""
    assert_runs_as_on_the_cpu(_train, mode, rtol=1e-10, atol=1e-12)


def test_the_switch_gives_the_fallback_and_the_same_training(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """TPUC_MATRIX_EXP_KERNEL=0 puts the exponential on the CPU fallback (another polynomial):
    the float64 run trains to the same values within 1e-10."""
    on, off = kernels_on_and_off("TPUC_MATRIX_EXP_KERNEL", "test_matrix_exp", "_train('tpu')",
                                 (OP,), str(tmp_path), globals())
    for a, b in zip(on, off):  # type: ignore[call-overload]
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
