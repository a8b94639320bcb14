"""Interleaved timing: contenders run A B A B ... in the same process after a
warm-up, so that a noisy shared machine affects them alike. Reports medians
with min and max."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Sample:
    """Seconds per repetition of one contender."""

    times: list[float] = field(default_factory=list)

    def summary(self, scale: float = 1.0) -> dict:
        t = sorted(x * scale for x in self.times)
        return {"median": statistics.median(t), "min": t[0], "max": t[-1], "n": len(t)}


def interleave(contenders: dict[str, Callable[[], None]], repeats: int,
               warmup: int = 1) -> dict[str, Sample]:
    """Times each callable `repeats` times, round-robin, after `warmup` calls each."""
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    out = {name: Sample() for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            fn()
            out[name].times.append(time.perf_counter() - t0)
    return out
