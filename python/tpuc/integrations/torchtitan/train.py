"""Launcher: TorchTitan's own trainer on "tpu".

    torchrun --nproc_per_node=1 -m tpuc.integrations.torchtitan.train \\
        --module llama3 --config llama3_debugmodel [--tpuc.swaps=attention,loss] [TorchTitan flags]

Applies :func:`tpuc.integrations.torchtitan.apply` (device glue, the torch 2.13 shim, the
process-group backend, peak FLOPs, the block swaps), removes its own ``--tpuc.*`` flags
from ``sys.argv`` and calls ``torchtitan.train.main()`` unchanged.
"""
from __future__ import annotations

import sys
from typing import Optional


def _take_swaps(argv: list[str]) -> tuple[Optional[str], list[str]]:
    swaps, rest, i = None, [], 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--tpuc.swaps="):
            swaps = a.split("=", 1)[1]
        elif a == "--tpuc.swaps" and i + 1 < len(argv):
            swaps = argv[i + 1]
            i += 1
        else:
            rest.append(a)
        i += 1
    return swaps, rest


def main() -> None:
    import torch  # noqa: F401  (registers "tpu" before torchtitan reads the device type)

    import tpuc  # noqa: F401

    from . import apply

    swaps, rest = _take_swaps(sys.argv[1:])
    sys.argv = [sys.argv[0]] + rest
    apply(swaps)
    from torchtitan.train import main as titan_main

    titan_main()


if __name__ == "__main__":
    main()
