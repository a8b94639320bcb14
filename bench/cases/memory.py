"""Peak device bytes of a training step against parameters + gradients +
optimizer state, per execution mode, with and without buffer donation."""
from __future__ import annotations

import torch

from .common import compiled_available, eager_mode, fused_available, tpu_available, train_step_fn

COMMAND = "make bench BENCH_CASES=memory"


def _measure(cfg, contender: str, steps: int, batch: int = 8, seq: int = 128) -> dict:
    from llama import Llama

    from tpuc import _C

    torch.manual_seed(0)
    model = Llama(cfg).to("tpu")
    compiled = contender.startswith("tpu compiled")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=compiled)
    x = torch.randint(0, cfg.vocab_size, (batch, seq)).to("tpu")

    step = train_step_fn(model, opt, x, x)
    if compiled:
        step = torch.compile(step, backend="tpu")
    _C._set_donation("no donation" not in contender)
    peak = 0
    try:
        with eager_mode("fused" if contender == "tpu fused" else "strict"):
            for i in range(steps):
                torch.tpu.synchronize()
                torch.tpu.reset_peak_memory_stats()
                step().item()
                torch.tpu.synchronize()
                peak = torch.tpu.max_memory_allocated()  # the last (steady) step's
    finally:
        _C._set_donation(True)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    state_bytes = sum(t.numel() * t.element_size() for s in opt.state.values()
                      for t in s.values() if torch.is_tensor(t))
    floor = 2 * param_bytes + state_bytes  # params + grads + optimizer state
    return {"contender": contender, "tokens": f"{batch} x {seq}", "peak_bytes": peak,
            "params_grads_state_bytes": floor,
            "ratio": peak / floor, "other_bytes": peak - floor}


def run(quick: bool) -> dict:
    if not tpu_available():
        return {"title": "Memory", "command": COMMAND, "rows": [],
                "notes": "tpu unavailable on this install"}
    from llama import LlamaConfig

    cfg = LlamaConfig(vocab_size=256, dim=256, n_layers=6 if not quick else 2, n_heads=8,
                      hidden_dim=688, max_seq_len=128)
    contenders = ["tpu strict"]
    if fused_available():
        contenders.append("tpu fused")
    if compiled_available():
        contenders += ["tpu compiled", "tpu compiled, no donation"]
    rows = [_measure(cfg, c, 3) for c in contenders]
    # the same step with almost no activations (1 x 16 tokens): what is left is
    # parameters, gradients, optimizer state and what the update itself needs
    rows += [_measure(cfg, c, 3, batch=1, seq=16) for c in contenders if "compiled" in c]
    return {
        "title": "Memory: peak device bytes per train step",
        "command": COMMAND,
        "rows": rows,
        "notes": "tpuc's accounting of live buffers plus each program's scratch memory as the "
                 "compiler reports it (PJRT compiled memory stats), at the third step of the "
                 "example model (batch 8 x 128, AdamW). Ratio = peak / (parameters + gradients "
                 "+ AdamW state); 'other' = the rest of the peak: activations kept for the "
                 "backward and temporaries. 'no donation' = TPUC_DONATE=0. The 1 x 16 rows run "
                 "the compiled step with almost no activations, isolating what donation "
                 "saves.",
    }
