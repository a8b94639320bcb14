"""`python -m tests.conformance.diagnose OP DTYPE`: where a mismatch comes from.

For each forward sample that differs it prints the worst element: the CPU's value, the
device's, and the float64 CPU value of the same inputs (upcast), so one can tell whether
the device or the CPU is further from the exact result. Used to write the reasons in
known_failures.py and policy.py."""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import warnings
from typing import Any

import torch

from . import catalog
from .tree import clone, describe, tensors, to_cpu, to_device, tree_map


def _up(x: Any) -> Any:
    return tree_map(lambda t: t.double() if t.is_floating_point() else t, x)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.conformance.diagnose")
    ap.add_argument("op")
    ap.add_argument("dtype")
    ap.add_argument("--samples", type=int, default=8)
    a = ap.parse_args(argv)
    os.environ.setdefault("TPUC_FALLBACK", "silent")
    warnings.simplefilter("ignore")
    op = catalog.entries()[a.op]
    torch.manual_seed(0)
    for i, s in enumerate(itertools.islice(op.reference_inputs("cpu", catalog.DTYPES[a.dtype]), a.samples)):
        desc = describe([s.input, *s.args]) + (f" {describe(s.kwargs)}" if s.kwargs else "")
        try:
            exp = tensors(to_cpu(op(clone(s.input), *clone(s.args), **clone(s.kwargs))))
        except Exception as e:
            print(f"[{i}] {desc}: CPU raised {type(e).__name__}")
            continue
        d = to_device((s.input, s.args, s.kwargs), "tpu")
        try:
            got = tensors(to_cpu(op(d[0], *d[1], **d[2])))
        except Exception as e:
            print(f"[{i}] {desc}: tpu raised {type(e).__name__}: {str(e).splitlines()[0]}")
            continue
        try:
            ref = tensors(to_cpu(op(*_up((clone(s.input),)), *_up(clone(s.args)), **_up(clone(s.kwargs)))))
        except Exception:
            ref = [None] * len(exp)
        for j, (e, g, r) in enumerate(zip(exp, got, ref)):
            if e.shape != g.shape or e.dtype != g.dtype:
                print(f"[{i}] {desc} out{j}: {g.dtype}{list(g.shape)} vs CPU {e.dtype}{list(e.shape)}")
                continue
            try:
                torch.testing.assert_close(g, e, equal_nan=True)
                continue
            except AssertionError:
                pass
            if e.dtype == torch.bool or not (e.is_floating_point() or e.is_complex()):
                bad = (e != g).nonzero()
                k = tuple(bad[0].tolist()) if len(bad) else ()
                print(f"[{i}] {desc} out{j}: {len(bad)} differ; at {k}: tpu {g[k].item()} cpu {e[k].item()}"
                      + (f" f64 {r[k].item()}" if r is not None else ""))
                continue
            diff = (g.double() - e.double()).abs().nan_to_num(nan=float("inf"))
            both_nan = g.isnan() & e.isnan()
            diff[both_nan] = 0
            k = tuple(torch.nonzero(diff == diff.max())[0].tolist()) if diff.numel() else ()
            line = f"[{i}] {desc} out{j}: max |diff| {diff.max().item():.3g} at {k}: tpu {g[k].item()!r} cpu {e[k].item()!r}"
            if r is not None and r.shape == e.shape:
                line += f" f64 {r[k].item()!r}"
                err_t = (g.double() - r).abs().nan_to_num(nan=0).max().item()
                err_c = (e.double() - r).abs().nan_to_num(nan=0).max().item()
                line += f"; max error vs f64: tpu {err_t:.3g} cpu {err_c:.3g}"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
