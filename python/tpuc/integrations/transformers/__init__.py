"""transformers on "tpu" (tested with transformers 5.24.0).

transformers >= 5.20 finds "tpu" itself through torch.accelerator
(`is_torch_tpu_available`, `TrainingArguments` picking tpu:0, the "tpu_dist"
backend, static-cache auto-compile with CompileConfig(backend="tpu")), so no
shim lives here; what it relies on below it is supplied elsewhere:
`device_map="auto"` through accelerate's get_max_memory
(tpuc.integrations.accelerate), tied weights staying tied through
`.to("tpu")` (csrc/torch/shallow_copy.cpp), the MoE routers' integer
`torch.histc` and generate's `torch.isin` (csrc/core/lower/count.c).
The models and paths tested: tests/models/, docs/models.md."""
