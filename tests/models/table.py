"""Writes docs/models.md (the model matrix) from a run of every family:
`make models-table` (python -m tests.models.table > docs/models.md)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from models import families as F  # noqa: E402

HEAD = """# Hugging Face models on "tpu"

```python
import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("path/to/saved_model", device_map="tpu")  # or "auto"
ids = torch.tensor([[1, 5, 9]], device="tpu")
print(model.generate(ids, max_new_tokens=8, do_sample=False))
```

transformers 5.24.0, accelerate 1.15.0, diffusers 0.42.1, safetensors 0.8.0 (installed by
`make setup`) with torch 2.13.0. Each family below is a tiny random config
(tests/models/families.py) run on "tpu" (the XLA CPU plugin here) and on the CPU with the same
weights. *forward*: max |logits - float64 CPU reference| on tpu vs on the CPU in float32 (pass:
tpu error <= 4x the CPU's + 16 float32 ulps of the logits' scale); *backward*: every parameter's
gradient under the same rule, none missing; *generate*: greedy `generate()` (5 new tokens, dynamic
cache) token for token equal to the CPU's; *ties*: tied/shared weights still one Parameter after
`.to("tpu")`; *fallbacks*: ops that ran on the CPU. Regenerate: `make models-table`.

| family | forward | backward | generate | ties | fallbacks | notes |
|---|---|---|---|---|---|---|
"""

TAIL = """
Paths tested besides (tests/models/test_paths.py): `from_pretrained(dir, device_map="tpu")`,
`device_map={"": "tpu"}` and `device_map="auto"` (fills tpu:0, through
tpuc.integrations.accelerate) from a `save_pretrained` directory, greedy output equal to the
CPU's; `safetensors.torch.load_file(..., device="tpu")` (tpuc.integrations.safetensors);
`model.to("tpu")`; beam search equal to the CPU's; seeded top-k/top-p sampling (reproducible
under a seed; the draws come from the tpu generator, so they are not the CPU's draws, and each
token is checked to lie in the CPU's top-k); `cache_implementation="static"` (transformers
compiles the decode step with backend "tpu"; a second generate() compiles nothing);
`accelerate.Accelerator().device` and `PartialState().device` are tpu; `transformers.Trainer`
on tpu:0 with losses matching the CPU's. tests/models/test_diffusers.py (`make models`): a tiny
`FluxPipeline` (CLIP and T5 text encoders, Flux transformer, VAE) on tpu, image within a bound
derived from the CPU's own float32 sensitivity.

Mechanisms behind them: tied weights through `_has_compatible_shallow_copy_type`
(csrc/torch/shallow_copy.cpp); integer `histc` (MoE routers) and `isin` (generate's stop check)
lowered on the device (csrc/core/lower/count.c).

Limits: accelerate's multi-process launch (a DistributedType for tpu) is not adapted; on a real
TPU, `device_map="auto"` sizes the device by `torch.tpu.mem_get_info` where it exists, else by
the host's free memory; `histc` does not raise for a non-finite data range (PyTorch checks that
on the host).
"""


def main() -> None:
    F.quiet()
    rows = []
    for name in F.FAMILIES:
        r = F.run(name)
        fb = ", ".join(f"{op} ({F.KNOWN_FALLBACKS.get(op, 'unexpected')})" for op in r.fallbacks) or "none"
        rows.append(f"| {name} | {r.forward} | {r.backward} | {r.generate} | {r.ties} | {fb} | {r.notes} |")
        if r.failures:
            rows[-1] += " failures: " + "; ".join(r.failures)
    sys.stdout.write(HEAD + "\n".join(rows) + "\n" + TAIL)


if __name__ == "__main__":
    main()
