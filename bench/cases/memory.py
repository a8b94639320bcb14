"""Peak device bytes of a training step against parameters + gradients +
optimizer state."""
from __future__ import annotations

import torch

from .common import tpu_available

COMMAND = "make bench BENCH_CASES=memory"


def run(quick: bool) -> dict:
    if not tpu_available():
        return {"title": "Memory", "command": COMMAND, "rows": [],
                "notes": "tpu unavailable on this install"}
    from llama import Llama, LlamaConfig

    cfg = LlamaConfig(vocab_size=256, dim=256, n_layers=6 if not quick else 2, n_heads=8,
                      hidden_dim=688, max_seq_len=128)
    torch.manual_seed(0)
    model = Llama(cfg).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 256, (8, 128)).to("tpu")
    rows = []
    for step in range(3):
        torch.tpu.synchronize()
        torch.tpu.reset_peak_memory_stats()
        _, loss = model(x, x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()
        torch.tpu.synchronize()
        param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        state_bytes = sum(t.numel() * t.element_size() for s in opt.state.values()
                          for t in s.values() if torch.is_tensor(t))
        floor = 2 * param_bytes + state_bytes  # params + grads + optimizer state
        peak = torch.tpu.max_memory_allocated()
        rows.append({"step": step + 1, "peak_bytes": peak, "params_grads_state_bytes": floor,
                     "ratio": peak / floor})
    return {
        "title": "Memory: peak device bytes per train step",
        "command": COMMAND,
        "rows": rows,
        "notes": "tpuc's own accounting of live buffers (the XLA CPU plugin reports none). "
                 "Ratio = peak / (parameters + gradients + AdamW state).",
    }
