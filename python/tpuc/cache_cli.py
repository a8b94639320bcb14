"""``tpuc cache``: look at, fill, move and empty the disk cache of compiled programs.

The core keeps every program it compiles under ``TPUC_CACHE_DIR`` (default
``~/.cache/tpuc``; csrc/core/runtime/disk_cache.c): one ``<sha256>.tpx`` file per program,
named by a hash of everything that makes the executable valid (program text, compile
options, plugin platform and version, PJRT API version, the plugin's XLA version, the
device kind, ``XLA_FLAGS``). A new process loads what an earlier one compiled instead of
compiling it again, so a job's first step costs what loading costs.

    tpuc cache info                          # where, how many programs, how many bytes
    tpuc cache warm -- python train.py ...   # run a program once to fill the cache
    tpuc cache export cache.tar.gz           # pack it (e.g. into a container image)
    tpuc cache import cache.tar.gz           # unpack on another host: only valid entries
    tpuc cache clear

Every command takes ``--dir`` (default: ``TPUC_CACHE_DIR``, else ``~/.cache/tpuc``). A
directory shared by every rank and host of a job (a network volume) works as it is: the
core writes each file under a temporary name and renames it into place, and ranks that
miss the same program wait for the first one's compile (a file lock) instead of each
compiling it. Entries made for another plugin, device kind or XLA_FLAGS are never
loaded (their names differ), so one directory may serve several kinds of hosts.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass

# format 1: the executable alone; format 2: with its program text and compile options
# (so that a new process can preload it into memory, csrc/core/runtime/preload.c)
MAGICS = (b"TPUCEXE1", b"TPUCEXE2")
HEADER_SIZE = 8 + 32 + 8 + 8
_NAME = re.compile(r"^[0-9a-f]{64}\.tpx$")
MANIFEST = "tpuc-cache.json"


def default_dir() -> str | None:
    """The directory the core uses (None: the disk cache is off)."""
    d = os.environ.get("TPUC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                         "tpuc")
    return None if d in ("off", "0") else d


@dataclass
class Summary:
    directory: str
    programs: int
    bytes: int
    newest: float | None

    def line(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.newest)) if self.newest else "-"
        return (f"{self.directory}: {self.programs} program(s), {self.bytes / 2**20:.1f} MiB "
                f"(newest {when})")


def entries(directory: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(directory) if _NAME.match(n))
    except FileNotFoundError:
        return []


def summarize(directory: str) -> Summary:
    total, newest = 0, None
    names = entries(directory)
    for n in names:
        st = os.stat(os.path.join(directory, n))
        total += st.st_size
        newest = st.st_mtime if newest is None else max(newest, st.st_mtime)
    return Summary(directory, len(names), total, newest)


def check_entry(name: str, data: bytes) -> str | None:
    """Why a cache file is not a valid entry (None: it is): the header the core writes
    (magic, the key its name spells, the payload's length). The payload's checksum is
    checked by the core when it loads the file (a corrupt one is removed and compiled
    again)."""
    if not _NAME.match(name):
        return "not a cache entry's name"
    if len(data) < HEADER_SIZE or data[:8] not in MAGICS:
        return "no tpuc executable header"
    if data[8:40].hex() != name[:64]:
        return "its header names another key"
    if int.from_bytes(data[40:48], "little") != len(data) - HEADER_SIZE:
        return "truncated"
    return None


def export(directory: str, path: str) -> int:
    names = entries(directory)
    manifest = {"format": 1, "programs": len(names), "created": time.time(),
                "tpuc": _tpuc_version()}
    with tarfile.open(path, "w:gz") as tar:
        raw = json.dumps(manifest, indent=1).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(raw)
        tar.addfile(info, io.BytesIO(raw))
        for n in names:
            tar.add(os.path.join(directory, n), arcname=n, recursive=False)
    return len(names)


def import_(directory: str, path: str) -> tuple[int, int, list[str]]:
    """Unpacks an export into `directory`: only regular files named like entries, with a
    valid header, written under a temporary name and renamed (readers never see half a
    file). Returns (added, already present, rejected with reasons)."""
    os.makedirs(directory, exist_ok=True)
    added = present = 0
    rejected: list[str] = []
    with tarfile.open(path, "r:*") as tar:
        for m in tar:
            if m.name == MANIFEST:
                continue
            base = os.path.basename(m.name)
            if not m.isfile() or base != m.name:
                rejected.append(f"{m.name}: not a plain file at the archive's top")
                continue
            f = tar.extractfile(m)
            data = f.read() if f else b""
            why = check_entry(base, data)
            if why:
                rejected.append(f"{m.name}: {why}")
                continue
            dest = os.path.join(directory, base)
            if os.path.exists(dest):
                present += 1
                continue
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=base + ".import.")
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, dest)
            added += 1
    return added, present, rejected


def clear(directory: str) -> int:
    names = entries(directory)
    for n in names:
        try:
            os.remove(os.path.join(directory, n))
        except FileNotFoundError:
            pass
    return len(names)


def warm(directory: str, command: list[str]) -> int:
    """Runs `command` with the cache directory set, then says what it added."""
    if not command:
        print("tpuc cache warm: give the program after --, e.g. "
              "tpuc cache warm -- python train.py --steps 2", file=sys.stderr)
        return 2
    os.makedirs(directory, exist_ok=True)
    before = set(entries(directory))
    t0 = time.perf_counter()
    print(f"tpuc cache warm: running {' '.join(command)} with TPUC_CACHE_DIR={directory}",
          file=sys.stderr, flush=True)
    rc = subprocess.call(command, env=dict(os.environ, TPUC_CACHE_DIR=directory))
    after = set(entries(directory))
    print(f"tpuc cache warm: {len(after - before)} program(s) added in "
          f"{time.perf_counter() - t0:.1f} s; {summarize(directory).line()}"
          + (f"; the program exited with {rc}" if rc else ""), file=sys.stderr)
    return rc


def _tpuc_version() -> str | None:
    try:
        from importlib import metadata

        return metadata.version("tpuc")
    except Exception:  # noqa: BLE001 (a source tree without an installed wheel)
        return None


def main(argv: list[str]) -> int:
    command: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(prog="tpuc cache", description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=["info", "warm", "export", "import", "clear"])
    p.add_argument("file", nargs="?", help="the archive (export, import)")
    p.add_argument("--dir", default=None, help="the cache directory (default: TPUC_CACHE_DIR, "
                   "else ~/.cache/tpuc)")
    a = p.parse_args(argv)
    directory = a.dir or default_dir()
    if directory is None:
        print("tpuc cache: the disk cache is off (TPUC_CACHE_DIR=off); name one with --dir",
              file=sys.stderr)
        return 2
    if a.action in ("export", "import") and not a.file:
        print(f"tpuc cache {a.action}: name the archive, e.g. tpuc cache {a.action} "
              "cache.tar.gz", file=sys.stderr)
        return 2
    if a.action == "info":
        print(summarize(directory).line())
        return 0
    if a.action == "warm":
        return warm(directory, command)
    if a.action == "export":
        n = export(directory, a.file)
        print(f"exported {n} program(s) from {directory} to {a.file}")
        return 0
    if a.action == "import":
        if not os.path.exists(a.file):
            print(f"tpuc cache import: {a.file} does not exist", file=sys.stderr)
            return 2
        added, present, rejected = import_(directory, a.file)
        print(f"imported {added} program(s) into {directory} ({present} already there, "
              f"{len(rejected)} rejected)")
        for r in rejected[:10]:
            print(f"  rejected {r}", file=sys.stderr)
        return 1 if rejected else 0
    n = clear(directory)
    print(f"removed {n} program(s) from {directory}")
    return 0


__all__ = ["main", "export", "import_", "clear", "summarize", "check_entry", "default_dir"]
