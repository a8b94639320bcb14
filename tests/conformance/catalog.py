"""Which OpInfo entries and dtypes the sweep covers.

The entries are PyTorch's own: `op_db` of common_methods_invocations (which already holds
the linalg, fft, special, masked and signal databases) plus the foreach databases when
importable. An entry's key is its name, with ".variant" when the OpInfo has a variant."""
from __future__ import annotations

import functools
from typing import Any

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
}

FOREACH_DBS = (
    "foreach_unary_op_db",
    "foreach_binary_op_db",
    "foreach_pointwise_op_db",
    "foreach_reduce_op_db",
    "foreach_other_op_db",
)


def key_of(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


@functools.lru_cache(maxsize=1)
def entries() -> dict[str, Any]:
    """key -> OpInfo, in database order (op_db first, then the foreach databases)."""
    from torch.testing._internal import common_methods_invocations as cmi

    ops: list[Any] = list(cmi.op_db)
    for name in FOREACH_DBS:
        ops.extend(getattr(cmi, name, []))
    out: dict[str, Any] = {}
    for op in ops:
        key = key_of(op)
        if key in out:  # the same OpInfo listed twice: keep the first
            continue
        out[key] = op
    return out


def is_foreach(op: Any) -> bool:
    return type(op).__name__ == "ForeachFuncInfo"


def cpu_dtypes(op: Any) -> set[torch.dtype]:
    return set(op.supported_dtypes("cpu"))
