"""TorchTitan 0.3.0's llama3 debugmodel (one process, no Trainer, tpuc's swaps): tokens/s,
MFU against the measured matmul peak and peak device memory on "tpu" (strict, fused) vs the
same model on the CPU; and the fused linear + cross-entropy loss's peak memory vs the plain
loss. Interleaved contenders, medians."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .common import eager_mode, fused_available, tpu_available

COMMAND = "python -m bench.run --cases torchtitan"


def _model(device: str, n_layers: int):
    from torchtitan.models.llama3 import model_registry

    from tpuc.integrations.torchtitan import swaps

    cfg = model_registry("debugmodel").model
    cfg.layers = cfg.layers[:n_layers]
    torch.manual_seed(0)
    with torch.device("meta"):
        m = cfg.build()
    m.to_empty(device=device)
    m.init_weights(buffer_device=torch.device(device))
    swaps.swap_attention_modules(m)
    return m


def _loss_memory() -> list[dict]:
    from tpuc.integrations.torchtitan import swaps

    N, D, V = 2048, 64, 2048
    y = torch.randint(0, V, (N,)).to("tpu")
    rows = []
    for name, fn in (("plain loss", lambda h, w: F.cross_entropy(h @ w.t(), y, reduction="sum")),
                     ("fused linear+CE", lambda h, w: swaps.linear_cross_entropy(h, w, y, chunk=256))):
        h = (torch.randn(N, D) * 0.1).to("tpu").requires_grad_()
        w = (torch.randn(V, D) * 0.1).to("tpu").requires_grad_()
        torch.tpu.synchronize()
        base = torch.tpu.memory_allocated()
        torch.tpu.reset_peak_memory_stats()
        fn(h, w).backward()
        torch.tpu.synchronize()
        rows.append({"what": f"{name} ({N} tokens x {V} vocab)",
                     "peak_mib": (torch.tpu.max_memory_allocated() - base) / 2**20})
    return rows


def run(quick: bool) -> dict:
    out: dict = {"title": "TorchTitan llama3 debugmodel (one process)", "command": COMMAND, "rows": []}
    try:
        import torchtitan  # noqa: F401
    except ImportError:
        out["error"] = "torchtitan not installed (make titan-setup)"
        return out
    if not tpu_available():
        out["error"] = "tpu unavailable"
        return out
    from bench.timing import interleave

    from tpuc.integrations.torchtitan.peak import measured_peak

    n_layers, B, L, repeats = (2, 2, 64, 3) if quick else (6, 4, 128, 5)
    peak = measured_peak()
    x = torch.randint(0, 2048, (B, L + 1))
    contenders, params, mem = {}, 0, {}
    for dev, mode in (("cpu", None), ("tpu", "strict"), ("tpu", "fused")):
        if mode == "fused" and not fused_available():
            continue
        m = _model(dev, n_layers)
        params = sum(p.numel() for p in m.parameters())
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, foreach=True)
        xi, yi = x[:, :-1].to(dev), x[:, 1:].to(dev)
        name = "cpu eager" if dev == "cpu" else f"tpu {mode}"

        def step(m=m, opt=opt, xi=xi, yi=yi, mode=mode, name=name):
            with eager_mode(mode or "strict"):
                if mode:
                    torch.tpu.reset_peak_memory_stats()
                loss = F.cross_entropy(m(xi).flatten(0, 1), yi.flatten())
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                loss.item()
                if mode:
                    mem[name] = torch.tpu.max_memory_allocated()

        step()
        step()  # warm: programs compiled
        contenders[name] = step
    times = interleave(contenders, repeats)
    tokens = B * L
    for name, t in times.items():
        s = t.summary()
        tps = tokens / s["median"]
        out["rows"].append({"contender": name, "tokens_per_s": tps, "step_s": s,
                            "mfu": 6 * params * tps / peak,
                            "peak_mib": mem.get(name, 0) / 2**20 if name in mem else None})
    out["params"] = params
    out["tokens"] = f"{B} x {L}"
    out["peak_gflops"] = peak / 1e9
    out["loss_memory"] = _loss_memory()
    return out
