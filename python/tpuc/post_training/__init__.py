"""Post-training on "tpu": GRPO with rollouts from a serving engine and weights synced to it
every step (docs/post_training.md).

``engine`` is the interface between a trainer and whatever generates its rollouts; the vLLM
engine in its own process (``vllm_engine``), the in-process reference engine and the GRPO recipe
(``grpo``) build on it.
"""
