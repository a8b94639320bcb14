"""The live device buffer count and device bytes are flat over a training run: nothing
leaks per step (a longer run with host RSS is `make soak`, plotted in docs/reliability.md)."""
from __future__ import annotations

from .soak import run


def test_live_buffers_flat_over_50_strict_steps() -> None:
    s = run("strict", 50, every=5)
    settled = s[1:]  # after the first steps (optimizer state appears at step 1)
    assert len({r["live_buffers"] for r in settled}) == 1, [r["live_buffers"] for r in s]
    assert len({r["device_bytes"] for r in settled}) == 1, [r["device_bytes"] for r in s]


def test_live_buffers_flat_over_20_compiled_steps() -> None:
    s = run("compiled", 20, every=4)
    settled = s[1:]
    assert len({r["live_buffers"] for r in settled}) == 1, [r["live_buffers"] for r in s]
