"""Shape buckets: counts rounded up to powers of two, so a steady stream of requests reuses a
few program shapes (tpuc compiles once per shape). Shared by the model runner (token counts)
and the attention backend (context lengths), which must agree on them."""
from __future__ import annotations

MIN_BUCKET = 8


def bucket(n: int, cap: int, minimum: int = MIN_BUCKET) -> int:
    """The smallest power of two >= n (at least `minimum`), never above `cap` (when n <= cap)."""
    b = max(minimum, 1 << max(0, int(n) - 1).bit_length())
    return max(int(n), min(b, int(cap)))
