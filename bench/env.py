"""What a benchmark report states about where it ran."""
from __future__ import annotations

import datetime
import os
import platform
from importlib import metadata


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def describe() -> dict:
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "tpuc": _version("tpuc"),
        "xla-cpu-pjrt": _version("xla-cpu-pjrt"),
    }
    try:
        import torch

        if hasattr(torch, "tpu") and torch.tpu.is_available():
            info["tpu_device"] = torch.tpu.get_device_name()
    except Exception as e:  # the report still describes the machine
        info["tpu_device"] = f"unavailable: {e}"
    return info
