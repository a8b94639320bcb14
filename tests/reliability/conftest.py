"""Shared set-up of the reliability tests: the device helpers, and each test leaves the
eager mode and the bounds-check switch as it found them."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tpu_testing  # noqa: E402,F401  (registers "tpu", quiets fallback warnings)


@pytest.fixture(autouse=True)
def restore_modes() -> Iterator[None]:
    mode, bounds = torch.tpu.get_eager_mode(), torch.tpu.check_bounds()
    try:
        yield
    finally:
        torch.tpu.set_eager_mode(mode)
        torch.tpu.set_check_bounds(bounds)
