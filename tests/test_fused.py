"""Fused eager mode keeps PyTorch's semantics: the same results as strict mode
(bitwise for elementwise chains), views and in-place ops, the same random
numbers, exceptions at the offending line, and steady loops that reuse cached
chunk programs."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _restore_mode():
    prev = torch.tpu.get_eager_mode()
    yield
    torch.tpu.set_eager_mode(prev)


def _chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    for _ in range(5):
        x = torch.tanh(x / y) - (x.exp() - 0.5).abs().sqrt()
    return x


def _fma_chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    for _ in range(5):
        x = torch.tanh(x * y + 0.5)
    return x


def _both_modes(f, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    torch.tpu.set_eager_mode("strict")
    strict = f(x.to("tpu"), y.to("tpu")).cpu()
    torch.tpu.set_eager_mode("fused")
    before = torch.tpu.stats()["recorded_ops"]
    fused = f(x.to("tpu"), y.to("tpu")).cpu()
    assert torch.tpu.stats()["recorded_ops"] > before  # really recorded
    return strict, fused


def test_elementwise_chain_is_bitwise_equal_to_strict() -> None:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 32, generator=g), torch.randn(64, 32, generator=g)
    strict, fused = _both_modes(_chain, x, y)
    assert torch.equal(strict, fused)


def test_multiply_add_may_contract_to_fma_within_one_ulp() -> None:
    # XLA contracts a*b+c into one fused multiply-add inside a fused program
    # (one rounding instead of two); documented in docs/execution.md.
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 32, generator=g), torch.randn(64, 32, generator=g)
    strict, fused = _both_modes(_fma_chain, x, y)
    torch.testing.assert_close(fused, strict)  # float32 tolerances: a few ulp


def test_reductions_match_within_tolerance() -> None:
    x = torch.randn(128, 64)
    torch.tpu.set_eager_mode("fused")
    t = x.to("tpu")
    got = ((t - t.mean(1, keepdim=True)) ** 2).sum(1).sqrt().cpu()
    ref = ((x - x.mean(1, keepdim=True)) ** 2).sum(1).sqrt()
    torch.testing.assert_close(got, ref)


def test_views_and_in_place_ops() -> None:
    base = torch.arange(12.0).reshape(3, 4)
    ref = base.clone()
    ref[:, 0].mul_(2)
    ref.view(-1)[3] = 7
    ref.t().add_(1)
    torch.tpu.set_eager_mode("fused")
    x = base.to("tpu")
    x[:, 0].mul_(2)
    x.view(-1)[3] = 7
    x.t().add_(1)
    assert torch.equal(x.cpu(), ref)


def test_same_random_numbers_as_strict() -> None:
    torch.tpu.set_eager_mode("strict")
    torch.manual_seed(123)
    a = torch.randn(1000, device="tpu").cpu()
    d1 = torch.nn.functional.dropout(torch.ones(100, device="tpu"), 0.5).cpu()
    torch.tpu.set_eager_mode("fused")
    torch.manual_seed(123)
    b = torch.randn(1000, device="tpu").cpu()
    d2 = torch.nn.functional.dropout(torch.ones(100, device="tpu"), 0.5).cpu()
    assert torch.equal(a, b)
    assert torch.equal(d1, d2)


def test_shape_error_raises_at_the_op() -> None:
    torch.tpu.set_eager_mode("fused")
    a = torch.randn(2, 3, device="tpu")
    b = torch.randn(4, device="tpu")
    with pytest.raises(RuntimeError, match="size"):
        a + b  # raised here, before anything runs
    assert torch.equal((a * 2).cpu(), a.cpu() * 2)  # still usable


def test_steady_loop_reuses_chunk_programs() -> None:
    torch.tpu.set_eager_mode("fused")
    dims = [16, 17, 18, 19, 20, 21, 22, 23, 16]
    ws = [torch.randn(a, b, device="tpu") / 4 for a, b in zip(dims, dims[1:])]
    x = torch.randn(8, 16, device="tpu")
    s0 = torch.tpu.stats()
    for _ in range(12):  # no host read inside the loop; 16 ops an iteration
        for w in ws:
            x = torch.tanh(x @ w)
    out = x.cpu()
    s1 = torch.tpu.stats()
    assert s1["flushes"] - s0["flushes"] >= 9  # cut at the loop boundary
    assert s1["chunk_hits"] - s0["chunk_hits"] >= 7
    assert s1["compiles"] - s0["compiles"] <= 3
    assert out.shape == (8, 16)


def test_context_manager_and_environment() -> None:
    with torch.tpu.eager_mode("fused"):
        assert torch.tpu.get_eager_mode() == "fused"
    assert torch.tpu.get_eager_mode() == "strict"
    with pytest.raises(ValueError):
        torch.tpu.set_eager_mode("turbo")
