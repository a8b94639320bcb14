"""``sglang.Engine(model_path=..., device="tpu")`` on a tiny Llama built offline: greedy tokens equal
transformers' greedy ``generate()`` on the CPU, a batch equals single requests, a live weight
update through SGLang's ``update_weights_from_tensor`` changes the output to the new weights',
bad input is refused with a clear error and the engine keeps serving. Counts come from the
scheduler process (``tpuc.integrations.sglang.stats``)."""
from __future__ import annotations

import pytest

from sgl_common import CHUNK, CONTEXT, MAX_NEW, hf_greedy, prompt_ids
from sgl_common import llama_engine, models, needs_sglang  # noqa: F401 (fixtures)

pytestmark = needs_sglang

GREEDY = {"temperature": 0.0, "max_new_tokens": MAX_NEW, "ignore_eos": True}


def _gen(engine, ids):
    outs = engine.generate(input_ids=ids, sampling_params=GREEDY)
    return [o["output_ids"] for o in outs]


def _flush(engine):
    """Empties the prefix cache. SGLang refuses a flush while its scheduler still holds a
    request, and a request's answer can reach the caller one scheduler step before the request
    leaves the running batch: retry until the flush succeeds."""
    import time

    for _ in range(200):
        if engine.flush_cache().success:
            return
        time.sleep(0.05)
    raise AssertionError("the engine never became idle enough to flush its cache")


def _stats(engine, tmp_path):
    from tpuc.integrations.sglang import stats

    return stats.read(engine, tmp_path / "stats.json")


def test_greedy_single_then_batch_match_transformers(llama_engine, models, tmp_path):
    ids = prompt_ids(models["llama"])
    ref = hf_greedy(models["llama"], ids)
    single = [_gen(llama_engine, [p])[0] for p in ids]
    assert single == ref
    before = _stats(llama_engine, tmp_path)
    batch = _gen(llama_engine, ids)  # all prompts at once: one prefill batch, batched decode
    assert batch == ref
    after = _stats(llama_engine, tmp_path)
    # the model ran on "tpu": programs executed there, and no op fell back to the CPU
    assert after["executions"] > before["executions"]
    assert sum(after["fallbacks"].values()) == 0, after["fallbacks"]
    # the single requests again with the prefix cache emptied (a cache hit changes the prefill's
    # shapes): every shape has been seen, so nothing compiles. (No buckets yet: a new prompt or
    # context length compiles its own programs; docs/sglang.md "Limits".)
    _flush(llama_engine)
    assert [_gen(llama_engine, [p])[0] for p in ids] == ref
    again = _stats(llama_engine, tmp_path)
    # cache_misses: programs new to the process, whether compiled or loaded from tpuc's disk cache
    assert again["cache_misses"] == after["cache_misses"], again.get("recompile_reasons")


def test_update_weights_from_tensor_changes_output(llama_engine, models):
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1] / "serving"))
    import tiny_models

    ids = prompt_ids(models["llama"])[:2]
    old, new = hf_greedy(models["llama"], ids), hf_greedy(models["llama_new"], ids)
    assert old != new  # the two seeds' weights answer differently
    assert _gen(llama_engine, ids) == old
    sd_new = tiny_models.state_dict("llama", models["root"], seed=1)
    sd_old = tiny_models.state_dict("llama", models["root"], seed=0)

    def update(sd):  # SGLang 0.5.23 wants updates inside begin/end_weight_update
        _flush(llama_engine)  # its cache flush after the update then finds the engine idle
        llama_engine.begin_weight_update()
        try:
            ok, msg = llama_engine.update_weights_from_tensor(list(sd.items()))
        finally:
            llama_engine.end_weight_update()
        assert ok, msg

    try:
        update(sd_new)
        assert _gen(llama_engine, ids) == new
    finally:
        update(sd_old)
    assert _gen(llama_engine, ids) == old


def test_bad_input_is_refused_and_engine_keeps_serving(llama_engine, models):
    ids = prompt_ids(models["llama"])[:1]
    too_long = [[5] * (CONTEXT + 10)]
    with pytest.raises(ValueError, match=r"longer than the model's context length \(128"):
        llama_engine.generate(input_ids=too_long, sampling_params=GREEDY)
    with pytest.raises(ValueError, match=r"token id 1000000, outside the model's vocabulary"):
        llama_engine.generate(input_ids=[[3, 10**6, 4]], sampling_params=GREEDY)
    assert _gen(llama_engine, ids) == hf_greedy(models["llama"], ids)


def test_context_lengths_within_a_bucket_need_no_new_attention_programs(llama_engine, tmp_path):
    # attention programs depend on the context length's bucket (16, 32, ...), not on the length:
    # after a 4-token prompt decoded to context 12, the same prompt length decoded further, to
    # context 15, needs no new attention program (SGLang's own torch_native loop needs new
    # softmax/matmul programs for every context length: this test fails with
    # TPUC_SGLANG_ATTENTION=native). What does change is SGLang's bookkeeping: its writes into
    # req_to_token at each request's positions are copies into views whose storage offsets
    # differ, and tpuc's op signatures include the offset (docs/sglang.md "Limits").
    _flush(llama_engine)
    llama_engine.generate(input_ids=[[7, 8, 9, 10]], sampling_params=GREEDY)
    before = _stats(llama_engine, tmp_path)
    _flush(llama_engine)
    longer = dict(GREEDY, max_new_tokens=MAX_NEW + 3)
    out = llama_engine.generate(input_ids=[[11, 12, 13, 14]], sampling_params=longer)
    assert len(out[0]["output_ids"]) == MAX_NEW + 3
    after = _stats(llama_engine, tmp_path)
    n_new = after["recompiles"] - before["recompiles"]
    assert n_new <= len(after["recompile_reasons"])  # all of the window's reasons are listed
    new = after["recompile_reasons"][len(after["recompile_reasons"]) - n_new:]
    attention_ops = ("softmax", "bmm", "mm.out", "scaled_dot_product", "index.Tensor")
    assert not [r for r in new if any(op in r for op in attention_ops)], new


def _new_reasons(before, after):
    n_new = after["recompiles"] - before["recompiles"]
    return after["recompile_reasons"][len(after["recompile_reasons"]) - n_new:] if n_new else []


def test_a_new_prompt_length_compiles_nothing_new(llama_engine, models, tmp_path):
    # token counts are padded to buckets and SGLang's bookkeeping runs at bounded shapes
    # (tpuc.integrations.sglang.shapes): after a 3-token prompt, a 6-token prompt (same token
    # bucket 16, contexts up to 14: same context bucket 16) needs no program new to the process.
    # Without the shim each new prompt length compiled its own model, position and
    # req_to_token-write programs (TPUC_SGLANG_TOKEN_BUCKETS=off brings the model's back).
    a, b = [[21, 22, 23]], [[31, 32, 33, 34, 35, 36]]
    ref = hf_greedy(models["llama"], a + b)
    _flush(llama_engine)
    assert _gen(llama_engine, a) == ref[:1]
    before = _stats(llama_engine, tmp_path)
    _flush(llama_engine)
    assert _gen(llama_engine, b) == ref[1:]
    after = _stats(llama_engine, tmp_path)
    assert after["cache_misses"] == before["cache_misses"], _new_reasons(before, after)
    assert sum(after["fallbacks"].values()) == 0, after["fallbacks"]


def test_update_weights_from_disk_changes_output(llama_engine, models):
    # SGLang's update_weights_from_disk loads a checkpoint directory (the tiny Llama saved with
    # seed 1, built offline) into the running engine: the output becomes the new weights' greedy
    # tokens; loading the seed-0 directory back restores the old ones
    def load(path):
        _flush(llama_engine)  # the update's own cache flush then finds the engine idle
        ok, msg = llama_engine.update_weights_from_disk(path)[:2]
        assert ok, msg

    ids = prompt_ids(models["llama"])[:2]
    old, new = hf_greedy(models["llama"], ids), hf_greedy(models["llama_new"], ids)
    assert old != new
    try:
        load(models["llama_new"])
        assert _gen(llama_engine, ids) == new
    finally:
        load(models["llama"])
    assert _gen(llama_engine, ids) == old


def test_prefix_cache_hit_and_chunked_prefill_match_transformers(llama_engine, models):
    # radix (prefix) cache: a prompt that extends an answered one reuses its cached prefix and
    # still equals transformers' answer to the whole prompt. Chunked prefill: the engine runs
    # with chunked_prefill_size=CHUNK, so a 40-token prompt is prefilled in three chunks (each
    # chunk after the first reads the previous ones from the KV cache) and equals transformers'
    # unchunked greedy tokens.
    base = [40 + i for i in range(12)]
    longer = base + [90, 91, 92, 93]
    long_prompt = [(7 * i + 3) % 300 + 2 for i in range(40)]
    assert len(long_prompt) > 2 * CHUNK
    ref = hf_greedy(models["llama"], [base, longer, long_prompt])
    _flush(llama_engine)
    assert _gen(llama_engine, [base]) == ref[:1]
    hit = llama_engine.generate(input_ids=[longer], sampling_params=GREEDY)[0]
    assert hit["meta_info"].get("cached_tokens", 0) >= len(base), hit["meta_info"]
    assert hit["output_ids"] == ref[1]
    _flush(llama_engine)
    assert _gen(llama_engine, [long_prompt]) == ref[2:]
