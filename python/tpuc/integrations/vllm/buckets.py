"""Shape buckets: counts rounded up to a small set of sizes, so a steady stream of requests reuses
a few program shapes (tpuc compiles once per shape). Shared by the model runner (token and
request counts) and the attention backend (context lengths), which must agree on them.

Defaults are powers of two (tokens: at least ``MIN_BUCKET``; requests: at least 1), capped at the
engine's maximum. ``TPUC_VLLM_TOKEN_BUCKETS`` / ``TPUC_VLLM_REQUEST_BUCKETS`` (comma-separated
sizes, e.g. ``"16,64,256"``) replace them; a count above the largest listed size is padded to the
engine's maximum (``max_num_batched_tokens`` / ``max_num_seqs``), so fewer sizes mean fewer
compiles and more padding (docs/serving.md "Shapes and compiles").
"""
from __future__ import annotations

import os

MIN_BUCKET = 8
TOKEN_BUCKETS_ENV = "TPUC_VLLM_TOKEN_BUCKETS"
REQUEST_BUCKETS_ENV = "TPUC_VLLM_REQUEST_BUCKETS"


def bucket(n: int, cap: int, minimum: int = MIN_BUCKET) -> int:
    """The smallest power of two >= n (at least `minimum`), never above `cap` (when n <= cap)."""
    b = max(minimum, 1 << max(0, int(n) - 1).bit_length())
    return max(int(n), min(b, int(cap)))


def sizes(cap: int, minimum: int, env: str) -> list[int]:
    """The bucket sizes for counts up to `cap`: from `env` if set, else powers of two from
    `minimum`; always ending with `cap` itself."""
    text = os.environ.get(env, "").strip()
    if text:
        try:
            listed = sorted({int(s) for s in text.split(",") if s.strip()})
        except ValueError:
            raise ValueError(f"{env}={text!r}: expected comma-separated positive integers, "
                             f'e.g. "16,64,256"') from None
        if not listed or listed[0] < 1:
            raise ValueError(f"{env}={text!r}: sizes must be positive integers")
    else:
        listed, b = [], max(1, minimum)
        while b < cap:
            listed.append(b)
            b *= 2
    return [s for s in listed if s < cap] + [int(cap)]


def pad_to(n: int, buckets: list[int]) -> int:
    """The smallest bucket >= n (n itself when it exceeds every bucket)."""
    for b in buckets:
        if b >= n:
            return b
    return int(n)
