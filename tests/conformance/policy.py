"""What the comparison allows, entry by entry, and why.

TOLERANCES: per-(op, dtype) tolerances that replace PyTorch's defaults (assert_close's
per-dtype rtol/atol); each states the reason found by looking at the difference.
NONDETERMINISTIC: entries whose values cannot be compared with the CPU (random draws,
uninitialized memory); they are checked for shape and dtype only. Samples of other entries
whose two CPU runs disagree (dropout_p > 0 in attention, say) are treated the same way."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    reason: str
    checks: tuple[str, ...] = ("forward", "inplace", "out", "grad")


TOLERANCES: dict[tuple[str, str], Tolerance] = {}


def tolerance(key: str, dtype: str, check: str) -> dict[str, float]:
    """assert_close keyword arguments for this (op, dtype, check): {} means the defaults."""
    t = TOLERANCES.get((key, dtype))
    if t is None or check not in t.checks:
        return {}
    return {"atol": t.atol, "rtol": t.rtol}


_RANDOM = "random op: outputs not comparable with the CPU's draws"
_EMPTY = "uninitialized memory: values not comparable"

NONDETERMINISTIC: dict[str, str] = {
    "bernoulli": _RANDOM,
    "cauchy": _RANDOM,
    "exponential": _RANDOM,
    "geometric": _RANDOM,
    "log_normal": _RANDOM,
    "multinomial": _RANDOM,
    "normal": _RANDOM,
    "normal.in_place": _RANDOM,
    "normal.number_mean": _RANDOM,
    "uniform": _RANDOM,
    "rand_like": _RANDOM,
    "randn_like": _RANDOM,
    "randint_like": _RANDOM,
    "randint": _RANDOM,
    "nn.functional.dropout": _RANDOM,
    "nn.functional.dropout2d": _RANDOM,
    "nn.functional.dropout3d": _RANDOM,
    "nn.functional.alpha_dropout": _RANDOM,
    "nn.functional.feature_alpha_dropout.with_train": _RANDOM,
    "nn.functional.rrelu": _RANDOM,
    "nn.functional.fractional_max_pool2d": _RANDOM,
    "nn.functional.fractional_max_pool3d": _RANDOM,
    "svd_lowrank": _RANDOM,
    "pca_lowrank": _RANDOM,
    "empty": _EMPTY,
    "empty_like": _EMPTY,
    "empty_strided": _EMPTY,
    "empty_permuted": _EMPTY,
    "new_empty": _EMPTY,
    "new_empty_strided": _EMPTY,
}
