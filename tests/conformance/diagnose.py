"""`python -m tests.conformance.diagnose OP DTYPE` / `--from results.json`: where a
mismatch comes from.

For every sample whose forward result (or, in float32, input gradient) differs it reports
the worst element: the device's value, the CPU's, and the value computed on the CPU in
float64 from the same inputs (upcast), with each side's largest error against that float64
value, so one can tell whether the device or the CPU is further from the exact result.
Used to write the reasons in known_failures.py and policy.py."""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import catalog
from .check import _loss
from .tree import clone, describe, tensors, to_cpu, to_device, tree_map


@dataclass
class Finding:
    check: str
    sample: str
    text: str
    tpu_err: float | None = None  # largest |tpu - f64| over the output
    cpu_err: float | None = None  # largest |cpu - f64|
    max_diff: float | None = None


def _up(x: Any) -> Any:
    return tree_map(lambda t: t.detach().double().requires_grad_(t.requires_grad) if t.is_floating_point() else t, x)


def _run(op: Any, parts: Any, grad: bool) -> list[torch.Tensor]:
    out = op(parts[0], *parts[1], **parts[2])
    if not grad:
        return tensors(out)
    leaves = [t for t in tensors(parts) if t.requires_grad]
    loss = _loss(out)
    if loss is None:
        return []
    gs = torch.autograd.grad(loss, leaves, allow_unused=True)
    return [torch.zeros(0) if g is None else g for g in gs]


def _compare(check: str, desc: str, e: torch.Tensor, g: torch.Tensor, r: torch.Tensor | None) -> Finding | None:
    e, g = e.detach().cpu(), g.detach().cpu()
    if e.shape != g.shape or e.dtype != g.dtype:
        return Finding(check, desc, f"tpu {g.dtype}{list(g.shape)} vs CPU {e.dtype}{list(e.shape)}")
    try:
        torch.testing.assert_close(g, e, equal_nan=True)
        return None
    except AssertionError:
        pass
    if e.is_complex():
        e, g = torch.view_as_real(e), torch.view_as_real(g)
        r = torch.view_as_real(r) if r is not None and r.is_complex() else None
    if not e.is_floating_point():
        bad = (e != g).nonzero()
        k = tuple(bad[0].tolist()) if len(bad) else ()
        ref = f" f64 {r[k].item()!r}" if r is not None and r.shape == e.shape else ""
        return Finding(check, desc, f"{len(bad)}/{e.numel()} differ; at {k}: tpu {g[k].item()!r} cpu {e[k].item()!r}{ref}")
    diff = (g.double() - e.double()).abs()
    diff[g.isnan() & e.isnan()] = 0
    diff = diff.nan_to_num(nan=float("inf"))
    k = tuple(torch.nonzero(diff == diff.max())[0].tolist()) if diff.numel() else ()
    f = Finding(check, desc, f"{int((diff > 0).sum())}/{e.numel()} differ, max |diff| {diff.max().item():.3g} at {k}: "
                f"tpu {g[k].item()!r} cpu {e[k].item()!r}", max_diff=diff.max().item())
    if r is not None and r.shape == e.shape:
        r = r.detach().double()
        f.text += f" f64 {r[k].item()!r}"
        fin = r.isfinite()
        f.tpu_err = (g.double() - r).abs()[fin].nan_to_num(nan=float("inf")).max().item() if fin.any() else 0.0
        f.cpu_err = (e.double() - r).abs()[fin].nan_to_num(nan=float("inf")).max().item() if fin.any() else 0.0
        f.text += f"; largest error vs f64: tpu {f.tpu_err:.3g}, cpu {f.cpu_err:.3g}"
    return f


def diagnose(key: str, dtype_name: str, samples: int = 8) -> list[Finding]:
    op = catalog.entries()[key]
    dtype = catalog.DTYPES[dtype_name]
    found: list[Finding] = []
    torch.manual_seed(0)
    plans = [("forward", False, op.reference_inputs("cpu", dtype))]
    if dtype == torch.float32 and op.supports_autograd:
        plans.append(("grad", True, op.sample_inputs("cpu", dtype, requires_grad=True)))
    for check, grad, gen in plans:
        for s in itertools.islice(gen, samples):
            desc = describe([s.input, *s.args]) + (f" {describe(s.kwargs)}" if s.kwargs else "")
            parts = (s.input, s.args, s.kwargs)
            try:
                exp = _run(op, clone(parts), grad)
            except Exception:
                continue
            try:
                got = [t.cpu() for t in _run(op, to_device(parts, "tpu"), grad)]
            except Exception as e:
                found.append(Finding(check, desc, f"tpu raised {type(e).__name__}: {str(e).splitlines()[0][:300]}"))
                continue
            try:
                ref: list[torch.Tensor | None] = list(_run(op, _up(clone(parts)), grad))
            except Exception:
                ref = []
            ref += [None] * (len(exp) - len(ref))
            for e, g, r in zip(exp, got, ref):
                f = _compare(check, desc, e, g, r)
                if f:
                    found.append(f)
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.conformance.diagnose")
    ap.add_argument("op", nargs="?")
    ap.add_argument("dtype", nargs="?")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--from", dest="results", type=Path, help="diagnose every mismatch in this results.json")
    a = ap.parse_args(argv)
    os.environ.setdefault("TPUC_FALLBACK", "silent")
    warnings.simplefilter("ignore")
    todo = [(a.op, a.dtype)] if a.op else []
    if a.results:
        todo += [(r["op"], r["dtype"]) for r in json.loads(a.results.read_text())["results"] if r["cls"] == "mismatch"]
    for key, dt in todo:
        for f in diagnose(key, dt, a.samples):
            print(f"{key} {dt} {f.check} {f.sample}: {f.text}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
