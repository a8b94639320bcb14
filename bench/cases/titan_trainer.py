"""TorchTitan 0.3.0's stock Trainer under torchrun (tpuc's launcher, as tests/torchtitan runs
it): tokens/s, MFU and peak memory per recipe on "tpu" (strict, fused, compiled) against the
same recipe on the CPU with gloo (``--tpuc.device=cpu``), at 1, 2 and 4 processes (FSDP).

The numbers are TorchTitan's own per-step metrics (its ``MetricsProcessor``: tokens/s per
device, FLOPs per token, memory peaks per logging window), recorded by bench/titan_launch.py;
medians over the steps after the warm-up. MFU = FLOPs per token x tokens/s per device over
the measured matmul peak of the contender's device: on "tpu" the peak tpuc gives TorchTitan
(``peak.measured_peak``, a 1024^3 f32 matmul, so TorchTitan's own mfu(%) log is this figure),
on the CPU the same measurement with torch's CPU matmul in the rank (TorchTitan itself would
divide by A100's 312 TFLOPS there). Memory: "tpu"'s device peak (TorchTitan's
max_active, from ``torch.tpu.memory_stats``) and every contender's peak host RSS of rank 0
(on the XLA CPU plugin device memory is host memory, so RSS is the comparable figure).

Each run is a separate torchrun; within one layout the contenders run back to back, their
order rotated from layout to layout (a trainer run cannot be interleaved step by step with
another). Quick (CI): llama3 at 1 process, CPU and "tpu" strict, 4 steps.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tpuc.integrations.torchtitan.procs import free_port as _port
from tpuc.integrations.torchtitan.procs import kill_tree as _kill_tree

from .common import compiled_available, fused_available, tpu_available

COMMAND = "python -m bench.run --cases titan_trainer --no-report"
ROOT = Path(__file__).resolve().parents[2]

RECIPES = {
    "llama3 debugmodel": ["--module", "llama3", "--config", "llama3_debugmodel"],
    "qwen3 debugmodel_moe": ["--module", "qwen3", "--config", "qwen3_moe_debug"],
}
EP_FLAGS = ["--parallelism.spmd_backend", "partial_dtensor", "--training.disable_cuda_graphs"]


@dataclass(frozen=True)
class Layout:
    """One parallel layout of a recipe: process count, its TorchTitan flags, a label."""
    procs: int
    flags: tuple[str, ...]
    label: str = ""


def _fsdp(n: int) -> Layout:
    flags = ("--parallelism.data_parallel_shard_degree", str(n))
    if n > 1:  # TorchTitan 0.3.0's default spmd_types fails at dp > 1
        flags += ("--parallelism.spmd_backend", "partial_dtensor")
    return Layout(n, flags)


# Per recipe: its extra flags, tokens per rank (seq, batch), steps / warm-up, layouts and the
# contenders it skips (with the reason). The MoE recipe is cut to its first 2 of 8 blocks
# (--tpuc.layers=2, as in tests/torchtitan/test_trainer_moe.py: 64 experts, top-8) at 1 x 16
# tokens per rank: under the moe swap's fixed-capacity EP dispatcher every rank's experts run
# over ep x tokens x top_k rows, and its steps took ~30 s each on the loaded 2-core machine.
PLANS: dict[str, dict] = {
    "llama3 debugmodel": dict(extra=[], seq=64, batch=2, steps=(8, 3),
                              layouts=[_fsdp(1), _fsdp(2), _fsdp(4)], skip={}),
    "qwen3 debugmodel_moe": dict(
        extra=["--tpuc.layers=2"], seq=16, batch=1, steps=(5, 2),
        layouts=[_fsdp(1),
                 Layout(4, ("--parallelism.data_parallel_shard_degree", "4",
                            "--parallelism.expert_parallel_degree", "4", *EP_FLAGS),
                        "EP=4 x FSDP=4")],
        skip={"tpu compiled": "not run: the compiled MoE step is not tested through the Trainer",
              "tpu fused": "not run: fused mode is not tested with the MoE recipe through the Trainer"}),
}
TIMEOUT_S = int(os.environ.get("TPUC_TITAN_BENCH_TIMEOUT", "900"))


def _launch(work: Path, name: str, nproc: int, args: list[str], env_extra: dict) -> list[dict]:
    rec = work / f"{name}.jsonl"
    log = work / f"{name}.log"
    rec.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
           "--master_addr=127.0.0.1", f"--master_port={_port()}", "-m", "bench.titan_launch",
           *args, "--dump_folder", str(work / f"{name}-dump")]
    env = dict(os.environ, OMP_NUM_THREADS="1", TPUC_BENCH_METRICS=str(rec),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               **env_extra)
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, cwd=work, stdout=f, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _kill_tree(p.pid)
            p.wait()
            raise RuntimeError(f"timed out after {TIMEOUT_S} s")
        finally:
            if p.poll() is None:
                _kill_tree(p.pid)
                p.wait()
    if rc != 0:
        tail = [ln for ln in log.read_text().splitlines() if "Error" in ln or "error" in ln]
        raise RuntimeError(f"rc {rc}: {(tail[-1] if tail else '')[:300]}")
    return [json.loads(line) for line in rec.read_text().splitlines()]


def _summarise(rows: list[dict], warmup: int, device: str, nproc: int) -> dict:
    steady = [r for r in rows if r["step"] > warmup]
    tps = [r["metrics"]["throughput(tps)"] for r in steady]
    med = statistics.median(tps)
    last = rows[-1]
    peak = last["cpu_matmul_peak"] if device == "cpu" else last["titan_peak_flops"]
    out = {"tps_per_rank": med, "tps_per_rank_min": min(tps), "tps_per_rank_max": max(tps),
           "tokens_per_s": med * nproc, "steps_timed": len(tps),
           "flops_per_token": last["flops_per_token"], "peak_gflops": (peak or 0) / 1e9,
           "mfu": last["flops_per_token"] * med / peak if peak else None,
           "max_rss_mib": last["max_rss_mib"]}
    if device == "tpu":
        out["device_peak_mib"] = max(r["metrics"]["memory/max_active(GiB)"] for r in steady) * 1024
        if "compiles" in last and steady:
            first = next(r for r in rows if r["step"] == warmup) if warmup else rows[0]
            out["compiles_after_warmup"] = last["compiles"] - first["compiles"]
    return out


def finish(out: dict) -> dict:
    """Per layout: every "tpu" contender's MFU against the strict run's measured peak, and
    each contender's tokens/s over the CPU run's."""
    for row in out["rows"]:
        # one denominator for every "tpu" contender of a layout: the peak measured in the strict
        # run (tpuc measures it in strict mode; before that fix a fused run's was 4x too high)
        strict = next((r for r in out["rows"] if r["recipe"] == row["recipe"]
                       and r["procs"] == row["procs"] and r["contender"] == "tpu strict"
                       and r.get("peak_gflops")), None)
        if row["contender"].startswith("tpu") and strict and "tps_per_rank" in row:
            row["own_peak_gflops"] = row["peak_gflops"]
            row["peak_gflops"] = strict["peak_gflops"]
            row["mfu"] = row["flops_per_token"] * row["tps_per_rank"] / (strict["peak_gflops"] * 1e9)
        cpu = next((r for r in out["rows"] if r["recipe"] == row["recipe"]
                    and r["procs"] == row["procs"] and r["contender"] == "cpu (gloo)"
                    and "tokens_per_s" in r), None)
        if cpu and "tokens_per_s" in row:
            row["vs_cpu"] = row["tokens_per_s"] / cpu["tokens_per_s"]
    return out


def run(quick: bool) -> dict:
    out: dict = {"title": "TorchTitan's stock Trainer: \"tpu\" against the CPU (gloo), 1 / 2 / 4 "
                          "processes", "command": COMMAND, "rows": []}
    try:
        import torchtitan  # noqa: F401
    except ImportError:
        out["error"] = "torchtitan not installed (make titan-setup)"
        return out
    if not tpu_available():
        out["error"] = "tpu unavailable"
        return out
    from tpuc.integrations.torchtitan.assets import ensure_assets

    recipes = ["llama3 debugmodel"] if quick else list(RECIPES)
    contenders: list[tuple[str, str, dict, list[str]]] = [("cpu (gloo)", "cpu", {}, []),
                                                          ("tpu strict", "tpu", {}, [])]
    if not quick and fused_available():
        contenders.append(("tpu fused", "tpu", {"TPUC_EAGER": "fused"}, []))
    if not quick and compiled_available():
        contenders.append(("tpu compiled", "tpu", {},
                           ["--compile.enable", "--compile.backend", "tpu"]))
    only = os.environ.get("TPUC_TITAN_BENCH_RECIPES")  # e.g. "llama3 debugmodel" (a subset)
    if only:
        recipes = [r for r in recipes if r in only.split(",")]
    out["sizes"] = {}
    with tempfile.TemporaryDirectory(prefix="tpuc-titan-bench-") as tmp:
        work = Path(tmp)
        assets = ensure_assets(str(work / "assets"))
        rotation = 0
        for recipe in recipes:
            plan = PLANS[recipe]
            steps, warmup = (4, 2) if quick else plan["steps"]
            seq, batch = plan["seq"], plan["batch"]
            layouts = plan["layouts"][:1] if quick else plan["layouts"]
            out["sizes"][recipe] = {"steps": steps, "warmup": warmup, "seq_len": seq,
                                    "local_batch": batch, "extra": plan["extra"]}
            for layout in layouts:
                nproc = layout.procs
                common = [*RECIPES[recipe], *plan["extra"], "--hf_assets_path", assets["tokenizer"],
                          "--dataloader.dataset_path", assets["c4_test"],
                          "--training.steps", str(steps), "--training.seq_len", str(seq),
                          "--training.local_batch_size", str(batch),
                          "--training.mixed_precision_param", "float32",
                          "--validator.no-enable", "--metrics.log_freq", "1", *layout.flags]
                order = contenders[rotation % len(contenders):] + contenders[:rotation % len(contenders)]
                rotation += 1
                for label, device, env_extra, extra in order:
                    tag = layout.label.replace(" ", "").replace("=", "") or "fsdp"
                    name = f"{recipe.split()[0]}-{nproc}p-{tag}-{label.split()[-1].strip('()')}"
                    row: dict = {"recipe": recipe, "procs": nproc, "contender": label}
                    if layout.label:
                        row["layout"] = layout.label
                    t0 = time.perf_counter()
                    if label in plan["skip"]:
                        row["error"] = plan["skip"][label]
                        out["rows"].append(row)
                        continue
                    try:
                        rows = _launch(work, name, nproc, [*common, f"--tpuc.device={device}", *extra],
                                       env_extra)
                        row.update(_summarise(rows, warmup, device, nproc))
                    except Exception as e:  # one failed contender must not lose the sweep
                        row["error"] = f"{type(e).__name__}: {e}"
                    row["wall_s"] = time.perf_counter() - t0
                    print(f"      {name}: " + json.dumps({k: v for k, v in row.items()
                                                         if k in ("tokens_per_s", "mfu", "error",
                                                                  "wall_s")}), flush=True)
                    out["rows"].append(row)
                    progress = os.environ.get("TPUC_TITAN_BENCH_PROGRESS")  # rows so far (long sweeps)
                    if progress:
                        with open(progress, "w") as f:
                            json.dump(out, f, indent=2)
    finish(out)
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    first = out["sizes"].get("llama3 debugmodel") or next(iter(out["sizes"].values()), {})
    sizes = "; ".join(f"{r}: {z['steps']} steps ({z['warmup']} warm-up) of {z['local_batch']} x "
                      f"{z['seq_len']} tokens per rank" + (f", {' '.join(z['extra'])}" if z["extra"] else "")
                      for r, z in out["sizes"].items())
    out.update({"steps": first.get("steps"), "warmup": first.get("warmup"),
                "seq_len": first.get("seq_len"), "local_batch": first.get("local_batch"),
                "loadavg_at_end": load,
                "notes": f"{sizes}. Weak scaling (FSDP, or EP x FSDP where named, over the ranks), "
                         "float32 parameters, medians over the steps after the warm-up, TorchTitan's "
                         "own per-step metrics; OMP_NUM_THREADS=1 per rank; every rank shares this "
                         "machine's cores. tokens/s is the total over the ranks; vs CPU = tokens/s "
                         "over the CPU run's in the same layout (> 1: tpu faster). The MoE recipe "
                         "(2 of its 8 blocks) is not in the quick mode: its launches take minutes "
                         "each (first-step compiles, ~30 s steps on a loaded 2-core machine)."})
    return out
