"""The wire protocol between a trainer and a rollout-engine process (one TCP socket, 127.0.0.1).

Each message is a frame: an 8-byte big-endian length, that many bytes of UTF-8 JSON (the
header), then -- when the header has ``"nbytes"`` -- exactly that many raw bytes (a tensor's
storage, C-contiguous, native byte order). Both processes are on one machine, so native byte
order is the byte order. Tensors are never written to disk; each is sent as it comes
(``{"op": "tensor", "name", "dtype", "shape", "nbytes"}`` + bytes), so neither side needs the
whole model at once in a second copy.

Requests and replies (the engine answers every request with ``{"ok": true, ...}`` or
``{"ok": false, "error": "..."}``):

- the engine, once loaded: ``{"op": "ready", "pid", "device", ...}`` (unrequested, first frame);
- ``{"op": "generate", "prompts": [[ids]], "spec": {...SamplingSpec}}`` ->
  ``{"ok", "outputs": [[{"token_ids", "logprobs"}]]}``;
- ``{"op": "update_begin"}``, then any number of ``tensor`` frames (no replies), then
  ``{"op": "update_end"}`` -> ``{"ok", "tensors", "bytes", "load_s"}``;
- ``{"op": "stats"}`` -> ``{"ok", "stats": {...}}`` (the engine's torch.tpu counters);
- ``{"op": "close"}`` -> ``{"ok"}``, then the engine exits.

Shared by both venvs: imports nothing beyond the standard library and torch.
"""
from __future__ import annotations

import json
import socket
import struct
from typing import Any

import torch

_LEN = struct.Struct("!Q")
MAX_HEADER = 64 << 20  # a generate request or reply; anything larger is a protocol error

_DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d
    for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
              torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)
}


class ProtocolError(RuntimeError):
    """The other side closed the connection or sent something that is not a frame."""


def dtype_name(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise TypeError(f"cannot send tensors of dtype {dtype}; supported: {sorted(_DTYPES)}")
    return name


def dtype_of(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError:
        raise ProtocolError(f"unknown dtype {name!r}") from None


def recv_exact(sock: socket.socket, n: int, into: memoryview | None = None) -> memoryview:
    buf = into if into is not None else memoryview(bytearray(n))
    got = 0
    while got < n:
        k = sock.recv_into(buf[got:], n - got)
        if k == 0:
            raise ProtocolError(f"connection closed after {got} of {n} bytes")
        got += k
    return buf


def send_msg(sock: socket.socket, header: dict[str, Any], payload: memoryview | bytes | None = None
             ) -> None:
    data = json.dumps(header, separators=(",", ":")).encode()
    sock.sendall(_LEN.pack(len(data)) + data)
    if payload is not None and len(payload):
        sock.sendall(payload)


def recv_msg(sock: socket.socket) -> dict[str, Any]:
    """One frame's header; the caller reads the ``nbytes`` payload that follows, if any."""
    (n,) = _LEN.unpack(recv_exact(sock, _LEN.size))
    if n > MAX_HEADER:
        raise ProtocolError(f"header of {n} bytes (more than {MAX_HEADER}): not this protocol")
    try:
        return json.loads(bytes(recv_exact(sock, n)))
    except ValueError as e:
        raise ProtocolError(f"header is not JSON: {e}") from None


def host_bytes(t: torch.Tensor) -> tuple[torch.Tensor, memoryview]:
    """A host copy of ``t`` (contiguous) and a zero-copy view of its bytes.

    The tensor is returned too: the memoryview is only valid while it lives."""
    h = t.detach()
    if h.device.type != "cpu":
        h = h.cpu()
    h = h.contiguous()
    if h.numel() == 0:
        return h, memoryview(b"")
    return h, memoryview(h.reshape(-1).view(torch.uint8).numpy()).cast("B")


def send_tensor(sock: socket.socket, name: str, t: torch.Tensor) -> int:
    """Sends one ``tensor`` frame; returns its payload size in bytes."""
    h, mv = host_bytes(t)
    send_msg(sock, {"op": "tensor", "name": name, "dtype": dtype_name(h.dtype),
                    "shape": list(h.shape), "nbytes": len(mv)}, mv)
    return len(mv)


def recv_tensor(sock: socket.socket, header: dict[str, Any]) -> torch.Tensor:
    """The payload of a ``tensor`` frame whose header was just read, as a CPU tensor."""
    dtype = dtype_of(header["dtype"])
    shape = [int(s) for s in header["shape"]]
    n = int(header["nbytes"])
    numel = 1
    for s in shape:
        numel *= s
    if n != numel * torch.empty((), dtype=dtype).element_size():
        raise ProtocolError(f"{header['name']}: {n} bytes for shape {shape} of {dtype}")
    buf = bytearray(n)
    if n:
        recv_exact(sock, n, memoryview(buf))
        return torch.frombuffer(buf, dtype=torch.uint8).view(dtype).reshape(shape)
    return torch.empty(shape, dtype=dtype)
