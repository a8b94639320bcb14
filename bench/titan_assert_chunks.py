"""What RoPE's torch._assert_async costs a TorchTitan step on "tpu", in counts.

TorchTitan 0.3.0's llama3 debugmodel (tpuc's swaps, positions given so RoPE checks them once
per layer) trains a few AdamW steps in fused mode; per step it reports the fused chunks run
(`flushes`), programs launched (`executions`) and CPU fallbacks, for two versions of the check:

- "device assert": torch._assert_async as tpuc runs it now (a deferred device-side assert);
- "host read (as the fallback did)": the same condition read on the host at the assert
  (`bool(cond)`), which is what the CPU fallback of aten::_assert_async.msg did: it ends the
  fused chunk at every layer.

Counts do not depend on the machine's load; the ms per step are printed too but are noisy on
a shared machine. Run: `.venv/bin/python -m bench.titan_assert_chunks [--layers N] [--steps N]`.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F


def _model(n_layers: int):
    from torchtitan.models.llama3 import model_registry

    from tpuc.integrations.torchtitan import swaps

    cfg = model_registry("debugmodel").model
    cfg.layers = cfg.layers[:n_layers]
    torch.manual_seed(0)
    with torch.device("meta"):
        m = cfg.build()
    m.to_empty(device="tpu")
    m.init_weights(buffer_device=torch.device("tpu"))
    swaps.swap_attention_modules(m)
    return m


def run(n_layers: int, steps: int, host_read: bool) -> list[dict]:
    real = torch._assert_async
    if host_read:  # the fallback's effect: the condition read on the host, at the assert
        def emulated(cond: torch.Tensor, msg: str = "") -> None:
            if not bool(cond):
                raise RuntimeError(msg)
        torch._assert_async = emulated  # type: ignore[assignment]
    try:
        model = _model(n_layers)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        vocab = model.tok_embeddings.weight.shape[0]
        g = torch.Generator().manual_seed(7)
        x = torch.randint(0, vocab, (2, 32), generator=g).to("tpu")
        y = torch.randint(0, vocab, (2, 32), generator=g).to("tpu")
        pos = torch.arange(32).repeat(2, 1).to("tpu")
        rows = []
        with torch.tpu.eager_mode("fused"):
            for step in range(steps):
                s0 = torch.tpu.stats()
                t0 = time.perf_counter()
                logits = model(x, positions=pos)
                loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                loss.item()
                ms = (time.perf_counter() - t0) * 1e3
                s1 = torch.tpu.stats()
                fb = sum(s1["fallbacks"].values()) - sum(s0["fallbacks"].values())
                rows.append({"step": step + 1, "flushes": s1["flushes"] - s0["flushes"],
                             "executions": s1["executions"] - s0["executions"], "fallbacks": fb,
                             "ms": ms})
        return rows
    finally:
        torch._assert_async = real  # type: ignore[assignment]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    import tpuc  # noqa: F401

    for name, host_read in (("device assert", False), ("host read (as the fallback did)", True)):
        for r in run(a.layers, a.steps, host_read):
            print(f"{name:34s} step {r['step']}: flushes {r['flushes']:3d}  executions "
                  f"{r['executions']:3d}  fallbacks {r['fallbacks']}  {r['ms']:8.1f} ms")


if __name__ == "__main__":
    main()
