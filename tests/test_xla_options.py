"""The XLA options tpuc gives the XLA CPU plugin (python/tpuc/_xla_flags.py): XNNPACK
off on every CPU (issue 29), 512-bit vectors on a CPU with AVX-512, in front of the
user's XLA_FLAGS, never over an option the user names, none with TPUC_XLA_DEFAULTS=off; checked in what XLA compiled (the vector width
its generated kernels were built for, from its own dump) and in the disk cache (a
program compiled under other options is compiled again, not loaded)."""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys

from tpuc import _xla_flags

OPTION = "--xla_cpu_prefer_vector_width=512"
XNN = "--xla_cpu_use_xnnpack=false"


def test_added_on_the_cpu_plugin() -> None:
    flags, why = _xla_flags.decide(True, None, {"avx2", "avx512f"})
    assert flags == f"{XNN} {OPTION}" and why.startswith(f"{XNN} {OPTION}")
    flags, _ = _xla_flags.decide(True, "--xla_dump_to=/tmp/d", {"avx512f"}, "auto")
    assert flags == f"{XNN} {OPTION} --xla_dump_to=/tmp/d"  # the user's flags come after
    assert _xla_flags.decide(True, None, {"avx2"})[0] == XNN  # no AVX-512: XNNPACK off only


def test_not_added_where_it_does_not_apply_or_the_user_decides() -> None:
    avx512 = {"avx512f"}
    assert _xla_flags.decide(False, None, avx512)[0] is None  # libtpu, CUDA: not theirs
    for user in ("--xla_cpu_prefer_vector_width=256", "--xla_cpu_prefer_vector_width 128",
                 "--xla_dump_to=/d -xla_cpu_prefer_vector_width=256"):
        flags, why = _xla_flags.decide(True, user, avx512)
        assert flags == XNN + " " + user, (user, flags)
    both = "--xla_cpu_use_xnnpack=true --xla_cpu_prefer_vector_width=256"
    flags, why = _xla_flags.decide(True, both, avx512)
    assert flags is None and "XLA_FLAGS sets them" in why, why
    assert _xla_flags.decide(True, None, avx512, "off") == (
        None, "none added (TPUC_XLA_DEFAULTS=off)")
    assert _xla_flags.decide(True, None, avx512, "bogus")[0] is None


SCRIPT = r"""
import os, torch
x = torch.arange(4096, dtype=torch.float32, device="tpu")
print((x * 3 + 1).sum().item(), os.environ.get("XLA_FLAGS"))
"""


def _vector_widths(dump: str, cache: str, **env: str) -> set[str]:
    """The prefer-vector-width XLA built the process's generated kernels for. Every
    process dumps into the same (emptied) folder, so that their XLA_FLAGS differ only
    where the test makes them differ."""
    shutil.rmtree(dump, ignore_errors=True)
    e = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "TPUC_XLA_DEFAULTS")}
    e.update(env, TPUC_CACHE_DIR=cache)
    e["XLA_FLAGS"] = f"--xla_dump_to={dump} {env.get('XLA_FLAGS', '')}".strip()
    subprocess.run([sys.executable, "-c", SCRIPT], env=e, check=True, timeout=300,
                   capture_output=True, text=True)
    widths = set()
    for path in glob.glob(os.path.join(dump, "*ir-with-opt.ll")):
        with open(path, encoding="utf-8") as f:
            widths |= set(re.findall(r'"prefer-vector-width"="(\d+)"', f.read()))
    return widths


def test_the_compiler_gets_it_and_the_disk_cache_keeps_programs_apart(tmp_path) -> None:
    """One disk cache for all three processes, the default first: a process whose options
    differ from the default's must compile its own programs (a dump with their width), not
    load the default's; one whose options are the same loads them."""
    cache, dump = str(tmp_path / "cache"), str(tmp_path / "dump")
    avx512 = "avx512f" in _xla_flags.cpu_flags()
    default = _vector_widths(dump, cache)
    user = _vector_widths(dump, cache, XLA_FLAGS="--xla_cpu_prefer_vector_width=256")
    # XLA_FLAGS differs from the default process's only by tpuc's option
    off = _vector_widths(dump, cache, TPUC_XLA_DEFAULTS="off")
    # XLA's own default is 256; with AVX-512 tpuc asks for 512
    assert default == ({"512"} if avx512 else {"256"}), default
    assert user == {"256"}, user
    # the off process's options differ from the default's (no XNNPACK option, no 512), so it
    # compiles its own 256-wide programs instead of loading the default's from the shared cache
    assert off == {"256"}, off
