"""The GRPO recipe on TorchTitan's components: a tiny llama3 policy learns to sort letters.

    python -m tpuc.post_training.recipe --device tpu --steps 8            # local engine
    torchrun --nproc_per_node=2 -m tpuc.post_training.recipe --device tpu  # FSDP=2

What it uses from TorchTitan 0.3.0 (nothing edited or copied): the llama3 model spec
(``model_registry``) and its model config with a character vocabulary (``Llama3Model.Config``
built by llama3's own layer builder), its parallelize function (FSDP2 over the data-parallel
mesh, float32 parameters) when there is more than one process, and its optimizer container
(``OptimizersContainer``, AdamW). The supervised warm-up runs on the CPU in float32 (the same
weights for every device and rank); the warm weights are the frozen KL reference.

A step: sample ``group_size`` rollouts for each of ``prompts_per_step`` prompts from the
engine, score them (task reward, plus the safety rule with weight ``safety_weight``),
``inner_epochs`` optimizer steps of the GRPO loss (:mod:`.grpo`), then
``engine.update_weights()`` with the new weights, whose :class:`SyncStats` are recorded.
The same code runs with ``--device cpu`` (the reference run).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F

from .engine import RolloutEngine, SamplingSpec
from .grpo import grpo_loss, group_advantages, token_logprobs
from .rewards import ForbiddenOutputRule, SortReward, Weighted, forbidden_rate
from .tasks import SortTask


@dataclass
class GRPOConfig:
    device: str = "tpu"
    seed: int = 0
    # policy (TorchTitan llama3, tiny)
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    # task
    length: int = 4
    n_letters: int = 6
    unsafe_rate: float = 0.3
    # supervised warm-up (CPU, float32)
    sft_steps: int = 30
    sft_batch: int = 64
    sft_lr: float = 3e-3
    # GRPO
    steps: int = 8
    prompts_per_step: int = 8
    group_size: int = 8
    inner_epochs: int = 2
    lr: float = 1e-3
    beta: float = 0.04
    clip_eps: float = 0.2
    temperature: float = 1.0
    safety_weight: float = 0.0  # 0: task reward only
    # evaluation
    eval_rounds: int = 4  # sampled evaluation batches (each prompts_per_step x group_size)
    # "vllm": vLLM on the device in its own process (.venv-serve, tpuc.post_training.vllm_engine);
    # "sglang": SGLang on the device in its own process (.venv-torch-2.14.1,
    # tpuc.post_training.sglang_engine);
    # "local": generation in-process with a copy of the policy (no vLLM needed).
    engine: str = "vllm"


@dataclass
class StepRecord:
    step: int
    reward: float  # mean total reward of the step's rollouts
    task_reward: float
    forbidden_rate: float  # over the step's rollouts
    loss: float
    kl: float
    clipped: float
    times: dict[str, float] = field(default_factory=dict)  # generation, scoring, training, sync
    sync_bytes: int = 0
    sync_tensors: int = 0
    sync_path: str = ""
    sync_bytes_per_s: float = 0.0


# ---- the policy: TorchTitan llama3 with a character vocabulary -------------------------------

POLICY_CONTEXT = 64  # the policy's rotary length: prompt + completion must fit (vLLM checks it)


def policy_config(vocab: int, dim: int, n_layers: int, n_heads: int,
                  max_seq_len: int = POLICY_CONTEXT) -> Any:
    """A llama3 ``Llama3Model.Config`` (TorchTitan 0.3.0) of the given size and vocabulary."""
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm, compute_ffn_hidden_dim
    from torchtitan.models.llama3 import Llama3Model, model_registry
    # The debug flavour's initialisers and layer structure, resized: llama3's own layer builder
    # (torchtitan.models.llama3._build_llama3_layers, 0.3.0) composes the blocks.
    from torchtitan.models.llama3 import _build_llama3_layers

    base = model_registry("debugmodel").model
    return Llama3Model.Config(
        dim=dim,
        vocab_size=vocab,
        tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim,
                                        param_init=base.tok_embeddings.param_init),
        norm=RMSNorm.Config(normalized_shape=dim, param_init=base.norm.param_init),
        lm_head=Linear.Config(in_features=dim, out_features=vocab,
                              param_init=_scaled_init(dim)),
        layers=_build_llama3_layers(
            n_layers=n_layers, dim=dim, n_heads=n_heads,
            hidden_dim=compute_ffn_hidden_dim(dim, multiple_of=32),
            rope=ComplexRoPE.Config(dim=dim // n_heads, max_seq_len=max_seq_len, theta=10000.0),
            attn_backend="flex",
        ),
    )


def _scaled_init(dim: int) -> dict[str, Callable[..., Any]]:
    import functools

    s = dim ** -0.5
    return {"weight": functools.partial(torch.nn.init.trunc_normal_, std=s, a=-3 * s, b=3 * s),
            "bias": torch.nn.init.zeros_}


def build_policy(cfg: GRPOConfig, vocab: int, device: str, state: dict[str, torch.Tensor] | None = None,
                 seed: int | None = None) -> torch.nn.Module:
    """Built on meta, allocated on ``device``, initialised (or loaded), attention swapped."""
    from tpuc.integrations.torchtitan import swaps

    mcfg = policy_config(vocab, cfg.dim, cfg.n_layers, cfg.n_heads)
    with torch.device("meta"):
        model = mcfg.build()
    model.to_empty(device=device)
    if seed is not None:
        torch.manual_seed(seed)
    model.init_weights(buffer_device=torch.device(device))
    if state is not None:
        model.load_state_dict(state)
    # FlexAttention -> one fused SDPA (causal: the prompts are unpadded), on every device.
    swaps.swap_attention_modules(model)
    return model


def build_optimizer(model: torch.nn.Module, lr: float) -> Any:
    """TorchTitan's OptimizersContainer: one AdamW group (no weight decay), foreach."""
    from torchtitan.components.optimizer.optimizer import default_adamw

    ocfg = dataclasses.replace(default_adamw(lr=lr, weight_decay=0.0), implementation="foreach")
    return ocfg.build(model_parts=[model])


_SFT_CACHE: dict[tuple, dict[str, torch.Tensor]] = {}


def supervised_warmup(cfg: GRPOConfig, task: SortTask) -> tuple[dict[str, torch.Tensor], list[float]]:
    """``sft_steps`` cross-entropy steps on the task's answers, on the CPU in float32."""
    key = (cfg.seed, cfg.dim, cfg.n_layers, cfg.n_heads, cfg.length, cfg.n_letters, cfg.unsafe_rate,
           cfg.sft_steps, cfg.sft_batch, cfg.sft_lr)
    if key in _SFT_CACHE:
        return _SFT_CACHE[key], []
    model = build_policy(cfg, task.tokenizer.vocab_size, "cpu", seed=cfg.seed)
    opt = build_optimizer(model, cfg.sft_lr)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    losses = []
    for _ in range(cfg.sft_steps):
        x, m = task.sft_batch(cfg.sft_batch, gen)
        logits = model(x[:, :-1])
        tok_loss = F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten(), reduction="none")
        mask = m[:, 1:].flatten().float()
        loss = (tok_loss * mask).sum() / mask.sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    _SFT_CACHE[key] = state
    return state, losses


# ---- distributed (FSDP via TorchTitan's parallelize function) ----------------------------------

def world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def parallelize(model: torch.nn.Module, world_size: int) -> torch.nn.Module:
    """TorchTitan llama3's ``parallelize_fn``: FSDP2 over ``world_size`` ranks, float32."""
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import ParallelDims
    from torchtitan.models.llama3 import model_registry

    parallelism = ParallelismConfig(data_parallel_shard_degree=world_size, spmd_backend="partial_dtensor")
    dims = ParallelDims.from_config(parallelism, world_size)
    dims.build_mesh()
    training = TrainingConfig(mixed_precision_param="float32", mixed_precision_reduce="float32")
    spec = model_registry("debugmodel")
    return spec.parallelize_fn(model, parallel_dims=dims, training=training, parallelism=parallelism,
                               compile_config=CompileConfig(enable=False), ac_config=None,
                               dump_folder="/tmp")


def full_state(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The model's parameters by name (fused ``wqkv`` as is), sharded (DTensor) ones gathered
    one at a time (``tpuc.post_training.weights.iter_full_state``; every rank must iterate)."""
    from .weights import iter_full_state

    return iter_full_state(model)


# ---- the recipe ------------------------------------------------------------------------------

class _HFNamedEngine:
    """A Hugging Face-named engine (vLLM) fed TorchTitan-named weights: converts as it streams
    (``tpuc.post_training.weights.titan_to_hf``, TorchTitan's own state-dict adapter)."""

    def __init__(self, engine: Any, model_config: Any) -> None:
        self.engine, self.model_config = engine, model_config

    def generate(self, prompts: list[list[int]], spec: SamplingSpec) -> Any:
        return self.engine.generate(prompts, spec)

    def update_weights(self, named_tensors: Any) -> Any:
        from .weights import titan_to_hf

        return self.engine.update_weights(titan_to_hf(named_tensors, self.model_config))

    def close(self) -> None:
        self.engine.close()


class _RankZeroEngine:
    """One engine serving every rank of a sharded trainer, held by rank 0.

    ``generate``: every rank's prompts and sampling spec are gathered to rank 0
    (``all_gather_object``), rank 0 generates each rank's share with that rank's spec, and the
    completions go back to all (``broadcast_object_list``), each rank keeping its own.
    ``update_weights``: every rank iterates the weights (each sharded parameter's gather is a
    collective), rank 0 streams them to the engine, and its SyncStats go to every rank.
    """

    def __init__(self, engine: Any, rank: int, world_size: int) -> None:
        self.engine, self.rank, self.world_size = engine, rank, world_size

    def generate(self, prompts: list[list[int]], spec: SamplingSpec) -> Any:
        import torch.distributed as dist

        asks: list[Any] = [None] * self.world_size
        dist.all_gather_object(asks, (prompts, spec))
        outs: list[Any] = [None]
        if self.rank == 0:
            outs = [[self.engine.generate(p, s) for p, s in asks]]
        dist.broadcast_object_list(outs, src=0)
        return outs[0][self.rank]

    def update_weights(self, named_tensors: Any) -> Any:
        import torch.distributed as dist

        stats: list[Any] = [None]
        if self.engine is None:
            for _ in named_tensors:  # the gathers are collectives: every rank takes part
                pass
        else:
            stats = [self.engine.update_weights(named_tensors)]
        dist.broadcast_object_list(stats, src=0)
        return stats[0]

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()


def make_engine(cfg: GRPOConfig, vocab: int, state: dict[str, torch.Tensor]) -> RolloutEngine:
    """``local``: :class:`LocalEngine`; ``vllm``: vLLM on ``cfg.device`` in its own process
    (.venv-serve); ``sglang``: SGLang there (.venv-torch-2.14.1); either started from the warm
    weights written as a Hugging Face directory."""
    if cfg.engine == "local":
        from .local_engine import LocalEngine

        return LocalEngine(build_policy(cfg, vocab, cfg.device, state=state), cfg.device)
    if cfg.engine in ("vllm", "sglang"):
        import tempfile

        from .weights import save_hf_dir

        rank, world_size = world()
        mcfg = policy_config(vocab, cfg.dim, cfg.n_layers, cfg.n_heads)
        engine: Any = None
        if rank == 0:  # one engine process for the whole trainer
            hf_dir = save_hf_dir(tempfile.mkdtemp(prefix="tpuc-grpo-policy-"), mcfg, state)
            # the context is the policy's rotary length (vLLM refuses a longer max_model_len)
            if cfg.engine == "vllm":
                from .vllm_engine import VLLMEngine

                inner: Any = VLLMEngine(hf_dir, device=cfg.device, seed=cfg.seed,
                                        max_model_len=POLICY_CONTEXT)
            else:
                from .sglang_engine import SGLangEngine

                inner = SGLangEngine(hf_dir, device=cfg.device, seed=cfg.seed,
                                     context_length=POLICY_CONTEXT)
            engine = _HFNamedEngine(inner, mcfg)
        return engine if world_size == 1 else _RankZeroEngine(engine, rank, world_size)
    raise ValueError(f"GRPO: unknown engine {cfg.engine!r} (local, vllm or sglang)")


def rewards_for(cfg: GRPOConfig, task: SortTask) -> tuple[Weighted, SortReward, ForbiddenOutputRule]:
    sort = SortReward(task)
    rule = ForbiddenOutputRule({task.tokenizer.forbidden_id})
    parts = [(sort, 1.0)] + ([(rule, cfg.safety_weight)] if cfg.safety_weight else [])
    return Weighted(parts), sort, rule


def evaluate(engine: RolloutEngine, cfg: GRPOConfig, task: SortTask) -> dict[str, float]:
    """Greedy task reward and sampled forbidden-output rate on fixed held-out prompts.

    Every batch has the training rollouts' shape (``prompts_per_step * group_size`` rows), so
    on "tpu" the evaluation reuses the training's compiled programs: greedy over that many
    prompts, and ``eval_rounds`` sampled batches of ``group_size`` completions per prompt.
    """
    _, sort, rule = rewards_for(cfg, task)
    rows = cfg.prompts_per_step * cfg.group_size
    g = torch.Generator().manual_seed(10_000 + cfg.seed)
    prompts = task.prompts(rows, g)
    stop = (task.tokenizer.eos_id,)
    greedy = engine.generate(prompts, SamplingSpec(n=1, max_tokens=task.max_completion, temperature=0.0,
                                                   stop_token_ids=stop))
    flat: list[tuple[list[int], list[int]]] = []
    for r in range(cfg.eval_rounds):
        ps = task.prompts(cfg.prompts_per_step, g)
        sampled = engine.generate(ps, SamplingSpec(n=cfg.group_size, max_tokens=task.max_completion,
                                                   temperature=cfg.temperature, seed=20_000 + 97 * cfg.seed + r,
                                                   stop_token_ids=stop))
        flat += [(p, c.token_ids) for p, gr in zip(ps, sampled) for c in gr]
    return {
        "greedy_reward": sum(sort(p, g[0].token_ids) for p, g in zip(prompts, greedy)) / len(prompts),
        "greedy_prompts": float(len(prompts)),
        "sampled_reward": sum(sort(p, c) for p, c in flat) / len(flat),
        "forbidden_rate": forbidden_rate(rule, (c for _, c in flat)),
        "samples": float(len(flat)),
    }


def _sync_device(device: str) -> None:
    if device == "tpu":
        torch.tpu.synchronize()


EngineFactory = Callable[[GRPOConfig, int, dict[str, torch.Tensor]], RolloutEngine]


def run(cfg: GRPOConfig, log: Callable[[str], None] | None = None,
        engine_factory: EngineFactory | None = None) -> dict[str, Any]:
    """Warm-up, then ``cfg.steps`` GRPO steps; returns the history and the evaluations.

    ``engine_factory(cfg, vocab, warm_state)``: where the rollout engine comes from (default
    :func:`make_engine`); ``tpuc.integrations.ray.grpo`` passes one that attaches to an engine
    hosted by a Ray actor."""
    rank, world_size = world()
    task = SortTask(length=cfg.length, n_letters=cfg.n_letters, unsafe_rate=cfg.unsafe_rate)
    vocab = task.tokenizer.vocab_size
    warm, sft_losses = supervised_warmup(cfg, task)
    dev = cfg.device
    policy = build_policy(cfg, vocab, dev, state=warm)
    if world_size > 1:
        policy = parallelize(policy, world_size)
    reference = build_policy(cfg, vocab, dev, state=warm).eval().requires_grad_(False)
    opt = build_optimizer(policy, cfg.lr)
    engine = (engine_factory or make_engine)(cfg, vocab, warm)
    reward_fn, sort, rule = rewards_for(cfg, task)
    history: list[StepRecord] = []
    before = evaluate(engine, cfg, task)
    gen = torch.Generator().manual_seed(cfg.seed + 2)
    P = task.prompt_len
    stop = (task.tokenizer.eos_id,)
    try:
        for step in range(cfg.steps):
            times: dict[str, float] = {}
            # Every rank draws the same prompts and takes its own share (data parallel).
            all_prompts = task.prompts(cfg.prompts_per_step * world_size, gen)
            prompts = all_prompts[rank::world_size]
            t0 = time.perf_counter()
            groups = engine.generate(prompts, SamplingSpec(
                n=cfg.group_size, max_tokens=task.max_completion, temperature=cfg.temperature,
                seed=cfg.seed * 100_003 + step * world_size + rank, stop_token_ids=stop))
            times["generation"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            comps = [(p, c.token_ids) for p, g in zip(prompts, groups) for c in g]
            rewards = torch.tensor([reward_fn(p, c) for p, c in comps], dtype=torch.float32)
            task_r = sum(sort(p, c) for p, c in comps) / len(comps)
            forb = forbidden_rate(rule, (c for _, c in comps))
            adv = group_advantages(rewards, cfg.group_size)
            T = task.max_completion
            rows = [p + c + [task.tokenizer.pad_id] * (T - len(c)) for p, c in comps]
            mask = [[1] * len(c) + [0] * (T - len(c)) for _, c in comps]
            times["scoring"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            tokens = torch.tensor(rows, device=dev)
            m = torch.tensor(mask, dtype=torch.bool, device=dev)
            a = adv.to(dev)
            with torch.no_grad():
                old = token_logprobs(policy, tokens, P)
                ref = token_logprobs(reference, tokens, P)
            for _ in range(cfg.inner_epochs):
                parts = grpo_loss(token_logprobs(policy, tokens, P), old, ref, a, m,
                                  clip_eps=cfg.clip_eps, beta=cfg.beta)
                parts.loss.backward()
                torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
                opt.step()
                opt.zero_grad()
            loss, kl, clipped = (float(x.detach().cpu()) for x in (parts.loss, parts.kl, parts.clipped))
            _sync_device(dev)
            times["training"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            stats = engine.update_weights(full_state(policy))
            times["sync"] = time.perf_counter() - t0
            rec = StepRecord(step, float(rewards.mean()), task_r, forb, loss, kl, clipped, times,
                             stats.bytes, stats.tensors, stats.path, stats.bytes_per_s)
            history.append(rec)
            if log is not None and rank == 0:
                log(f"step {step}: reward {rec.reward:.3f} task {task_r:.3f} forbidden {forb:.3f} "
                    f"kl {kl:.4f} | gen {times['generation']:.2f}s score {times['scoring']:.3f}s "
                    f"train {times['training']:.2f}s sync {times['sync']:.3f}s "
                    f"({stats.bytes / 1e6:.2f} MB, {stats.path})")
        after = evaluate(engine, cfg, task)
    finally:
        engine.close()
    return {"config": dataclasses.asdict(cfg), "sft_losses": sft_losses, "before": before,
            "after": after, "history": [dataclasses.asdict(h) for h in history],
            "world_size": world_size}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for f in dataclasses.fields(GRPOConfig):
        ap.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)
    ap.add_argument("--out", default="", help="write the result as JSON here (rank 0)")
    args = ap.parse_args(argv)
    cfg = GRPOConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(GRPOConfig)})
    import tpuc  # noqa: F401  (registers "tpu")

    ws = int(os.environ.get("WORLD_SIZE", "1"))
    if ws > 1:
        import torch.distributed as dist

        local = int(os.environ.get("LOCAL_RANK", "0"))
        if cfg.device == "tpu":
            torch.tpu.set_device(local)
            dist.init_process_group(device_id=torch.device("tpu", local))
        else:
            dist.init_process_group("gloo")
    try:
        res = run(cfg, log=print)
        rank = world()[0]
    finally:
        if ws > 1:
            import torch.distributed as dist

            dist.destroy_process_group()
    if rank == 0:
        print(f"before: {res['before']}\nafter:  {res['after']}")
        if args.out:
            with open(args.out, "w") as fh:
                json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
