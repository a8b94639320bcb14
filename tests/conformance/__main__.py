"""`python -m tests.conformance`: the OpInfo sweep on "tpu" (see `make conformance`).

Writes docs/op_coverage.{md,json} (and the raw outcomes to build/conformance/results.json);
exits 1 when a mismatch or error is not explained in known_failures.py."""
from __future__ import annotations

import argparse
import fnmatch
import json
import sys
import time
from pathlib import Path
from typing import Any

from . import catalog, pool, report
from .check import Outcome
from .known_failures import KNOWN_FAILURES
from .progress import Progress

REPO = pool.REPO


def select_ops(patterns: str | None) -> list[str]:
    keys = list(catalog.entries())
    if not patterns:
        return keys
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    return [k for k in keys if any(fnmatch.fnmatchcase(k, p) for p in pats)]


def sweep(ops: list[str], dtypes: list[str], samples: int, grad_samples: int | None, workers: int,
          timeout_s: float, show_progress: bool = True) -> list[dict[str, Any]]:
    """Every (op, dtype): dtypes without CPU support are skipped here, the rest run in workers."""
    results: list[dict[str, Any]] = []
    tasks: list[tuple[str, str]] = []
    for key in ops:
        supported = catalog.cpu_dtypes(catalog.entries()[key])
        for dt in dtypes:
            if catalog.DTYPES[dt] in supported:
                tasks.append((key, dt))
            else:
                results.append(Outcome(key, dt, "skipped", "no CPU support for dtype").to_json())
    per_op: dict[str, int] = {}
    for key, _ in tasks:
        per_op[key] = per_op.get(key, 0) + 1
    bar = Progress(per_op, enabled=show_progress)
    bar.show()
    partial = REPO / "build" / "conformance" / "results.partial.jsonl"  # readable while it runs
    partial.parent.mkdir(parents=True, exist_ok=True)
    with open(partial, "w", buffering=1) as log:
        def done(r: dict[str, Any]) -> None:
            log.write(json.dumps(r) + "\n")
            bar.done(r["op"], r["cls"])

        results += pool.run(tasks, samples, grad_samples, workers=workers, timeout_s=timeout_s, on_result=done)
    bar.show(final=True)
    return results


def merged(path: Path, results: list[dict[str, Any]], meta: dict[str, Any]
           ) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
    """The committed sweep at `path` with the entries of `results` replacing its own: the
    results of both, the committed dtypes, and its meta with the re-run noted."""
    old = json.loads(path.read_text())
    fresh = {(r["op"], r["dtype"]) for r in results}
    kept = []
    for op, per in old["ops"].items():
        for dt, e in per.items():
            if (op, dt) not in fresh:
                kept.append({"op": op, "dtype": dt, "cls": e["class"], "detail": e.get("detail", ""),
                             "fallbacks": e.get("fallbacks", {})})
    base = {k: old[k] for k in ("torch", "platform", "samples", "workers", "seconds")}
    reruns = list(old.get("reruns", [])) + [{"entries": sorted({op for op, _ in fresh}),
                                             "torch": meta["torch"], "seconds": meta["seconds"]}]
    return kept + results, old["dtypes"], {**base, "reruns": reruns}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.conformance", description=__doc__)
    ap.add_argument("--ops", help="comma-separated OpInfo keys or globs (default: all)")
    ap.add_argument("--dtypes", default=",".join(catalog.DTYPES), help="comma-separated dtype names")
    ap.add_argument("--samples", type=int, default=8, help="sample inputs per (op, dtype)")
    ap.add_argument("--grad-samples", type=int, default=None, help="float32 gradient samples (default: --samples)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per (op, dtype)")
    ap.add_argument("--out", type=Path, default=REPO / "docs", help="where op_coverage.{md,json} go")
    ap.add_argument("--no-report", action="store_true", help="do not write the docs")
    ap.add_argument("--rebuild", type=Path, help="only rebuild the docs from this results.json")
    ap.add_argument("--merge", action="store_true",
                    help="replace only the swept (op, dtype) entries of the existing "
                         "op_coverage.json and keep the others (a targeted re-run of a few ops)")
    a = ap.parse_args(argv)
    dtypes = [d.strip() for d in a.dtypes.split(",") if d.strip()]
    raw = REPO / "build" / "conformance" / "results.json"

    import torch

    start = time.monotonic()
    if a.rebuild:
        saved = json.loads(a.rebuild.read_text())
        results, meta = saved["results"], saved["meta"]
    else:
        ops = select_ops(a.ops)
        print(f"conformance: {len(ops)} OpInfo entries x {len(dtypes)} dtypes, {a.samples} samples, "
              f"{a.workers} workers (logs in build/conformance/)", file=sys.stderr)
        results = sweep(ops, dtypes, a.samples, a.grad_samples, a.workers, a.timeout)
        meta = {"torch": torch.__version__, "platform": torch.tpu.get_device_name(),
                "samples": a.samples, "workers": a.workers, "seconds": round(time.monotonic() - start, 1)}
        raw.parent.mkdir(parents=True, exist_ok=True)
        raw.write_text(json.dumps({"meta": meta, "results": results}) + "\n")
    if a.merge:
        results, dtypes, meta = merged(a.out / "op_coverage.json", results, meta)
    doc = report.build(results, dtypes, meta)
    if not a.no_report:
        report.write(doc, a.out)
        print(f"conformance: wrote {a.out}/op_coverage.md and .json", file=sys.stderr)
    for dt in dtypes:
        s = doc["summary"][dt]
        print(f"{dt:9s} entries {s['entries']:4d}  native {s['native_pass']:4d} ({100 * s['native_fraction']:.1f}%)  "
              f"fallback {s['fallback_pass']:4d}  mismatch {s['mismatch']:3d}  error {s['error']:3d}  "
              f"skipped {s['skipped']:4d}")
    seen = {(r["op"], r["dtype"]) for r in results}
    stale = [(op, dt) for (op, dt) in KNOWN_FAILURES if (op, dt) in seen and
             doc["ops"][op][dt]["class"] not in ("mismatch", "error")]
    for op, dt in stale:
        print(f"note: known failure ({op}, {dt}) now passes: remove it from known_failures.py", file=sys.stderr)
    bad = report.unexplained(doc)
    for op, dt, detail in bad:
        print(f"UNEXPLAINED {op} {dt}: {detail}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
