"""The example transformer (examples/llama.py), tiny, trained the same way on
N ranks and in one CPU process, and the bound that compares them.

Bound: the distributed float32 run and a one-process CPU float32 run are both
compared with a one-process CPU float64 run (the truth, up to float64
rounding). The distributed run's error may be a few times the CPU float32
run's own error — different summation orders (per-rank partial gradients
reduced across ranks) give errors of the same order, not the same bits — plus
a floor of a few float32 ulps of the values' scale, for where the CPU's own
error happens to be ~0. Both measured, nothing tuned to a machine.
"""
from __future__ import annotations

import os
import sys
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from llama import Llama, LlamaConfig  # noqa: E402

CFG = LlamaConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_seq_len=16)
BATCH, SEQ, LR = 4, 8, 0.5


def make_model(seed: int = 0, dtype: torch.dtype = torch.float32) -> Llama:
    torch.manual_seed(seed)
    model = Llama(CFG)
    for p in model.parameters():  # Module.to(dtype) would make the complex rope buffer real
        p.data = p.data.to(dtype)
    if dtype == torch.float64:
        model.freqs = model.freqs.to(torch.complex128)
    return model


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    tok = torch.randint(0, CFG.vocab_size, (BATCH, SEQ + 1), generator=g)
    return tok[:, :-1], tok[:, 1:]


def reference(steps: int, dtype: torch.dtype, compute_dtype: torch.dtype | None = None
              ) -> tuple[list[float], dict[str, torch.Tensor]]:
    """One CPU process, the whole batch, SGD. ``compute_dtype`` runs forward and
    backward with parameters cast to it (FSDP2's MixedPrecisionPolicy param_dtype)."""
    model = make_model(0, dtype)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for s in range(steps):
        tok, tgt = batch(s)
        if compute_dtype is None:
            _, loss = model(tok, tgt)
        else:
            params = {k: v.to(compute_dtype) for k, v in model.named_parameters()}
            _, loss = torch.func.functional_call(model, params, (tok, tgt))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses, {k: v.detach().clone() for k, v in model.named_parameters()}


def check_against_reference(losses: list[float], params: dict[str, torch.Tensor], steps: int,
                            compute_dtype: torch.dtype | None = None) -> None:
    truth_l, truth_p = reference(steps, torch.float64, None)
    cpu_l, cpu_p = reference(steps, torch.float32, compute_dtype)
    eps = torch.finfo(compute_dtype or torch.float32).eps
    lt = torch.tensor(truth_l)
    cpu_err = (torch.tensor(cpu_l) - lt).abs().max().item()
    err = (torch.tensor(losses) - lt).abs().max().item()
    bound = 4 * cpu_err + 8 * eps * lt.abs().max().item()
    assert err <= bound, f"losses: error {err:.3g} > bound {bound:.3g} (CPU's own {cpu_err:.3g})\n" \
                         f"{losses}\n{truth_l}"
    assert set(params) == set(truth_p), (sorted(params), sorted(truth_p))
    for k, tp in truth_p.items():
        got = params[k].double()
        e = (got - tp).abs().max().item()
        ce = (cpu_p[k].double() - tp).abs().max().item()
        b = 4 * ce + 8 * eps * tp.abs().max().item()
        assert e <= b, f"{k}: error {e:.3g} > bound {b:.3g} (CPU's own {ce:.3g})"


def full_params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter as a full CPU float32 tensor (DTensors gathered), FQNs
    stripped of wrapper prefixes."""
    from torch.distributed.tensor import DTensor

    out: dict[str, torch.Tensor] = {}
    for k, v in model.named_parameters():
        t = v.full_tensor() if isinstance(v, DTensor) else v
        out[k.replace("module.", "").replace("_orig_mod.", "")] = t.detach().float().cpu()
    return out


def local_batch(step: int, dp_rank: int, dp: int) -> tuple[torch.Tensor, torch.Tensor]:
    tok, tgt = batch(step)
    n = BATCH // dp
    return tok[dp_rank * n:(dp_rank + 1) * n].to("tpu"), tgt[dp_rank * n:(dp_rank + 1) * n].to("tpu")


def train_loop(model: torch.nn.Module, steps: int, dp_rank: int, dp: int, loss_group: Any = None
               ) -> list[float]:
    import torch.distributed as dist

    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for s in range(steps):
        tok, tgt = local_batch(s, dp_rank, dp)
        _, loss = model(tok, tgt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        rep = loss.detach().float().clone()
        if dp > 1:
            dist.all_reduce(rep, op=dist.ReduceOp.AVG, group=loss_group)
        losses.append(float(rep))
    return losses


def tp_plan_apply(model: Llama, tp_mesh: Any) -> None:
    """Megatron-style TP + sequence parallelism, applied from outside the model
    (as TorchTitan does): attention heads and FFN columns split over the mesh."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    parallelize_module(model, tp_mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    })
    for block in model.layers:
        parallelize_module(block, tp_mesh, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None),
                                            desired_input_layouts=(Replicate(), None),
                                            use_local_output=True),
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),),
                                               desired_input_layouts=(Replicate(),),
                                               use_local_output=True),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
        })
        block.attention.n_heads = CFG.n_heads // tp_mesh.size()  # local heads
