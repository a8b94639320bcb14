"""The engine process's side of :mod:`.wire`, for any rollout engine (vLLM, SGLang).

An engine process (``python -m tpuc.integrations.<engine>.sync_server``) builds a *session* --
an object with ``generate(prompts, spec) -> [[{"token_ids", "logprobs"}]]``,
``update(iterator of (name, CPU tensor))`` and ``stats() -> dict`` -- and hands it to
:func:`run_child`, which connects back to the trainer (handshake first), sends ``ready`` and
answers requests with :func:`serve` until ``close``; after ``detach`` or a dropped connection it
accepts the next authenticated one on its own listener (``VLLMEngine.attach``), and it exits when
its parent is gone. A failing request is answered ``{"ok": false, "error"}`` and the engine keeps
serving. Shared by every engine's venv: standard library and torch only.
"""
from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any, Callable, Iterator

import torch

from . import wire

logger = logging.getLogger(__name__)


def tensor_frames(sock: socket.socket, counts: dict[str, int]) -> Iterator[tuple[str, torch.Tensor]]:
    """Yields each ``tensor`` frame until ``update_end`` (which it consumes)."""
    while True:
        h = wire.recv_msg(sock)
        op = h.get("op")
        if op == "update_end":
            counts["ended"] = 1
            return
        if op != "tensor":
            raise wire.ProtocolError(f"expected a tensor frame or update_end, got {op!r}")
        t = wire.recv_tensor(sock, h)
        counts["tensors"] += 1
        counts["bytes"] += int(h["nbytes"])
        yield h["name"], t


def serve(session: Any, sock: socket.socket) -> str:
    """Answers requests on ``sock``; returns "shutdown" after ``close``, "detached" after
    ``detach`` or when the trainer's side of the connection goes away."""
    while True:
        try:
            req = wire.recv_msg(sock)
        except (wire.ProtocolError, OSError):
            logger.info("the trainer closed the connection")
            return "detached"
        op = req.get("op")
        try:
            if op == "generate":
                wire.send_msg(sock, {"ok": True, "outputs": session.generate(req["prompts"],
                                                                            req["spec"])})
            elif op == "update_begin":
                counts = {"tensors": 0, "bytes": 0, "ended": 0}
                t0 = time.perf_counter()
                frames = tensor_frames(sock, counts)
                try:
                    session.update(frames)
                finally:
                    if not counts["ended"]:  # the loader stopped early: keep the stream in step
                        for _ in frames:
                            pass
                wire.send_msg(sock, {"ok": True, "tensors": counts["tensors"],
                                     "bytes": counts["bytes"],
                                     "load_s": time.perf_counter() - t0})
            elif op == "stats":
                wire.send_msg(sock, {"ok": True, "stats": session.stats()})
            elif op == "close":
                wire.send_msg(sock, {"ok": True})
                return "shutdown"
            elif op == "detach":
                wire.send_msg(sock, {"ok": True})
                return "detached"
            else:
                wire.send_msg(sock, {"ok": False, "error": f"unknown request {op!r}"})
        except (wire.ProtocolError, OSError):
            logger.exception("lost the trainer during %r", op)
            return "detached"
        except Exception as e:  # the engine keeps serving; the trainer raises with this text
            logger.exception("request %r failed", op)
            wire.send_msg(sock, {"ok": False, "error": f"{type(e).__name__}: {e}"})


def next_connection(listener: socket.socket, parent: int, secret: str) -> socket.socket | None:
    """The next trainer that attaches to a detached engine (authenticated; intruders refused and
    logged), or None once the process ``parent`` is gone (this engine then exits)."""
    return wire.accept_authenticated(listener, secret,
                                     keep_waiting=lambda: os.getppid() == parent)


def run_child(connect: str, listen_host: str, device: str, make_session: Callable[[], Any],
              shutdown: Callable[[Any], None] | None = None) -> int:
    """The engine process's main loop (see the module docstring). ``connect``: the trainer's
    ``HOST:PORT``; the job's secret comes from ``TPUC_WIRE_SECRET`` and is removed from this
    process's environment before ``make_session`` runs (the engine's own children need not
    inherit it). ``shutdown(session)`` runs after ``close``. Returns the exit status."""
    secret = wire.secret_from_env()
    os.environ.pop(wire.SECRET_ENV, None)
    host, _, port = connect.rpartition(":")
    sock = wire.connect_authenticated(host, int(port), secret, timeout=60)
    sock.settimeout(None)  # requests may come minutes apart (a long training step)
    try:
        session = make_session()
    except Exception as e:
        logger.exception("engine start failed")
        try:
            wire.send_msg(sock, {"op": "ready", "ok": False, "error": f"{type(e).__name__}: {e}"})
        finally:
            sock.close()
        return 1
    listener = socket.create_server((listen_host, 0))
    listener.settimeout(1.0)
    ready = {"op": "ready", "ok": True, "pid": os.getpid(), "device": device,
             "port": listener.getsockname()[1]}
    parent = os.getppid()
    try:
        while True:
            wire.send_msg(sock, ready)
            try:
                reason = serve(session, sock)
            finally:
                sock.close()
            if reason == "shutdown":
                break
            nxt = next_connection(listener, parent, secret)
            if nxt is None:
                logger.info("the parent process is gone; exiting")
                break
            sock = nxt
    finally:
        listener.close()
        if shutdown is not None:
            try:
                shutdown(session)
            except Exception:
                logger.exception("engine shutdown failed")
    return 0
