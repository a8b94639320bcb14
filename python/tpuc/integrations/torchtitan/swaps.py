"""Block swaps for TorchTitan on "tpu", applied from outside model.py when parallelism is applied.

Chosen by configuration: ``--tpuc.swaps=attention,loss`` on the launcher's command line, or
``TPUC_TITAN_SWAPS`` (default ``attention,moe``; ``none`` for none). Each swap keeps the
replaced block's semantics and is checked against it on the CPU (tests/torchtitan/):

- ``attention``: TorchTitan 0.3.0's language models use FlexAttention (its backward does not
  run off CUDA, and its ``torch.compile`` of the mask builder goes to Inductor's Pallas
  backend for "tpu"). :class:`DeviceAttention` runs ``F.scaled_dot_product_attention``,
  which tpuc lowers to one fused attention op with its backward, with the *same* mask: the
  recipe's mask_mod (causal + packed documents) is evaluated densely on the device instead
  of being compiled into a BlockMask (:func:`dense_attention_mask`); GQA keeps its grouping
  (keys/values repeated per query group, as ``enable_gqa`` does). The swap replaces every
  ``FlexAttention`` module when TorchTitan's ``parallelize_fn`` runs (which is wrapped).
- ``moe``: ``aten::_grouped_mm`` is lowered natively by the core (csrc/core/lower/grouped_mm.c),
  one fixed-shape program for every routing; token dispatch (argsort, scatter_add, gather)
  runs on the device. Under expert parallelism (EP > 1) the swap gives each routed-expert
  block :mod:`.ep_dispatch`'s fixed-capacity dispatcher (equal all-to-all splits, so the
  received rows' shape no longer follows the routing and nothing recompiles per step).
- ``loss``: :class:`FusedLinearCrossEntropyLoss` replaces TorchTitan's
  ``ChunkedLossWrapper(CrossEntropyLoss)``: lm_head + cross-entropy in one autograd
  Function, chunked over the tokens, that saves only each token's log-sum-exp and
  recomputes a chunk's logits in its backward, so the full [tokens, vocab] logits (and
  their gradient) are never materialised.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

KNOWN = ("attention", "moe", "loss")
_active: set[str] = set()
_installed = False


def parse(spec: Optional[str]) -> set[str]:
    if spec is None:
        spec = os.environ.get("TPUC_TITAN_SWAPS", "attention,moe")
    items = {s.strip() for s in spec.split(",") if s.strip() and s.strip() != "none"}
    bad = items - set(KNOWN)
    if bad:
        raise ValueError(f"tpuc: unknown TorchTitan swaps {sorted(bad)}; known: {', '.join(KNOWN)}")
    return items


def active() -> set[str]:
    return set(_active)


# ---- attention -------------------------------------------------------------------------


@dataclass
class DenseMask:
    """What the patched mask builder returns instead of a BlockMask: the mask_mod itself."""

    mask_mod: Callable[..., torch.Tensor]
    batch: int
    q_len: int
    kv_len: int
    device: torch.device

    def materialize(self) -> torch.Tensor:
        """The boolean mask [B, 1, Q, KV] (True = attend), evaluated with broadcasting."""
        d = self.device
        b = torch.arange(self.batch, device=d).view(-1, 1, 1, 1)
        h = torch.zeros(1, 1, 1, 1, dtype=torch.long, device=d)
        q = torch.arange(self.q_len, device=d).view(1, 1, -1, 1)
        kv = torch.arange(self.kv_len, device=d).view(1, 1, 1, -1)
        m = self.mask_mod(b, h, q, kv)
        return m.expand(self.batch, 1, self.q_len, self.kv_len)


def dense_attention_mask(mask_mod, B, H, Q_LEN, KV_LEN, device="cpu", **_: Any) -> DenseMask:
    """Stands in for TorchTitan's ``create_attention_mask`` (a compiled create_block_mask)."""
    return DenseMask(mask_mod, int(B), int(Q_LEN), int(KV_LEN), torch.device(device))


def _flex_classes():
    from torchtitan.models.common.attention import FlexAttention

    return FlexAttention


class DeviceAttention(torch.nn.Module):
    """FlexAttention's interface, run as one fused SDPA with the same mask (B, L, N, H layout)."""

    def forward(self, q_BLNH, k_BLNH, v_BLNH, *, attention_masks=None, score_mod=None,
                scale=None, enable_gqa=False, out_transform=None, **kwargs):
        if score_mod is not None or out_transform is not None:
            raise NotImplementedError("tpuc DeviceAttention: score_mod/out_transform (flex extras)")
        q, k, v = (t.transpose(1, 2) for t in (q_BLNH, k_BLNH, v_BLNH))
        if k.shape[1] != q.shape[1]:  # GQA: each KV head serves n_heads / n_kv_heads queries
            rep = q.shape[1] // k.shape[1]
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        if attention_masks is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        else:
            if isinstance(attention_masks, DenseMask):
                mask = attention_masks.materialize()
            else:  # a real BlockMask (built elsewhere): evaluate its mask_mod the same way
                bm = attention_masks
                mask = DenseMask(bm.mask_mod, q.shape[0], q.shape[2], k.shape[2], q.device).materialize()
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        return out.transpose(1, 2)


@functools.lru_cache(maxsize=None)
def _sharded_attention_class() -> type:
    """DeviceAttention as a TorchTitan ``Module``, so ``Module.parallelize`` applies the
    replaced FlexAttention's ``sharding_config`` to it: under TP its q/k/v arrive as DTensors
    sharded on heads and TorchTitan's ``local_map`` (set_gqa_inner_attention_local_map) hands
    the kernel local tensors (a plain nn.Module is skipped and SDPA gets DTensor q/k/v with a
    plain mask: "got mixed torch.Tensor and DTensor")."""
    from torchtitan.protocols.module import Module

    class ShardedDeviceAttention(DeviceAttention, Module):
        pass

    return ShardedDeviceAttention


def swap_attention_modules(model: torch.nn.Module) -> int:
    """Replaces every FlexAttention module of ``model`` by DeviceAttention; returns how many.
    A module with a TorchTitan ``sharding_config`` (TP) keeps it on its replacement."""
    FlexAttention = _flex_classes()
    n = 0
    for name, mod in list(model.named_modules()):
        for cname, child in list(mod.named_children()):
            if isinstance(child, FlexAttention):
                sharding = getattr(child, "_sharding_config", None)
                if sharding is None:
                    new: torch.nn.Module = DeviceAttention()
                else:
                    new = _sharded_attention_class()()
                    new._sharding_config = sharding
                setattr(mod, cname, new)
                n += 1
    return n


# ---- loss ------------------------------------------------------------------------------


class _LinearCrossEntropy(torch.autograd.Function):
    """sum over tokens of CE(h @ W^T, labels), ignoring ``ignore_index``, chunk by chunk."""

    @staticmethod
    def forward(ctx, h, weight, labels, chunk, ignore_index):
        n = h.shape[0]
        acc = torch.promote_types(h.dtype, torch.float32)  # bf16/f16 logits in f32
        lse = torch.empty(n, dtype=acc, device=h.device)
        total = torch.zeros((), dtype=acc, device=h.device)
        for s in range(0, n, chunk):
            hc, lc = h[s:s + chunk], labels[s:s + chunk]
            logits = (hc @ weight.t()).to(acc)
            lse_c = torch.logsumexp(logits, dim=-1)
            valid = lc != ignore_index
            tgt = logits.gather(1, torch.where(valid, lc, 0).unsqueeze(1)).squeeze(1)
            total = total + torch.where(valid, lse_c - tgt, 0.0).sum()
            lse[s:s + chunk] = lse_c
        ctx.save_for_backward(h, weight, labels, lse)
        ctx.chunk, ctx.ignore_index = chunk, ignore_index
        return total

    @staticmethod
    def backward(ctx, grad_total):
        h, weight, labels, lse = ctx.saved_tensors
        chunk, ignore_index = ctx.chunk, ctx.ignore_index
        grad_h = torch.empty_like(h) if ctx.needs_input_grad[0] else None
        acc = lse.dtype
        grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device) \
            if ctx.needs_input_grad[1] else None
        g = grad_total.to(acc)
        for s in range(0, h.shape[0], chunk):
            hc, lc = h[s:s + chunk], labels[s:s + chunk]
            logits = (hc @ weight.t()).to(acc)
            p = torch.exp(logits - lse[s:s + chunk].unsqueeze(1))
            valid = lc != ignore_index
            onehot = F.one_hot(torch.where(valid, lc, 0), p.shape[1]).to(p.dtype)
            d = (p - onehot) * (valid.unsqueeze(1).to(p.dtype) * g)
            if grad_h is not None:
                grad_h[s:s + chunk] = (d.to(weight.dtype) @ weight).to(h.dtype)
            if grad_w is not None:
                grad_w += d.t() @ hc.to(acc)
        return grad_h, (grad_w.to(weight.dtype) if grad_w is not None else None), None, None, None


def linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, *,
                         chunk: int = 1024, ignore_index: int = -100) -> torch.Tensor:
    """Sum of cross-entropies of ``h @ weight.T`` against ``labels`` without full logits.

    ``h``: [..., D], ``labels``: [...]; the logits of at most ``chunk`` tokens exist at once."""
    return _LinearCrossEntropy.apply(h.reshape(-1, h.shape[-1]), weight, labels.reshape(-1),
                                     int(chunk), int(ignore_index))


def _loss_class():
    from torchtitan.components.loss import IGNORE_INDEX, ChunkedLossWrapper
    from torch.distributed.tensor import DTensor

    class FusedLinearCrossEntropyLoss(ChunkedLossWrapper):
        """ChunkedLossWrapper's contract (the trainer hands it lm_head and hidden states),
        computed by :func:`linear_cross_entropy`. TP/DTensor inputs go to the wrapper itself."""

        @dataclass(kw_only=True, slots=True)
        class Config(ChunkedLossWrapper.Config):
            chunk_tokens: int = 1024
            """Tokens whose logits exist at once."""

        def __init__(self, config: "FusedLinearCrossEntropyLoss.Config", **kw: Any):
            super().__init__(config, **kw)
            self.chunk_tokens = config.chunk_tokens

        def __call__(self, pred, labels, global_valid_tokens=None, **loss_inputs):
            lm_head = self.lm_head
            assert lm_head is not None, "set_lm_head first"
            w = lm_head.weight
            if isinstance(pred, DTensor) or isinstance(w, DTensor) or loss_inputs or \
                    getattr(lm_head, "bias", None) is not None:
                return super().__call__(pred, labels, global_valid_tokens, **loss_inputs)
            loss = linear_cross_entropy(pred, w, labels, chunk=self.chunk_tokens,
                                        ignore_index=IGNORE_INDEX)
            if global_valid_tokens is not None:
                loss = loss / global_valid_tokens
            return loss, {}

    return FusedLinearCrossEntropyLoss


@functools.lru_cache(maxsize=None)
def fused_loss_class():
    return _loss_class()


def swap_loss_config(loss_config: Any) -> Any:
    """ChunkedLossWrapper.Config(CrossEntropyLoss) -> FusedLinearCrossEntropyLoss.Config."""
    from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss

    cls = fused_loss_class()
    if isinstance(loss_config, cls.Config) or not isinstance(loss_config, ChunkedLossWrapper.Config):
        return loss_config
    if not isinstance(loss_config.loss_fn, CrossEntropyLoss.Config):
        return loss_config
    return cls.Config(num_chunks=loss_config.num_chunks, loss_fn=loss_config.loss_fn)


# ---- applying them ---------------------------------------------------------------------


def wrap_parallelize(parallelize_fn: Callable[..., Any]) -> Callable[..., Any]:
    """TorchTitan's parallelize_fn, with the swaps applied to the model first."""
    if getattr(parallelize_fn, "_tpuc_swaps", False):
        return parallelize_fn

    @functools.wraps(parallelize_fn)
    def parallelize(model, *args, **kwargs):
        if "attention" in _active:
            swap_attention_modules(model)
        if "moe" in _active:
            from .ep_dispatch import swap_token_dispatchers

            swap_token_dispatchers(model)  # EP > 1 only; at EP=1 it dispatches as before
        return parallelize_fn(model, *args, **kwargs)

    parallelize._tpuc_swaps = True  # type: ignore[attr-defined]
    return parallelize


def apply_to_config(config: Any) -> Any:
    """Applies the active swaps to a TorchTitan Trainer.Config (in place; returns it)."""
    spec = getattr(config, "model_spec", None)
    if spec is not None and spec.parallelize_fn is not None:
        spec.parallelize_fn = wrap_parallelize(spec.parallelize_fn)
    if "loss" in _active and hasattr(config, "loss"):
        config.loss = swap_loss_config(config.loss)
    return config


def install(swaps: set[str]) -> None:
    """Activates ``swaps`` and hooks TorchTitan's config parsing and mask building."""
    global _installed
    _active.clear()
    _active.update(swaps)
    if _installed:
        return
    import torchtitan.models.common.decoder as decoder
    from torchtitan.config import ConfigManager

    original_mask = decoder.create_attention_mask

    def create_attention_mask(*args: Any, **kwargs: Any):
        if "attention" in _active:
            return dense_attention_mask(*args, **kwargs)
        return original_mask(*args, **kwargs)

    decoder.create_attention_mask = create_attention_mask
    original_parse = ConfigManager.parse_args

    def parse_args(self, *args: Any, **kwargs: Any):
        return apply_to_config(original_parse(self, *args, **kwargs))

    ConfigManager.parse_args = parse_args
    _installed = True


__all__ = ["parse", "install", "active", "DeviceAttention", "DenseMask", "dense_attention_mask",
           "swap_attention_modules", "linear_cross_entropy", "fused_loss_class",
           "swap_loss_config", "apply_to_config", "wrap_parallelize", "dataclasses"]
