"""What the device-side bounds check (TPUC_CHECK_BOUNDS=1) costs in strict mode.

Side by side in one process, interleaved: the same work with the check off (the default
in strict mode) and on. Two workloads: an index-heavy loop (embedding lookups, gather,
index_select, scatter_add on small tensors, where the check's extra reduction and result
are largest relative to the op) and the example Llama training step (embedding, its
backward and cross-entropy's gather among ~500 ops). Debug mode always checks; its cost is
the per-op wait, not the check."""
from __future__ import annotations

import torch

from ..timing import interleave
from .common import eager_mode, sync, tpu_available, train_step_fn

COMMAND = "python -m bench.run --cases bounds"


def _index_loop(n: int):
    table = torch.randn(1000, 64, device="tpu")
    idx = torch.randint(0, 1000, (8, 128), device="tpu")
    src = torch.randn(256, 64, device="tpu")
    rows = torch.randint(0, 1000, (256,), device="tpu")

    def loop():
        acc = torch.zeros(1000, 64, device="tpu")
        for _ in range(n):
            e = torch.nn.functional.embedding(idx, table)
            g = table.gather(0, rows[:, None].expand(-1, 64))
            s = table.index_select(0, rows)
            acc.index_add_(0, rows, src + g + s)
            e.sum()
        sync("tpu")

    return loop


def _train_step(quick: bool):
    from llama import Llama, LlamaConfig

    cfg = LlamaConfig(vocab_size=256, dim=128 if quick else 256, n_layers=2 if quick else 6,
                      n_heads=4 if quick else 8, hidden_dim=344 if quick else 688, max_seq_len=64)
    torch.manual_seed(0)
    model = Llama(cfg).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.vocab_size, (4, 64), generator=g).to("tpu")
    y = torch.randint(0, cfg.vocab_size, (4, 64), generator=g).to("tpu")
    step = train_step_fn(model, opt, x, y)
    steps = 2 if quick else 5

    def loop():
        for _ in range(steps):
            loss = step()
        loss.item()

    return loop, steps


def _with_checks(fn, on: bool):
    def run():
        prev = torch.tpu.check_bounds()
        torch.tpu.set_check_bounds(on)
        try:
            fn()
        finally:
            torch.tpu.set_check_bounds(prev)

    return run


def run(quick: bool) -> dict:
    if not tpu_available():
        return {"title": "Bounds check cost", "command": COMMAND, "rows": [], "error": "no tpu device"}
    repeats = 3 if quick else 9
    rows = []
    with eager_mode("strict"):
        n = 10 if quick else 50
        loop = _index_loop(n)
        res = interleave({"off": _with_checks(loop, False), "on": _with_checks(loop, True)}, repeats)
        off, on = res["off"].summary(1e3 / n), res["on"].summary(1e3 / n)
        rows.append({"workload": "index-heavy loop (5 indexing ops + 2 others)", "unit": "ms/iteration",
                     "off": off, "on": on, "ratio": on["median"] / off["median"]})
        step, steps = _train_step(quick)
        res = interleave({"off": _with_checks(step, False), "on": _with_checks(step, True)}, repeats)
        off, on = res["off"].summary(1e3 / steps), res["on"].summary(1e3 / steps)
        rows.append({"workload": "Llama train step (strict)", "unit": "ms/step",
                     "off": off, "on": on, "ratio": on["median"] / off["median"]})
    return {
        "title": "Bounds check: strict mode with TPUC_CHECK_BOUNDS off and on",
        "command": COMMAND,
        "rows": rows,
        "notes": "medians [min, max] of interleaved repetitions in one process; ratio = on / off "
                 "(1.00: no cost). The check adds a comparison and two reductions per index "
                 "tensor inside the op's program and one 16-byte result, read at the next sync.",
    }
