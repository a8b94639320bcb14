"""Nested sample structures (tensors inside lists, tuples and dicts): moving them between
devices, cloning them, collecting their tensors."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def tree_map(fn: Callable[[torch.Tensor], Any], x: Any) -> Any:
    """Applies fn to every tensor in x; containers keep their type, other leaves stay."""
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, torch.Size):
        return x
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # named tuple (torch.return_types)
        return type(x)(*(tree_map(fn, v) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(tree_map(fn, v) for v in x)
    if isinstance(x, dict):
        return {k: tree_map(fn, v) for k, v in x.items()}
    return x


def tensors(x: Any) -> list[torch.Tensor]:
    """Every tensor in x, depth first."""
    out: list[torch.Tensor] = []
    tree_map(out.append, x)
    return out


def clone(x: Any) -> Any:
    """A copy whose tensors are fresh (detached; requires_grad kept for leaves)."""
    return tree_map(lambda t: t.detach().clone().requires_grad_(t.requires_grad), x)


def to_device(x: Any, device: str) -> Any:
    """x with every tensor copied to device by `.to(device)`, grad leaves kept as leaves,
    and every `device=` keyword (factory functions' samples say device="cpu") set to device."""
    def move(t: torch.Tensor) -> torch.Tensor:
        return t.detach().to(device).requires_grad_(t.requires_grad)

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: (device if k == "device" and v[k] is not None else walk(i)) for k, i in v.items()}
        if isinstance(v, (list, tuple)) and not isinstance(v, torch.Size) and not hasattr(v, "_fields"):
            return type(v)(walk(i) for i in v)
        return tree_map(move, v)

    return walk(x)


def to_cpu(x: Any) -> Any:
    """x with every tensor on the CPU (device results are read back)."""
    return tree_map(lambda t: t.detach().cpu() if t.device.type != "cpu" else t.detach(), x)


def describe(x: Any) -> str:
    """A short description: tensors as dtype[shape], other values by repr (truncated)."""
    def one(v: Any) -> str:
        if isinstance(v, torch.Tensor):
            dt = str(v.dtype).removeprefix("torch.")
            if v.layout != torch.strided:
                return f"{dt}{list(v.shape)}({str(v.layout).removeprefix('torch.')})"
            return f"{dt}{list(v.shape)}" + ("" if v.is_contiguous() or v.dim() < 2 else "(nc)")
        if isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
            inner = ", ".join(one(i) for i in v[:6]) + (", ..." if len(v) > 6 else "")
            return f"[{inner}]" if isinstance(v, list) else f"({inner})"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}={one(i)}" for k, i in v.items()) + "}"
        r = repr(v)
        return r if len(r) <= 40 else r[:37] + "..."

    return one(x)
