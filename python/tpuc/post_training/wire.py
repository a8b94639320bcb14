"""The wire protocol between a trainer and a rollout-engine process (one TCP socket, 127.0.0.1).

Each message is a frame: an 8-byte big-endian length, that many bytes of UTF-8 JSON (the
header), then -- when the header has ``"nbytes"`` -- exactly that many raw bytes (a tensor's
storage, C-contiguous, native byte order). Both processes are on one machine, so native byte
order is the byte order. Tensors are never written to disk; each is sent as it comes
(``{"op": "tensor", "name", "dtype", "shape", "nbytes"}`` + bytes), so neither side needs the
whole model at once in a second copy.

Authentication: every connection starts with a handshake before any other frame. The side that
accepted sends ``{"op": "challenge", "nonce"}``; the side that connected answers, as its first
frame, ``{"op": "hello", "mac"}`` -- HMAC-SHA256 of the nonce under the job's secret -- and the
acceptor compares it in constant time (``hmac.compare_digest``). A connection that sends
anything else, nothing within ``HELLO_TIMEOUT`` seconds, or a wrong MAC is answered
``{"ok": false}``, closed and logged (its peer address, never the secret), and the listener
goes on accepting. The secret is per job: the launcher makes one (:func:`new_secret`) and hands
it to its child through the environment (``TPUC_WIRE_SECRET``), never on a command line; it
never travels on the wire itself (a fresh nonce per connection, so a recorded hello cannot be
replayed).

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

import hashlib
import hmac
import json
import logging
import os
import secrets
import socket
import struct
import time
from typing import Any

import torch

_LEN = struct.Struct("!Q")
MAX_HEADER = 64 << 20  # a generate request or reply; anything larger is a protocol error
MAX_HELLO = 4096  # the handshake's frames: an unauthenticated peer cannot make us allocate more
HELLO_TIMEOUT = 10.0  # seconds a connecting peer has to answer the challenge
SECRET_ENV = "TPUC_WIRE_SECRET"

logger = logging.getLogger("tpuc.post_training.wire")

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


def recv_msg(sock: socket.socket, max_header: int = MAX_HEADER) -> dict[str, Any]:
    """One frame's header; the caller reads the ``nbytes`` payload that follows, if any."""
    (n,) = _LEN.unpack(recv_exact(sock, _LEN.size))
    if n > max_header:
        raise ProtocolError(f"header of {n} bytes (more than {max_header}): not this protocol")
    try:
        msg = json.loads(bytes(recv_exact(sock, n)))
    except ValueError as e:
        raise ProtocolError(f"header is not JSON: {e}") from None
    if not isinstance(msg, dict):
        raise ProtocolError(f"header is a JSON {type(msg).__name__}, not an object")
    return msg


# -- authentication --------------------------------------------------------------------------
class AuthError(ProtocolError):
    """The peer did not prove it holds the job's secret."""


def new_secret() -> str:
    """A fresh per-job secret (256 random bits, hex)."""
    return secrets.token_hex(32)


def secret_from_env(env: dict[str, str] | None = None) -> str:
    """The job's secret from ``TPUC_WIRE_SECRET``; an error when it is missing or empty."""
    value = (os.environ if env is None else env).get(SECRET_ENV, "")
    if not value:
        raise AuthError(f"no wire secret: {SECRET_ENV} is unset (the process that started the "
                        "engine has it as VLLMEngine.secret)")
    return value


def _mac(secret: str, nonce: str) -> str:
    return hmac.new(secret.encode(), nonce.encode(), hashlib.sha256).hexdigest()


def authenticate_peer(sock: socket.socket, secret: str, timeout: float = HELLO_TIMEOUT) -> None:
    """The accepting side's handshake: challenge, then the peer's ``hello`` checked in constant
    time. Raises :class:`AuthError` (or ``OSError``) when the peer fails; the caller closes."""
    nonce = secrets.token_hex(16)
    sock.settimeout(timeout)
    try:
        send_msg(sock, {"op": "challenge", "nonce": nonce})
        hello = recv_msg(sock, MAX_HELLO)
    except socket.timeout:
        raise AuthError(f"no hello within {timeout:.0f} s") from None
    except ProtocolError as e:
        raise AuthError(f"not a hello frame ({e})") from None
    mac = hello.get("mac")
    if hello.get("op") != "hello" or not isinstance(mac, str):
        raise AuthError(f"first frame was {str(hello.get('op'))[:32]!r}, not a hello")
    if not hmac.compare_digest(_mac(secret, nonce).encode(), mac.encode("utf-8", "replace")):
        raise AuthError("wrong secret")
    sock.settimeout(None)


def prove(sock: socket.socket, secret: str, timeout: float = HELLO_TIMEOUT) -> None:
    """The connecting side's handshake: answers the acceptor's challenge with the MAC."""
    sock.settimeout(timeout)
    try:
        challenge = recv_msg(sock, MAX_HELLO)
    except socket.timeout:
        raise AuthError(f"no challenge within {timeout:.0f} s: not a tpuc wire listener") from None
    nonce = challenge.get("nonce")
    if challenge.get("op") != "challenge" or not isinstance(nonce, str):
        raise AuthError(f"expected a challenge, got {str(challenge.get('op'))[:32]!r}")
    send_msg(sock, {"op": "hello", "mac": _mac(secret, nonce)})
    sock.settimeout(None)


def refuse(sock: socket.socket, peer: Any, why: str) -> None:
    """Logs a refused connection (peer and reason, never the secret) and closes it."""
    logger.warning("refused a connection from %s: %s", _peer_text(peer), why)
    try:
        sock.settimeout(1.0)
        send_msg(sock, {"ok": False, "error": "authentication failed"})
    except OSError:
        pass
    sock.close()


def _peer_text(peer: Any) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


def accept_authenticated(listener: socket.socket, secret: str, deadline: float | None = None,
                         *, keep_waiting: Any = None, hello_timeout: float = HELLO_TIMEOUT
                         ) -> socket.socket | None:
    """The next connection on ``listener`` that passes the handshake; every other one is refused
    and logged, and accepting goes on. Returns None at ``deadline`` (``time.monotonic()``) or
    once ``keep_waiting()`` says False (checked about every second)."""
    listener.settimeout(1.0)
    while True:
        if deadline is not None and time.monotonic() > deadline:
            return None
        if keep_waiting is not None and not keep_waiting():
            return None
        try:
            conn, peer = listener.accept()
        except socket.timeout:
            continue
        try:
            authenticate_peer(conn, secret, hello_timeout)
        except (AuthError, OSError) as e:
            refuse(conn, peer, str(e))
            continue
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn


def connect_authenticated(host: str, port: int, secret: str, timeout: float = 60.0
                          ) -> socket.socket:
    """A connection to a wire listener, handshake done (the caller's next frame is its own)."""
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    try:
        prove(sock, secret, min(timeout, HELLO_TIMEOUT * 3))
    except BaseException:
        sock.close()
        raise
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


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
