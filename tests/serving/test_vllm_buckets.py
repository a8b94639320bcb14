"""Shape bucketing on "tpu": a stream of concurrent requests of varied lengths stops compiling.

The stream (run_llm.run_stream, in the offline "tpu" Llama engine of conftest's `offline`
fixture: no engine of its own) sends waves of 1-13 concurrent requests with prompts of 2-40
tokens and 2-11 output tokens, so nearly every step has a new (requests, tokens) pair. The
model runner logs each step's bucket key (token bucket, request bucket, context bucket) and
the programs tpuc compiled while the step ran. Bucketing holds when, after warm-up, a step
whose key was already seen compiles nothing -- exactly zero -- and every compile of the
measured half belongs to a step with a new key. Outputs stay those of each request alone.
"""
from __future__ import annotations

import pytest

from conftest import SKIP_REASON

pytest.importorskip("vllm", reason=SKIP_REASON)

REQ, TOK, TB, RB, CTX, COMPILES = range(6)


@pytest.fixture(scope="module")
def stream(offline_tpu) -> dict:
    return offline_tpu["llama"]["stream"]


def _key(step) -> tuple:
    return (step[TB], step[RB], step[CTX])


def test_steps_with_seen_buckets_compile_nothing(stream):
    seen = {_key(s) for s in stream["warmup_steps"]}
    new_key_compiles = 0
    for s in stream["measured_steps"]:
        if _key(s) in seen:
            assert s[COMPILES] == 0, (s, "a step on already-compiled buckets compiled")
        else:
            new_key_compiles += s[COMPILES]
            seen.add(_key(s))
    # every compile of the measured half happened inside a step, on a new bucket key
    assert stream["measured_compiles"] == new_key_compiles
    assert len(stream["measured_steps"]) > 20


def test_buckets_collapse_the_step_shapes(stream):
    steps = stream["warmup_steps"] + stream["measured_steps"]
    pairs = {(s[REQ], s[TOK]) for s in steps}
    keys = {_key(s) for s in steps}
    b = stream["buckets"]
    for s in steps:
        assert s[TB] in b["tokens"] and s[TB] >= s[TOK]
        assert s[RB] in b["requests"] and s[RB] >= s[REQ]
    assert len(pairs) > len(keys), (len(pairs), len(keys))  # 22 pairs on 10 keys (seed 0)


def test_stream_outputs_equal_single_request_outputs(stream):
    assert stream["stream"] == stream["single"]
    assert len(stream["single"]) > 30
