"""`tpuc cache`: warm a cache by running a program, export it, import it elsewhere, and a
fresh process then compiles nothing and computes the same values; an archive with
foreign or damaged files is refused entry by entry."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile

_PROGRAM = r"""
import json, torch
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to("tpu")
opt = torch.optim.SGD(m.parameters(), lr=0.1)
x = torch.randn(8, 16).to("tpu")
for _ in range(2):
    loss = m(x).square().mean(); opt.zero_grad(); loss.backward(); opt.step()
s = torch.tpu.stats()
# loaded from disk: by the op that needed it, or ahead of it by the preload
print(json.dumps({"loss": loss.item(), "compiles": s["compiles"],
                  "disk_hits": s["disk_hits"] + s["preloaded"]}))
"""


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=180,
                          env=dict(os.environ, **(env or {})))


def _tpuc(*args: str) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "tpuc", *args])


def test_warm_export_import_round_trip(tmp_path) -> None:
    a, b, archive = tmp_path / "a", tmp_path / "b", tmp_path / "cache.tar.gz"
    r = _tpuc("cache", "warm", "--dir", str(a), "--", sys.executable, "-c", _PROGRAM)
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout.strip().splitlines()[-1])
    assert first["compiles"] > 0 and first["disk_hits"] == 0
    n = len([f for f in os.listdir(a) if f.endswith(".tpx")])
    assert n == first["compiles"]  # every program compiled went to disk
    assert "program(s) added" in r.stderr

    r = _tpuc("cache", "info", "--dir", str(a))
    assert r.returncode == 0 and f"{n} program(s)" in r.stdout, r.stdout + r.stderr
    r = _tpuc("cache", "export", str(archive), "--dir", str(a))
    assert r.returncode == 0, r.stderr
    from tpuc import cache_cli  # the rest in this process: each `tpuc` command imports torch

    assert cache_cli.main(["import", str(archive), "--dir", str(b)]) == 0
    assert cache_cli.import_(str(b), str(archive)) == (0, n, [])  # again: nothing new

    r = _run([sys.executable, "-c", _PROGRAM], env={"TPUC_CACHE_DIR": str(b)})
    assert r.returncode == 0, r.stderr
    second = json.loads(r.stdout.strip().splitlines()[-1])
    assert second["compiles"] == 0 and second["disk_hits"] == n
    assert second["loss"] == first["loss"]  # the same executables: bit for bit

    assert cache_cli.main(["clear", "--dir", str(b)]) == 0
    assert not [f for f in os.listdir(b) if f.endswith(".tpx")]


def test_import_refuses_foreign_and_damaged_entries(tmp_path) -> None:
    from tpuc import cache_cli

    key = "ab" * 32
    good = (cache_cli.MAGICS[1] + bytes.fromhex(key) + (4).to_bytes(8, "little") + bytes(8)
            + b"data")
    archive = tmp_path / "mixed.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in [(f"{key}.tpx", good),
                           ("../" + "cd" * 32 + ".tpx", good),          # leaves the directory
                           ("ef" * 32 + ".tpx", good),                  # header names another key
                           ("12" * 32 + ".tpx", good[:20]),             # truncated
                           ("notes.txt", b"hello")]:                    # not an entry
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    dest = tmp_path / "d"
    added, present, rejected = cache_cli.import_(str(dest), str(archive))
    assert (added, present) == (1, 0)
    assert len(rejected) == 4, rejected
    assert sorted(os.listdir(dest)) == [f"{key}.tpx"]
    assert not (tmp_path / ("cd" * 32 + ".tpx")).exists()
    assert cache_cli.main(["import", str(archive), "--dir", str(tmp_path / "e")]) == 1


def test_warm_without_a_program_says_how() -> None:
    r = _tpuc("cache", "warm", "--dir", "/tmp/unused-tpuc-cache")
    assert r.returncode == 2 and "tpuc cache warm -- python train.py" in r.stderr
