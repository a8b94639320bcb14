"""One vLLM engine on "tpu" (no Ray), greedy on the prompts given as JSON: the single-engine
reference of tests/rayserve (a subprocess: vLLM's in-process engine stays out of pytest).

    python run_single.py MODEL_DIR PROMPTS.json MAX_TOKENS OUT.json
"""
from __future__ import annotations

import json
import os
import sys


def main() -> None:
    model, prompts_file, max_tokens, out = sys.argv[1:5]
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import vllm
    from tpuc.integrations.ray.serve import DEFAULT_ENGINE_ARGS

    llm = vllm.LLM(model=model, **DEFAULT_ENGINE_ARGS)
    prompts = json.loads(open(prompts_file).read())
    sp = vllm.SamplingParams(temperature=0.0, max_tokens=int(max_tokens), ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
    with open(out, "w") as f:
        json.dump([list(o.outputs[0].token_ids) for o in outs], f)
    os._exit(0)  # skip vLLM's interpreter-exit teardown (nothing left to flush)


if __name__ == "__main__":
    main()
