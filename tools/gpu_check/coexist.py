"""tpuc beside PyTorch's own accelerator (issue 31, python/tpuc_entry): one process of the check.

usage: coexist.py {ref,tpu,both} REF_DEVICE

ref   no TPUC_* variable and autoload on (as a user's plain `import torch`): which accelerator
      PyTorch reports, whether tpuc was imported, then a few AdamW steps on REF_DEVICE (cuda:
      the backward that once failed with `opt_ready_stream && opt_parent_stream`).
tpu   TPUC_PLATFORM set by the caller: the same steps on "tpu".
both  TPUC_PLATFORM set: REF_DEVICE and "tpu" trained in one process, one after the other.

Prints one line `RESULT {json}`.
"""
from __future__ import annotations

import json
import sys
import traceback
from typing import Any


def train(torch: Any, device: str, steps: int = 3) -> list[float]:
    """A two-layer MLP regression, AdamW, `steps` steps; the same weights and data anywhere."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 64, generator=g)
    y = torch.randn(32, 8, generator=g)
    model = model.to(device)
    x, y = x.to(device), y.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    return losses


def main(which: str, ref: str) -> dict[str, Any]:
    out: dict[str, Any] = {"case": which}
    import torch

    import tpuc_entry

    acc = torch.accelerator.current_accelerator() if hasattr(torch, "accelerator") else None
    out.update(accelerator=str(acc.type) if acc is not None else None,
               tpuc_imported="tpuc" in sys.modules,
               autoload_decision=list(tpuc_entry.decision) if tpuc_entry.decision else None)
    if which in ("ref", "both"):
        out["ref_losses"] = train(torch, ref)
    if which in ("tpu", "both"):
        import tpuc  # noqa: F401  (a no-op when autoload registered it)

        out["tpu_losses"] = train(torch, "tpu")
        out["tpu_device_name"] = torch.tpu.get_device_name()
    return out


if __name__ == "__main__":
    case, ref_device = sys.argv[1], sys.argv[2]
    try:
        res = main(case, ref_device)
        res["ok"] = True
    except Exception as e:  # noqa: BLE001 — the failure is the finding
        res = {"case": case, "ok": False, "error": f"{type(e).__name__}: {e}"[:600],
               "traceback": traceback.format_exc()[-1500:]}
    print("RESULT " + json.dumps(res), flush=True)
    sys.exit(0 if res["ok"] else 1)
