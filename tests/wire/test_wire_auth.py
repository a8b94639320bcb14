"""Nobody else gets in (issue 33): the trainer <-> rollout-engine wire authenticates every
connection with the job's secret (tpuc.post_training.wire, "Authentication").

- a listener refuses a connection that sends no hello, one that stays silent and one with a
  wrong secret -- each answered ``ok: false``, closed and logged without the secret -- and the
  real one, coming after them, is accepted and served;
- the engine's side (engine_server.next_connection, the attach listener) does the same for VLLMEngine.attach;
- ``VLLMEngine`` hands its child the secret in the environment, never on the command line, and
  waits past two intruders for the real child (a fake engine process: no vLLM needed).

All on 127.0.0.1, every wait bounded; runs in the main venv in a few seconds."""
from __future__ import annotations

import json
import logging
import os
import socket
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tpuc.post_training import wire

HERE = Path(__file__).resolve().parent


def _serve_one(listener: socket.socket, secret: str, got: dict[str, Any], **kw: Any) -> None:
    """Accepts the first authenticated connection, answers one request on it."""
    conn = wire.accept_authenticated(listener, secret, time.monotonic() + 30, **kw)
    got["conn"] = conn is not None
    if conn is not None:
        with conn:
            req = wire.recv_msg(conn)
            got["req"] = req
            wire.send_msg(conn, {"ok": True, "echo": req.get("op")})


def _refusal(s: socket.socket) -> dict[str, Any]:
    s.settimeout(10)  # bounded even where the peer let an intruder in (then: a timeout error)
    rep = wire.recv_msg(s, wire.MAX_HELLO)
    try:  # closed: end of stream, or a reset when bytes it never read were still queued
        assert s.recv(1) == b"", "a refused connection must be closed"
    except ConnectionResetError:
        pass
    s.close()
    return rep


def test_intruders_refused_real_peer_served(caplog: pytest.LogCaptureFixture) -> None:
    secret = wire.new_secret()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    got: dict[str, Any] = {}
    caplog.set_level(logging.WARNING, logger="tpuc.post_training.wire")
    t = threading.Thread(target=_serve_one, args=(listener, secret, got),
                         kwargs={"hello_timeout": 1.0}, daemon=True)
    t.start()
    try:
        # 1: a request where the hello should be (a process that knows the frames, not the secret)
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        assert wire.recv_msg(s, wire.MAX_HELLO)["op"] == "challenge"
        wire.send_msg(s, {"op": "update_begin"})
        assert _refusal(s) == {"ok": False, "error": "authentication failed"}
        # 2: a hello under a wrong secret
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        wire.prove(s, wire.new_secret())
        assert _refusal(s)["ok"] is False
        # 3: silent past the hello timeout
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        assert wire.recv_msg(s, wire.MAX_HELLO)["op"] == "challenge"
        assert _refusal(s)["ok"] is False
        # 4: garbage that is not a frame at all (a huge length)
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        wire.recv_msg(s, wire.MAX_HELLO)
        s.sendall(b"\xff" * 16)
        assert _refusal(s)["ok"] is False
        # the real peer, after all of them
        real = wire.connect_authenticated("127.0.0.1", port, secret, timeout=10)
        wire.send_msg(real, {"op": "stats"})
        real.settimeout(10)
        assert wire.recv_msg(real) == {"ok": True, "echo": "stats"}
        real.close()
        t.join(10)
    finally:
        listener.close()
    assert got == {"conn": True, "req": {"op": "stats"}}
    refused = [r.getMessage() for r in caplog.records if "refused a connection" in r.getMessage()]
    assert len(refused) == 4, refused
    assert any("wrong secret" in m for m in refused) and any("no hello" in m for m in refused)
    assert all(secret not in r.getMessage() for r in caplog.records)


def test_hello_is_not_replayable() -> None:
    """A recorded hello is worth nothing on the next connection: a fresh nonce each time."""
    secret = wire.new_secret()
    a, b = socket.socketpair()
    with a, b:
        th = threading.Thread(target=wire.prove, args=(b, secret), daemon=True)
        th.start()
        wire.authenticate_peer(a, secret, 5)
        th.join(5)
    a, b = socket.socketpair()
    with a, b:
        nonce1 = None

        def replay() -> None:
            nonlocal nonce1
            nonce1 = wire.recv_msg(b)["nonce"]
            wire.send_msg(b, {"op": "hello", "mac": wire._mac(secret, "an old nonce")})
        th = threading.Thread(target=replay, daemon=True)
        th.start()
        with pytest.raises(wire.AuthError, match="wrong secret"):
            wire.authenticate_peer(a, secret, 5)
        th.join(5)
        assert nonce1 and nonce1 != "an old nonce"


def test_engine_attach_listener() -> None:
    """The engine process's attach listener (engine_server.next_connection, shared by the vLLM
    and SGLang engine processes) and VLLMEngine's _connect."""
    from tpuc.post_training import engine_server, vllm_engine

    secret = wire.new_secret()
    listener = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    got: dict[str, Any] = {}

    def engine_side() -> None:
        try:
            conn = engine_server.next_connection(listener, os.getppid(), secret)
        except BaseException as e:  # reported by the test, not lost in a dead thread
            got["error"] = repr(e)
            return
        got["conn"] = conn is not None
        if conn is not None:
            with conn:
                wire.send_msg(conn, {"op": "ready", "ok": True, "port": 0})
                got["req"] = wire.recv_msg(conn)

    t = threading.Thread(target=engine_side, daemon=True)
    t.start()
    try:
        time.sleep(0.2)
        assert "error" not in got, got["error"]
        with pytest.raises(vllm_engine.EngineError, match="did not accept"):
            vllm_engine._connect(address, "wrong", 10)
        sock = vllm_engine._connect(address, secret, 10)
        wire.send_msg(sock, {"op": "detach"})
        sock.close()
        t.join(10)
    finally:
        listener.close()
    assert got == {"conn": True, "req": {"op": "detach"}}
    with pytest.raises(wire.AuthError, match="TPUC_WIRE_SECRET"):
        wire.secret_from_env({})


def test_vllm_engine_waits_past_intruders(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                          ) -> None:
    from tpuc.post_training.vllm_engine import VLLMEngine

    fake_python = tmp_path / "python"
    fake_python.write_text(f"#!/bin/sh\nexec {sys.executable} {HERE / 'fake_engine_child.py'} "
                           '"$@"\n')
    fake_python.chmod(fake_python.stat().st_mode | stat.S_IXUSR)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    out = tmp_path / "seen.json"
    caplog.set_level(logging.WARNING, logger="tpuc.post_training.wire")
    engine = VLLMEngine(model, python=str(fake_python), start_timeout=60, request_timeout=30,
                        env={"FAKE_ENGINE_OUT": str(out)}, log_path=str(tmp_path / "log"))
    try:
        assert engine.info["device"] == "fake"
        assert engine.engine_stats() == {"fake": 1}
        proc = engine._proc
    finally:
        engine.close()
    assert proc is not None and proc.returncode == 0, engine.log_tail()
    seen = json.loads(out.read_text())
    assert seen["has_secret"] and not seen["secret_in_argv"], seen
    assert [i["reply"]["ok"] for i in seen["intruders"]] == [False, False], seen
    assert all(i["closed"] for i in seen["intruders"]), seen
    refused = [r.getMessage() for r in caplog.records if "refused a connection" in r.getMessage()]
    assert len(refused) == 2, refused
    assert all(engine.secret not in r.getMessage() for r in caplog.records)
