"""Launcher: TorchTitan's own trainer on "tpu" (or, as the reference, on the CPU).

    torchrun --nproc_per_node=1 -m tpuc.integrations.torchtitan.train \\
        --module llama3 --config llama3_debugmodel [--tpuc.swaps=attention,loss] [TorchTitan flags]

Applies :func:`tpuc.integrations.torchtitan.apply` (device glue, the torch 2.13 shim, the
process-group backend, peak FLOPs, the block swaps), removes its own ``--tpuc.*`` flags
from ``sys.argv`` and calls ``torchtitan.train.main()`` unchanged. Its flags:

- ``--tpuc.swaps=LIST``: the block swaps (:mod:`.swaps`);
- ``--tpuc.device=cpu``: the same recipe and swaps on the CPU with gloo (:mod:`.reference`);
- ``--tpuc.dtype=float64``: with ``--tpuc.device=cpu``, a float64 reference run;
- ``--tpuc.cpu_rng=1``: on "tpu", random draws come from the CPU generator (:mod:`.flux`; for
  comparing a recipe that draws noise in its step with the CPU run);
- ``--tpuc.layers=N``: keep only the recipe's first N transformer blocks (the same config
  otherwise; for running a recipe's layouts within a small machine's memory, e.g. the tests'
  4-rank expert-parallel runs of qwen3 debugmodel_moe);
- ``--tpuc.record=PATH``: rank 0 appends one JSON line per logged step (step, loss, grad
  norm, and on "tpu" the cumulative compile and fallback counts of ``torch.tpu.stats()`` and
  the number of graphs Dynamo compiled).
"""
from __future__ import annotations

import json
import sys
from typing import Optional

_FLAGS = ("swaps", "device", "dtype", "record", "cpu_rng", "layers")


def _take_flags(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    got: dict[str, str] = {}
    rest, i = [], 0
    while i < len(argv):
        a = argv[i]
        name = a[len("--tpuc."):].split("=", 1)[0] if a.startswith("--tpuc.") else None
        if name is not None and name not in _FLAGS:
            raise SystemExit(f"tpuc: unknown flag {a!r}; known: " + ", ".join(f"--tpuc.{f}" for f in _FLAGS))
        if name is not None and "=" in a:
            got[name] = a.split("=", 1)[1]
        elif name is not None and i + 1 < len(argv):
            got[name] = argv[i + 1]
            i += 1
        else:
            rest.append(a)
        i += 1
    return got, rest


def _take_swaps(argv: list[str]) -> tuple[Optional[str], list[str]]:
    """(kept for callers of the earlier launcher) the --tpuc.swaps value and the rest."""
    flags, rest = _take_flags(argv)
    return flags.get("swaps"), rest


def _record_steps(path: str, device: str) -> None:
    """Wraps TorchTitan's MetricsProcessor.log (it receives every logged step's loss)."""
    import torch
    from torchtitan.components.metrics import MetricsProcessor

    original = MetricsProcessor.log

    def log(self, step, global_avg_loss, global_max_loss, grad_norm, *args, **kwargs):
        row = {"step": int(step), "loss": float(global_avg_loss), "grad_norm": float(grad_norm)}
        if device == "tpu":
            s = torch.tpu.stats()
            row["compiles"] = int(s["compiles"])
            row["fallbacks"] = {k: int(v) for k, v in s["fallbacks"].items()}
            # graphs Dynamo compiled so far (--compile.enable): zero new ones in steady state
            from torch._dynamo.utils import counters

            row["dynamo_graphs"] = int(counters["stats"]["unique_graphs"])
        if not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
            with open(path, "a") as f:
                f.write(json.dumps(row) + "\n")
        return original(self, step, global_avg_loss, global_max_loss, grad_norm, *args, **kwargs)

    MetricsProcessor.log = log


def _keep_layers(n: int) -> None:
    """Cuts the parsed config's model to its first ``n`` blocks (``--tpuc.layers``)."""
    from torchtitan.config import ConfigManager

    parse = ConfigManager.parse_args

    def parse_args(self, *a, **k):
        config = parse(self, *a, **k)
        model = config.model_spec.model
        if not 1 <= n <= len(model.layers):
            raise SystemExit(f"tpuc: --tpuc.layers={n}: the recipe has {len(model.layers)} blocks")
        model.layers = list(model.layers)[:n]
        return config

    ConfigManager.parse_args = parse_args


def main() -> None:
    import torch  # noqa: F401  (registers "tpu" before torchtitan reads the device type)

    import tpuc  # noqa: F401

    flags, rest = _take_flags(sys.argv[1:])
    sys.argv = [sys.argv[0]] + rest
    device = flags.get("device", "tpu")
    dtype = flags.get("dtype", "float32")
    if device == "cpu":
        from . import reference

        reference.use_cpu(dtype)
        from . import apply

        apply(flags.get("swaps"), device="cpu")
        from torchtitan.config import ConfigManager

        parse = ConfigManager.parse_args

        def parse_args(self, *a, **k):
            return reference.apply_dtype_to_config(parse(self, *a, **k), dtype)

        ConfigManager.parse_args = parse_args
    elif device == "tpu":
        if dtype != "float32":
            raise SystemExit("tpuc: --tpuc.dtype=float64 is for the CPU reference (--tpuc.device=cpu)")
        from . import apply

        apply(flags.get("swaps"))
    else:
        raise SystemExit(f"tpuc: --tpuc.device must be tpu or cpu, not {device!r}")
    if "layers" in flags:
        _keep_layers(int(flags["layers"]))
    if "record" in flags:
        _record_steps(flags["record"], device)
    if any(a == "flux" and rest[i - 1] == "--module" for i, a in enumerate(rest) if i) or "--module=flux" in rest:
        from . import flux

        flux.apply_load_shim()
        if flags.get("cpu_rng", "0") not in ("0", "false"):
            flux.enable_cpu_random_stream()
    from torchtitan.train import main as titan_main

    titan_main()


if __name__ == "__main__":
    main()
