"""``nn.DataParallel`` on "tpu": torch.nn.parallel.comm's collectives for tpu tensors.

DataParallel and its pieces (Scatter, Gather, Broadcast, replicate, parallel_apply)
are written for any accelerator, but the six functions of torch.nn.parallel.comm
they call end in CUDA-only C++ (``torch._C._scatter``, ``_gather``,
``_broadcast_coalesced``, ...), absent from a CPU build of torch and wrong for tpu
tensors in a CUDA one: ``nn.DataParallel(model.to("tpu"))(x)`` raised "module
'torch._C' has no attribute '_scatter'". register() wraps each so that a call on
tpu tensors runs as copies (``.to``) and ``torch.cat``/sums on the devices, and
every other call goes to PyTorch's own. Written against PyTorch 2.13 and 2.14,
whose comm functions take the arguments named below. PyTorch recommends
DistributedDataParallel over DataParallel on CUDA too (tpu_dist: docs/distributed.md).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

_PATCHED = "_tpuc_patched"


def _on_tpu(*ts: Any) -> bool:
    for t in ts:
        if isinstance(t, torch.Tensor) and t.device.type == "tpu":
            return True
        if isinstance(t, (list, tuple)) and _on_tpu(*t):
            return True
    return False


def _dev(d: int | torch.device | str | None) -> torch.device:
    if d is None:
        return torch.device("tpu", torch.tpu.current_device())
    if isinstance(d, int):
        return torch.device("cpu") if d == -1 else torch.device("tpu", d)
    d = torch.device(d)
    return torch.device("tpu", torch.tpu.current_device()) if d.type == "tpu" and d.index is None else d


def _to(t: torch.Tensor, d: torch.device) -> torch.Tensor:
    return t if t.device == d else t.to(d)


def scatter(tensor: torch.Tensor, devices: Sequence[Any] | None = None,
            chunk_sizes: Sequence[int] | None = None, dim: int = 0, streams: Any = None,
            *, out: Sequence[torch.Tensor] | None = None) -> tuple[torch.Tensor, ...]:
    if out is not None:
        sizes = [o.size(dim) for o in out]
        for o, c in zip(out, tensor.split(sizes, dim)):
            o.copy_(c)
        return tuple(out)
    devs = [_dev(d) for d in devices or []]
    chunks = tensor.split(list(chunk_sizes), dim) if chunk_sizes else tensor.chunk(len(devs), dim)
    return tuple(_to(c, d).contiguous() for c, d in zip(chunks, devs))


def gather(tensors: Sequence[torch.Tensor], dim: int = 0, destination: Any = None,
           *, out: torch.Tensor | None = None) -> torch.Tensor:
    if out is not None:
        return out.copy_(torch.cat([_to(t, out.device) for t in tensors], dim))
    dest = _dev(destination)
    return torch.cat([_to(t, dest) for t in tensors], dim)


def broadcast(tensor: torch.Tensor, devices: Sequence[Any] | None = None,
              *, out: Sequence[torch.Tensor] | None = None) -> list[torch.Tensor]:
    if out is not None:
        return [o.copy_(_to(tensor, o.device)) for o in out]
    return [_to(tensor, _dev(d)) for d in devices or []]


def broadcast_coalesced(tensors: Sequence[torch.Tensor], devices: Sequence[Any],
                        buffer_size: int = 10485760) -> list[list[torch.Tensor]]:
    """One list per device; the tensors themselves on the device they are on, as CUDA's."""
    return [[_to(t, _dev(d)) for t in tensors] for d in devices]


def reduce_add(inputs: Sequence[torch.Tensor], destination: Any = None) -> torch.Tensor:
    dest = _dev(destination)
    total = _to(inputs[0], dest).clone()
    for t in inputs[1:]:
        total.add_(_to(t, dest))
    return total


def reduce_add_coalesced(inputs: Sequence[Sequence[torch.Tensor]], destination: Any = None,
                         buffer_size: int = 10485760) -> list[torch.Tensor]:
    return [reduce_add(list(group), destination) for group in zip(*inputs)]


_OURS: dict[str, Callable[..., Any]] = {
    "scatter": scatter, "gather": gather, "broadcast": broadcast,
    "broadcast_coalesced": broadcast_coalesced, "reduce_add": reduce_add,
    "reduce_add_coalesced": reduce_add_coalesced,
}


def _wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    ours = _OURS[name]

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _on_tpu(*args, *kwargs.values()):
            return ours(*args, **kwargs)
        return original(*args, **kwargs)

    setattr(wrapper, _PATCHED, True)
    return wrapper


def register() -> None:
    from torch.nn.parallel import comm

    for name in _OURS:
        original = getattr(comm, name, None)
        if original is not None and not getattr(original, _PATCHED, False):
            setattr(comm, name, _wrap(name, original))
