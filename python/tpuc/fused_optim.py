"""PyTorch's fused optimizer kernels (``Adam(fused=True)``, ``AdamW(fused=True)`` —
TorchTitan's default optimizer — and ``SGD(fused=True)``) on the device "tpu".

``aten::_fused_adam(w)_`` and ``_fused_sgd_`` are single ops over lists of tensors; without a kernel
they would fall back to the CPU, copying every parameter, gradient and moment
across each step. Here they are written with foreach ops the core lowers, so
they run on the device in every eager mode (fused mode records the whole update
into its chunk) and inside compiled graphs (the functional ``_fused_adam(w)``
that AOTAutograd traces). The math is the one of PyTorch's CPU kernel
(``FusedAdamKernel.cpp``): per parameter with its own step count, bias-corrected
moments, decoupled (AdamW) or L2 (Adam) weight decay, ``amsgrad``,
``maximize``; ``grad_scale`` divides the gradients (written back unscaled) and
a ``found_inf`` of 1 leaves every tensor as it was — decided on the device, so
no host synchronisation is needed. SGD follows PyTorch's ``_single_tensor_sgd``:
weight decay, momentum with dampening (the first step copies the gradient),
Nesterov, ``maximize``.
"""
from __future__ import annotations

import contextlib
import math
import os
from typing import Iterator, Optional, Union

import torch
from torch import Tensor

_lib: Optional[torch.library.Library] = None

Lists = tuple[list[Tensor], list[Tensor], list[Tensor], list[Tensor], list[Tensor]]


def _grads_in(params: list[Tensor], grads: list[Tensor], lr: Union[float, Tensor],
              grad_scale: Optional[Tensor], maximize: bool):
    """(lr on the params' device, the unscaled grads to write back, the grads the
    update follows: negated with maximize)."""
    if isinstance(lr, Tensor):
        lr = lr.to(params[0].device)
    unscaled = list(grads)
    if grad_scale is not None:
        unscaled = list(torch._foreach_div(grads, grad_scale.to(params[0].device)))
    return lr, unscaled, list(torch._foreach_neg(unscaled)) if maximize else unscaled


def _unless_inf(found_inf: Optional[Tensor], olds: tuple, news: tuple) -> tuple:
    """`news`, or `olds` everywhere when found_inf is 1 (decided on the device)."""
    if found_inf is None:
        return news
    skip = found_inf.to(olds[0][0].device) == 1
    return tuple([torch.where(skip, o, n) for o, n in zip(old, new)]
                 for old, new in zip(olds, news))


def _log(beta: float) -> float:
    """log(beta) as a Python float (-inf for 0: expm1 then gives beta^t - 1 = -1)."""
    return math.log(beta) if beta > 0 else -math.inf


def _adam_math(params: list[Tensor], grads: list[Tensor], exp_avgs: list[Tensor],
               exp_avg_sqs: list[Tensor], max_exp_avg_sqs: list[Tensor],
               state_steps: list[Tensor], lr: Union[float, Tensor], beta1: float,
               beta2: float, weight_decay: float, eps: float, amsgrad: bool, maximize: bool,
               decoupled: bool, grad_scale: Optional[Tensor] = None,
               found_inf: Optional[Tensor] = None) -> Lists:
    """New (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs); inputs untouched."""
    if not params:
        return [], [], [], [], []
    lr, new_grads, g = _grads_in(params, grads, lr, grad_scale, maximize)
    p = list(params)
    if weight_decay != 0:
        if decoupled:
            p = list(torch._foreach_mul(params, 1 - lr * weight_decay))
        else:
            g = list(torch._foreach_add(g, params, alpha=weight_decay))
    m = list(torch._foreach_lerp(exp_avgs, g, 1 - beta1))
    v = list(torch._foreach_mul(exp_avg_sqs, beta2))
    v = list(torch._foreach_addcmul(v, g, g, value=1 - beta2))
    # The bias corrections 1 - beta^t as -expm1(t * log(beta)): beta^t - 1 loses the low bits
    # of 1 - beta2^t to cancellation (0.999 in float32: 1.3e-5 relative at t = 1, where
    # PyTorch's CPU kernel computes it in double). float64 parameters compute them in float64.
    cdt = torch.float64 if params[0].dtype == torch.float64 else torch.float32
    steps = [s.to(device=params[0].device, dtype=cdt) for s in state_steps]
    neg_bc1 = torch._foreach_expm1(torch._foreach_mul(steps, _log(beta1)))  # -(1 - beta1^t)
    bc2_sqrt = torch._foreach_sqrt(torch._foreach_neg(
        torch._foreach_expm1(torch._foreach_mul(steps, _log(beta2)))))  # sqrt(1 - beta2^t)
    vmax = list(torch._foreach_maximum(max_exp_avg_sqs, v)) if amsgrad else list(max_exp_avg_sqs)
    denom = torch._foreach_add(torch._foreach_div(torch._foreach_sqrt(vmax if amsgrad else v),
                                                  bc2_sqrt), eps)
    neg_step = torch._foreach_mul(torch._foreach_reciprocal(neg_bc1), lr)  # -lr / (1 - beta1^t)
    p = list(torch._foreach_add(p, torch._foreach_mul(torch._foreach_div(m, denom), neg_step)))
    return _unless_inf(found_inf, (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs),
                       (p, new_grads, m, v, vmax))  # type: ignore[return-value]


def _sgd_math(params: list[Tensor], grads: list[Tensor], bufs: list[Tensor],
              weight_decay: float, momentum: float, lr: Union[float, Tensor],
              dampening: float, nesterov: bool, maximize: bool, is_first_step: bool,
              grad_scale: Optional[Tensor] = None, found_inf: Optional[Tensor] = None) -> tuple:
    """New (params, grads, momentum buffers) of SGD; inputs untouched."""
    if not params:
        return [], [], []
    lr, new_grads, g = _grads_in(params, grads, lr, grad_scale, maximize)
    if weight_decay != 0:
        g = list(torch._foreach_add(g, params, alpha=weight_decay))
    new_bufs = list(bufs)
    if momentum != 0:
        if is_first_step:
            new_bufs = [t.clone() for t in g]
        else:
            new_bufs = list(torch._foreach_add(torch._foreach_mul(bufs, momentum), g,
                                               alpha=1 - dampening))
        g = list(torch._foreach_add(g, new_bufs, alpha=momentum)) if nesterov else new_bufs
    p = list(torch._foreach_add(params, torch._foreach_mul(g, lr), alpha=-1))
    return _unless_inf(found_inf, (params, grads, bufs), (p, new_grads, new_bufs))


_CHUNK_BYTES = 64 << 20
# TPUC_FUSED_OPTIM=0: one program per op instead (docs/execution.md, "Switches"); read at start
_ONE_PROGRAM = os.environ.get("TPUC_FUSED_OPTIM") != "0"


@contextlib.contextmanager
def _one_program() -> Iterator[None]:
    """In strict mode, the block runs as one fused program (leaving fused mode runs it),
    as PyTorch's fused kernel is one pass: the math is ~15 foreach ops, and one program per op
    read and wrote every list ~15 times (qwen3 debugmodel's AdamW step over 8.4M parameters:
    ~3x the CPU kernel's time, docs/torchtitan.md). Other modes are kept: fused mode records
    it anyway, debug mode waits per op by design, a compiled graph traces the functional op."""
    from .eager import eager_mode, get_eager_mode

    if get_eager_mode() != "strict" or not _ONE_PROGRAM:
        yield
        return
    with eager_mode("fused"):
        yield


def _chunks(lists: tuple) -> list[tuple]:
    """``lists`` (parallel per-parameter lists; empty ones, e.g. max_exp_avg_sqs without
    amsgrad, stay empty) cut into runs of parameters of at most _CHUNK_BYTES (one parameter
    larger than that is a run of its own)."""
    params = lists[0]
    n = len(params)
    bounds, start, size = [], 0, 0
    for i, p in enumerate(params):
        b = p.numel() * p.element_size()
        if i > start and size + b > _CHUNK_BYTES:
            bounds.append((start, i))
            start, size = i, 0
        size += b
    bounds.append((start, n))
    if len(bounds) == 1:
        return [lists]
    return [tuple(lst[a:b] if len(lst) == n else lst for lst in lists) for a, b in bounds]


def _pair(math, nlists: int, **fixed):
    """The in-place op (copies the new values into its list arguments) and the
    functional op (returns fresh tensors, never its inputs) over `math`."""
    def inplace(*lists, **kw) -> None:
        # Parameter by parameter the math is independent: it runs over chunks of at most
        # _CHUNK_BYTES of parameters, so its temporaries (about six lists of new values before
        # the copy) stay bounded by the chunk, not by the model. Over the whole list at once, a
        # 0.3B-parameter AdamW step peaked at ~10x the parameters' bytes.
        for part in _chunks(lists):
            with _one_program():
                new = math(*part, **kw, **fixed)
                for dst, src in zip(part[:nlists], new):
                    pairs = [(d, t) for d, t in zip(dst, src) if d is not t]
                    if pairs:
                        torch._foreach_copy_([d for d, _ in pairs], [t for _, t in pairs])

    def functional(*lists, **kw) -> tuple:
        new = math(*lists, **kw, **fixed)
        return tuple([t.clone() if t is o else t for o, t in zip(old, lst)]
                     for old, lst in zip(lists[:nlists], new))

    return inplace, functional


def register() -> None:
    """Registers the kernels for the device "tpu" (idempotent)."""
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    kernels = {"_fused_adam": _pair(_adam_math, 5, decoupled=False),
               "_fused_adamw": _pair(_adam_math, 5, decoupled=True),
               "_fused_sgd": _pair(_sgd_math, 3)}
    for name, (inplace, functional) in kernels.items():
        for overload in ("", ".tensor_lr"):
            lib.impl(f"{name}_{overload}", inplace, "PrivateUse1")
            lib.impl(f"{name}{overload}", functional, "PrivateUse1")
    _lib = lib
