"""Device fixes found by serving vLLM on "tpu" (docs/serving.md).

vLLM's sampler draws per-request exponential noise with the request's own generator
(`q[i].exponential_(generator=g)`, vllm/v1/sample/ops/topk_topp_sampler.py); the Meta step
refused any generator ("generator is not supported in refs") before the op ran.
"""
from __future__ import annotations

import torch

import tpu_testing  # noqa: F401


def _fallbacks() -> dict:
    return dict(torch.tpu.stats()["fallbacks"])


def test_exponential_with_a_generator_runs_on_the_device_and_is_seeded():
    before = _fallbacks().get("aten::exponential_", 0)

    def draw(seed: int) -> torch.Tensor:
        g = torch.Generator(device="tpu")
        g.manual_seed(seed)
        q = torch.zeros(3, 64, device="tpu")
        q[1].exponential_(generator=g)  # a row view, as vLLM's sampler does
        return q.cpu()

    a, b, c = draw(7), draw(7), draw(8)
    assert torch.equal(a, b)  # the same seed gives the same numbers
    assert not torch.equal(a[1], c[1])
    assert torch.equal(a[0], torch.zeros(64)) and torch.equal(a[2], torch.zeros(64))
    assert bool((a[1] > 0).all())
    # Exp(1): the mean of 64 draws lies within 6 standard errors (1/8 each) of 1
    assert abs(a[1].double().mean().item() - 1.0) < 0.75
    assert _fallbacks().get("aten::exponential_", 0) == before


def test_exponential_generator_is_advanced_like_the_default_stream():
    g = torch.Generator(device="tpu")
    g.manual_seed(3)
    x = torch.empty(128, device="tpu").exponential_(generator=g).cpu()
    y = torch.empty(128, device="tpu").exponential_(generator=g).cpu()
    assert not torch.equal(x, y)  # consecutive draws advance the generator
