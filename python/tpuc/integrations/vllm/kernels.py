"""Native PyTorch forms of the Triton kernels that vLLM 0.32's GPU model runner launches.

vLLM lets a platform replace them (``Platform.register_triton_kernel_overrides`` and
``vllm.triton_utils.dispatcher.register_kernels``, called in every worker); its CPU platform
does so with C++ ops on CPU tensors. These take the kernels' arguments and run as ordinary
tensor ops on "tpu", which tpuc lowers.
"""
from __future__ import annotations

import torch

SLOT_MAPPING = "vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel"


def compute_slot_mapping(num_tokens: int, max_num_tokens: int, query_start_loc: torch.Tensor,
                         positions: torch.Tensor, block_table: torch.Tensor,
                         block_table_stride: int, slot_mapping: torch.Tensor,
                         KV_CACHE_BLOCK_SIZE: int, TOTAL_CP_WORLD_SIZE: int = 1,
                         TOTAL_CP_RANK: int = 0, CP_KV_CACHE_INTERLEAVE_SIZE: int = 1,
                         PAD_ID: int = -1, BLOCK_SIZE: int = 1024) -> None:
    """slot_mapping[t] = block_table[req(t), pos(t) // bs] * bs + pos(t) % bs for the scheduled
    tokens, PAD_ID after them; req(t) is the request whose query range holds token t."""
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError('context parallelism on "tpu"')
    n = int(positions.shape[0])
    bs = int(KV_CACHE_BLOCK_SIZE)
    tok = torch.arange(n, device=positions.device, dtype=torch.int64)
    ends = query_start_loc[1:].to(torch.int64)
    req = (tok.unsqueeze(1) >= ends.unsqueeze(0)).sum(dim=1)
    pos = positions.to(torch.int64)
    blocks = block_table[req, torch.div(pos, bs, rounding_mode="floor")].to(torch.int64)
    slot_mapping[:n] = blocks * bs + torch.remainder(pos, bs)
    if n < slot_mapping.shape[0]:
        slot_mapping[n:] = PAD_ID


def register() -> None:
    from vllm.triton_utils.dispatcher import register_kernels

    register_kernels({SLOT_MAPPING: compute_slot_mapping})
