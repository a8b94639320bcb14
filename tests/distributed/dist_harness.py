"""Runs a function on N ranks (spawned processes) with a tpu_dist process group.

Every rank gets a file store in a fresh temporary directory (127.0.0.1 only, no
ports), ``TPUC_CPU_DEVICE_COUNT`` = N so that ``tpu:rank`` exists, and the
whole run is bounded: past ``timeout`` seconds every child is killed and the
test fails. A rank's exception fails the test with that rank's traceback.
Results come back through ``torch.save`` files, one per rank.
"""
from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.multiprocessing as mp


def _entry(rank: int, fn: Callable[..., Any], world: int, tmp: str, backend: str | None,
           pg_timeout: float, env: dict[str, str], args: tuple) -> None:
    os.environ.update(env)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world))
    os.environ.setdefault("TPUC_CPU_DEVICE_COUNT", str(world))
    import torch.distributed as dist

    import tpuc  # noqa: F401

    torch.tpu.set_device(rank)
    kwargs: dict[str, Any] = dict(init_method=f"file://{tmp}/store", rank=rank, world_size=world,
                                  timeout=timedelta(seconds=pg_timeout))
    if backend:
        kwargs["backend"] = backend
    if backend == "device_id":
        kwargs.pop("backend")
        kwargs["device_id"] = torch.device("tpu", rank)
    dist.init_process_group(**kwargs)
    try:
        out = fn(rank, world, *args)
        torch.save(out, f"{tmp}/result{rank}.pt")
    except BaseException:
        with open(f"{tmp}/error{rank}.txt", "w") as f:
            f.write(traceback.format_exc())
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run(fn: Callable[..., Any], world: int = 2, *args: Any, timeout: float = 120,
        backend: str | None = "tpu_dist", pg_timeout: float = 60, env: dict[str, str] | None = None,
        expect_fail: bool = False, collect: bool = False) -> list[Any]:
    """fn(rank, world, *args) on `world` ranks; returns each rank's return value.

    With ``expect_fail`` every rank runs to its end (a failed rank does not stop
    the others) and the ranks' error texts come back instead (None for a rank
    that raised nothing). With ``collect`` every rank runs to its end too and
    the results come back, None for a rank that left none (it died)."""
    with tempfile.TemporaryDirectory(prefix="tpuc-dist-") as tmp:
        ctx = mp.start_processes(_entry, args=(fn, world, tmp, backend, pg_timeout, env or {}, args),
                                 nprocs=world, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout
        failed: str | None = None
        try:
            while any(p.is_alive() for p in ctx.processes):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"ranks still running after {timeout:.0f} s")
                bad = [r for r, p in enumerate(ctx.processes) if p.exitcode not in (None, 0)]
                if bad and not (expect_fail or collect):  # a rank failed: stop the others now
                    failed = f"rank {bad[0]} exited with {ctx.processes[bad[0]].exitcode}"
                    break
                time.sleep(0.2)
            bad = [r for r, p in enumerate(ctx.processes) if p.exitcode not in (None, 0)]
            if bad and failed is None:
                failed = f"rank {bad[0]} exited with {ctx.processes[bad[0]].exitcode}"
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    try:
                        os.kill(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                p.join(5)
        errors = []
        for r in range(world):
            path = f"{tmp}/error{r}.txt"
            errors.append(open(path).read() if os.path.exists(path) else None)
        if expect_fail:
            return errors
        if collect:
            return [torch.load(f"{tmp}/result{r}.pt", weights_only=False)
                    if os.path.exists(f"{tmp}/result{r}.pt") else None for r in range(world)]
        if failed is not None and not collect:
            detail = "\n".join(f"--- rank {r}:\n{e}" for r, e in enumerate(errors) if e)
            raise AssertionError(f"a rank failed: {failed}\n{detail}") from None
        return [torch.load(f"{tmp}/result{r}.pt", weights_only=False) for r in range(world)]


def run_collect(fn: Callable[..., Any], world: int = 2, *args: Any, **kw: Any) -> list[Any]:
    return run(fn, world, *args, collect=True, **kw)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("import this module from a test")
