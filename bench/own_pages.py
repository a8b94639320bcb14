"""Results of the cases run by their own make targets in other venvs (bench/report.py's
OWN_PAGES), rendered into their own docs pages: each page holds a block between the markers
``<!-- bench:<case> -->`` and ``<!-- /bench:<case> -->``, replaced from
bench/results/<case>.json. Called by those cases after they write their results, and by
bench/report.py's write() (so `make bench` renders them again, measuring nothing)."""
from __future__ import annotations

import json
import os
import re
from typing import Callable


def _machine(r: dict) -> str:
    m = r.get("machine") or {}
    load = m.get("loadavg")
    return (f"Run: {m.get('date', '?')}, {m.get('nproc', '?')} cores ({m.get('cpu', '?')}, "
            f"shared), torch {m.get('torch', '?')}, \"tpu\" = {m.get('tpu_device', '?')}"
            + (f", load average {load[0]:.1f} at the end" if load else "")
            + (", **quick mode**" if r.get("quick") else "") + ".")


def _num(x: object, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, (int, float)) else "—"


def dlrm(r: dict) -> list[str]:
    L = [f"Source: `bench/cases/dlrm.py`, results `bench/results/dlrm.json`; command "
         f"`{r.get('command')}`. {_machine(r)} Medians of {r.get('repeats')} interleaved "
         f"repetitions; PyTorch CPU with {r.get('cpu_threads', '?')} threads.", "",
         f"Training step (batch {r['batch']}, {r['tables']} tables of {r.get('rows_per_table', '?')}"
         f" x {r['dim']}):", "",
         "| device | samples/s | step (ms) |", "|---|---|---|",
         f"| tpu (XLA CPU plugin) | {_num(r.get('tpu_samples_per_s'), '.0f')} | "
         f"{_num(r.get('tpu_step_ms_median'), '.1f')} |",
         f"| CPU (PyTorch) | {_num(r.get('cpu_samples_per_s'), '.0f')} | "
         f"{_num(r.get('cpu_step_ms_median'), '.1f')} |", ""]
    rows = r.get("lookup_rows") or []
    if rows:
        L += ["Embedding lookup alone (`EmbeddingBagCollection`, sum pooling, float32): bytes "
              "of embedding rows gathered per second (ids x dim x 4 bytes; the backward "
              "counts the same rows, scattered into the table gradients, which are dense and "
              "table-sized as `nn.EmbeddingBag(sparse=False)` makes them, so their zeroing "
              "is in its time):", "",
              "| direction | tables x rows x dim (MiB each) | ids | tpu ms | CPU ms | tpu GB/s | "
              "CPU GB/s | tpu / CPU |", "|---|---|---|---|---|---|---|---|"]
        L += [f"| {x['direction']} | {x['tables']} x {x['rows_per_table']:,} x {x['dim']} "
              f"({x['table_mib']}) | {x['ids']:,} | {x['tpu_ms_median']:.2f} | "
              f"{x['cpu_ms_median']:.2f} | {x['tpu_GBps']:.2f} | {x['cpu_GBps']:.2f} | "
              f"{x['tpu_over_cpu']:.2f}x |" for x in rows]
        L.append("")
    return L


SGL_ENGINES = (("sglang_tpu", "SGLang on tpu"), ("vllm_tpu", "vLLM on tpu"),
               ("sglang_cpu", "SGLang CPU backend"))


def sglang_serving(r: dict) -> list[str]:
    L = [f"Source: `bench/cases/sglang_serving.py`, results `bench/results/sglang_serving.json`; "
         f"command `{r.get('command')}`. {_machine(r)} {r.get('notes', '')}", ""]
    engines = [(k, n) for k, n in SGL_ENGINES
               if any(f"{k}_tokens_per_s" in row for row in r.get("rows", []))]
    if engines:
        L += ["| concurrency | " + " | ".join(
            f"{n} tokens/s | {n} requests/s | {n} TTFT ms" for _, n in engines)
            + (" | SGLang / vLLM tokens/s | SGLang / vLLM TTFT |"
               if len(engines) > 1 and engines[1][0] == "vllm_tpu" else " |"),
              "|---|" + "---|---|---|" * len(engines)
              + ("---|---|" if len(engines) > 1 and engines[1][0] == "vllm_tpu" else "")]
        for row in r["rows"]:
            cells = [str(row["concurrency"])]
            for k, _ in engines:
                cells += [_num(row.get(f"{k}_tokens_per_s"), ".1f"),
                          _num(row.get(f"{k}_requests_per_s"), ".2f"),
                          _num(row.get(f"{k}_ttft_ms"), ".1f")]
            if len(engines) > 1 and engines[1][0] == "vllm_tpu":
                cells += [_num(row.get("sglang_over_vllm_tokens"), ".2f") + "x",
                          _num(row.get("sglang_over_vllm_ttft"), ".2f") + "x"]
            L.append("| " + " | ".join(cells) + " |")
        L.append("")
    for k, err in (r.get("errors") or {}).items():
        L += [f"Not run: `{k}`: `{err[:300]}`", ""]
    if r.get("outputs_match") is not None:
        L += [f"Greedy tokens, SGLang vs vLLM on the same prompts: {r['outputs_match']}.", ""]
    return L


RENDERERS: dict[str, tuple[str, Callable[[dict], list[str]]]] = {
    "dlrm": ("docs/torchrec.md", dlrm),
    "sglang_serving": ("docs/sglang.md", sglang_serving),
}


def render(root: str) -> list[str]:
    """Rewrites each page's block from its results file; returns the pages changed."""
    changed = []
    for case, (page, fn) in RENDERERS.items():
        res = os.path.join(root, "bench", "results", f"{case}.json")
        path = os.path.join(root, page)
        if not (os.path.exists(res) and os.path.exists(path)):
            continue
        with open(res) as f:
            r = json.load(f)
        with open(path) as f:
            text = f.read()
        block = "\n".join([f"<!-- bench:{case} -->", *fn(r), f"<!-- /bench:{case} -->"])
        new, n = re.subn(rf"<!-- bench:{case} -->.*?<!-- /bench:{case} -->",
                         lambda _m: block, text, flags=re.S)
        if n and new != text:
            with open(path, "w") as f:
                f.write(new)
            changed.append(page)
    return changed


if __name__ == "__main__":
    print(render(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
