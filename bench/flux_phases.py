"""Where the FluxTrainer's step goes, phase by phase: tpuc's launcher with timers around
TorchTitan's own FLUX calls.

    TPUC_FLUX_PHASES=PATH torchrun --nproc_per_node=1 ... -m bench.flux_phases \\
        <tpuc.integrations.torchtitan.train args for --module flux>

Runs the stock FluxTrainer unchanged and wraps, per step: ``optimizers.zero_grad``, FLUX's
``preprocess_data`` (T5 and CLIP stand-ins + the autoencoder's encode), the transformer's
forward (module hooks), ``forward_backward_step`` as a whole (so the backward is that minus
preprocess and forward), ``clip_grad_norm_``, ``optimizers.step`` and ``train_step``. Each
boundary synchronizes the device (the phases no longer overlap, so the total is an upper
bound of the unprofiled step) and reads ``torch.tpu.stats()``: rank 0 appends one JSON line a
step, ``{phase: [seconds, executions, programs compiled or loaded from disk, CPU
fallbacks]}``. On the CPU reference (``--tpuc.device=cpu``) the counts are 0.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

import torch

OUT = os.environ.get("TPUC_FLUX_PHASES", "flux_phases.jsonl")
_rec: dict[str, list[float]] = {}
_marks: dict[str, tuple[float, int, int, int]] = {}


def _snap() -> tuple[float, int, int, int]:
    """(time, executions, compiles + disk loads, fallbacks) after the device is idle."""
    try:
        torch.tpu.synchronize()  # type: ignore[attr-defined]
        s = torch.tpu.stats()  # type: ignore[attr-defined]
        return (time.perf_counter(), s["executions"], s["compiles"] + s["disk_hits"],
                sum(s["fallbacks"].values()))
    except (AttributeError, RuntimeError):  # the CPU reference: no "tpu" in use
        return time.perf_counter(), 0, 0, 0


def _add(name: str, a: tuple[float, int, int, int], b: tuple[float, int, int, int]) -> None:
    r = _rec.setdefault(name, [0.0, 0, 0, 0])
    for i in range(4):
        r[i] += b[i] - a[i]


def _wrap(obj: Any, attr: str, name: str) -> None:
    f: Callable[..., Any] = getattr(obj, attr)

    def timed(*a: Any, **k: Any) -> Any:
        s0 = _snap()
        out = f(*a, **k)
        _add(name, s0, _snap())
        return out

    setattr(obj, attr, timed)


def main() -> None:
    from tpuc.integrations.torchtitan.train import main as launch
    import torchtitan.models.flux.trainer as ft
    from torchtitan.distributed import utils as du

    _wrap(ft, "preprocess_data", "preprocess (T5 + CLIP + autoencoder)")
    _wrap(du, "clip_grad_norm_", "clip_grad_norm_")
    fbs, ts = ft.FluxTrainer.forward_backward_step, ft.FluxTrainer.train_step

    def forward_backward_step(self: Any, **k: Any) -> Any:
        m = self.model_parts[0]
        if not getattr(m, "_tpuc_phases", False):
            m._tpuc_phases = True
            m.register_forward_pre_hook(lambda *_: _marks.__setitem__("fwd", _snap()))
            m.register_forward_hook(lambda *_: _add("transformer forward", _marks["fwd"], _snap()))
            _wrap(self.optimizers, "step", "optimizer step")
            _wrap(self.optimizers, "zero_grad", "zero_grad")
        s0 = _snap()
        out = fbs(self, **k)
        _add("forward_backward_step (all)", s0, _snap())
        return out

    def train_step(self: Any, *a: Any, **k: Any) -> Any:
        _rec.clear()
        s0 = _snap()
        out = ts(self, *a, **k)
        _add("train_step (all)", s0, _snap())
        if int(os.environ.get("RANK", "0")) == 0:
            with open(OUT, "a") as f:
                f.write(json.dumps({"step": self.step, **_rec}) + "\n")
        return out

    ft.FluxTrainer.forward_backward_step = forward_backward_step  # type: ignore[method-assign]
    ft.FluxTrainer.train_step = train_step  # type: ignore[method-assign]
    launch()


if __name__ == "__main__":
    main()
