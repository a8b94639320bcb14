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

Recipes: llama3 debugmodel, qwen3 debugmodel (dense), qwen3 debugmodel_moe and FLUX flux-debug,
each at the sizes in PLANS. A full run restricted to some recipes, layouts or contenders
(run()'s environment variables) merges into the results file: its rows replace the ones it
measured again (keeping their figures under ``replaces``), the others stay (merge_previous).
TPUC_TITAN_BENCH_MAX_RSS_MIB kills a launch whose processes together hold more memory (the sum of their proportional set sizes).
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
from tpuc.integrations.torchtitan.procs import descendants as _descendants
from tpuc.integrations.torchtitan.procs import kill_tree as _kill_tree

from .common import compiled_available, fused_available, tpu_available

COMMAND = "python -m bench.run --cases titan_trainer --no-report"
ROOT = Path(__file__).resolve().parents[2]

RECIPES = {
    "llama3 debugmodel": ["--module", "llama3", "--config", "llama3_debugmodel"],
    "qwen3 debugmodel": ["--module", "qwen3", "--config", "qwen3_debugmodel"],
    "qwen3 debugmodel_moe": ["--module", "qwen3", "--config", "qwen3_moe_debug"],
    "flux flux-debug": ["--module", "flux", "--config", "flux_debugmodel"],
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
    # Every MoE contender runs without activation checkpointing (as the compiled tests do:
    # with AC, TorchTitan halves the expert-bias token count under torch.compile, so compiled
    # would train something else than eager) and from --debug.seed 0 (at 4 ranks TorchTitan's
    # rank 0 otherwise draws a fresh seed per run and the contenders' losses say nothing).
    "qwen3 debugmodel_moe": dict(
        extra=["--tpuc.layers=2", "--debug.seed", "0", "activation-checkpoint:none"],
        seq=16, batch=1, steps=(5, 2),
        layouts=[_fsdp(1),
                 Layout(4, ("--parallelism.data_parallel_shard_degree", "4",
                            "--parallelism.expert_parallel_degree", "4", *EP_FLAGS),
                        "EP=4 x FSDP=4")],
        skip={}),
    # qwen3 dense at the tests' CI shapes (trainer_runs.CI_SIZES): its first 2 of 8 blocks,
    # 1 x 16 tokens per rank (same attention, norms, embedding and output as the MoE flavour).
    # A fixed seed: without one TorchTitan's rank 0 draws a fresh seed at more than one rank,
    # and the contenders of a layout would train other initial weights (their losses then say
    # nothing about each other)
    "qwen3 debugmodel": dict(extra=["--tpuc.layers=2", "--debug.seed", "0"], seq=16, batch=1,
                             steps=(5, 2),
                             layouts=[_fsdp(1), _fsdp(2), _fsdp(4)], skip={}),
    # FLUX at the tests' shapes (test_trainer_flux.py: 32 px images, 8 T5 tokens, batch 2; the
    # FluxTrainer sets seq_len to 4 image + 8 text tokens = 12 a sample), cut to its first
    # double- and single-stream block as the FSDP=2 tests are (--tpuc.layers=1: 138M of its
    # 258M parameters; a "tpu" rank's resident set was ~4.2 GiB there). Fused and compiled FLUX
    # are tested through the FluxTrainer at one process only.
    "flux flux-debug": dict(
        extra=["--tpuc.layers=1"], seq=None, batch=2, steps=(5, 2),
        layouts=[_fsdp(1), _fsdp(2)],
        skip={"tpu compiled @ 2p":
              "not run: FLUX with --compile.enable is tested through the FluxTrainer at one process only",
              "tpu fused @ 2p": "not run: fused mode is tested with FLUX through the FluxTrainer at one process only"}),
}


def _recipe_args(recipe: str, plan: dict, steps: int, work: Path) -> list[str]:
    """The launcher flags every run of ``recipe`` shares (as tests/torchtitan launches it)."""
    from tpuc.integrations.torchtitan.assets import ensure_assets, ensure_flux_assets

    tail = ["--training.steps", str(steps), "--training.local_batch_size", str(plan["batch"]),
            "--training.mixed_precision_param", "float32", "--validator.no-enable",
            "--metrics.log_freq", "1"]
    if recipe.startswith("flux"):  # FluxRunner's flags (tests/torchtitan/test_trainer_flux.py)
        a = ensure_flux_assets(str(work / "assets"))
        return [*RECIPES[recipe], *plan["extra"], "--hf_assets_path", a["tokenizer"],
                "--tokenizer.test_mode", "--tokenizer.t5_tokenizer_path", a["tokenizer"],
                "--tokenizer.clip_tokenizer_path", a["tokenizer"],
                "--tokenizer.max_t5_encoding_len", "8", "--encoder.t5_encoder", a["t5_encoder"],
                "--encoder.clip_encoder", a["clip_encoder"],
                "--encoder.autoencoder_path", a["autoencoder"],
                "--dataloader.dataset_path", a["cc12m_test"], "--dataloader.img_size", "32",
                "--debug.seed", "0", *tail]
    assets = ensure_assets(str(work / "assets"))
    return [*RECIPES[recipe], *plan["extra"], "--hf_assets_path", assets["tokenizer"],
            "--dataloader.dataset_path", assets["c4_test"], "--training.seq_len", str(plan["seq"]),
            *tail]
TIMEOUT_S = int(os.environ.get("TPUC_TITAN_BENCH_TIMEOUT", "900"))
# the most MiB a launch's processes may hold resident together (0: no limit), sampled each second
MAX_RSS_MIB = int(os.environ.get("TPUC_TITAN_BENCH_MAX_RSS_MIB", "0"))


def _tree_rss_mib(pid: int) -> float:
    """Memory of ``pid`` and its descendants (torchrun, its agent, every rank), MiB: the sum of
    their proportional set sizes (Pss: a page shared by k of them counts 1/k in each, so the
    libraries every rank maps, ~0.2 GiB each, count once), the resident set where smaps_rollup
    cannot be read."""
    total_kib = 0.0
    for q in [pid, *_descendants(pid)]:
        try:
            with open(f"/proc/{q}/smaps_rollup") as f:
                total_kib += next(int(ln.split()[1]) for ln in f if ln.startswith("Pss:"))
            continue
        except (OSError, ValueError, StopIteration):
            pass
        try:
            with open(f"/proc/{q}/statm") as f:
                total_kib += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024
        except (OSError, ValueError, IndexError):
            continue
    return total_kib / 1024


def _launch(work: Path, name: str, nproc: int, args: list[str], env_extra: dict) -> list[dict]:
    """One torchrun of the launcher; rank 0's recorded steps. Killed past TIMEOUT_S, or when
    the launch's processes together hold more than MAX_RSS_MIB resident (a shared machine)."""
    rec = work / f"{name}.jsonl"
    log = work / f"{name}.log"
    rec.unlink(missing_ok=True)
    # a TorchTitan (tyro) subcommand such as activation-checkpoint:none goes after every flag
    # (tyro reads the flags after it as the subcommand's own)
    subcommands = [a for a in args if a.startswith("activation-checkpoint:")]
    flags = [a for a in args if a not in subcommands]
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
           "--master_addr=127.0.0.1", f"--master_port={_port()}", "-m", "bench.titan_launch",
           *flags, "--dump_folder", str(work / f"{name}-dump"), *subcommands]
    env = dict(os.environ, OMP_NUM_THREADS="1", TPUC_BENCH_METRICS=str(rec),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               **env_extra)
    peak_rss = 0.0
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, cwd=work, stdout=f, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        try:
            t_end = time.monotonic() + TIMEOUT_S
            while p.poll() is None:
                if time.monotonic() > t_end:
                    raise RuntimeError(f"timed out after {TIMEOUT_S} s")
                if MAX_RSS_MIB:
                    peak_rss = max(peak_rss, _tree_rss_mib(p.pid))
                    if peak_rss > MAX_RSS_MIB:
                        raise RuntimeError(f"killed for memory: the launch's processes held "
                                           f"{peak_rss:.0f} MiB resident (limit {MAX_RSS_MIB} MiB)")
                time.sleep(1.0)
            rc = p.returncode
        finally:
            if p.poll() is None:
                _kill_tree(p.pid)
                p.wait()
    if rc != 0:
        tail = [ln for ln in log.read_text().splitlines() if "Error" in ln or "error" in ln]
        raise RuntimeError(f"rc {rc}: {(tail[-1] if tail else '')[:300]}")
    rows = [json.loads(line) for line in rec.read_text().splitlines()]
    for r in rows:
        r["tree_rss_mib"] = peak_rss
    return rows


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
           "max_rss_mib": last["max_rss_mib"],
           "step_s": statistics.median(r["metrics"]["time_metrics/end_to_end(s)"] for r in steady),
           "losses": [r["metrics"]["loss_metrics/global_avg_loss"] for r in rows]}
    if last.get("tree_rss_mib"):
        out["launch_peak_rss_mib"] = last["tree_rss_mib"]
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
        strict = next((r for r in out["rows"] if _key(r)[:3] == _key(row)[:3]
                       and r["contender"] == "tpu strict"
                       and r.get("peak_gflops")), None)
        if row["contender"].startswith("tpu") and strict and "tps_per_rank" in row:
            row.setdefault("own_peak_gflops", row["peak_gflops"])  # finish may run twice (merges)
            row["peak_gflops"] = strict["peak_gflops"]
            row["mfu"] = row["flops_per_token"] * row["tps_per_rank"] / (strict["peak_gflops"] * 1e9)
        cpu = next((r for r in out["rows"] if _key(r)[:3] == _key(row)[:3]
                    and r["contender"] == "cpu (gloo)"
                    and "tokens_per_s" in r), None)
        if cpu and "tokens_per_s" in row:
            row["vs_cpu"] = row["tokens_per_s"] / cpu["tokens_per_s"]
        # fused / compiled train what strict trains when they start from the same weights (at
        # one process "tpu" draws the same initial weights in every run; the CPU's generator
        # draws others, so the CPU run's losses are not comparable). Per step, so that a step-1
        # difference (other initial weights) is told apart from a drift.
        strict_l = next((r.get("losses") for r in out["rows"] if _key(r)[:3] == _key(row)[:3]
                         and r["contender"] == "tpu strict" and r.get("losses")), None)
        if (row["contender"] not in ("tpu strict", "cpu (gloo)") and strict_l and row.get("losses")
                and len(strict_l) == len(row["losses"])):
            rel = [abs(a - b) / abs(b) for a, b in zip(row["losses"], strict_l)]
            row["rel_loss_vs_strict"] = rel
            row["max_rel_loss_vs_strict"] = max(rel)
    return out


def _key(row: dict) -> tuple:
    return (row["recipe"], row["procs"], row.get("layout", ""), row["contender"])


def merge_previous(out: dict, previous: dict | None) -> dict:
    """``out`` (a run restricted to some recipes, layouts or contenders) with the rows of
    ``previous`` (the results file before the run) that it did not measure again: a subset run
    adds to the sweep instead of replacing it. Each run's load average and date stay in
    ``runs``; rows are ordered by recipe (RECIPES), processes, then as measured."""
    if not previous or previous.get("quick") or not previous.get("rows"):
        return out
    new = {_key(r): r for r in out["rows"]}
    kept = [r for r in previous["rows"] if _key(r) not in new]
    for r in previous["rows"]:  # a row measured again keeps the old figures it replaces
        if _key(r) in new and "tokens_per_s" in r:
            new[_key(r)]["replaces"] = {k: r[k] for k in ("tokens_per_s", "vs_cpu", "mfu", "date",
                                                          "loadavg_at_start", "replaces") if k in r}
            new[_key(r)]["replaces"].setdefault("date", previous.get("machine", {}).get("date"))
    order = {r: i for i, r in enumerate(RECIPES)}
    rows = kept + out["rows"]
    out["rows"] = sorted(rows, key=lambda r: (order.get(r["recipe"], len(order)), r["procs"]))
    runs = previous.get("runs")
    if runs is None:  # a file from before runs were kept: its own load and notes as one run
        runs = [{"recipes": sorted({r["recipe"] for r in previous["rows"]}),
                 "date": previous.get("machine", {}).get("date"),
                 "loadavg_at_end": previous.get("loadavg_at_end"),
                 "notes": previous.get("notes")}]
        if previous.get("moe_loadavg_at_end"):
            runs[0]["moe_loadavg_at_end"] = previous["moe_loadavg_at_end"]
        if previous.get("partial"):
            runs[0]["partial"] = previous["partial"]
    out["runs"] = [*runs, *out.get("runs", [])]
    out["sizes"] = {**previous.get("sizes", {}), **out.get("sizes", {})}
    return out


def _listed(name: str) -> list[str] | None:
    got = os.environ.get(name)
    return [x.strip() for x in got.split(",") if x.strip()] if got else None


def run(quick: bool) -> dict:
    """The sweep. Subsets (the rows measured replace those of the results file, the others are
    kept, merge_previous): TPUC_TITAN_BENCH_RECIPES (e.g. "qwen3 debugmodel,flux flux-debug"),
    TPUC_TITAN_BENCH_PROCS ("1,2"), TPUC_TITAN_BENCH_CONTENDERS ("cpu (gloo),tpu fused"; a
    contender named here runs even where the recipe's plan skips it, and its row says so)."""
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

    recipes = ["llama3 debugmodel"] if quick else list(RECIPES)
    contenders: list[tuple[str, str, dict, list[str]]] = [("cpu (gloo)", "cpu", {}, []),
                                                          ("tpu strict", "tpu", {}, [])]
    if not quick and fused_available():
        contenders.append(("tpu fused", "tpu", {"TPUC_EAGER": "fused"}, []))
    if not quick and compiled_available():
        contenders.append(("tpu compiled", "tpu", {},
                           ["--compile.enable", "--compile.backend", "tpu"]))
    only, procs_only, asked = (_listed("TPUC_TITAN_BENCH_RECIPES"), _listed("TPUC_TITAN_BENCH_PROCS"),
                               _listed("TPUC_TITAN_BENCH_CONTENDERS"))
    if only:
        recipes = [r for r in recipes if r in only]
    if asked:
        contenders = [c for c in contenders if c[0] in asked]
    out["sizes"] = {}
    this_run: dict = {"recipes": recipes, "procs": procs_only, "contenders": [c[0] for c in contenders],
                      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "max_rss_mib_limit": MAX_RSS_MIB or None}
    with tempfile.TemporaryDirectory(prefix="tpuc-titan-bench-") as tmp:
        work = Path(tmp)
        rotation = 0
        for recipe in recipes:
            plan = PLANS[recipe]
            steps, warmup = (4, 2) if quick else plan["steps"]
            layouts = plan["layouts"][:1] if quick else plan["layouts"]
            if procs_only:
                layouts = [lay for lay in layouts if str(lay.procs) in procs_only]
            out["sizes"][recipe] = {"steps": steps, "warmup": warmup, "seq_len": plan["seq"],
                                    "local_batch": plan["batch"], "extra": plan["extra"]}
            common = _recipe_args(recipe, plan, steps, work)
            for layout in layouts:
                nproc = layout.procs
                order = contenders[rotation % len(contenders):] + contenders[:rotation % len(contenders)]
                rotation += 1
                for label, device, env_extra, extra in order:
                    tag = layout.label.replace(" ", "").replace("=", "") or "fsdp"
                    name = f"{recipe.split()[0]}-{nproc}p-{tag}-{label.split()[-1].strip('()')}"
                    row: dict = {"recipe": recipe, "procs": nproc, "contender": label}
                    if layout.label:
                        row["layout"] = layout.label
                    t0 = time.perf_counter()
                    # a skip keyed "contender @ layout" (its label, else "<procs>p") holds there only
                    where = layout.label or f"{layout.procs}p"
                    reason = plan["skip"].get(f"{label} @ {where}") or plan["skip"].get(label)
                    if reason:
                        if not (asked and label in asked):
                            row["error"] = reason
                            out["rows"].append(row)
                            continue
                        row["note"] = f"run on request (the plan skips it: {reason})"
                    row["loadavg_at_start"] = list(os.getloadavg())
                    row["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
                    try:
                        rows = _launch(work, name, nproc,
                                       [*common, *layout.flags, f"--tpuc.device={device}", *extra],
                                       env_extra)
                        row.update(_summarise(rows, warmup, device, nproc))
                    except Exception as e:  # one failed contender must not lose the sweep
                        row["error"] = f"{type(e).__name__}: {e}"
                    row["wall_s"] = time.perf_counter() - t0
                    row["loadavg_at_end"] = list(os.getloadavg())
                    print(f"      {name}: " + json.dumps({k: v for k, v in row.items()
                                                         if k in ("tokens_per_s", "mfu", "error",
                                                                  "wall_s", "launch_peak_rss_mib")}),
                          flush=True)
                    out["rows"].append(row)
                    progress = os.environ.get("TPUC_TITAN_BENCH_PROGRESS")  # rows so far (long sweeps)
                    if progress:
                        with open(progress, "w") as f:
                            json.dump(out, f, indent=2)
    this_run["loadavg_at_end"] = list(os.getloadavg())
    out["runs"] = [this_run]
    if not quick:
        path = ROOT / "bench" / "results" / "titan_trainer.json"
        previous = json.loads(path.read_text()) if path.exists() else None
        merge_previous(out, previous)
    finish(out)
    sizes = "; ".join(f"{r}: {z['steps']} steps ({z['warmup']} warm-up) of {z['local_batch']} x "
                      f"{z['seq_len'] or 12} tokens per rank" + (f", {' '.join(z['extra'])}" if z["extra"] else "")
                      for r, z in out["sizes"].items())
    first = out["sizes"].get("llama3 debugmodel") or next(iter(out["sizes"].values()), {})
    out.update({"steps": first.get("steps"), "warmup": first.get("warmup"),
                "seq_len": first.get("seq_len"), "local_batch": first.get("local_batch"),
                "loadavg_at_end": this_run["loadavg_at_end"],
                "notes": f"{sizes}. Weak scaling (FSDP, or EP x FSDP where named, over the ranks), "
                         "float32 parameters, medians over the steps after the warm-up, TorchTitan's "
                         "own per-step metrics; OMP_NUM_THREADS=1 per rank; every rank shares this "
                         "machine's cores. tokens/s is the total over the ranks (FLUX: 4 image + 8 "
                         "text tokens a sample, as its FluxTrainer counts them); vs CPU = tokens/s "
                         "over the CPU run's in the same layout (> 1: tpu faster). Rows come from "
                         "several runs of the case (runs: their recipes, dates and load averages; "
                         "rows from 2026-12-02 on carry their own loadavg_at_start/_at_end). The "
                         "MoE recipe (2 of its 8 blocks) is not in the quick mode: its launches take "
                         "minutes each (first-step compiles, ~30 s steps on a loaded 2-core machine)."})
    return out
