"""What every part of the GPU check shares: the model sizes, the machine's peak rates, the
run's settings (read once from the environment), and the results file.

The check runs in one of two modes:

- GPU (default): "tpu" is the CUDA PJRT plugin (TPUC_PLATFORM=cuda), the reference is
  PyTorch's own CUDA on the same GPU.
- dry (GPU_CHECK_DRY=1): "tpu" is the XLA CPU plugin, the reference is PyTorch on the CPU,
  the sizes are tiny and the deadline short. It runs every phase of the script on a machine
  without a GPU, so the script is tested before the few minutes of a lent GPU are spent.

Also a command line for run.sh: ``python3 checklib.py record KIND key=value ...`` appends one
record (values parsed as JSON where they parse, else kept as text).
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Size:
    dim: int
    layers: int
    heads: int
    batch: int
    seq: int

    @property
    def hidden(self) -> int:
        return (8 * self.dim // 3 + 7) // 8 * 8  # SwiGLU's 8/3 d, a multiple of 8

    @property
    def tokens(self) -> int:
        return self.batch * self.seq


# The sizes of issue 30: small (dim 256, 4 layers) and large (dim 1024, 8 layers, 8x1024
# tokens, 101M parameters); the dry run's two stand-ins are tiny so that a CPU runs them.
SIZES: dict[str, Size] = {
    "small": Size(dim=256, layers=4, heads=8, batch=8, seq=256),
    "large": Size(dim=1024, layers=8, heads=16, batch=8, seq=1024),
    "dry-small": Size(dim=32, layers=1, heads=2, batch=2, seq=16),
    "dry-large": Size(dim=64, layers=2, heads=4, batch=2, seq=32),
}

# Dense peak rates in FLOP/s, from NVIDIA's H200 datasheet (its Tensor Core figures are
# "with sparsity", i.e. twice the dense rate): H200 SXM: FP32 67 TFLOP/s (CUDA cores),
# TF32 989 sparse -> 494.5 dense, BF16 1,979 sparse -> 989.5 dense. H200 NVL (PCIe):
# FP32 60, TF32 835 -> 417.5, BF16 1,671 -> 835.5. f32 training is rated against FP32's
# peak: torch's default f32 matmul does not use TF32, and the one GPU run measured 51
# TFLOP/s for an 8192^3 f32 matmul on both torch CUDA and "tpu" (notes/gpu.md), under 67.
PEAKS: dict[str, dict[str, float]] = {
    "H200 NVL": {"f32": 60e12, "tf32": 417.5e12, "bf16": 835.5e12},
    "H200": {"f32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12},
}


def peak_for(device_name: str, dtype: str) -> tuple[float | None, str]:
    """(peak FLOP/s, where it comes from) for a device name such as 'NVIDIA H200'."""
    for key, rates in PEAKS.items():  # NVL first: "H200" is a prefix of it
        if key in device_name:
            return rates[dtype], f"{key} dense {dtype} {rates[dtype] / 1e12:g} TFLOP/s (NVIDIA datasheet)"
    return None, f"no published peak known for {device_name!r}: MFU not computed"


def flops_per_step(n_params: int, size: Size) -> float:
    """examples/llama.py's count: 6N per token for the weights plus attention's
    12 * layers * dim * seq per token (forward and backward)."""
    return float((6 * n_params + 12 * size.layers * size.dim * size.seq) * size.tokens)


def _flag(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


@dataclass(frozen=True)
class Settings:
    dry: bool
    out: str            # where results.jsonl, log.txt and report.md go
    src: str            # the project checkout
    python: str         # the interpreter of the machine's torch
    deadline_s: float   # the whole check, from run.sh's start
    t_start: float      # epoch seconds when run.sh started
    steps: int          # training steps per contender
    dtype: str          # f32 | bf16 (bf16: autocast)
    ref_device: str     # cuda | cpu
    tpu_platform: str   # cuda | cpu (TPUC_PLATFORM of the "tpu" runs)
    loss_rtol: float    # largest per-step relative loss difference accepted vs the reference
    phases: tuple[str, ...]
    sizes: tuple[str, ...]
    modes: tuple[str, ...]  # "tpu" modes trained (cold and warm) + ref_compile

    @property
    def t_end(self) -> float:
        return self.t_start + self.deadline_s

    def left(self) -> float:
        return self.t_end - time.time()

    def elapsed(self) -> float:
        return time.time() - self.t_start


DEFAULT_PHASES = ("machine", "info", "coexist", "memory", "train", "ctests", "pytest", "micro")


def settings() -> Settings:
    dry = _flag("GPU_CHECK_DRY", "0") not in ("", "0", "no", "off", "false")
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.abspath(_flag("GPU_CHECK_SRC") or os.path.join(here, "..", ".."))
    out = _flag("OUT") or os.path.join(src, "build", "gpu_check-dry" if dry else "gpu_check")
    phases = tuple(p for p in _flag("GPU_CHECK_PHASES", ",".join(DEFAULT_PHASES)).split(",") if p)
    sizes = tuple(s for s in _flag("GPU_CHECK_SIZES", "small,large").split(",") if s)
    return Settings(
        dry=dry, out=os.path.abspath(out), src=src,
        python=_flag("GPU_CHECK_PYTHON") or sys.executable,
        deadline_s=float(_flag("GPU_CHECK_DEADLINE", "150" if dry else "480")),
        t_start=float(_flag("GPU_CHECK_T0") or time.time()),
        steps=int(_flag("GPU_CHECK_STEPS", "5" if dry else "8")),
        dtype=_flag("GPU_CHECK_DTYPE", "f32"),
        ref_device="cpu" if dry else "cuda",
        tpu_platform="cpu" if dry else "cuda",
        # Same weights, batches and f32 math on both sides: only the order of sums differs.
        # Measured on the CPU (XLA CPU vs torch CPU): <= 3e-7 relative over 5 steps. On the
        # GPU, XLA and cuBLAS/cuDNN pick other kernels (and attention other algorithms), and
        # 8 AdamW steps amplify a first-step difference; 1e-3 (0.005 on a loss of 5.5) is a
        # bound to tighten once a GPU run has measured it, still far under what a wrong
        # lowering does to a loss (1e-2 and more). bf16 autocast rounds operands to 8 bits: 2e-2.
        loss_rtol=float(_flag("GPU_CHECK_LOSS_RTOL",
                              "2e-2" if _flag("GPU_CHECK_DTYPE", "f32") == "bf16" else "1e-3")),
        phases=phases,
        modes=tuple(m for m in _flag("GPU_CHECK_MODES", "strict,fused,compile,ref_compile").split(",") if m),
        sizes=tuple(("dry-" + s if dry and not s.startswith("dry-") else s) for s in sizes),
    )


def results_path(out: str) -> str:
    return os.path.join(out, "results.jsonl")


def record(out: str, kind: str, **fields: Any) -> dict[str, Any]:
    """Appends one JSON line {kind, t, ...} to results.jsonl (flushed: a killed run keeps
    every line written before)."""
    os.makedirs(out, exist_ok=True)
    rec: dict[str, Any] = {"kind": kind, "t": round(time.time(), 1), **fields}
    with open(results_path(out), "a") as f:
        f.write(json.dumps(rec, default=str) + "\n")
        f.flush()
    return rec


def read_results(out: str) -> list[dict[str, Any]]:
    """Every record of results.jsonl; a torn last line (a killed writer) is skipped."""
    recs: list[dict[str, Any]] = []
    try:
        with open(results_path(out)) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    recs.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    except FileNotFoundError:
        pass
    return recs


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "record":
        print("usage: checklib.py record KIND key=value ...", file=sys.stderr)
        return 2
    fields = {}
    for arg in argv[2:]:
        key, _, val = arg.partition("=")
        fields[key] = _value(val)
    record(settings().out, argv[1], **fields)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
