"""``torch.tpu.Stream`` / ``Event`` / ``current_stream`` / ``stream(...)``.

What FSDP2, DTensor and TorchTitan ask of a device module, shaped like
``torch.cuda``'s. The device runs its ops in launch order on ONE in-order
stream per device (the C++ guard's stream; csrc/torch/device.cpp), so every
stream object names that stream and the orderings code asks for with
``wait_stream`` / ``record_event`` / ``wait_event`` already hold: an op
launched after the wait runs after everything launched before the record.
``synchronize()`` waits for the device's pending work. A timing event
(``enable_timing=True``) is a marker behind the work before it: its
``synchronize()``, ``query()`` and ``elapsed_time()`` ask the marker. Another
event's ``synchronize()`` and ``query()`` wait for the device (true, never a
stale false).
"""
from __future__ import annotations

from typing import Any, Union

import torch

_DeviceLike = Union[torch.device, str, int, None]


def _index(device: _DeviceLike) -> int:
    from .device import _get_device_index

    return _get_device_index(device)


class Stream(torch.Stream):
    """A stream of "tpu" (``priority`` accepted and ignored: one in-order stream)."""

    def __new__(cls, device: _DeviceLike = None, priority: int = 0, **kwargs: Any) -> "Stream":
        return super().__new__(cls, device=torch.device("tpu", _index(device)), priority=priority)

    def query(self) -> bool:
        self.synchronize()
        return True


class _EventMeta(type):
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, torch.Event) and obj.device.type == "tpu"


class Event(torch.Event, metaclass=_EventMeta):
    """An event of "tpu": ``record()`` marks the stream's position. With
    ``enable_timing=True`` each record places a marker behind the device's work
    (recorded ops are flushed first) and ``elapsed_time`` gives the milliseconds of
    device time between two records, as CUDA events do (runtime/marker.c).

    The object made is a plain ``torch.Event`` of device "tpu" (and an instance of this
    class): PyTorch's ``elapsed_time`` accepts only that type as its argument."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False) -> "Event":
        return torch.Event("tpu", enable_timing=enable_timing, blocking=blocking,  # type: ignore[return-value]
                           interprocess=interprocess)


def current_stream(device: _DeviceLike = None) -> torch.Stream:
    return torch.accelerator.current_stream(_index(device))


def default_stream(device: _DeviceLike = None) -> torch.Stream:
    return torch.accelerator.current_stream(_index(device))


def set_stream(stream: torch.Stream | None) -> None:
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """``with torch.tpu.stream(s):`` makes s current for the body."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self.prev: torch.Stream | None = None

    def __enter__(self) -> torch.Stream | None:
        if self.stream is not None:
            self.prev = torch.accelerator.current_stream(self.stream.device_index)
            torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc: object) -> None:
        if self.prev is not None:
            torch.accelerator.set_stream(self.prev)


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)
