"""Entry point of the rollout-engine process (serving venv): ``python -m tpuc.integrations.vllm.sync_server``.

    python -m tpuc.integrations.vllm.sync_server --connect 127.0.0.1:PORT --model DIR \
        [--device tpu|cpu] [--max-model-len N] [--seed S] ...

Started by :class:`tpuc.post_training.vllm_engine.VLLMEngine` (the trainer's side), which
listens on PORT first and hands this process the job's secret in ``TPUC_WIRE_SECRET`` (never on
the command line; removed from this process's environment once read): this process connects
back, answers the trainer's challenge (:mod:`tpuc.post_training.wire`, "Authentication"), builds the engine
(:class:`~tpuc.integrations.vllm.weight_sync.EngineSession`), sends ``ready`` (with the port of
its own listener, on ``--listen-host``, 127.0.0.1 unless a multi-host job names another
interface) and serves the trainer's requests. One connection at a time:
after ``detach`` (or a dropped connection) it accepts the next one on its listener -- how rank 0
of a torchrun'd trainer (``VLLMEngine.attach``) uses an engine that another process started;
every such connection must pass the same handshake, anything else is refused and logged --
and after ``close`` it exits. It also exits when its parent (the process that started it) is
gone, so no engine outlives its trainer.
"""
from __future__ import annotations

import argparse
import logging
import os
import socket
import sys


def _next_connection(listener: socket.socket, parent: int, secret: str) -> socket.socket | None:
    """The next authenticated trainer connection (others are refused and logged), or None once
    the parent process has gone."""
    from tpuc.post_training import wire

    return wire.accept_authenticated(listener, secret, keep_waiting=lambda: os.getppid() == parent)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tpuc.integrations.vllm.sync_server")
    ap.add_argument("--connect", required=True, help="HOST:PORT the trainer listens on")
    ap.add_argument("--model", required=True, help="Hugging Face directory (config + weights)")
    ap.add_argument("--device", default="tpu", choices=["tpu", "cpu"])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--max-model-len", type=int, default=256)
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument("--kv-cache-bytes", type=int, default=64 << 20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--listen-host", default="127.0.0.1",
                    help="interface of this engine's own listener (attach); loopback by default")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[engine %(process)d] %(message)s")

    from tpuc.post_training import wire

    secret = wire.secret_from_env()
    os.environ.pop(wire.SECRET_ENV, None)  # vLLM's own child processes need not inherit it
    host, _, port = a.connect.rpartition(":")
    sock = wire.connect_authenticated(host, int(port), secret, timeout=60)
    sock.settimeout(None)  # requests may come minutes apart (a long training step)

    try:
        from .weight_sync import EngineSession, serve

        session = EngineSession(a.model, device=a.device, dtype=a.dtype,
                                max_model_len=a.max_model_len, max_num_seqs=a.max_num_seqs,
                                kv_cache_bytes=a.kv_cache_bytes, seed=a.seed)
    except Exception as e:
        logging.exception("engine start failed")
        try:
            wire.send_msg(sock, {"op": "ready", "ok": False, "error": f"{type(e).__name__}: {e}"})
        finally:
            sock.close()
        return 1
    listener = socket.create_server((a.listen_host, 0))
    listener.settimeout(1.0)
    ready = {"op": "ready", "ok": True, "pid": os.getpid(), "device": a.device,
             "port": listener.getsockname()[1]}
    parent = os.getppid()
    while True:
        wire.send_msg(sock, ready)
        try:
            reason = serve(session, sock)
        finally:
            sock.close()
        if reason == "shutdown":
            break
        sock = _next_connection(listener, parent, secret)
        if sock is None:
            logging.info("the parent process is gone; exiting")
            break
    listener.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip vLLM's interpreter-exit teardown (nothing left to flush)


if __name__ == "__main__":
    sys.exit(main())
