"""Decode tokens/s of Hugging Face `generate()` (greedy) for a tiny Llama,
batch 1 and 8: the CPU, tpu strict, tpu fused and tpu with a static cache
(transformers auto-compiles its decode step with CompileConfig(backend="tpu")).
Contenders run interleaved after a warm-up that compiles everything."""
from __future__ import annotations

import warnings

import torch

from ..timing import interleave
from .common import eager_mode, fused_available, tpu_available

COMMAND = "python -m bench.run --cases decode"


def _model():
    import transformers as tf

    cfg = tf.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         pad_token_id=0, bos_token_id=1, eos_token_id=None)
    torch.manual_seed(0)
    return tf.LlamaForCausalLM(cfg).eval()


def run(quick: bool) -> dict:
    out = {"title": "Decode: generate() tokens/s, tiny Llama", "command": COMMAND, "rows": []}
    if not tpu_available():
        out["notes"] = "tpu unavailable on this install"
        return out
    try:
        import transformers  # noqa: F401
    except ImportError:
        out["notes"] = "transformers not installed (make setup installs it)"
        return out
    warnings.filterwarnings("ignore")
    new_tokens = 8 if quick else 32
    repeats = 2 if quick else 5
    cpu = _model()
    dev = _model().to("tpu")
    for batch in (1, 8):
        ids = torch.randint(3, 256, (batch, 8), generator=torch.Generator().manual_seed(batch))
        ids_t = ids.to("tpu")

        def gen(model, x, **kw):
            def f():
                with torch.no_grad():
                    y = model.generate(input_ids=x, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                       do_sample=False, **kw)
                y.cpu()
            return f

        strict = gen(dev, ids_t)
        static = gen(dev, ids_t, cache_implementation="static")
        fused_fn = gen(dev, ids_t)

        def fused():
            with eager_mode("fused"):
                fused_fn()

        contenders = {"cpu eager": gen(cpu, ids), "tpu strict": strict, "tpu static compiled": static}
        if fused_available():
            contenders["tpu fused"] = fused
        before = torch.tpu.stats()["compiles"]
        samples = interleave(contenders, repeats=repeats, warmup=1)
        for name, s in samples.items():
            m = s.summary()
            out["rows"].append({"batch": batch, "contender": name, "new_tokens": new_tokens,
                                "tokens_per_s": batch * new_tokens / m["median"], "call_s": m})
        out.setdefault("compiles_during", {})[str(batch)] = torch.tpu.stats()["compiles"] - before
    by = {(r["batch"], r["contender"]): r["tokens_per_s"] for r in out["rows"]}
    for b in (1, 8):
        st = by.get((b, "tpu strict"))
        for r in out["rows"]:
            if r["batch"] == b and st:
                r["vs_strict"] = r["tokens_per_s"] / st
                r["vs_cpu"] = r["tokens_per_s"] / by[(b, "cpu eager")]
    return out
