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
- ``--tpuc.record=PATH``: rank 0 appends one JSON line per logged step (step, loss, grad
  norm, and on "tpu" the cumulative compile and fallback counts of ``torch.tpu.stats()`` and
  the number of graphs Dynamo compiled);
- ``--tpuc.layers=N``: keep only the model's first N blocks (the recipe's own blocks and
  config otherwise; the tests cut deep recipes, e.g. qwen3 debugmodel_moe, to fit a small
  machine's memory); for FLUX the first N double-stream and N single-stream blocks;
- ``--tpuc.runs=FILE``: FILE is a JSON list of argument lists, each a whole run (TorchTitan's
  flags and these); they run one after another in the same processes, so torch, tpuc and
  TorchTitan are imported once and the process group is kept between runs (TorchTitan's
  ``init_distributed`` skips an initialised one). Every run must name the same
  ``--tpuc.device``, ``--tpuc.swaps`` and ``--tpuc.cpu_rng``; ``--tpuc.dtype``,
  ``--tpuc.record`` and ``--tpuc.layers`` are per run.
"""
from __future__ import annotations

import contextlib
import gc
import json
import sys
from typing import Any, Iterator, Optional

_FLAGS = ("swaps", "device", "dtype", "record", "cpu_rng", "layers", "runs")
# what the current run (of --tpuc.runs) asks for; read by the hooks installed once per process
_run: dict[str, Any] = {"record": None, "dtype": "float32", "layers": None}
_hooks_installed = False


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


def _record_steps(path: Optional[str], device: str) -> None:
    """Wraps TorchTitan's MetricsProcessor.log (it receives every logged step's loss); writes
    to ``_run["record"]`` (``path`` sets it), nothing when that is None."""
    import torch
    from torchtitan.components.metrics import MetricsProcessor

    _run["record"] = path
    original = MetricsProcessor.log

    def log(self, step, global_avg_loss, global_max_loss, grad_norm, *args, **kwargs):
        row = {"step": int(step), "loss": float(global_avg_loss), "grad_norm": float(grad_norm)}
        if device == "tpu":
            s = torch.tpu.stats()
            row["compiles"] = int(s["compiles"])
            row["fallbacks"] = {k: int(v) for k, v in s["fallbacks"].items()}
            # where a slow first step goes: XLA compile time (cumulative) and programs the
            # disk cache supplied instead of compiling
            row["compile_seconds"] = float(s.get("compile_seconds", 0.0))
            row["disk_hits"] = int(s.get("disk_hits", 0))
            # graphs Dynamo compiled so far (--compile.enable): zero new ones in steady state
            from torch._dynamo.utils import counters

            row["dynamo_graphs"] = int(counters["stats"]["unique_graphs"])
        rank0 = not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0
        if rank0 and _run["record"] is not None:
            with open(_run["record"], "a") as f:
                f.write(json.dumps(row) + "\n")
        return original(self, step, global_avg_loss, global_max_loss, grad_norm, *args, **kwargs)

    MetricsProcessor.log = log


def _cut_layers(config: Any, n: Optional[int]) -> Any:
    """--tpuc.layers=N: the model's first N blocks (its config's ``layers`` list)."""
    if n is None:
        return config
    model = config.model_spec.model
    if isinstance(getattr(model, "double_blocks", None), list):  # FLUX: both block lists
        return _cut_flux_blocks(config, model, n)
    layers = getattr(model, "layers", None)
    if not isinstance(layers, list):
        raise SystemExit(f"tpuc: --tpuc.layers: {type(model).__name__} has no list of layers")
    if not 0 < n <= len(layers):
        raise SystemExit(f"tpuc: --tpuc.layers={n}: the model has {len(layers)} layers")
    model.layers = layers[:n]
    return config


def _cut_flux_blocks(config: Any, model: Any, n: int) -> Any:
    """FLUX (``FluxModel.Config``) has no ``layers``: its first N double-stream and first N
    single-stream blocks are kept (``depth``/``depth_single_blocks`` follow, for the FLOPs)."""
    most = min(len(model.double_blocks), len(model.single_blocks))
    if not 0 < n <= most:
        raise SystemExit(f"tpuc: --tpuc.layers={n}: the FLUX model has {len(model.double_blocks)} "
                         f"double and {len(model.single_blocks)} single blocks")
    model.double_blocks = model.double_blocks[:n]
    model.single_blocks = model.single_blocks[:n]
    model.depth, model.depth_single_blocks = n, n
    return config


def _install_config_hook(device: str) -> None:
    """Once per process: TorchTitan's parsed config gets the current run's dtype (CPU
    reference) and layer cut."""
    global _hooks_installed
    if _hooks_installed:
        return
    from torchtitan.config import ConfigManager

    from . import reference

    parse = ConfigManager.parse_args

    def parse_args(self, *a, **k):
        config = parse(self, *a, **k)
        if device == "cpu":
            config = reference.apply_dtype_to_config(config, _run["dtype"])
        return _cut_layers(config, _run["layers"])

    ConfigManager.parse_args = parse_args
    _hooks_installed = True


class _NoFinalSleep:
    """``torchtitan.trainer``'s ``time`` for a run that keeps the process group: every
    attribute is the ``time`` module's but ``sleep``, a no-op. TorchTitan 0.3.0's
    ``Trainer.train`` ends with rank 0 sleeping 2 s "for other ranks to complete" before the
    group is destroyed (the module's one ``time.sleep``); between the runs of --tpuc.runs the
    group is kept and the next run's initialisation synchronises the ranks, so the sleep
    only adds 2 s of wall time per run."""

    def __init__(self, module: Any):
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        return None


@contextlib.contextmanager
def _keep_process_group(keep: bool) -> Iterator[None]:
    """TorchTitan's main destroys the process group after its run; between the runs of
    --tpuc.runs it is kept (re-creating it on torchrun's store would reuse the first group's
    rendezvous keys), and TorchTitan's init_distributed then skips initialisation. A kept
    group's run also skips the trainer's final 2 s sleep (:class:`_NoFinalSleep`)."""
    import torch.distributed as dist
    import torchtitan.trainer as titan_trainer

    destroy, clock = dist.destroy_process_group, titan_trainer.time
    if keep:
        dist.destroy_process_group = lambda *a, **k: None
        titan_trainer.time = _NoFinalSleep(clock)
    try:
        yield
    finally:
        dist.destroy_process_group = destroy
        titan_trainer.time = clock


def _read_runs(argv: list[str]) -> list[list[str]]:
    flags, rest = _take_flags(argv)
    if "runs" not in flags:
        return [argv]
    if rest or len(flags) > 1:
        raise SystemExit("tpuc: --tpuc.runs=FILE takes every run's flags from FILE, nothing else")
    with open(flags["runs"]) as f:
        runs = json.load(f)
    if not (isinstance(runs, list) and runs and all(isinstance(r, list) for r in runs)):
        raise SystemExit(f"tpuc: {flags['runs']}: expected a JSON list of argument lists")
    return [[str(a) for a in r] for r in runs]


def main() -> None:
    import torch  # noqa: F401  (registers "tpu" before torchtitan reads the device type)

    import tpuc  # noqa: F401

    argv0 = sys.argv[0]
    runs = [_take_flags(r) for r in _read_runs(sys.argv[1:])]
    if any("runs" in f for f, _ in runs):
        raise SystemExit("tpuc: --tpuc.runs cannot be nested")
    for key in ("device", "swaps", "cpu_rng"):
        if len({f.get(key) for f, _ in runs}) > 1:
            raise SystemExit(f"tpuc: every run of --tpuc.runs must name the same --tpuc.{key}")
    flags, rest0 = runs[0]
    device = flags.get("device", "tpu")
    for f, _ in runs:
        if device == "tpu" and f.get("dtype", "float32") != "float32":
            raise SystemExit("tpuc: --tpuc.dtype=float64 is for the CPU reference (--tpuc.device=cpu)")
    if device == "cpu":
        from . import reference

        reference.use_cpu(flags.get("dtype", "float32"))
        from . import apply

        apply(flags.get("swaps"), device="cpu")
    elif device == "tpu":
        from . import apply

        apply(flags.get("swaps"))
    else:
        raise SystemExit(f"tpuc: --tpuc.device must be tpu or cpu, not {device!r}")
    _install_config_hook(device)
    _record_steps(None, device)

    def is_flux(rest: list[str]) -> bool:
        return "--module=flux" in rest or any(
            a == "flux" and rest[i - 1] == "--module" for i, a in enumerate(rest) if i)

    if any(is_flux(r) for _, r in runs):
        from . import flux

        flux.apply_load_shim()
        if device == "cpu":  # the reference: float64 / bf16 runs draw the float32 run's noise
            flux.enable_cpu_random_stream("cpu")
        elif flags.get("cpu_rng", "0") not in ("0", "false"):
            flux.enable_cpu_random_stream()
    from torchtitan.train import main as titan_main

    for i, (f, rest) in enumerate(runs):
        _run.update(record=f.get("record"), dtype=f.get("dtype", "float32"),
                    layers=int(f["layers"]) if "layers" in f else None)
        if device == "cpu":
            reference.set_dtype(_run["dtype"])
        sys.argv = [argv0] + rest
        with _keep_process_group(i < len(runs) - 1):
            titan_main()
        gc.collect()  # the finished Trainer's cycles (TorchTitan runs with gc disabled)


if __name__ == "__main__":
    main()
