"""DLRM on "tpu" vs PyTorch on the CPU, side by side (medians of interleaved repetitions):
training samples/s of a whole DLRM step, and the embedding lookup's bandwidth alone (bytes of
embedding rows gathered per second by an ``EmbeddingBagCollection``, forward and backward).
Needs torchrec: run in the TorchRec venv, ``make bench-dlrm`` (not one of bench.run's default
cases). Writes bench/results/dlrm.json; bench/own_pages.py renders it into docs/torchrec.md."""
from __future__ import annotations

import json
import os
import sys

import torch

import tpuc  # noqa: F401

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "rec"))
import dlrm_setup as d  # noqa: E402
from torchrec.modules.embedding_configs import EmbeddingBagConfig  # noqa: E402
from torchrec.modules.embedding_modules import EmbeddingBagCollection  # noqa: E402

from ..timing import interleave  # noqa: E402

COMMAND = "make bench-dlrm"
SHAPE = d.Shape(batch=256, dense_in=13, dim=16, rows=(1000,) * 8, max_len=4,
                dense_layers=(64, 16), over_layers=(64, 1))
# the lookup alone: 4 tables of 64-float rows (256 bytes a row), a small and a larger table size;
# max_len 8 -> batch * 4 ids per table per lookup (dlrm_setup.batch: half the cap on average)
LOOKUP_DIM = 64
LOOKUP_TABLES = 4
LOOKUP_BATCH = 2048
LOOKUP_MAX_LEN = 8
LOOKUP_ROWS = (10_000, 200_000)


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


def _sync(device: str) -> None:
    if device == "tpu":
        torch.tpu.synchronize()


def _lookup(device: str, rows: int):  # type: ignore[no-untyped-def]
    """(forward, backward) callables of one EmbeddingBagCollection lookup on `device`, and the
    ids one lookup gathers. The backward is the table gradients of a retained forward (dense,
    table-sized, as nn.EmbeddingBag with sparse=False produces them)."""
    shape = d.Shape(batch=LOOKUP_BATCH, dim=LOOKUP_DIM, rows=(rows,) * LOOKUP_TABLES,
                    max_len=LOOKUP_MAX_LEN)
    torch.manual_seed(0)
    ebc = EmbeddingBagCollection(tables=[
        EmbeddingBagConfig(name=f"t{i}", embedding_dim=LOOKUP_DIM, num_embeddings=rows,
                           feature_names=[k]) for i, k in enumerate(d.keys(shape))]).to(device)
    weights = list(ebc.parameters())
    _, kjt, _ = d.batch(shape, 0)
    ids = int(kjt.values().numel())
    kjt = d.kjt_to(kjt, device)
    grad = torch.ones(shape.batch, LOOKUP_TABLES * LOOKUP_DIM, device=device)
    out = ebc(kjt).values()  # kept for the backward

    def forward() -> None:
        ebc(kjt).values()
        _sync(device)

    def backward() -> None:
        torch.autograd.grad(out, weights, grad, retain_graph=True)
        _sync(device)

    return forward, backward, ids


def lookup_rows(repeats: int) -> list[dict]:
    rows_out = []
    for rows in LOOKUP_ROWS:
        fns = {dev: _lookup(dev, rows) for dev in ("tpu", "cpu")}
        ids = fns["tpu"][2]
        gathered = ids * LOOKUP_DIM * 4  # float32 rows
        for i, direction in ((0, "forward"), (1, "backward")):
            s = interleave({dev: f[i] for dev, f in fns.items()}, repeats, warmup=3)
            row = {"direction": direction, "tables": LOOKUP_TABLES, "rows_per_table": rows,
                   "dim": LOOKUP_DIM, "table_mib": round(rows * LOOKUP_DIM * 4 / 2**20, 1),
                   "ids": ids, "bytes": gathered}
            for dev, smp in s.items():
                med = smp.summary()["median"]
                row[f"{dev}_ms_median"] = round(med * 1e3, 3)
                row[f"{dev}_GBps"] = round(gathered / med / 1e9, 3)
            row["tpu_over_cpu"] = round(row["tpu_GBps"] / row["cpu_GBps"], 2)
            rows_out.append(row)
    return rows_out


def run(quick: bool = False) -> dict:
    repeats = 5 if quick else 20
    samples = interleave({dev: _stepper(dev) for dev in ("tpu", "cpu")}, repeats, warmup=3)
    out: dict = {"title": "DLRM: \"tpu\" vs PyTorch CPU (training step, embedding lookup)",
                 "command": COMMAND, "quick": quick, "repeats": repeats,
                 "batch": SHAPE.batch, "tables": len(SHAPE.rows), "rows_per_table": SHAPE.rows[0],
                 "dim": SHAPE.dim, "cpu_threads": torch.get_num_threads()}
    for dev, s in samples.items():
        med = s.summary()["median"]
        out[f"{dev}_samples_per_s"] = round(SHAPE.batch / med, 1)
        out[f"{dev}_step_ms_median"] = round(med * 1e3, 3)
    out["lookup_rows"] = lookup_rows(repeats)
    out["fallbacks"] = dict(torch.tpu.stats()["fallbacks"])
    return out


def main() -> None:
    sys.path.insert(0, ROOT)
    from bench import env, own_pages

    result = run(quick="--quick" in sys.argv)
    result["case"] = "dlrm"
    result["machine"] = env.describe()
    result["machine"]["loadavg"] = list(os.getloadavg())
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "dlrm.json"), "w") as f:
        json.dump(result, f, indent=2, default=str)
    own_pages.render(ROOT)
    print(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
