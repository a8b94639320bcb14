"""nn.EmbeddingBag on "tpu" (python/tpuc/embedding_bag.py): _embedding_bag and its backwards
composed of ops the core lowers, registered with the device, so a plain nn.EmbeddingBag (not only
TorchRec's) runs on the device: every mode it composes, with gradients of the weight and of
per_sample_weights, against the CPU kernel in float64, with nothing on the CPU fallback."""
from __future__ import annotations


import pytest
import torch

import tpuc  # noqa: F401
from tpu_testing import no_fallback  # noqa: F401  (the fixture)


pytestmark = pytest.mark.usefixtures("no_fallback")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# (mode, weighted): PyTorch takes per_sample_weights with mode="sum" only
@pytest.mark.parametrize(("mode", "weighted"), [("sum", False), ("sum", True), ("mean", False)])
@pytest.mark.parametrize("padding_idx", [None, 3])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag(mode: str, padding_idx: int | None, weighted: bool, include_last_offset: bool) -> None:
    g = _gen(0)
    weight = torch.randn(9, 5, generator=g, dtype=torch.float64)
    idx = torch.randint(0, 9, (14,), generator=g)
    offsets = torch.tensor([0, 3, 3, 8, 13] + ([14] if include_last_offset else []))
    psw = torch.rand(14, generator=g, dtype=torch.float64) if weighted else None
    grad = torch.randn(5, 5, generator=g, dtype=torch.float64)
    outs = {}
    for dev in ("cpu", "tpu"):
        w = weight.clone().to(dev).requires_grad_()
        p = None if psw is None else psw.clone().to(dev).requires_grad_()
        out = torch.nn.functional.embedding_bag(idx.to(dev), w, offsets.to(dev), mode=mode,
                                                per_sample_weights=p, padding_idx=padding_idx,
                                                include_last_offset=include_last_offset)
        out.backward(grad.to(dev))
        outs[dev] = (out.detach().cpu(), w.grad.cpu(), None if p is None else p.grad.cpu())
    for got, want in zip(outs["tpu"], outs["cpu"]):
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_embedding_bag_max_mode_still_correct() -> None:
    """mode='max' is not composed here: it keeps PyTorch's CPU kernel, counted as a fallback
    (not hidden), and the result is still PyTorch's."""
    from tpuc import embedding_bag

    before = embedding_bag.cpu_runs().get("_embedding_bag(mode=max)", 0)
    w = torch.randn(6, 3, dtype=torch.float64)
    idx, off = torch.tensor([0, 5, 2, 2, 4]), torch.tensor([0, 2])
    got = torch.nn.functional.embedding_bag(idx.to("tpu"), w.to("tpu"), off.to("tpu"), mode="max")
    torch.testing.assert_close(got.cpu(), torch.nn.functional.embedding_bag(idx, w, off, mode="max"))
    assert embedding_bag.cpu_runs()["_embedding_bag(mode=max)"] == before + 1
    assert torch.tpu.stats()["fallbacks"] == {"aten::_embedding_bag": 1}
    torch.tpu.reset_stats()  # counted as it should be: the fixture checks the other ops


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_module_trains_like_embedding_then_a_reduction(mode: str) -> None:
    """nn.EmbeddingBag with 2-D input (fixed-size bags) and scale_grad_by_freq, four SGD steps,
    the weight updated in place and read back after each. The reference is its definition on
    the CPU: nn.Embedding (same scale_grad_by_freq), then the bag's sum or mean. Not the CPU's
    EmbeddingBag: with scale_grad_by_freq its backward divides the gradient of an id that
    occurs three times by 2, not 3 (torch 2.13; nn.Embedding divides by 3, as documented)."""
    def train(emb: torch.nn.Module, dev: str, bag: bool) -> list[torch.Tensor]:
        opt = torch.optim.SGD(emb.parameters(), lr=0.5)
        idx = torch.tensor([[1, 2, 2, 7], [5, 1, 11, 0], [3, 3, 3, 9]]).to(dev)
        steps = []
        for _ in range(4):
            opt.zero_grad()
            out = emb(idx) if bag else getattr(emb(idx), mode)(1)
            out.sin().sum().backward()
            opt.step()
            steps.append(emb.weight.detach().cpu().clone())
        return steps

    torch.manual_seed(0)
    ref = torch.nn.Embedding(12, 4, scale_grad_by_freq=True).double()
    bag = torch.nn.EmbeddingBag(12, 4, mode=mode, scale_grad_by_freq=True).double()
    bag.weight.data.copy_(ref.weight.data)
    want = train(ref, "cpu", bag=False)
    got = train(bag.to("tpu"), "tpu", bag=True)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
    assert not torch.equal(want[0], want[-1])
