"""Fixed training programs for the standing multi-step parity tests.

Each is a train program of gen.py, written out by hand: an architecture users train
(attention with a fused qkv projection, SwiGLU, embeddings, conv, norms), at sizes on
both sides of the engine's thresholds, several optimizer steps, host reads between
steps (grad-norm clipping, reading a gradient or a parameter, ``loss.item()``) and
in-place edits of parameters; Adam's eps is 1e-3 (gen.py says why).
tests/test_training_parity.py runs each in every mode against float64 (run.check); tests/distributed/test_dist_parity.py trains LLAMA_LIKE
under DDP and FSDP2.
"""
from __future__ import annotations

from .gen import Program


def _train(seed: int, blocks: list, dim: int, rows: int, batch_shape: list[int], optim: list,
           steps: list[list[str]], tokens: bool = False, lr: float = 1e-2) -> Program:
    return {"kind": "train", "seed": seed, "dim": dim, "rows": rows, "batch_shape": batch_shape,
            "tokens": tokens, "blocks": blocks, "optim": optim, "lr": lr, "steps": steps}


PROGRAMS: dict[str, Program] = {
    # issue 29: Linear(128, 512) over 8 x 64 rows, its weight edited in place between steps
    "linear_128_512_inplace": _train(
        29, [["linear", 128, 512, False]], 128, 64, [8], ["sgd", {}],
        [["param_add"], ["param_add", "read_grad"], ["param_add", "read_param"], []], lr=0.1),
    "llama_like": _train(
        1, [["embedding", 64, 128], ["norm", 128, "rms"], ["attn", 128, 4], ["norm", 128, "rms"],
            ["swiglu", 128, 344], ["linear", 128, 64, False]],
        128, 64, [4], ["adamw", {"foreach": True, "eps": 1e-3}],
        [["clip"], ["clip", "read_grad"], ["clip"], ["item_loss"], ["clip", "read_param"]],
        tokens=True),
    "wide_mlp_520_rows": _train(
        2, [["linear", 128, 512, True], ["act", "gelu"], ["linear", 512, 128, True],
            ["norm", 128, "layer"], ["linear", 128, 512, False]],
        128, 520, [], ["adamw", {"fused": True, "eps": 1e-3}],
        [["item_loss"], ["slice_add"], ["read_grad"], ["slice_zero"], []]),
    "conv_residual": _train(
        3, [["conv1d", 64, 3], ["act", "relu"], ["residual", 64, 256], ["linear", 64, 16, True]],
        64, 127, [2], ["sgd", {"momentum": 0.9}],
        [[], ["param_mul"], ["clip"], [], ["read_param"]]),
    "qkv_attention_accumulate": _train(
        4, [["attn", 96, 2], ["residual", 96, 130], ["linear", 96, 31, True]],
        96, 128, [], ["adam", {"foreach": False, "eps": 1e-3}],
        [["grad_none"], [], ["grad_none", "read_grad"], [], []]),
}
