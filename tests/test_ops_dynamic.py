"""Ops whose result size depends on the data — nonzero, masked_select and
boolean-mask indexing (x[mask], x[mask] = v) — run on the device (one host
sync for the count, as on CUDA) and equal PyTorch on the CPU, in order."""
from __future__ import annotations

import pytest
import torch

import tpuc  # noqa: F401


def _fallbacks() -> dict[str, int]:
    return dict(torch.tpu.stats()["fallbacks"])


@pytest.fixture(autouse=True)
def no_fallback():
    before = _fallbacks()
    yield
    assert _fallbacks() == before


@pytest.mark.parametrize("shape", [(7,), (5, 7), (2, 3, 4), (1, 1), (0, 3)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_nonzero_matches_cpu(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-1, 2, shape, generator=g).to(dtype)
    got = torch.nonzero(x.to("tpu"))
    assert got.device.type == "tpu" and got.dtype == torch.int64
    assert torch.equal(got.cpu(), torch.nonzero(x))
    assert got.is_contiguous()


def test_nonzero_of_scalars_and_all_zero() -> None:
    assert torch.nonzero(torch.tensor(3.0, device="tpu")).shape == (1, 0)
    assert torch.nonzero(torch.tensor(0.0, device="tpu")).shape == (0, 0)
    assert torch.nonzero(torch.zeros(4, 5, device="tpu")).shape == (0, 2)


def test_masked_select_with_broadcast_and_grad() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 6)
    m = torch.tensor([True, False, True, True, False, True])  # broadcast over rows
    xt = x.to("tpu").requires_grad_()
    got = torch.masked_select(xt, m.to("tpu"))
    assert torch.equal(got.detach().cpu(), torch.masked_select(x, m))
    got.sum().backward()
    assert torch.equal(xt.grad.cpu(), m.expand(4, 6).float())


def test_boolean_mask_indexing_read_write_accumulate() -> None:
    torch.manual_seed(0)
    x = torch.randn(5, 7)
    m = x > 0.2
    xt, mt = x.to("tpu"), m.to("tpu")
    assert torch.equal(xt[mt].cpu(), x[m])
    rows = torch.tensor([True, False, True, True, False])
    assert torch.equal(xt[rows.to("tpu"), 1:4].cpu(), x[rows, 1:4])
    y, yt = x.clone(), xt.clone()
    y[m] = -1.0
    yt[mt] = -1.0
    assert torch.equal(yt.cpu(), y)
    v = torch.arange(int(m.sum()), dtype=torch.float32)
    y, yt = x.clone(), xt.clone()
    y[m] += v
    yt[mt] += v.to("tpu")
    assert torch.equal(yt.cpu(), y)
