"""SGLang 0.5.23's platform plugin for "tpu", as far as SGLang runs here (docs/serving.md).

SGLang 0.5.23 pins torch 2.14.1, so `make serve-setup` installs it next to tpuc's torch 2.13 with
--no-deps plus the pure-Python modules its import needs. What runs: the entry point in the group
SGLang reads, its activation rule, and SGLang's own platform discovery picking "tpu".
"""
from __future__ import annotations

import importlib.util
from importlib.metadata import entry_points

import pytest
import torch

from conftest import SKIP_REASON

pytest.importorskip("vllm", reason=SKIP_REASON)  # the serving venv, where tpuc is reinstalled


def test_entry_point_in_sglang_group_activates_on_tpu():
    eps = {e.name: e for e in entry_points(group="sglang.srt.platforms")}
    assert "tpuc" in eps
    assert torch.tpu.is_available()
    assert eps["tpuc"].load()() == "tpuc.integrations.sglang.platform.TpuSRTPlatform"


@pytest.mark.skipif(importlib.util.find_spec("sglang") is None,
                    reason="SGLang is not installed in this Python (make serve-setup installs it; "
                           "see docs/serving.md)")
def test_sglang_discovers_the_tpu_platform():
    from sglang.srt.platforms import current_platform

    from tpuc.integrations.sglang.platform import TpuSRTPlatform

    # SGLang's own discovery (its entry-point group) chose tpuc's platform, not CUDA/CPU
    assert isinstance(current_platform, TpuSRTPlatform)
    assert current_platform.device_type == "tpu"
    assert current_platform.get_dispatch_key_name() == "PrivateUse1"
    assert current_platform.get_default_attention_backend() == "torch_native"
    dev = current_platform.get_group_coordinator_device(0)
    x = torch.arange(6, dtype=torch.float32, device=dev)
    assert x.device.type == "tpu" and (x * 2).cpu().tolist() == [0, 2, 4, 6, 8, 10]
