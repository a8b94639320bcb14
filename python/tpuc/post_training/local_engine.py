"""An in-process rollout engine: generation with a copy of the policy itself (no vLLM).

:class:`LocalEngine` implements :class:`~tpuc.post_training.engine.RolloutEngine` with its
own model instance (built by the caller, e.g. the recipe's TorchTitan llama3), so a weight
update really moves tensors into a separate model, as with a serving engine. Generation is a
plain loop without a KV cache (the prompts of a batch have one length, the rollouts advance in
lock-step); sampling is Gumbel-max with noise drawn from a seeded CPU generator, so the same
seed draws the same noise on "tpu" and on the CPU and the two devices sample the same tokens
wherever their logits order the same way. Weight names are the model's own (TorchTitan's
``layers.0.attention.wqkv.weight``), not Hugging Face's: the recipe hands this engine its
parameters as they are named (``named_parameters``). It is also the reference for "the engine's greedy outputs equal the
trainer's" (:func:`generate`).
"""

from __future__ import annotations

import time
from typing import Iterable

import torch

from .engine import Completion, SamplingSpec, SyncStats


@torch.no_grad()
def generate(model: torch.nn.Module, prompts: list[list[int]], spec: SamplingSpec,
             device: torch.device | str) -> list[list[Completion]]:
    """``spec.n`` completions per prompt with ``model`` (prompts of one length)."""
    lengths = {len(p) for p in prompts}
    if len(lengths) != 1:
        raise ValueError(f"LocalEngine: prompts of one length only (got lengths {sorted(lengths)})")
    if spec.top_p != 1.0:
        raise NotImplementedError("LocalEngine: top_p < 1 (use the vLLM engine)")
    rows = [p for p in prompts for _ in range(spec.n)]
    B = len(rows)
    seq = torch.tensor(rows, device=device)
    gen = torch.Generator().manual_seed(spec.seed if spec.seed is not None else torch.seed())
    stops = list(spec.stop_token_ids)
    out: list[list[int]] = [[] for _ in range(B)]
    lps: list[list[float]] = [[] for _ in range(B)]
    done = [False] * B
    for _ in range(spec.max_tokens):
        logits = model(seq)[:, -1].float()
        if spec.temperature == 0.0:
            nxt = logits.argmax(dim=-1)
            scaled = logits
        else:
            scaled = logits / spec.temperature
            u = torch.rand(B, logits.shape[-1], generator=gen).clamp_(min=1e-20)
            gumbel = (-torch.log(-torch.log(u))).to(device)
            nxt = (scaled + gumbel).argmax(dim=-1)
        if spec.logprobs:
            lp = torch.log_softmax(scaled, dim=-1).gather(-1, nxt[:, None]).squeeze(-1).cpu().tolist()
        ids = nxt.cpu().tolist()
        for i, t in enumerate(ids):
            if not done[i]:
                out[i].append(t)
                if spec.logprobs:
                    lps[i].append(lp[i])
                done[i] = t in stops
        if all(done):
            break
        seq = torch.cat([seq, nxt[:, None]], dim=1)
    comps = [Completion(o, l if spec.logprobs else None) for o, l in zip(out, lps)]
    return [comps[i * spec.n:(i + 1) * spec.n] for i in range(len(prompts))]


class LocalEngine:
    """Rollouts from a separate copy of the policy on ``device``; weights by the model's names."""

    weight_names = "model"  # the recipe sends the model's own parameter names

    def __init__(self, model: torch.nn.Module, device: torch.device | str) -> None:
        self.model = model.eval()
        self.device = torch.device(device)
        # Parameters themselves (aliases), not state_dict(): TorchTitan's fused-QKV module
        # splits wqkv into fresh wq/wk/wv tensors in state_dict(), so writing those would miss.
        self._params = dict(model.named_parameters())

    def generate(self, prompts: list[list[int]], spec: SamplingSpec) -> list[list[Completion]]:
        return generate(self.model, prompts, spec, self.device)

    @torch.no_grad()
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> SyncStats:
        t0 = time.perf_counter()
        n = nbytes = 0
        path = "host"
        for name, t in named_tensors:
            dst = self._params.get(name)
            if dst is None:
                raise KeyError(f"LocalEngine.update_weights: no weight named {name!r} in the engine's model")
            if dst.shape != t.shape:
                raise ValueError(f"LocalEngine.update_weights: {name} is {tuple(t.shape)}, the engine's "
                                 f"is {tuple(dst.shape)}")
            path = "device" if t.device.type == dst.device.type else "host"
            dst.copy_(t)
            n += 1
            nbytes += t.numel() * t.element_size()
        if self.device.type == "tpu":
            torch.tpu.synchronize()
        return SyncStats(tensors=n, bytes=nbytes, seconds=time.perf_counter() - t0, path=path)

    def close(self) -> None:
        self._params.clear()
