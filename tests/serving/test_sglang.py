"""SGLang 0.5.23's platform plugin for "tpu", as far as SGLang runs here (docs/serving.md).

SGLang 0.5.23 pins torch 2.14.1, so it installs next to tpuc's torch 2.13 only with --no-deps,
and then `import sglang` stops at its first missing dependency (orjson). What can be checked
without importing SGLang: the entry point in the group SGLang reads, and its activation rule.
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
                    reason="SGLang is not installed (0.5.23 installs only with --no-deps; see "
                           "docs/serving.md)")
def test_platform_class_resolves():
    from tpuc.integrations.sglang.platform import TpuSRTPlatform

    p = TpuSRTPlatform()
    assert p.device_type == "tpu" and p.get_dispatch_key_name() == "PrivateUse1"
