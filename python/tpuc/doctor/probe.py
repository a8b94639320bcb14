"""What ``tpuc doctor`` runs inside the user's process (loaded by the
``sitecustomize`` that the doctor puts first on the child's ``PYTHONPATH``).

It collects, without changing what the program computes:

- every CPU fallback and every recompile the C core reports, each with the
  user's own stack at that moment (the innermost and outermost frames that
  are not torch, tpuc, the standard library or site-packages);
- time per kind (compile, launch, transfers, fallbacks) and device time per
  program, from the core's events (csrc/torch/observe.cpp);
- dynamo's graph breaks and recompiles under ``torch.compile`` (its own
  counters and its ``graph_breaks`` / ``recompiles`` log records);
- the shapes and dtypes of matmuls and attention calls (for hardware advice),
  peak device memory, and at exit the live tpu tensors by owner (parameters,
  gradients, optimizer state, other);

and writes them as JSON to ``$TPUC_DOCTOR_OUT/raw-<pid>.json`` at exit.
"""
from __future__ import annotations

import atexit
import collections
import gc
import json
import logging
import os
import sys
import sysconfig
import threading
import time
import traceback
import warnings
from typing import Any

_SKIP_DIRS: tuple[str, ...] = ()
_MAX_EVENTS = 2000  # per kind: each event keeps a stack


def _skip_dirs() -> tuple[str, ...]:
    import torch

    import tpuc

    dirs = {os.path.dirname(torch.__file__), os.path.dirname(tpuc.__file__)}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            dirs.add(p)
    return tuple(sorted((os.path.realpath(d) + os.sep for d in dirs), key=len, reverse=True))


def _is_user(filename: str) -> bool:
    if filename.startswith("<"):
        return False
    real = os.path.realpath(filename)
    return not any(real.startswith(d) for d in _SKIP_DIRS)


def user_frames(limit: int = 64) -> list[dict[str, Any]]:
    """The user's frames of the current stack, outermost first."""
    frames = traceback.extract_stack(limit=limit)[:-1]
    return [
        {"file": f.filename, "line": f.lineno, "function": f.name, "code": (f.line or "").strip()}
        for f in frames
        if _is_user(f.filename)
    ]


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        self.counts: collections.Counter[str] = collections.Counter()
        self.shapes: list[dict[str, Any]] = []
        self.shape_keys: set[tuple] = set()
        self.dynamo_logs: list[dict[str, Any]] = []
        self.t0 = time.perf_counter()
        self.pid = os.getpid()


_state: _State | None = None


def _on_core_event(kind: str, op: str, detail: str) -> None:
    st = _state
    if st is None:
        return
    frames = user_frames()
    ev = {
        "op": op,
        "detail": detail,
        "thread": threading.current_thread().name,
        "frames": frames[-8:],
    }
    with st.lock:
        st.counts[kind] += 1
        if len(st.events[kind]) < _MAX_EVENTS:
            st.events[kind].append(ev)


def _note_shape(kind: str, shapes: list[list[int]], dtypes: list[str]) -> None:
    st = _state
    if st is None:
        return
    frames = user_frames()
    site = frames[-1] if frames else None
    key = (kind, tuple(map(tuple, shapes)), tuple(dtypes), site["file"] if site else "",
           site["line"] if site else 0)
    with st.lock:
        if key in st.shape_keys or len(st.shapes) > 5000:
            return
        st.shape_keys.add(key)
        st.shapes.append({"kind": kind, "shapes": shapes, "dtypes": dtypes, "site": site})


def _wrap_shape_probes() -> None:
    """Records the shapes of the calls whose shapes hardware advice reads
    (linear/matmul operands, attention q/k/v) on tpu tensors."""
    import torch
    import torch.nn.functional as F

    def tpu(ts: tuple) -> bool:
        return any(isinstance(t, torch.Tensor) and t.device.type == "tpu" for t in ts)

    def wrap(mod: Any, name: str, kind: str, nargs: int) -> None:
        orig = getattr(mod, name)

        def probe(*args: Any, **kwargs: Any) -> Any:
            ts = args[:nargs]
            if not torch.compiler.is_compiling() and tpu(ts):
                ok = [t for t in ts if isinstance(t, torch.Tensor)]
                _note_shape(kind, [list(t.shape) for t in ok], [str(t.dtype) for t in ok])
            return orig(*args, **kwargs)

        probe.__wrapped__ = orig  # type: ignore[attr-defined]
        probe.__name__ = getattr(orig, "__name__", name)
        setattr(mod, name, probe)

    wrap(F, "linear", "linear", 2)
    wrap(F, "scaled_dot_product_attention", "attention", 3)
    wrap(torch, "matmul", "matmul", 2)


class _DynamoLog(logging.Handler):
    """Keeps dynamo's graph-break and recompile records (with the user's
    line, which dynamo puts in the message)."""

    def emit(self, record: logging.LogRecord) -> None:
        st = _state
        if st is None:
            return
        try:
            msg = record.getMessage()
        except Exception:  # a record that cannot format: not ours to fix
            return
        with st.lock:
            if len(st.dynamo_logs) < _MAX_EVENTS:
                st.dynamo_logs.append({"logger": record.name, "message": msg[:4000]})


def _watch_dynamo() -> None:
    # Dynamo's modules register the artifact loggers watched below as they are imported;
    # `import torch` no longer imports Dynamo (tpuc registers its backend by entry point)
    import torch._dynamo  # noqa: F401
    import torch._logging
    from torch._logging._internal import log_registry

    torch._logging.set_logs(graph_breaks=True, recompiles=True)
    handler = _DynamoLog()
    # dynamo logs each artifact from the module that emits it
    # ("torch._dynamo.symbolic_convert.__graph_breaks"): keep those records
    # here, not on the user's stderr (the report has them)
    for name in sorted(log_registry.artifact_log_qnames):
        if name.endswith(("__graph_breaks", "__recompiles")):
            lg = logging.getLogger(name)
            lg.addHandler(handler)
            lg.propagate = False


def _is_tensor_or_optimizer(o: object) -> bool:
    import torch

    try:  # a dead weak proxy raises on isinstance
        return isinstance(o, (torch.Tensor, torch.optim.Optimizer))
    except Exception:
        return False


def _live_tensors() -> dict[str, int]:
    """Bytes of live tpu tensors' storages by owner (each storage once)."""
    import torch

    seen: set[int] = set()
    out = {"parameters": 0, "gradients": 0, "optimizer_state": 0, "other": 0}
    owner: dict[int, str] = {}
    with warnings.catch_warnings():  # isinstance on deprecated module proxies warns
        warnings.simplefilter("ignore")
        objs = [o for o in gc.get_objects() if _is_tensor_or_optimizer(o)]
    for o in objs:
        if isinstance(o, torch.optim.Optimizer):
            for s in o.state.values():
                for v in s.values() if isinstance(s, dict) else ():
                    if isinstance(v, torch.Tensor):
                        owner.setdefault(id(v), "optimizer_state")
    for o in objs:
        if isinstance(o, torch.nn.Parameter):
            owner[id(o)] = "parameters"
            if o.grad is not None:
                owner.setdefault(id(o.grad), "gradients")
    for o in objs:
        if not isinstance(o, torch.Tensor):
            continue
        try:
            if o.device.type != "tpu":
                continue
            st = o.untyped_storage()
            key = st._cdata
        except Exception:  # a tensor without storage (meta/fake): not device memory
            continue
        if key in seen:
            continue
        seen.add(key)
        out[owner.get(id(o), "other")] += st.nbytes()
    return out


def _dynamo_counters() -> dict[str, Any]:
    mod = sys.modules.get("torch._dynamo.utils")
    if mod is None:
        return {}
    c = mod.counters
    return {
        "graph_break": dict(c.get("graph_break", {})),
        "stats": dict(c.get("stats", {})),
        "recompiles": dict(c.get("recompiles", {})),
    }


def _finish(out_dir: str) -> None:
    global _state
    st = _state
    if st is None:
        return
    import torch

    from tpuc import _C

    wall = time.perf_counter() - st.t0
    raw: dict[str, Any] = {"pid": st.pid, "argv": sys.argv, "wall_seconds": wall}
    try:
        if torch.tpu.is_initialized():
            torch.tpu.synchronize()
        raw["observer"] = dict(_C._observe_stop())
    except Exception as e:  # the program broke the device: report what we have
        raw["observer"] = {}
        raw["observer_error"] = str(e)
    _state = None
    raw["events"] = dict(st.events)
    raw["counts"] = dict(st.counts)
    raw["shapes"] = st.shapes
    raw["dynamo_logs"] = st.dynamo_logs
    raw["dynamo"] = _dynamo_counters()
    try:
        stats = torch.tpu.stats()
        raw["stats"] = {k: v for k, v in stats.items()}
        props = torch.tpu.get_device_properties(0) if torch.tpu.is_available() else None
        raw["platform"] = props.platform if props else ""
        raw["device_name"] = props.name if props else ""
        raw["eager_mode"] = torch.tpu.get_eager_mode()
        raw["memory"] = {
            "peak_bytes": torch.tpu.max_memory_allocated(0) if torch.tpu.is_available() else 0}
    except Exception as e:  # never let the doctor break the program's exit
        raw["stats_error"] = str(e)
    try:
        raw.setdefault("memory", {})["live_at_exit"] = _live_tensors()
    except Exception as e:
        raw["memory_error"] = str(e)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"raw-{st.pid}.json")
    with open(path, "w") as f:
        json.dump(raw, f, default=str)


def install(out_dir: str) -> None:
    """Starts collecting in this process; writes the raw JSON at exit."""
    global _state, _SKIP_DIRS
    if _state is not None:
        return
    import torch  # noqa: F401  (registers "tpu")

    from tpuc import _C

    _SKIP_DIRS = _skip_dirs()
    _state = _State()
    _C._observe_start(_on_core_event)
    _wrap_shape_probes()
    try:
        _watch_dynamo()
    except Exception:  # dynamo unavailable: eager diagnostics still work
        pass
    atexit.register(_finish, out_dir)
