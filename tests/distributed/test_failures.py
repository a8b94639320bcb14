"""Failures give errors, not hangs: mismatched shapes, a rank that dies; and
``destroy_process_group()`` leaves the process usable (device work and a new
process group both work afterwards)."""
from __future__ import annotations

import os
import time
from datetime import timedelta

import torch

import dist_harness as harness

PG_TIMEOUT = 15.0


def _fresh_group_works(rank: int, world: int, tag: str) -> str | None:
    """After destroy_process_group: a new group (new store) and device ops work."""
    import torch.distributed as dist

    d = os.environ["TPUC_TEST_STORE_DIR"]
    dist.init_process_group("tpu_dist", init_method=f"file://{d}/{tag}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=PG_TIMEOUT))
    t = torch.full((3,), float(rank + 1), device="tpu")
    dist.all_reduce(t)
    dist.destroy_process_group()
    if not torch.equal(t.cpu(), torch.full((3,), float(sum(range(1, world + 1))))):
        return f"new group all_reduce gave {t.cpu()}"
    if (torch.ones(2, device="tpu") * 3).sum().item() != 6:
        return "device ops broken after destroy_process_group"
    return None


def mismatch_worker(rank: int, world: int) -> dict[str, object]:
    import torch.distributed as dist

    t0 = time.monotonic()
    err = None
    try:
        dist.all_reduce(torch.ones(4 + rank, device="tpu"))  # 4 elements on rank 0, 5 on rank 1
    except Exception as e:
        err = str(e)
    took = time.monotonic() - t0
    dist.destroy_process_group()
    return {"error": err, "seconds": took, "after": _fresh_group_works(rank, world, "again")}


def dying_worker(rank: int, world: int) -> dict[str, object]:
    import torch.distributed as dist

    dist.all_reduce(torch.ones(2, device="tpu"))  # everyone is connected
    if rank == 1:
        os._exit(3)  # dies without a word
    t0 = time.monotonic()
    err = None
    try:
        dist.all_reduce(torch.ones(2, device="tpu"))
    except Exception as e:
        err = str(e)
    took = time.monotonic() - t0
    return {"error": err, "seconds": took}


def test_mismatched_shapes_error_then_recover(tmp_path) -> None:  # type: ignore[no-untyped-def]
    res = harness.run(mismatch_worker, 2, timeout=180, pg_timeout=PG_TIMEOUT,
                      env={"TPUC_TEST_STORE_DIR": str(tmp_path)})
    for r, out in enumerate(res):
        assert out["error"] is not None, f"rank {r}: a size mismatch did not raise"
        assert "all_reduce" in out["error"], f"rank {r}: the error does not name the collective: {out}"
        assert out["seconds"] < PG_TIMEOUT + 20, f"rank {r}: took {out['seconds']:.1f} s"
        assert out["after"] is None, f"rank {r}: {out['after']}"


def test_dead_rank_message() -> None:
    """The surviving rank's error names the collective and comes within the PG timeout."""
    out = harness.run_collect(dying_worker, 2, timeout=180, pg_timeout=PG_TIMEOUT)
    survivor = out[0]
    assert survivor is not None, "rank 0 returned nothing"
    assert survivor["error"] is not None, "rank 0 did not notice the dead rank"
    assert "all_reduce" in survivor["error"], survivor
    assert survivor["seconds"] < PG_TIMEOUT + 20, survivor
