"""Why fused mode raises the MoE recipe's device peak: TorchTitan's routed-expert SwiGLU alone.

The experts of qwen3 debugmodel_moe at the Trainer bench's sizes (16 tokens x top-8 = 128 rows,
dim 256, hidden 768, 64 experts; bf16 as TorchTitan casts them): three ``aten::_grouped_mm``
(w1, w3, w2) forward and backward, from one routing, in strict and in fused mode, each in a
fresh process. Reports the device peak above the start (``torch.tpu.max_memory_allocated``:
live buffers plus each program's scratch, docs/execution.md), the programs launched per call
and the value computed (the same in both modes). Peak bytes and launch counts do not depend on
the machine's load. Run: ``.venv/bin/python -m bench.moe_fused_peak``.
"""
from __future__ import annotations

import json
import subprocess
import sys

E, D, F, R = 64, 256, 768, 128


def _one(mode: str) -> dict:
    import torch

    torch.tpu.set_eager_mode(mode)
    g = torch.Generator().manual_seed(0)
    w1 = (torch.randn(E, F, D, generator=g) * 0.02).to("tpu").requires_grad_()
    w3 = (torch.randn(E, F, D, generator=g) * 0.02).to("tpu").requires_grad_()
    w2 = (torch.randn(E, D, F, generator=g) * 0.02).to("tpu").requires_grad_()
    counts = torch.bincount(torch.randint(0, E, (R,), generator=g), minlength=E)
    offs = torch.cumsum(counts, 0, dtype=torch.int32).to("tpu")
    x = torch.randn(R, D, generator=g).to("tpu").requires_grad_()
    rows = []
    for _ in range(3):
        torch.tpu.synchronize()
        torch.tpu.reset_peak_memory_stats()
        base, ex0 = torch.tpu.memory_allocated(), torch.tpu.stats()["executions"]
        gmm = torch._grouped_mm
        h = torch.nn.functional.silu(gmm(x.bfloat16(), w1.bfloat16().transpose(-2, -1), offs=offs))
        h = h * gmm(x.bfloat16(), w3.bfloat16().transpose(-2, -1), offs=offs)
        gmm(h, w2.bfloat16().transpose(-2, -1), offs=offs).float().square().sum().backward()
        value = float(w1.grad.float().sum())
        torch.tpu.synchronize()
        rows.append({"peak_above_start_mib": (torch.tpu.max_memory_allocated() - base) / 2**20,
                     "executions": torch.tpu.stats()["executions"] - ex0, "value": value})
        for p in (w1, w2, w3, x):
            p.grad = None
    return {"mode": mode, "calls": rows}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("strict", "fused"):
        print(json.dumps(_one(sys.argv[1])))
        return
    for mode in ("strict", "fused"):
        out = subprocess.run([sys.executable, "-m", "bench.moe_fused_peak", mode], check=True,
                             capture_output=True, text=True).stdout
        got = json.loads(out.strip().splitlines()[-1])
        last = got["calls"][-1]
        print(f"{mode:6s}: peak above start {last['peak_above_start_mib']:.0f} MiB, "
              f"{last['executions']} programs per call, value {last['value']:.6g}")


if __name__ == "__main__":
    main()
