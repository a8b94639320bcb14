"""Token ids outside the vocabulary are refused with a clear error (SGLang 0.5.23).

SGLang 0.5.23's ``TokenizerManager._validate_one_request`` checks a prompt's length against the
context but not its token ids against the vocabulary (only ``token_ids_logprob`` is checked). On
CUDA an out-of-range id trips a device-side assert that takes the scheduler down; on "tpu" the
embedding gather clamps the index (XLA's gather semantics), so the request would answer silently
from the wrong token. ``install()`` wraps that method so such a request fails with a
``ValueError`` naming the id and the valid range, before it reaches the scheduler; the engine and
the server go on serving. Run from the platform's ``apply_server_args_defaults`` (the process that
holds the tokenizer manager).
"""
from __future__ import annotations

from typing import Any


def check_ids(input_ids: Any, vocab_size: int) -> None:
    if not input_ids or not vocab_size:
        return
    lo, hi = min(input_ids), max(input_ids)
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        raise ValueError(f"The input contains token id {bad}, outside the model's vocabulary "
                         f"(valid token ids: [0, {vocab_size})).")


def install() -> None:
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    orig = TokenizerManager._validate_one_request
    if getattr(orig, "_tpuc", False):
        return

    def _validate_one_request(self: Any, obj: Any, input_ids: Any) -> None:
        if isinstance(input_ids, list) and input_ids and isinstance(input_ids[0], int):
            check_ids(input_ids, int(getattr(self.model_config, "vocab_size", 0) or 0))
        return orig(self, obj, input_ids)

    _validate_one_request._tpuc = True
    TokenizerManager._validate_one_request = _validate_one_request
