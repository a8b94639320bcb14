"""``torch.tpu.stats()`` of SGLang's scheduler process, readable from the engine's process.

SGLang runs the model in a scheduler subprocess; its ``Engine.collective_rpc(method, **kw)`` calls
``Scheduler.<method>(**kw)`` there and returns only success. ``install()`` (run by the platform's
``post_load_model`` in the scheduler process) adds ``Scheduler.tpuc_write_stats(path)``, which writes that
process's ``torch.tpu.stats()`` as JSON; ``read(engine, path)`` calls it and reads the file.
A shim for SGLang 0.5.23, whose RPC has no return value.
"""
from __future__ import annotations

import json
import os
from typing import Any


def _write_stats(self: Any, path: str) -> None:
    import torch

    s = torch.tpu.stats()
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(s, f, default=str)
    os.replace(tmp, path)


def install() -> None:
    from sglang.srt.managers.scheduler import Scheduler

    if not hasattr(Scheduler, "tpuc_write_stats"):
        Scheduler.tpuc_write_stats = _write_stats


def read(engine: Any, path: str) -> dict:
    """The scheduler's ``torch.tpu.stats()`` (engine: an ``sglang.Engine`` on "tpu")."""
    engine.collective_rpc("tpuc_write_stats", path=str(path))
    with open(path) as f:
        return json.load(f)
