"""tpuc's SGLang platform plugin: the entry point in the group SGLang reads, its activation rule,
and SGLang's own discovery choosing it (moved from tests/serving/test_sglang.py when SGLang moved
to the torch-2.14.1 venv)."""
from __future__ import annotations

from importlib.metadata import entry_points

import torch

from sgl_common import needs_sglang

pytestmark = needs_sglang


def test_entry_point_in_sglang_group_activates_on_tpu():
    eps = {e.name: e for e in entry_points(group="sglang.srt.platforms")}
    assert "tpuc" in eps
    assert torch.tpu.is_available()
    assert eps["tpuc"].load()() == "tpuc.integrations.sglang.platform.TpuSRTPlatform"


def test_sglang_discovers_the_tpu_platform():
    from sglang.srt.platforms import current_platform

    from tpuc.integrations.sglang.platform import TpuSRTPlatform

    # SGLang's own discovery (its entry-point group) chose tpuc's platform, not CUDA/CPU
    assert isinstance(current_platform, TpuSRTPlatform)
    assert current_platform.is_out_of_tree() and current_platform.device_type == "tpu"
    # no SGLang fused op has a forward_<tpu>: each runs forward_native, which tpuc lowers
    assert current_platform.get_dispatch_key_name() == "native"
    assert current_platform.get_default_attention_backend() == "torch_native"
    free, total = current_platform.get_available_memory(0)
    assert 0 < free <= total == current_platform.get_device_total_memory(0)
    dev = current_platform.get_group_coordinator_device(0)
    x = torch.arange(6, dtype=torch.float32, device=dev)
    assert x.device.type == "tpu" and (x * 2).cpu().tolist() == [0, 2, 4, 6, 8, 10]


def test_out_of_vocabulary_check():
    import pytest

    from tpuc.integrations.sglang.validate import check_ids

    check_ids([0, 5, 383], 384)
    with pytest.raises(ValueError, match=r"token id 384, outside .* \[0, 384\)"):
        check_ids([0, 384], 384)
    with pytest.raises(ValueError, match=r"token id -1"):
        check_ids([-1, 3], 384)


def test_plugin_declines_when_sglang_cpu_engine_is_asked_for(monkeypatch):
    from tpuc.integrations.sglang import PLATFORM, register

    assert register() == PLATFORM
    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", "1")
    assert register() is None
