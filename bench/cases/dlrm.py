"""DLRM training samples/s on "tpu" vs the CPU, side by side (medians of
interleaved steps). Needs torchrec: run in the TorchRec venv,
``make bench-dlrm`` (not one of bench.run's default cases)."""
from __future__ import annotations

import json
import os
import sys

import torch

import tpuc  # noqa: F401

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "rec"))
import dlrm_setup as d  # noqa: E402

from ..timing import interleave  # noqa: E402

COMMAND = "make bench-dlrm"
SHAPE = d.Shape(batch=256, dense_in=13, dim=16, rows=(1000,) * 8, max_len=4,
                dense_layers=(64, 16), over_layers=(64, 1))


def _stepper(device: str):  # type: ignore[no-untyped-def]
    model = d.build(SHAPE, seed=0).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dense, kjt, labels = d.batch(SHAPE, 0)
    dense, kjt, labels = dense.to(device), d.kjt_to(kjt, device), labels.to(device)

    def step() -> None:
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(dense, kjt).squeeze(-1), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()  # waits for the step

    return step


def run(quick: bool = False) -> dict:
    repeats = 5 if quick else 20
    samples = interleave({dev: _stepper(dev) for dev in ("tpu", "cpu")}, repeats, warmup=3)
    out = {"batch": SHAPE.batch, "tables": len(SHAPE.rows), "dim": SHAPE.dim}
    for dev, s in samples.items():
        med = s.summary()["median"]
        out[f"{dev}_samples_per_s"] = round(SHAPE.batch / med, 1)
        out[f"{dev}_step_ms_median"] = round(med * 1e3, 3)
    out["fallbacks"] = dict(torch.tpu.stats()["fallbacks"])
    return out


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=1))
