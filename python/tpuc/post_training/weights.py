"""From a trainer's model to the names and files a vLLM engine loads (trainer side, no vLLM).

- :func:`iter_full_state` -- a model's parameters one full tensor at a time: a DTensor (FSDP2,
  TP) is gathered with ``full_tensor()`` (a collective: every rank iterates), so at most one
  gathered tensor is alive at a time, never a second full copy of the model.
- :func:`titan_to_hf` -- TorchTitan llama3 names to Hugging Face names, streaming. It uses
  TorchTitan 0.3.0's own ``Llama3StateDictAdapter.to_hf`` (which applies Hugging Face's rotary
  permutation of the q/k rows) one tensor at a time, after splitting a fused ``wqkv`` with
  TorchTitan's own ``FusedQKVLinear._split_qkv_on_save`` (what ``state_dict()`` does).
- :func:`hf_config` / :func:`save_hf_dir` -- config.json + model.safetensors for the engine's
  first load (token ids only: no tokenizer).
- :func:`push_weights` -- one call for every rank of a (sharded) trainer: gathers and converts on
  all ranks, sends from the rank that holds the engine (rank 0), returns its SyncStats.

TorchTitan is imported lazily: the HF-named paths work without it.
"""
from __future__ import annotations

import json
import os
import re
import types
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch

from .engine import RolloutEngine, SyncStats

Named = Iterable[tuple[str, torch.Tensor]]


def iter_full_state(model: torch.nn.Module, *, buffers: bool = False,
                    to_cpu: bool = False) -> Iterator[tuple[str, torch.Tensor]]:
    """Yields ``(name, full tensor)`` for each parameter (and persistent buffer if asked).

    Sharded tensors (DTensor) are gathered with ``full_tensor()`` one at a time: on a sharded
    trainer every rank must consume the iterator in step (it runs collectives). Tied
    parameters appear once (``named_parameters()``'s rule). ``to_cpu`` moves each to the host
    before yielding (the gathered device copy is dropped right after)."""
    from torch.distributed.tensor import DTensor

    items: list[tuple[str, torch.Tensor]] = list(model.named_parameters())
    if buffers:
        non_persistent = {f"{m}.{b}" if m else b for m, mod in model.named_modules()
                          for b in mod._non_persistent_buffers_set}
        items += [(n, b) for n, b in model.named_buffers() if n not in non_persistent]
    for name, t in items:
        t = t.detach()
        if isinstance(t, DTensor):
            t = t.full_tensor()
        if to_cpu and t.device.type != "cpu":
            t = t.cpu()
        yield name, t


def llama3_config(*, vocab_size: int, dim: int = 128, n_layers: int = 2, n_heads: int = 2,
                  n_kv_heads: int | None = None, hidden_dim: int = 256, max_seq_len: int = 512,
                  theta: float = 10000.0, tie_embeddings: bool = False) -> Any:
    """A small TorchTitan ``Llama3Model.Config`` (TorchTitan's own layer builder, flex attention
    -- swap it with ``tpuc.integrations.torchtitan.swaps.swap_attention_modules`` on "tpu"),
    rotary without llama3 scaling. ``config.build()`` makes the model."""
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.llama3 import Llama3Model, _build_llama3_layers

    norm = {"weight": torch.nn.init.ones_}
    init = {"weight": lambda w: torch.nn.init.normal_(w, std=0.02)}
    return Llama3Model.Config(
        dim=dim, vocab_size=vocab_size, enable_weight_tying=tie_embeddings,
        tok_embeddings=Embedding.Config(num_embeddings=vocab_size, embedding_dim=dim,
                                        param_init={"weight": torch.nn.init.normal_}),
        norm=RMSNorm.Config(normalized_shape=dim, param_init=norm),
        lm_head=Linear.Config(in_features=dim, out_features=vocab_size, param_init=init),
        layers=_build_llama3_layers(
            n_layers=n_layers, dim=dim, n_heads=n_heads, n_kv_heads=n_kv_heads,
            hidden_dim=hidden_dim, fuse_qkv=True, attn_backend="flex",
            rope=ComplexRoPE.Config(dim=dim // n_heads, max_seq_len=max_seq_len, theta=theta)))


def _attention_shape(model_config: Any) -> tuple[int, int, int]:
    attn = model_config.layers[0].attention
    n_heads = attn.n_heads
    n_kv = attn.n_kv_heads if attn.n_kv_heads is not None else n_heads
    head_dim = attn.head_dim or model_config.dim // n_heads
    return n_heads, n_kv, head_dim


def titan_to_hf(named: Named, model_config: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """TorchTitan llama3 ``(name, tensor)`` pairs -> Hugging Face ``(name, tensor)``, streaming.

    ``model_config`` is the ``Llama3Model.Config`` the model was built from. Accepts the
    fused (``qkv_linear.wqkv``) or the split (``wq``/``wk``/``wv``) form; drops what HF has
    no name for (TorchTitan's adapter decides) and a tied ``lm_head``."""
    from torchtitan.models.common.attention import FusedQKVLinear
    from torchtitan.models.llama3.state_dict_adapter import Llama3StateDictAdapter

    adapter = Llama3StateDictAdapter(model_config, None)
    n_heads, n_kv, head_dim = _attention_shape(model_config)
    fused = types.SimpleNamespace(head_dim=head_dim, heads_per_kv=n_heads // n_kv,
                                  r_dim=n_heads // n_kv + 2)
    for name, t in named:
        if re.search(r"\.wqkv\.(weight|bias)$", name):
            prefix = name[: name.index("wqkv.")]
            sd = {name: t}
            FusedQKVLinear._split_qkv_on_save(fused, sd, prefix, None)
            parts = list(sd.items())
        else:
            parts = [(name, t)]
        for n, v in parts:
            yield from adapter.to_hf({n: v}).items()


def hf_config(model_config: Any, *, dtype: torch.dtype = torch.float32,
              bos_token_id: int | None = None, eos_token_id: int | None = None) -> dict[str, Any]:
    """The config.json of a ``LlamaForCausalLM`` equal to a TorchTitan llama3 model config."""
    n_heads, n_kv, head_dim = _attention_shape(model_config)
    layer = model_config.layers[0]
    rope = layer.attention.rope
    if type(rope).__qualname__ != "ComplexRoPE.Config":
        raise ValueError(f"only ComplexRoPE (llama3's) maps onto Llama's rotary; got {rope}")
    if rope.dim != head_dim:
        raise ValueError(f"rope dim {rope.dim} != head_dim {head_dim}: partial rotary has no "
                         "Llama equivalent")
    eps = {model_config.norm.eps} | {x.eps for lay in model_config.layers
                                     for x in (lay.attention_norm, lay.ffn_norm)}
    if len(eps) != 1:
        raise ValueError(f"RMSNorm eps differ between norms ({sorted(eps)}); HF has one")
    if layer.attention.qk_norm is not None or layer.moe is not None:
        raise ValueError("qk_norm / MoE layers have no LlamaForCausalLM equivalent")
    cfg: dict[str, Any] = dict(
        architectures=["LlamaForCausalLM"], model_type="llama",
        vocab_size=model_config.vocab_size, hidden_size=model_config.dim,
        intermediate_size=layer.feed_forward.w1.out_features,
        num_hidden_layers=len(model_config.layers), num_attention_heads=n_heads,
        num_key_value_heads=n_kv, head_dim=head_dim, hidden_act="silu",
        max_position_embeddings=rope.max_seq_len, rms_norm_eps=eps.pop(),
        rope_theta=float(rope.theta), attention_bias=False, mlp_bias=False,
        tie_word_embeddings=bool(model_config.enable_weight_tying),
        torch_dtype=str(dtype).removeprefix("torch."))
    if rope.scaling == "llama":
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": float(rope.scaling_factor),
                               "low_freq_factor": float(rope.low_freq_factor),
                               "high_freq_factor": float(rope.high_freq_factor),
                               "original_max_position_embeddings":
                                   int(rope.original_max_position_embeddings)}
    elif rope.scaling != "none":
        raise ValueError(f"rope scaling {rope.scaling!r} is not mapped (llama and none are)")
    if bos_token_id is not None:
        cfg["bos_token_id"] = bos_token_id
    if eos_token_id is not None:
        cfg["eos_token_id"] = eos_token_id
    return cfg


def save_hf_dir(path: str | os.PathLike, titan_model_args: Any,
                state_dict: dict[str, torch.Tensor] | Named, *,
                dtype: torch.dtype | None = None, **config_kw: Any) -> str:
    """Writes ``path/config.json`` and ``path/model.safetensors`` for a TorchTitan llama3 model
    (``titan_model_args``: its ``Llama3Model.Config``; ``state_dict``: TorchTitan names, e.g.
    ``model.state_dict()`` or :func:`iter_full_state`), loadable by vLLM and transformers.
    No tokenizer: engines built on it take token ids (``skip_tokenizer_init``)."""
    from safetensors.torch import save_file

    items = state_dict.items() if isinstance(state_dict, dict) else state_dict
    tensors: dict[str, torch.Tensor] = {}
    for name, t in titan_to_hf(items, titan_model_args):
        t = t.detach().to("cpu")
        if dtype is not None:
            t = t.to(dtype)
        tensors[name] = t.contiguous().clone()
    if not tensors:
        raise ValueError("no tensors to save")
    first_dtype = next(iter(tensors.values())).dtype
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    cfg = hf_config(titan_model_args, dtype=dtype or first_dtype, **config_kw)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return str(out)


def push_weights(engine: RolloutEngine | None, model: torch.nn.Module, *,
                 convert: Callable[[Named], Named] | None = None) -> SyncStats | None:
    """Sends ``model``'s weights to ``engine``; call it on every rank of a sharded trainer.

    Each parameter is gathered (:func:`iter_full_state`, a collective) and converted
    (``convert``, e.g. ``lambda it: titan_to_hf(it, model_config)``) on every rank; the rank
    whose ``engine`` is not None (rank 0) streams it, the others drop it. Returns that rank's
    SyncStats, None elsewhere."""
    stream: Named = iter_full_state(model)
    if convert is not None:
        stream = convert(stream)
    if engine is None:
        for _ in stream:
            pass
        return None
    return engine.update_weights(stream)
