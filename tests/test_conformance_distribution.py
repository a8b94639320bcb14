"""The conformance sweep's distribution check for random ops (tests/conformance/distribution.py):
it must pass two samplers of one distribution, even when their values differ by a rounding,
and fail a wrong parameter. CPU only: both sides are CPU samplers here."""
from __future__ import annotations

import numpy as np
import torch
from torch.testing._utils import wrapper_set_seed

from tests.conformance import distribution as dist


def test_critical_value_shrinks_with_draws() -> None:
    assert dist.critical(100, 100) > dist.critical(4000, 4000) > 0
    # c(alpha) = sqrt(-ln(alpha/2)/2): 1.36 at alpha 0.05, the textbook value
    assert abs(dist.critical(10**8, 10**8, 0.05) / np.sqrt(2 / 10**8) - 1.358) < 1e-3


def test_rounding_is_not_a_difference_but_a_wrong_scale_is() -> None:
    """Outputs that are one value up to rounding on both sides (dropout with p = 0, a
    deterministic output beside a random one) are point masses a few ulp apart: the plain KS
    statistic is 1 there, the allowance makes it 0; a wrong scale still fails."""
    x = np.float32(0.3)
    a = np.full(400, x / np.float32(0.7), dtype=np.float32).astype(np.float64)
    b = np.full(400, np.nextafter(x / np.float32(0.7), np.float32(1)), dtype=np.float32).astype(np.float64)
    n = len(a)
    assert dist.distance(a, b, 0.0, 0.0) == 1.0 > dist.critical(n, n)
    assert dist.distance(a, b, 1.3e-6, 1e-5) == 0.0
    assert dist.distance(a, b * 1.01, 1.3e-6, 1e-5) == 1.0
    g = np.random.default_rng(0)
    keep = g.random((2, 4000)) > 0.5
    drop = keep[0] * g.standard_normal(4000) / 0.5
    assert dist.distance(drop, keep[1] * g.standard_normal(4000) / 0.5, 1.3e-6, 1e-5) <= dist.critical(4000, 4000)
    assert dist.distance(drop, keep[1] * g.standard_normal(4000), 1.3e-6, 1e-5) > dist.critical(4000, 4000)


def test_compare_passes_equal_samplers_and_fails_a_wrong_std() -> None:
    torch.manual_seed(0)

    def randn() -> torch.Tensor:
        return torch.randn(40)

    def randn_wide() -> torch.Tensor:
        return torch.randn(40) * 1.5

    assert dist.compare(randn, randn, dependent=False) == (None, dist.TARGET_VALUES)
    msg, _ = dist.compare(randn, randn_wide, dependent=False)
    assert msg is not None and "distribution differs" in msg


def test_ops_that_reseed_every_call_still_draw_new_values() -> None:
    """OpInfo's wrapper_set_seed seeds 42 on every call; the pools must not be one draw
    repeated (a constant would pass against itself and fail against any real sampler)."""
    def op() -> torch.Tensor:
        return wrapper_set_seed(torch.rand, 8)

    def plain() -> torch.Tensor:
        return torch.rand(8)

    assert dist.compare(op, plain, dependent=False)[0] is None
    msg, _ = dist.compare(op, lambda: torch.full((8,), 0.5), dependent=False)
    assert msg is not None


def test_dependent_draws_count_calls_and_empty_outputs_compare_nothing() -> None:
    def channel_mask() -> torch.Tensor:
        return (torch.rand(4, 1) > 0.5).float().expand(4, 64)

    msg, draws = dist.compare(channel_mask, channel_mask, dependent=True)
    assert msg is None and draws == dist.MAX_CALLS
    assert dist.compare(lambda: torch.empty(0), lambda: torch.empty(0), dependent=False) == (None, 0)
