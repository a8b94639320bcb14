"""Strict mode's per-op programs get their own XLA options (csrc/core/runtime/op_options.c,
TPUC_OP_XLA_OPTIONS; the default on a GPU plugin turns GEMM autotuning off, on the CPU plugin
there is none). The C test test_runtime.c test_op_options checks the decision and its wire
bytes; these tests check, through the XLA CPU plugin, that the options reach XLA's compiler for
per-op programs and only for them: the observable option is `xla_dump_to`, which makes XLA
write each program it compiles with it into a folder. Each test is a fresh process (the
options are read when the runtime starts)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROG = r"""
import json, sys, torch
x = (torch.arange(12.0) / 12).reshape(3, 4).to("tpu")
w = torch.linspace(-1, 1, 20).reshape(4, 5).to("tpu")
for _ in range(3):
    y = ((x @ w) * 0.5 + 1.0).relu()
    z = (y.exp() - y).sum(0)
# float64 reference; float32's error: a few roundings per element (4-term dot, scale, shift,
# exp within a few ulps, difference, 3-term sum), each at most eps32 of the magnitudes summed
ref = (((torch.arange(12.0) / 12).reshape(3, 4).double()
        @ torch.linspace(-1, 1, 20).reshape(4, 5).double()) * 0.5 + 1.0).relu()
zr = (ref.exp() - ref).sum(0)
bound = 64 * torch.finfo(torch.float32).eps * (ref.exp() + ref).sum(0)
ok = bool(((z.cpu().double() - zr).abs() <= bound).all())  # runs a fused chunk
s = torch.tpu.stats()
print(json.dumps({"ok": ok,
                  "compiles": s["compiles"], "disk_hits": s.get("disk_hits", 0),
                  "preloaded": s.get("preloaded", 0)}))
"""


def _run(env_extra: dict[str, str], prog: str = PROG) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, **env_extra)
    env.setdefault("TPUC_CACHE_DIR", "off")
    return subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True,
                          text=True, timeout=240, cwd=ROOT)


def _dumped_modules(d: Path) -> set[str]:
    """The modules XLA wrote before optimizing them: one per compiled program."""
    return {p.name.split(".")[0] for p in d.glob("*before_optimizations.txt")}


def _result(p: subprocess.CompletedProcess[str]) -> dict[str, float | bool]:
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_per_op_programs_are_compiled_with_the_options(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    r = _result(_run({"TPUC_OP_XLA_OPTIONS": f"xla_dump_to={dump}", "TPUC_EAGER": "strict"}))
    assert r["ok"]
    mods = _dumped_modules(dump)
    assert r["compiles"] > 3 and len(mods) == r["compiles"], (mods, r)


def test_fused_chunks_keep_the_defaults(tmp_path: Path) -> None:
    """In fused mode the chunks are compiled without the per-op options: fewer modules are
    dumped than programs compiled (the per-op ones a fused run still compiles, if any)."""
    dump = tmp_path / "dump"
    r = _result(_run({"TPUC_OP_XLA_OPTIONS": f"xla_dump_to={dump}", "TPUC_EAGER": "fused"}))
    assert r["ok"]
    assert r["compiles"] >= 1 and len(_dumped_modules(dump)) < r["compiles"], r


def test_the_options_are_part_of_the_disk_cache_key(tmp_path: Path) -> None:
    """A program compiled without the options is not loaded for a process that has them."""
    cache, dump = tmp_path / "cache", tmp_path / "dump"
    first = _result(_run({"TPUC_OP_XLA_OPTIONS": "none", "TPUC_CACHE_DIR": str(cache)}))
    again = _result(_run({"TPUC_OP_XLA_OPTIONS": "none", "TPUC_CACHE_DIR": str(cache)}))
    # each program loaded once: by its op or ahead of it (the preload)
    assert again["disk_hits"] + again["preloaded"] == first["compiles"] and again["compiles"] == 0
    assert not dump.exists()  # without the option nothing is dumped
    other = _result(_run({"TPUC_OP_XLA_OPTIONS": f"xla_dump_to={dump}",
                          "TPUC_CACHE_DIR": str(cache)}))
    assert other["disk_hits"] == 0 and other["compiles"] == first["compiles"]
    assert len(_dumped_modules(dump)) == first["compiles"]


def test_an_unknown_option_names_the_variable() -> None:
    p = _run({"TPUC_OP_XLA_OPTIONS": "xla_no_such_option_here=1"})
    assert p.returncode != 0
    assert "TPUC_OP_XLA_OPTIONS" in p.stderr and "xla_no_such_option_here" in p.stderr


def test_bad_syntax_names_the_variable() -> None:
    p = _run({"TPUC_OP_XLA_OPTIONS": "xla_gpu_autotune_level"})
    assert p.returncode != 0 and "TPUC_OP_XLA_OPTIONS" in p.stderr and "name=value" in p.stderr


def test_info_says_which_options() -> None:
    tpuc = str(Path(sys.executable).with_name("tpuc"))
    env = dict(os.environ)
    env.pop("TPUC_OP_XLA_OPTIONS", None)
    out = subprocess.run([tpuc, "info"], env=env, capture_output=True, text=True, timeout=120)
    assert "per-op programs:   none (the default on a cpu plugin" in out.stdout, out.stdout
    env["TPUC_OP_XLA_OPTIONS"] = "xla_cpu_enable_fast_math=false"
    out = subprocess.run([tpuc, "info"], env=env, capture_output=True, text=True, timeout=120)
    assert "per-op programs:   xla_cpu_enable_fast_math=false (TPUC_OP_XLA_OPTIONS)" in out.stdout
