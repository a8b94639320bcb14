"""Each architecture family (tests/models/families.py) on "tpu" against the
CPU: forward logits, every parameter's gradient (none missing), greedy
generate token for token, tied weights kept, no unexpected CPU fallback.
`make test` runs every family with generate (about 15 s with a warm compile
cache; the families are tiny)."""
from __future__ import annotations

import pytest

from models import families as F


@pytest.mark.parametrize("name", list(F.FAMILIES))
def test_family_matches_cpu(name: str) -> None:
    F.quiet()
    r = F.run(name, check_generate=True)
    assert r.failures == [], r
