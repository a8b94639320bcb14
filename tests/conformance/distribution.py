"""Random ops compared with the CPU by distribution, not by value.

A random op's draws on "tpu" cannot equal the CPU's (another generator), so its values were
once only checked for shape and dtype. Here the op runs many times on each side with the same
sample input, every output's values are pooled per side, and the two pools are compared with
a two-sample Kolmogorov-Smirnov test that allows each value its dtype's rounding:

    D = max over x of  F_dev(x) - F_cpu(x + t(x))  and  F_cpu(x) - F_dev(x + t(x))

with F the pools' empirical distribution functions and t(x) = atol + rtol * |x| (PyTorch's
default tolerances of the dtype), so an output that is one value up to rounding on both
sides (a sample with p = 0, a deterministic output beside a random one: point masses a few ulp
apart, where the plain statistic is 1) is not a difference of distribution.
Without the allowance D is the plain KS statistic; the allowance only lowers it, so the test
stays conservative. It fails when D exceeds the KS critical value at ALPHA, c(ALPHA) *
sqrt((n + m) / (n m)) with c(a) = sqrt(-ln(a / 2) / 2) (the asymptotic bound; for discrete
outputs the test is conservative too).

n and m count independent draws: every value when the op draws each element independently;
one per call for the ops in policy.DEPENDENT_DRAWS (a channel's mask, a pooling region's
offsets, a random projection: the values of one call are not independent of each other).

What it catches: a wrong parameter (scale, rate, probability, range), a wrong transform, a
mask applied to the wrong values -- when the difference is large enough for the draws: with
4000 a side, a normal's scale off by 1.5x fails (tests/test_conformance_distribution.py), one
off by 1.25x does not (the largest gap of the two distribution functions, 0.053, is under the
critical value, 0.060). What it does not: a generator of poor quality whose
marginals are right, or correlations between elements.

OpInfo wraps most random ops in ``wrapper_set_seed``, which seeds 42 before the call and
restores the generator after it, so every call would draw the same values: while the pools
are drawn, ``torch.manual_seed`` seeds a new value on each call instead (_new_seed_each_call).
"""
from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Iterator
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .tree import tensors, to_cpu

ALPHA = 1e-6          # per sample and output: the chance a correct op fails one comparison
TARGET_VALUES = 4000  # per side, for ops whose elements are drawn independently
MAX_CALLS = 200       # per side

# PyTorch's default (rtol, atol) by dtype (torch.testing.assert_close); exact for integers
_TOL = {torch.float64: (1e-7, 1e-7), torch.float32: (1.3e-6, 1e-5),
        torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5)}


def critical(n: int, m: int, alpha: float = ALPHA) -> float:
    """The two-sample KS statistic's critical value at level alpha (asymptotic)."""
    return math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt((n + m) / (n * m))


def distance(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> float:
    """D above, for two pools of float64 values (NaN counted as +inf)."""
    a = np.sort(np.nan_to_num(a, nan=np.inf, posinf=np.inf, neginf=-np.inf))
    b = np.sort(np.nan_to_num(b, nan=np.inf, posinf=np.inf, neginf=-np.inf))
    n, m = len(a), len(b)

    def one_way(x: np.ndarray, y: np.ndarray, nx: int, ny: int) -> float:
        fin = np.isfinite(x)
        shifted = np.where(fin, x + atol + rtol * np.abs(np.where(fin, x, 0.0)), x)
        fx = np.searchsorted(x, x, side="right") / nx
        fy = np.searchsorted(y, shifted, side="right") / ny
        return float(np.max(fx - fy)) if len(x) else 0.0

    return max(one_way(a, b, n, m), one_way(b, a, m, n), 0.0)


@contextlib.contextmanager
def _new_seed_each_call(start: int) -> Iterator[None]:
    real = torch.manual_seed
    seeds = itertools.count(start)

    def seed(_: Any) -> Any:
        return real(next(seeds))
    torch.manual_seed = seed  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.manual_seed = real  # type: ignore[assignment]


def _pools(run: Callable[[], Any], calls: int, target: int
           ) -> tuple[list[list[np.ndarray]], list[torch.dtype], int]:
    """Runs `run` until `target` values per output (or `calls` calls): the values by output,
    the outputs' dtypes and the number of calls."""
    pools: list[list[np.ndarray]] = []
    dtypes: list[torch.dtype] = []
    done = 0
    while done < calls:
        outs = list(tensors(to_cpu(run())))
        done += 1
        if not pools:
            pools = [[] for _ in outs]
            dtypes = [t.dtype for t in outs]
        for i, t in enumerate(outs[: len(pools)]):
            pools[i].append(t.detach().to(torch.float64).reshape(-1).numpy())
        if pools and min(sum(len(v) for v in p) for p in pools) >= target:
            break
    return pools, dtypes, done


def compare(dev: Callable[[], Any], cpu: Callable[[], Any], dependent: bool) -> tuple[str | None, int]:
    """None when every output's pools agree in distribution, else what differs; and the
    number of independent draws per side that were compared (the smallest over outputs; 0
    when every output was empty: nothing was compared)."""
    calls = MAX_CALLS
    target = 10 ** 12 if dependent else TARGET_VALUES  # dependent: always every call
    with _new_seed_each_call(1):
        d_pools, d_types, d_calls = _pools(dev, calls, target)
    with _new_seed_each_call(10 ** 6):
        c_pools, _, c_calls = _pools(cpu, calls, target)
    if len(d_pools) != len(c_pools):
        return f"{len(d_pools)} outputs, the CPU's {len(c_pools)}", 0
    least = None
    for i, (dp, cp) in enumerate(zip(d_pools, c_pools)):
        a, b = np.concatenate(dp), np.concatenate(cp)
        if len(a) == 0 or len(b) == 0:
            continue
        rtol, atol = _TOL.get(d_types[i], (0.0, 0.0))
        n, m = (d_calls, c_calls) if dependent else (len(a), len(b))
        d, c = distance(a, b, rtol, atol), critical(n, m)
        least = n if least is None else min(least, n)
        if d > c:
            return (f"output {i}: distribution differs from the CPU's draws (two-sample KS "
                    f"D={d:.3f} > {c:.3f} at alpha {ALPHA:g}, {n} vs {m} draws; means "
                    f"{np.nanmean(a):.4g} vs {np.nanmean(b):.4g})"), n
    return None, least or 0
