"""Expert-parallel token dispatch with fixed shapes (the ``moe`` swap at EP > 1).

TorchTitan 0.3.0's ``AllToAllTokenDispatcher`` exchanges each rank's per-expert token counts,
reads them on the host and moves the routed rows with ``all_to_all_single`` of those uneven
splits: every rank then receives a data-dependent number of rows R, and every op after the
exchange (the permute, the experts' ``_grouped_mm`` forward and backward, the combine) has a
new shape whenever the routing changes. On "tpu" each new shape is a new program, so an EP run
would keep compiling step after step.

:class:`FixedCapacityTokenDispatcher` (installed in place of it, class swap on the built
module, when TorchTitan applies parallelism) sends the same rows with *equal* splits of the
largest possible size: each rank's N = T * top_k routed rows go out in ``ep`` slots of N rows
(rows for rank r at the head of slot r, zeros after them), so every rank receives ``ep * N``
rows whatever the routing. The counts still come from the count exchange, but stay on the
device (no host read): they give each received row its place in TorchTitan's expert-major
order ((e0, rank0), (e0, rank1), ..., (e1, rank0), ...), and the padding rows follow the real
ones as extra rows of the last local expert. Those rows are exactly zero, so they add exactly
zero to every expert-weight gradient and their outputs are dropped in the combine; the real
rows see the same products in the same order as with the stock dispatcher. Cost: ``ep`` times
the all-to-all volume and the grouped matmuls run over ``ep * N`` rows.

All index arithmetic is comparisons, cumulative sums and gathers of fixed shapes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


def _dispatcher_classes() -> tuple[type, type, type]:
    from torchtitan.models.common.token_dispatcher import (
        AllToAllTokenDispatcher,
        LocalDispatchMetadata,
        LocalTokenDispatcher,
    )

    return AllToAllTokenDispatcher, LocalDispatchMetadata, LocalTokenDispatcher


def _segment_of(pos: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """For each position, the index of the segment holding it (``len(ends)`` past the end)."""
    return (pos.unsqueeze(-1) >= ends.unsqueeze(0)).sum(-1)


def _a2a(x: torch.Tensor, splits: list[int], mesh: Any) -> torch.Tensor:
    from torch.distributed._functional_collectives import all_to_all_single

    return all_to_all_single(x, splits, splits, mesh)


@dataclass
class FixedCapacityMetadata:
    token_indices_experts_sorted_N: torch.Tensor
    topk_scores_experts_sorted_N: torch.Tensor
    back_index: torch.Tensor  # slot layout <- expert-major rows (ep*N,)
    home_index: torch.Tensor  # my sorted rows <- returned slot layout (N,)
    capacity: int  # N


_CLASS: dict[str, type] = {}


def fixed_capacity_class() -> type:
    """The dispatcher class (built lazily: TorchTitan is imported only when used)."""
    if "cls" in _CLASS:
        return _CLASS["cls"]
    AllToAll, LocalMeta, Local = _dispatcher_classes()

    class FixedCapacityTokenDispatcher(AllToAll):  # type: ignore[misc, valid-type]
        """TorchTitan's all-to-all dispatcher with equal, routing-independent splits."""

        def dispatch(self, x_TD, topk_scores_TK, topk_expert_ids_TK, num_local_tokens_per_expert_E):
            if self.ep_mesh is None:
                return Local.dispatch(self, x_TD, topk_scores_TK, topk_expert_ids_TK,
                                      num_local_tokens_per_expert_E)
            ep = self.ep_mesh.size()
            routed_ND, tok_idx_N, scores_N = self._local_reorder(x_TD, topk_scores_TK, topk_expert_ids_TK)
            N, D = routed_ND.shape
            dev = routed_ND.device
            counts = num_local_tokens_per_expert_E.to(torch.int64)
            e = counts.shape[0] // ep
            with torch.no_grad():
                # recv[s, j]: rows rank s sends to my local expert j (the count exchange)
                recv = _a2a(counts.view(ep, e).contiguous(), [1] * ep, self.ep_mesh)
                recv = torch.ops._c10d_functional.wait_tensor(recv).view(ep, e)
                # my rows, sorted by expert, hence by destination rank: slot r gets rows
                # send_start[r] .. send_start[r] + send_n[r] - 1 at its head
                send_n = counts.view(ep, e).sum(1)
                send_end = send_n.cumsum(0)
                send_start = send_end - send_n
                q = torch.arange(ep * N, device=dev)
                r, p = q // N, q % N
                send_src = torch.where(p < send_n[r], send_start[r] + p, torch.full_like(q, N))
                rows = torch.arange(N, device=dev)
                dest = _segment_of(rows, send_end).clamp(max=ep - 1)
                home_index = dest * N + rows - send_start[dest]
                # received slot s holds recv[s, :] rows, expert-major within the slot;
                # TorchTitan's order is expert-major over (expert j, rank s)
                seg_len = recv.t().reshape(-1)  # [j * ep + s]
                seg_end = seg_len.cumsum(0)
                seg_start = seg_end - seg_len
                in_slot = recv.cumsum(1) - recv  # [s, j]: start of (s, j) inside slot s
                seg_in = (torch.arange(ep, device=dev).unsqueeze(1) * N + in_slot).t().reshape(-1)
                seg = _segment_of(q, seg_end)
                segc = seg.clamp(max=e * ep - 1)
                gather = torch.where(seg < e * ep, seg_in[segc] + q - seg_start[segc],
                                     torch.full_like(q, ep * N))
                # inverse: each slot row's expert-major position (padding -> the zero row)
                s_of, p_of = q // N, q % N
                slot_ends = recv.cumsum(1)  # [s, j]
                j_of = (p_of.unsqueeze(1) >= slot_ends[s_of]).sum(1)
                valid = p_of < slot_ends[s_of, -1]
                jc = j_of.clamp(max=e - 1)
                back = seg_start[jc * ep + s_of] + p_of - in_slot[s_of, jc]
                back_index = torch.where(valid, back, torch.full_like(q, ep * N))
                per_expert = recv.sum(0)
                pad = ep * N - per_expert.sum()
                per_expert = torch.cat([per_expert[:-1], per_expert[-1:] + pad])
            zero = routed_ND.new_zeros(1, D)
            send = torch.cat([routed_ND, zero])[send_src]
            received = _a2a(send, [N] * ep, self.ep_mesh)
            routed_RD = torch.cat([received, zero])[gather]
            meta = FixedCapacityMetadata(tok_idx_N, scores_N, back_index, home_index, N)
            return routed_RD, per_expert, meta

        def combine(self, routed_output_RD, metadata, x_TD):
            if self.ep_mesh is None:
                return Local.combine(self, routed_output_RD, metadata, x_TD)
            N = metadata.capacity
            zero = routed_output_RD.new_zeros(1, routed_output_RD.shape[1])
            slots = torch.cat([routed_output_RD, zero])[metadata.back_index]
            returned = _a2a(slots, [N] * self.ep_mesh.size(), self.ep_mesh)
            out_ND = returned[metadata.home_index]
            local = LocalMeta(token_indices_experts_sorted_N=metadata.token_indices_experts_sorted_N,
                              topk_scores_experts_sorted_N=metadata.topk_scores_experts_sorted_N)
            return Local.combine(self, out_ND, local, x_TD)

    _CLASS["cls"] = FixedCapacityTokenDispatcher
    return FixedCapacityTokenDispatcher


def swap_token_dispatchers(model: torch.nn.Module) -> int:
    """Gives every routed-expert block whose dispatcher is TorchTitan's standard all-to-all one
    the fixed-capacity dispatcher (same state; a class swap). Returns how many were swapped."""
    AllToAll, _, _ = _dispatcher_classes()
    cls = fixed_capacity_class()
    n = 0
    for m in model.modules():
        d = getattr(m, "token_dispatcher", None)
        if d is not None and type(d) is AllToAll:
            d.__class__ = cls
            n += 1
    return n
