"""The TorchTitan Trainer benchmark's launcher: tpuc's launcher with a metrics recorder.

    TPUC_BENCH_METRICS=PATH torchrun ... -m bench.titan_launch <tpuc.integrations.torchtitan.train args>

Runs :func:`tpuc.integrations.torchtitan.train.main` unchanged (the stock Trainer) and, once
tpuc's integration is applied (after the CPU reference has set TorchTitan's device module),
wraps TorchTitan's ``MetricsProcessor.log`` so that rank 0 appends one JSON line per logged
step with TorchTitan's own metrics dict (tokens/s per device, TFLOPS, memory peaks), the peak
FLOPs TorchTitan divided by for its MFU, its FLOPs per token, and this process's peak RSS.
For the CPU reference (TorchTitan answers A100's 312 TFLOPS for the name "CPU") it also
measures the CPU's own matmul peak with the same protocol as tpuc's ``peak.measured_peak``,
during step 1 (a warm-up step the benchmark discards), so MFU can be stated against the
measured matmul peak of each contender's own device.
"""
from __future__ import annotations

import json
import os
import resource
import time


def cpu_matmul_peak(n: int = 1024, repeats: int = 5, per_round: int = 4) -> float:
    """FLOP/s of n x n f32 matmuls on the CPU (threads as launched): same protocol as
    tpuc.integrations.torchtitan.peak.measured_peak on "tpu"."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        outs = [a @ b for _ in range(per_round)]
        best = min(best, (time.perf_counter() - t0) / per_round)
        del outs
    return 2.0 * n**3 / best


def _install_recorder(path: str) -> None:
    import torch
    from torchtitan.components.metrics import MetricsProcessor

    original = MetricsProcessor.log
    state: dict = {}

    def log(self, step, *args, **kwargs):
        rank0 = not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0
        if rank0 and "cpu_peak" not in state and str(self.device_memory_monitor.device_name) == "CPU":
            state["cpu_peak"] = cpu_matmul_peak()  # inside step 1's time: discarded as warm-up
        got: dict = {}
        inner = self.logger.log

        def capture(metrics, step_):
            got.update(metrics)
            return inner(metrics, step_)

        self.logger.log = capture
        try:
            out = original(self, step, *args, **kwargs)
        finally:
            self.logger.log = inner
        if rank0:
            row = {"step": int(step), "metrics": {k: float(v) for k, v in got.items()},
                   "titan_peak_flops": float(self.gpu_peak_flops),
                   "flops_per_token": float(self.num_flops_per_token),
                   "cpu_matmul_peak": state.get("cpu_peak"),
                   "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
            if hasattr(torch, "tpu") and torch.tpu.is_available():
                s = torch.tpu.stats()
                row["compiles"] = int(s["compiles"])
                row["fallbacks"] = int(sum(s["fallbacks"].values()))
            with open(path, "a") as f:
                f.write(json.dumps(row) + "\n")
        return out

    MetricsProcessor.log = log


def main() -> None:
    import torch  # noqa: F401  (registers "tpu")

    import tpuc.integrations.torchtitan as integration
    from tpuc.integrations.torchtitan import train

    path = os.environ["TPUC_BENCH_METRICS"]
    apply = integration.apply

    def apply_and_record(*args, **kwargs):
        apply(*args, **kwargs)
        _install_recorder(path)

    integration.apply = apply_and_record  # train.main imports it at call time, after use_cpu
    train.main()


if __name__ == "__main__":
    main()
