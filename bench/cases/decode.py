"""Decode tokens/s of Hugging Face `generate()` (greedy) for a tiny Llama,
batch 1 and 8: the CPU, tpu strict, tpu fused and tpu with a static cache
(transformers auto-compiles its decode step with CompileConfig(backend="tpu")).
Contenders run interleaved after a warm-up that compiles everything.

Besides wall time, each row carries the process's CPU seconds per call (less
sensitive to other processes on a shared machine than wall time), the tpuc
launches per generated token, and the compiles that happened during the timed
calls (0: the warm-up compiled everything; a static cache's decode step must
compile once, not per token)."""
from __future__ import annotations

import warnings

import torch

import statistics
import time

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
    repeats = 3 if quick else 9
    # quick (CI): batch 1 only. Each batch size compiles its own programs (the static cache's
    # decode step included), which was most of the case's 112 s in CI.
    batches = (1,) if quick else (1, 8)
    cpu = _model()
    dev = _model().to("tpu")
    for batch in batches:
        ids = torch.randint(3, 256, (batch, 8), generator=torch.Generator().manual_seed(batch))
        ids_t = ids.to("tpu")

        def gen(model, x, **kw):
            def f():
                with torch.no_grad():
                    y = model.generate(input_ids=x, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                       do_sample=False, **kw)
                y.cpu()
            return f

        def moded(mode, f):
            def g():
                with eager_mode(mode):
                    f()
            return g

        contenders = {"cpu eager": gen(cpu, ids), "tpu strict": moded("strict", gen(dev, ids_t)),
                      "tpu static compiled": moded("strict", gen(dev, ids_t, cache_implementation="static"))}
        if fused_available():
            contenders["tpu fused"] = moded("fused", gen(dev, ids_t))
            contenders["tpu static compiled + fused"] = moded(
                "fused", gen(dev, ids_t, cache_implementation="static"))
        launches = {}
        first_compiles = {}
        for name, fn in contenders.items():  # warm-up (compiles), then one counted call
            c0 = torch.tpu.stats()["compiles"]
            fn()
            first_compiles[name] = torch.tpu.stats()["compiles"] - c0
            e0 = torch.tpu.stats()["executions"]
            fn()
            launches[name] = (torch.tpu.stats()["executions"] - e0) / new_tokens
        wall = {n: [] for n in contenders}
        cpu_s = {n: [] for n in contenders}
        before = torch.tpu.stats()["compiles"]
        for _ in range(repeats):
            for name, fn in contenders.items():
                c0, t0 = time.process_time(), time.perf_counter()
                fn()
                wall[name].append(time.perf_counter() - t0)
                cpu_s[name].append(time.process_time() - c0)
        out.setdefault("compiles_during", {})[str(batch)] = torch.tpu.stats()["compiles"] - before
        for name in contenders:
            w = sorted(wall[name])
            m = {"median": statistics.median(w), "min": w[0], "max": w[-1], "n": len(w)}
            out["rows"].append({"batch": batch, "contender": name, "new_tokens": new_tokens,
                                "tokens_per_s": batch * new_tokens / m["median"], "call_s": m,
                                "cpu_s": statistics.median(cpu_s[name]),
                                "launches_per_token": None if name == "cpu eager" else launches[name],
                                "first_call_compiles": None if name == "cpu eager" else first_compiles[name]})
    by = {(r["batch"], r["contender"]): r["tokens_per_s"] for r in out["rows"]}
    for b in batches:
        st = by.get((b, "tpu strict"))
        for r in out["rows"]:
            if r["batch"] == b and st:
                r["vs_strict"] = r["tokens_per_s"] / st
                r["vs_cpu"] = r["tokens_per_s"] / by[(b, "cpu eager")]
        cs = {r["contender"]: r["cpu_s"] for r in out["rows"] if r["batch"] == b}
        for r in out["rows"]:
            if r["batch"] == b and "tpu strict" in cs:
                r["cpu_vs_strict"] = cs["tpu strict"] / r["cpu_s"]
    return out
