"""Shared by the cases: which contenders exist on this install, syncing."""
from __future__ import annotations

import os
import sys
from typing import Callable

import torch

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)


def tpu_available() -> bool:
    return hasattr(torch, "tpu") and torch.tpu.is_available()


def fused_available() -> bool:
    return tpu_available() and hasattr(torch.tpu, "set_eager_mode")


def compiled_available() -> bool:
    if not tpu_available():
        return False
    try:
        from torch._dynamo import list_backends

        return "tpu" in list_backends(exclude_tags=())
    except Exception:
        return False


def train_step_fn(model, opt, x, y):
    """The example model's training step: forward, zero_grad, backward, step."""
    def step():
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def example_step(cfg, device: str, batch: int, seq: int, capturable: bool = False,
                 wrap: Callable | None = None):
    """The example Llama of ``cfg`` on ``device`` (seed 0), optionally wrapped (``wrap(model)``,
    e.g. checkpointed blocks), its AdamW (``capturable`` for a compiled step) and one fixed batch
    of ``batch`` x ``seq`` tokens: ``(model, opt, x, y, step)``, the same data for every
    contender."""
    from llama import Llama

    torch.manual_seed(0)
    model = Llama(cfg).to(device)
    if wrap is not None:
        model = wrap(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=capturable)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.vocab_size, (batch, seq), generator=g).to(device)
    y = torch.randint(0, cfg.vocab_size, (batch, seq), generator=g).to(device)
    return model, opt, x, y, train_step_fn(model, opt, x, y)


def sync(device: str) -> None:
    if device.startswith("tpu"):
        torch.tpu.synchronize()


class eager_mode:
    """Context manager selecting tpu's eager mode where the install has modes."""

    def __init__(self, mode: str):
        self.mode = mode
        self.prev = None

    def __enter__(self):
        if hasattr(torch.tpu, "set_eager_mode"):
            self.prev = torch.tpu.get_eager_mode()
            torch.tpu.set_eager_mode(self.mode)
        return self

    def __exit__(self, *exc):
        if self.prev is not None:
            torch.tpu.set_eager_mode(self.prev)
        return False


_PEAKS: dict = {}


def machine_peak(dtype: torch.dtype, quick: bool) -> float:
    """This machine's matmul peak for `dtype` in FLOP/s: the best of PyTorch's
    CPU mm (and numpy for float32) at a large size, best of 5. Measured once
    per run and shared by the cases."""
    key = (dtype, quick)
    if key not in _PEAKS:
        n = 1024 if quick else 2048
        best = matmul_peak(dtype, n, repeats=5)
        if dtype == torch.float32:
            import time

            import numpy as np

            a = np.random.rand(n, n).astype(np.float32)
            b = np.random.rand(n, n).astype(np.float32)
            a @ b
            for _ in range(5):
                t0 = time.perf_counter()
                a @ b
                best = max(best, 2 * n**3 / (time.perf_counter() - t0))
        _PEAKS[key] = best
    return _PEAKS[key]


def matmul_peak(dtype: torch.dtype, n: int, repeats: int = 3) -> float:
    """FLOP/s of PyTorch's CPU mm at size n (the best of `repeats`)."""
    import time

    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def run_ranks(child: str, world: int, args: Callable[[int, str], list[str]], what: str,
              env: dict | None = None, timeout: float = 900) -> str:
    """Runs ``python -c child`` once per rank (``args(rank, store_path)`` its argv) with a file
    store in a temporary directory; returns rank 0's last stdout line. Every child is killed and
    reaped on the way out; a failed rank raises with its stderr's tail."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        e = dict(os.environ, TPUC_CPU_DEVICE_COUNT=str(world), **(env or {}))
        procs = [subprocess.Popen([sys.executable, "-c", child, *args(r, f"{tmp}/store")], env=e,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(world)]
        outs = []
        try:
            for p in procs:
                outs.append(p.communicate(timeout=timeout))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        for p, (_, err) in zip(procs, outs):
            if p.returncode != 0:
                raise RuntimeError(f"{what} child failed: {err[-800:]}")
    return outs[0][0].strip().splitlines()[-1]
