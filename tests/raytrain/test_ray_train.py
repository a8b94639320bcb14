"""Ray Train on "tpu" (tpuc.integrations.ray, issue 33): a local Ray cluster on 127.0.0.1,
started and stopped here, every wait bounded, and no Ray process left behind (checked).

- 2 workers, DDP over tpu_dist, each on tpu:LOCAL_RANK through Ray's own prepare_model /
  prepare_data_loader / get_device, against one CPU process: losses and every final parameter
  within tests/distributed/train_common.py's float64-derived bounds;
- a worker SIGKILLed in the middle of a step: FailureConfig(max_failures=1) restarts the group
  from the last ray.train.report checkpoint and the final parameters are again within those
  bounds of the uninterrupted one-process training (and a restart did happen).

Needs Ray (make ray-setup); make test-ray runs it."""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

ray = pytest.importorskip("ray", reason="Ray is not installed in this venv: make ray-setup")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / "tests" / "distributed")]
sys.path.insert(0, str(ROOT / "tests"))
import ray_cluster  # noqa: E402
import train_common as tc  # noqa: E402

STEPS = 5
FIT_TIMEOUT = 420.0  # seconds for one TorchTrainer.fit (a fresh worker group compiles its steps)


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray cluster (tests/ray_cluster.py) whose workers import the tests' helpers."""
    path = [str(HERE), str(ROOT / "tests" / "distributed"), str(ROOT / "examples")]
    pythonpath = os.pathsep.join(path + [p for p in [os.environ.get("PYTHONPATH")] if p])
    with ray_cluster.local_cluster("tpuc-ray-", {"PYTHONPATH": pythonpath}) as tmp:
        yield tmp


def _fit(config: dict[str, Any], storage: Path, max_failures: int = 0) -> Any:
    """TorchTrainer(...).fit() on 2 workers, bounded by FIT_TIMEOUT."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from tpuc.integrations.ray import TpuTorchConfig
    from ray_train_worker import train_fn

    trainer = TorchTrainer(
        train_fn, train_loop_config=config, torch_config=TpuTorchConfig(timeout_s=120),
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(storage_path=str(storage), name="run",
                             failure_config=FailureConfig(max_failures=max_failures)))
    out: dict[str, Any] = {}

    def go() -> None:
        try:
            out["result"] = trainer.fit()
        except BaseException as e:  # noqa: BLE001  (re-raised in the test's thread)
            out["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(FIT_TIMEOUT)
    if t.is_alive():
        pytest.fail(f"TorchTrainer.fit did not finish within {FIT_TIMEOUT:.0f} s")
    if "error" in out:
        raise out["error"]
    return out["result"]


def _results(out_dir: Path) -> list[dict[str, Any]]:
    return [torch.load(out_dir / f"rank{r}.pt", weights_only=False) for r in range(2)]


def test_two_workers_ddp_match_one_cpu_process(cluster: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    _fit({"steps": STEPS, "out_dir": str(out)}, tmp_path / "storage")
    ranks = _results(out)
    for r, got in enumerate(ranks):
        assert got["world"] == 2
        assert got["device"] == f"tpu:{r}", got["device"]  # ray.train.torch.get_device()
        assert got["devices"] == [f"tpu:{r}"], got["devices"]  # model and batches
        assert "tpu_dist" in got["backend"], got["backend"]
        tc.check_against_reference(got["losses"], got["params"], STEPS)
    for k, v in ranks[0]["params"].items():  # DDP keeps the replicas identical
        assert torch.equal(v, ranks[1]["params"][k]), k


def test_worker_killed_mid_run_resumes_from_checkpoint(cluster: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    marker = tmp_path / "killed"
    kill_at = 3
    _fit({"steps": STEPS, "out_dir": str(out), "ckpt": True, "kill_at": kill_at,
          "kill_rank": 1, "marker": str(marker)}, tmp_path / "storage", max_failures=1)
    assert marker.exists(), "the worker was never killed"
    ranks = _results(out)
    for got in ranks:
        # the second attempt started from a checkpoint taken before the kill (the last one the
        # controller had registered: step kill_at - 1 unless the kill outran its bookkeeping)
        assert got["resumed_from"] is not None and 0 < got["resumed_from"] <= kill_at, got
        assert len(got["losses"]) == STEPS
        tc.check_against_reference(got["losses"], got["params"], STEPS)
