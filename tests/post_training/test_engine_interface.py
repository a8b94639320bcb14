"""The rollout-engine interface's own arithmetic (the engines' tests live beside this file)."""

from tpuc.post_training.engine import SamplingSpec, SyncStats


def test_sync_rate_and_defaults() -> None:
    s = SyncStats(tensors=3, bytes=3_000_000, seconds=0.5, path="host")
    assert s.bytes_per_s == 6_000_000
    assert SyncStats(tensors=0, bytes=0, seconds=0.0, path="host").bytes_per_s == float("inf")
    spec = SamplingSpec()
    assert spec.n == 1 and spec.temperature == 1.0 and spec.stop_token_ids == ()
