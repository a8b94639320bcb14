"""Weight sync from the trainer (this process, and an FSDP=2 torchrun trainer) to the vLLM engine
on "tpu" in its own process (.venv-serve): after each sync the engine's greedy outputs are
exactly the trainer model's greedy outputs on "tpu", and SyncStats counts the model's bytes.

One engine serves every test (vLLM's start-up dominates): it starts from weights of seed 99,
then gets seed 1 from this process, seed 2 from this process, seed 3 from the FSDP trainer.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sync_common as sc  # noqa: E402

from tpuc.post_training.vllm_engine import default_serve_python  # noqa: E402

SERVE_PY = default_serve_python()
pytestmark = [
    pytest.mark.skipif(not Path(SERVE_PY).exists(),
                       reason=f"the serving venv ({SERVE_PY}) is absent: make serve-setup "
                              "(make test-post depends on it)"),
    pytest.mark.skipif(not (hasattr(torch, "tpu") and torch.tpu.is_available()),
                       reason='device "tpu" unavailable'),
]
pytest.importorskip("torchtitan", reason="TorchTitan is absent: make titan-setup")
# a top-1/top-2 gap below this share of the largest logit could let float32 rounding order two
# candidates differently on two correct implementations (float32's epsilon is 1.2e-7; a dot
# product of 256 terms accumulates at most 256 of them, 3e-5, per layer input); the weights are
# drawn to stay above it
MIN_GAP = 1e-4


@pytest.fixture(scope="module")
def engine():
    from tpuc.post_training.vllm_engine import VLLMEngine
    from tpuc.post_training.weights import iter_full_state, save_hf_dir

    d = tempfile.mkdtemp(prefix="tpuc-sync-")
    cfg, m = sc.build(99)
    save_hf_dir(d, cfg, iter_full_state(m))
    env = {"TPUC_CACHE_DIR": os.environ.get("TPUC_CACHE_DIR",
                                            str(HERE.parents[1] / "build" / "serving-cache"))}
    with VLLMEngine(d, device="tpu", max_model_len=128, seed=0, env=env) as e:
        yield e
    assert e.pid is None


def _engine_greedy(engine) -> list[list[int]]:
    from tpuc.post_training.engine import SamplingSpec

    outs = engine.generate(sc.PROMPTS, SamplingSpec(max_tokens=sc.MAX_TOKENS, temperature=0.0))
    assert all(len(g) == 1 for g in outs)
    return [g[0].token_ids for g in outs]


def _sync_and_check(engine, seed: int) -> list[list[int]]:
    from tpuc.post_training.weights import iter_full_state, titan_to_hf

    cfg, model = sc.build(seed, "tpu")
    trainer, gap = sc.greedy(model, sc.PROMPTS, sc.MAX_TOKENS, "tpu")
    assert gap > MIN_GAP, gap
    stats = engine.update_weights(titan_to_hf(iter_full_state(model), cfg))
    assert stats.path == "host" and stats.bytes == sc.model_bytes(model)
    assert stats.tensors == 3 + 9 * len(model.layers)  # embed, norm, lm_head; 9 per block
    assert stats.seconds > 0 and stats.bytes_per_s > 0
    assert _engine_greedy(engine) == trainer
    return trainer


def test_sync_from_one_process_and_again_with_changed_weights(engine):
    before = _engine_greedy(engine)  # seed 99's weights, loaded from the directory
    first = _sync_and_check(engine, seed=1)
    assert first != before
    second = _sync_and_check(engine, seed=2)  # every tensor changed: so must the outputs
    assert second != first


def test_sync_from_fsdp2_trainer(engine, tmp_path):
    before = _engine_greedy(engine)
    address = engine.detach()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "fsdp.json"
    # the job's secret, as a launcher hands it out: attach() reads TPUC_WIRE_SECRET
    env = dict(os.environ, OMP_NUM_THREADS="1", TPUC_WIRE_SECRET=engine.secret)
    env.pop("TPUC_CPU_DEVICE_COUNT", None)  # tpuc sizes it from LOCAL_WORLD_SIZE
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           "--master_addr=127.0.0.1", f"--master_port={port}", str(HERE / "fsdp_sync_worker.py"),
           "--engine", address, "--seed", "3", "--out", str(out)]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        log = p.communicate(timeout=300)[0]
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait(10)
        engine.reattach()
    assert p.returncode == 0, log[-6000:]
    r = json.loads(out.read_text())
    assert r["world"] == 2 and r["sharded"], r
    assert r["min_gap"] > MIN_GAP, r
    assert r["path"] == "host" and r["sync_bytes"] == r["model_bytes"], r
    assert r["engine"] == r["trainer"], r
    assert r["trainer"] != before  # seed 3's outputs, not the last sync's
    assert _engine_greedy(engine) == r["engine"]  # this process sees the same engine state
