"""What the comparison allows, entry by entry, and why.

TOLERANCES: per-(op, dtype) tolerances that replace PyTorch's defaults (assert_close's
per-dtype rtol/atol); each states the reason found by looking at the difference.
NONDETERMINISTIC: entries whose values cannot be compared with the CPU (random draws,
uninitialized memory); they are checked for shape and dtype only. NONDETERMINISTIC_SAMPLES:
entries random only for some samples (OpInfo seeds them, so two CPU runs agree, but the
device's generator draws other numbers); samples of any entry whose two CPU runs disagree
are treated the same way."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


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
    "randn": _RANDOM,
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


def _dropout_p(sample: Any) -> float:
    p = sample.kwargs.get("dropout_p", 0.0)
    return float(p) if isinstance(p, (int, float)) else 0.0


def _mha_dropout(sample: Any) -> bool:
    # multi_head_attention_forward(query, key, value, embed_dim, num_heads, in_proj_weight,
    # in_proj_bias, bias_k, bias_v, add_zero_attn, dropout_p, ...): args[9] is dropout_p
    p = sample.args[9] if len(sample.args) > 9 else sample.kwargs.get("dropout_p", 0.0)
    return sample.kwargs.get("training", True) and isinstance(p, (int, float)) and p > 0


NONDETERMINISTIC_SAMPLES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "nn.functional.scaled_dot_product_attention": (
        "dropout_p > 0: random dropout mask", lambda s: _dropout_p(s) > 0),
    "nn.functional.multi_head_attention_forward": (
        "training with dropout_p > 0: random dropout mask", _mha_dropout),
}


def sample_is_random(key: str, sample: Any) -> bool:
    entry = NONDETERMINISTIC_SAMPLES.get(key)
    return entry is not None and entry[1](sample)


# Entries whose tensor arguments after the input must stay on the CPU (their API says so);
# only the input moves to the device.
CPU_ARGS: dict[str, str] = {
    "tensor_split": "tensor_indices_or_sections must be a CPU tensor (PyTorch's API)",
}
