"""tpuc: PyTorch on TPUs (and any PJRT plugin) with a native core in C."""
from __future__ import annotations

__version__ = "0.1.0"
