"""The disk cache's preload (csrc/core/runtime/preload.c): a second process with a warm
TPUC_CACHE_DIR has its programs in memory before its ops ask for them.

Each scenario runs in a child process (bounded in time) on its own copy of a cache directory
one first process filled. A training run's parameters are compared
bit for bit between the two processes (the same executables must give the same bits), and
with PyTorch on the CPU in float64 (bounds from float32 rounding over a few steps)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# A few AdamW steps of a small MLP trained in place on the device; prints the
# parameters' bits, the float64 CPU reference's largest deviation and the stats.
TRAIN = r"""
import json, sys, torch
torch.manual_seed(0)
def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 4))
x, y = torch.randn(64, 16), torch.randn(64, 4)
m = make().to("tpu")
ref = make().double()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
xd, yd = x.to("tpu"), y.to("tpu")
for step in range(4):
    for model, o, xx, yy in ((m, opt, xd, yd), (ref, ropt, x.double(), y.double())):
        loss = ((model(xx) - yy) ** 2).mean()
        o.zero_grad()
        loss.backward()
        o.step()
dev = max(float((p.cpu().double() - q).abs().max()) for p, q in zip(m.parameters(), ref.parameters()))
bits = [p.detach().cpu().view(torch.int32).flatten().tolist() for p in m.parameters()]
s = torch.tpu.stats()
keys = ["compiles", "disk_hits", "preloaded", "cached_executables", "disk_corrupt", "compile_joins"]
print(json.dumps({"bits": bits, "dev": dev, **{k: s[k] for k in keys}}))
"""

EXIT_AT_ONCE = r"""
import torch
torch.ones(2, device="tpu").add_(1).cpu()  # the runtime starts, its preload with it
print("started", torch.tpu.stats()["preloaded"], flush=True)
"""


def _run(code: str, cache: Path, **env: str) -> subprocess.CompletedProcess:
    e = {**os.environ, "TPUC_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1"}
    e.pop("TPUC_CACHE_PRELOAD", None)
    e.update(env)
    out = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _train(cache: Path, **env: str) -> dict:
    return json.loads(_run(TRAIN, cache, **env).stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A cache directory one process filled, and that process's result."""
    cache = tmp_path_factory.mktemp("preload") / "cache"
    first = _train(cache)
    assert first["compiles"] > 0 and first["preloaded"] == 0
    # float32 AdamW against float64: a few ulps of the parameters' size after 4 steps
    assert first["dev"] < 1e-4
    return cache, first


def _copy(cold: tuple[Path, dict], tmp_path: Path) -> Path:
    dest = tmp_path / "cache"
    shutil.copytree(cold[0], dest, copy_function=shutil.copy2)  # mtimes kept: the same order
    return dest


def test_warm_process_preloads_and_matches_bit_for_bit(cold, tmp_path: Path) -> None:
    warm = _train(_copy(cold, tmp_path))
    assert warm["compiles"] == 0 and warm["preloaded"] > 0, warm
    # each program came into memory once: from the preload or by its op, never both
    assert warm["preloaded"] + warm["disk_hits"] == warm["cached_executables"], warm
    assert warm["bits"] == cold[1]["bits"] and warm["dev"] < 1e-4


def test_preload_off_loads_on_demand(cold, tmp_path: Path) -> None:
    off = _train(_copy(cold, tmp_path), TPUC_CACHE_PRELOAD="0")
    assert off["preloaded"] == 0 and off["compiles"] == 0
    assert off["disk_hits"] == off["cached_executables"] > 0
    assert off["bits"] == cold[1]["bits"]


def test_truncated_file_is_removed_and_recompiled(cold, tmp_path: Path) -> None:
    cache = _copy(cold, tmp_path)
    files = sorted(cache.glob("*.tpx"))
    victim = files[len(files) // 2]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    warm = _train(cache)
    assert warm["disk_corrupt"] == 1 and warm["compiles"] == 1, warm
    assert warm["preloaded"] > 0 and warm["bits"] == cold[1]["bits"]
    assert victim.exists() and victim.stat().st_size > 0  # written again, whole


def test_exit_while_preloading_is_clean(cold, tmp_path: Path) -> None:
    """A process that ends right after it started, its preload loading the directory's
    programs meanwhile: the exit stops the preload first (a load running into the exit
    handlers would crash in LLVM, as a compile did)."""
    cache = _copy(cold, tmp_path)
    assert len(list(cache.glob("*.tpx"))) >= 20
    out = _run(EXIT_AT_ONCE, cache)
    assert out.stdout.startswith("started"), out.stdout
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
