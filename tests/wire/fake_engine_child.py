"""A stand-in for ``python -m tpuc.integrations.vllm.sync_server`` (no vLLM here): started by
VLLMEngine through a fake ``python`` (test_wire_auth.py), it first plays two intruders -- a
connection that sends no hello and one whose hello is under a wrong secret -- and only then
connects as the real child with the secret from TPUC_WIRE_SECRET, sends ``ready`` and serves
``stats`` and ``close``. It writes what it saw to $FAKE_ENGINE_OUT (JSON)."""
from __future__ import annotations

import json
import os
import socket
import sys

from tpuc.post_training import wire


def main() -> int:
    argv = sys.argv[1:]
    host, _, port = argv[argv.index("--connect") + 1].rpartition(":")
    secret = os.environ.get(wire.SECRET_ENV, "")
    seen: dict[str, object] = {"secret_in_argv": bool(secret) and any(secret in a for a in argv),
                               "has_secret": bool(secret), "intruders": []}
    # intruder 1: answers the challenge with a request instead of a hello
    s = socket.create_connection((host, int(port)), timeout=30)
    wire.recv_msg(s)
    wire.send_msg(s, {"op": "update_begin"})
    seen["intruders"].append(_answer(s))
    # intruder 2: a hello under a wrong secret
    s = socket.create_connection((host, int(port)), timeout=30)
    try:
        wire.prove(s, "not-" + secret)
        seen["intruders"].append(_answer(s))
    except wire.ProtocolError as e:
        seen["intruders"].append(f"raised {e}")
    # the real child
    sock = wire.connect_authenticated(host, int(port), secret, timeout=30)
    wire.send_msg(sock, {"op": "ready", "ok": True, "pid": os.getpid(), "device": "fake",
                         "port": 1})
    while True:
        req = wire.recv_msg(sock)
        if req.get("op") == "stats":
            wire.send_msg(sock, {"ok": True, "stats": {"fake": 1}})
        elif req.get("op") == "close":
            wire.send_msg(sock, {"ok": True})
            break
    with open(os.environ["FAKE_ENGINE_OUT"], "w") as f:
        json.dump(seen, f)
    return 0


def _answer(s: socket.socket) -> object:
    """What a refused connection gets: the refusal frame, then end of stream."""
    try:
        rep = wire.recv_msg(s)
        try:
            more = s.recv(1)
        except OSError:
            more = b""
        return {"reply": rep, "closed": more == b""}
    except (wire.ProtocolError, OSError) as e:
        return f"closed: {e}"
    finally:
        s.close()


if __name__ == "__main__":
    sys.exit(main())
