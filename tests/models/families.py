"""Tiny random Hugging Face models, one per architecture family, and the
checks tests/models and `make models-table` run on each: forward logits,
every parameter's gradient and greedy generate on "tpu" against the CPU.

Bounds are derived, not tuned: the reference is the same model in float64 on
the CPU; the tpu (float32) result must be as close to it as a small multiple
of the CPU's own float32 error, plus a few float32 ulps of the values' scale
(so an exact CPU result does not demand an exact tpu one)."""
from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import transformers as tf

EPS32 = torch.finfo(torch.float32).eps
# Ops that run on the CPU for a model, with the reason (none today).
KNOWN_FALLBACKS: dict[str, str] = {}


@dataclass
class Family:
    name: str
    build: Callable[[], Any]
    inputs: Callable[[], dict[str, torch.Tensor]]
    generate: bool = True
    ties: tuple[tuple[str, str], ...] = ()
    notes: str = ""


def _ids(b: int = 2, s: int = 7, vocab: int = 96, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, vocab, (b, s), generator=torch.Generator().manual_seed(seed))


def _lm(cls: Any, cfg: Any) -> Callable[[], Any]:
    return lambda: cls(cfg)


_DEC = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            pad_token_id=0, bos_token_id=1, eos_token_id=2)

FAMILIES: dict[str, Family] = {
    "llama": Family("llama", _lm(tf.LlamaForCausalLM, tf.LlamaConfig(**_DEC)),
                    lambda: {"input_ids": _ids()}, notes="GQA, RoPE, SwiGLU"),
    "qwen3": Family("qwen3", _lm(tf.Qwen3ForCausalLM, tf.Qwen3Config(**_DEC, head_dim=8,
                                                                     tie_word_embeddings=True)),
                    lambda: {"input_ids": _ids()}, ties=(("model.embed_tokens.weight", "lm_head.weight"),),
                    notes="qk-norm, tied embeddings"),
    "qwen3_moe": Family("qwen3_moe", _lm(tf.Qwen3MoeForCausalLM, tf.Qwen3MoeConfig(
        **_DEC, head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        decoder_sparse_step=1, norm_topk_prob=True)), lambda: {"input_ids": _ids()},
        notes="4 experts, top-2; router histc on int"),
    "mixtral": Family("mixtral", _lm(tf.MixtralForCausalLM, tf.MixtralConfig(
        **_DEC, num_local_experts=4, num_experts_per_tok=2)), lambda: {"input_ids": _ids()},
        notes="4 experts, top-2; router histc on int"),
    "gemma": Family("gemma", _lm(tf.GemmaForCausalLM, tf.GemmaConfig(**_DEC, head_dim=8)),
                    lambda: {"input_ids": _ids()}, ties=(("model.embed_tokens.weight", "lm_head.weight"),),
                    notes="GeGLU, scaled embeddings, tied"),
    "gpt2": Family("gpt2", _lm(tf.GPT2LMHeadModel, tf.GPT2Config(
        vocab_size=96, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=1,
        eos_token_id=2)), lambda: {"input_ids": _ids()},
        ties=(("transformer.wte.weight", "lm_head.weight"),), notes="learned positions, Conv1D, tied"),
    "bert": Family("bert", _lm(tf.BertForMaskedLM, tf.BertConfig(
        vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64)),
        lambda: {"input_ids": _ids(), "attention_mask": torch.tensor([[1] * 7, [1] * 5 + [0] * 2])},
        generate=False, ties=(("bert.embeddings.word_embeddings.weight", "cls.predictions.decoder.weight"),),
        notes="encoder, padding mask, tied decoder"),
    "t5": Family("t5", _lm(tf.T5ForConditionalGeneration, tf.T5Config(
        vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
        num_heads=4, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)),
        lambda: {"input_ids": _ids(), "decoder_input_ids": _ids(s=4, seed=1)},
        ties=(("shared.weight", "encoder.embed_tokens.weight"), ("shared.weight", "decoder.embed_tokens.weight")),
        notes="encoder-decoder, relative position bias, shared embeddings"),
    "bart": Family("bart", _lm(tf.BartForConditionalGeneration, tf.BartConfig(
        vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None)),
        lambda: {"input_ids": _ids(), "decoder_input_ids": _ids(s=4, seed=1)},
        ties=(("model.shared.weight", "lm_head.weight"),), notes="encoder-decoder, learned positions"),
    "vit": Family("vit", _lm(tf.ViTForImageClassification, tf.ViTConfig(
        image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, num_labels=5)),
        lambda: {"pixel_values": torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))},
        generate=False, notes="patch conv, CLS head"),
}


def _out_tensor(out: Any) -> torch.Tensor:
    return out.logits


def _max_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref).abs().max())


def _bound(cpu_err: float, ref: torch.Tensor) -> float:
    return 4 * cpu_err + 16 * EPS32 * float(ref.abs().max())


@dataclass
class Result:
    family: str
    forward: str = "-"
    backward: str = "-"
    generate: str = "-"
    ties: str = "-"
    fallbacks: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: str = ""


def _fallbacks() -> dict[str, int]:
    return dict(torch.tpu.stats()["fallbacks"])


def run(name: str, check_generate: bool = True) -> Result:
    fam = FAMILIES[name]
    res = Result(name, notes=fam.notes)
    torch.manual_seed(0)
    base = fam.build().eval()
    inputs = fam.inputs()
    ref64 = copy.deepcopy(base).double()
    if getattr(ref64.config, "_experts_implementation", None) not in (None, "eager"):
        # torch's CPU grouped_mm has no float64 kernel: the reference runs the
        # experts one by one (the same mathematics)
        ref64.config._experts_implementation = "eager"
    cpu = copy.deepcopy(base)
    dev = copy.deepcopy(base).to("tpu")
    for a, b in fam.ties:
        same_cpu = cpu.get_parameter(a) is cpu.get_parameter(b)
        same_dev = dev.get_parameter(a) is dev.get_parameter(b)
        if same_cpu != same_dev:
            res.failures.append(f"tie {a} = {b}: cpu {same_cpu}, tpu {same_dev}")
    res.ties = "kept" if fam.ties and not any(f.startswith("tie") for f in res.failures) else res.ties
    before = _fallbacks()

    def fwd(model: Any, dtype: torch.dtype | None, device: str) -> torch.Tensor:
        kw = {k: (v.to(device=device, dtype=dtype) if v.is_floating_point() and dtype else v.to(device))
              for k, v in inputs.items()}
        out = _out_tensor(model(**kw))
        loss = (out.float() if dtype is None else out).square().mean()
        loss.backward()
        return out

    r = fwd(ref64, torch.float64, "cpu").detach()
    c = fwd(cpu, None, "cpu").detach()
    d = fwd(dev, None, "tpu").detach().cpu()
    ce, de = _max_err(c, r), _max_err(d, r)
    ok = de <= _bound(ce, r)
    res.forward = f"{'ok' if ok else 'FAIL'} ({de:.1e} vs cpu {ce:.1e})"
    if not ok:
        res.failures.append(f"forward error {de:.3e} > bound {_bound(ce, r):.3e}")
    worst, missing, bad = 0.0, [], []
    for (pn, pr), pc, pd in zip(ref64.named_parameters(), cpu.parameters(), dev.parameters()):
        if pr.grad is None:
            continue
        if pd.grad is None:
            missing.append(pn)
            continue
        gce, gde = _max_err(pc.grad, pr.grad), _max_err(pd.grad.cpu(), pr.grad)
        worst = max(worst, gde / max(_bound(gce, pr.grad), 1e-30))
        if gde > _bound(gce, pr.grad):
            bad.append(f"{pn}: {gde:.2e} > {_bound(gce, pr.grad):.2e}")
    n = sum(1 for p in ref64.parameters() if p.grad is not None)
    res.backward = f"{'ok' if not (missing or bad) else 'FAIL'} ({n} grads)"
    if missing:
        res.failures.append(f"no gradient on tpu: {missing}")
    res.failures += bad
    if fam.generate and check_generate:
        with torch.no_grad():
            kw = {"input_ids": inputs["input_ids"], "max_new_tokens": 5, "do_sample": False}
            gc = cpu.generate(**kw)
            gd = dev.generate(**{**kw, "input_ids": kw["input_ids"].to("tpu")}).cpu()
        same = gc.shape == gd.shape and bool((gc == gd).all())
        res.generate = "equal" if same else "FAIL"
        if not same:
            res.failures.append(f"greedy generate differs: {gc.tolist()} vs {gd.tolist()}")
    new = sorted(k for k, v in _fallbacks().items() if v > before.get(k, 0))
    res.fallbacks = new
    for op in new:
        if op not in KNOWN_FALLBACKS:
            res.failures.append(f"unexpected CPU fallback {op}")
    return res


def quiet() -> None:
    warnings.filterwarnings("ignore")
    tf.logging.set_verbosity_error()
