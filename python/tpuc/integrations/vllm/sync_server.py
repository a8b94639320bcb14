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
import sys


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

    from tpuc.post_training.engine_server import run_child

    def make():  # type: ignore[no-untyped-def]
        from .weight_sync import EngineSession

        return EngineSession(a.model, device=a.device, dtype=a.dtype,
                             max_model_len=a.max_model_len, max_num_seqs=a.max_num_seqs,
                             kv_cache_bytes=a.kv_cache_bytes, seed=a.seed)

    rc = run_child(a.connect, a.listen_host, a.device, make)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # skip vLLM's interpreter-exit teardown (nothing left to flush)


if __name__ == "__main__":
    sys.exit(main())
