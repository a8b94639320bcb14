"""Each architecture family (tests/models/families.py) on "tpu" against the
CPU: forward logits, every parameter's gradient (none missing), greedy
generate token for token, tied weights kept, no unexpected CPU fallback.
`make test` runs a CI slice (one decoder with generate, the tied GPT-2, the
encoder-decoder T5 with shared embeddings; the MoE router's int histc is in
tests/test_count_ops.py); `make models`
(TPUC_MODELS_FULL=1) runs every family with generate."""
from __future__ import annotations

import os

import pytest

from models import families as F

FULL = os.environ.get("TPUC_MODELS_FULL") == "1"
SLICE = {"llama": True, "gpt2": False, "t5": False}  # name: check generate


@pytest.mark.parametrize("name", list(F.FAMILIES) if FULL else list(SLICE))
def test_family_matches_cpu(name: str) -> None:
    F.quiet()
    r = F.run(name, check_generate=FULL or SLICE[name])
    assert r.failures == [], r
