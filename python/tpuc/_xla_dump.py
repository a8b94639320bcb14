"""Reads XLA's dumps of optimized programs: how many donated parameters a
program copies.

A program that updates a donated argument in place (``tf.aliasing_output``)
needs XLA to order every read of the old value before the write into the same
buffer; where it cannot, its copy insertion keeps the old value in a copy of
the parameter. Run with ``XLA_FLAGS=--xla_dump_to=DIR`` (and a fresh compile:
``TPUC_CACHE_DIR=off``) and pass DIR here. Used by tests/test_compiled_step.py
and bench/cases/compiled_step.py.
"""
from __future__ import annotations

import glob
import os
import re

_ALIAS = re.compile(r"\{[0-9,\s]*\}:\s*\((\d+),")
_PARAM = re.compile(r"%([\w.\-]+) = [^=]*? parameter\((\d+)\)")
_ASSIGN = re.compile(r"%([\w.\-]+) = \S+ (copy|bitcast)\(%([\w.\-]+)\)")


def program_copies(hlo: str) -> dict[str, int]:
    """For one optimized HLO module's text: `aliased`, the number of entry
    parameters aliased with an output (updated in place), and `copies`, the
    number of copy instructions of such a parameter (directly or through a
    bitcast)."""
    entry = hlo[hlo.find("\nENTRY"):] if "\nENTRY" in hlo else ""
    header = hlo.split("\n", 1)[0]
    m = re.search(r"input_output_alias=\{(.*?)\}\s*(,\s*\w+=|$)", header)
    aliased = {int(p) for p in _ALIAS.findall(m.group(1))} if m else set()
    params = {name for name, num in _PARAM.findall(entry) if int(num) in aliased}
    copies = 0
    for name, op, src in _ASSIGN.findall(entry):
        if src in params:
            if op == "copy":
                copies += 1
            else:
                params.add(name)  # a bitcast of the parameter is the same buffer
    return {"aliased": len(aliased), "copies": copies}


def dump_copies(dump_dir: str) -> list[dict]:
    """program_copies of every optimized module in an XLA dump directory,
    with its file name and instruction count."""
    out = []
    pattern = os.path.join(dump_dir, "*after_optimizations.txt")
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        row = program_copies(text)
        row["file"] = os.path.basename(path)
        row["instructions"] = text.count("\n  %") + text.count("\n  ROOT")
        out.append(row)
    return out
