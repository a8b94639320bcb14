"""Fused eager's chunks replayed: a chunk whose ops repeat a recently recorded
chunk's (a training step between two host reads) is launched from that
chunk's program without signing and checking each op again
(csrc/core/exec/fused_replay.c). Replayed steps must equal steps whose every
chunk is recorded (torch.tpu.set_fused_replay(False): the same programs), bit
for bit — arguments, donation, the device generator (dropout) — and a step
that differs (a new batch size) must fall back to recording, counted with its
reason."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from replay_models import DropLlama as _DropLlama, batches as _batches, mlp as _mlp


def _train(kind: str, mode: str, replay: bool, steps: int = 20, batch_of=lambda i: 8) -> dict:
    """`steps` eager AdamW (capturable) steps in `mode`, reading the loss each step."""
    torch.tpu.set_fused_replay(replay)
    try:
        torch.manual_seed(0)
        model = (_mlp() if kind == "mlp" else _DropLlama()).to("tpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1, capturable=True)
        torch.tpu.manual_seed(123)
        s0 = torch.tpu.stats()
        losses = []
        with torch.tpu.eager_mode(mode):
            for x, y in _batches(kind, steps, batch_of):
                out = model(x.to("tpu"))
                loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.to("tpu").reshape(-1))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(loss.item())  # a host read: one chunk per step
        s1 = torch.tpu.stats()
        notes = s1["fused_replay_notes"] - s0["fused_replay_notes"]
        return {
            "losses": torch.tensor(losses),
            "params": [p.detach().cpu() for p in model.parameters()],
            "buffers": [b.detach().cpu() for b in model.buffers()],
            "replays": s1["fused_replays"] - s0["fused_replays"],
            "fallbacks": s1["fused_replay_fallbacks"] - s0["fused_replay_fallbacks"],
            "reasons": s1["fused_replay_reasons"][-notes:] if notes else [],
            "donations": s1["donations"] - s0["donations"],
        }
    finally:
        torch.tpu.set_fused_replay(True)


def _assert_equal(a: dict, b: dict) -> None:
    assert torch.equal(a["losses"], b["losses"])
    for x, y in zip(a["params"] + a["buffers"], b["params"] + b["buffers"]):
        assert torch.equal(x, y)


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_replayed_fused_steps_equal_recorded_ones(kind: str) -> None:
    recorded = _train(kind, "fused", replay=False)
    replayed = _train(kind, "fused", replay=True)
    assert recorded["replays"] == 0
    _assert_equal(replayed, recorded)
    # the first steps record (the first step creates the optimizer's state);
    # afterwards most of each step's chunks are launched from a kept one (15 of
    # 20 for the MLP when measured; the reasons name the others)
    assert replayed["replays"] >= 10, replayed["reasons"]
    assert replayed["donations"] == recorded["donations"]


def test_a_new_batch_shape_falls_back_and_still_matches() -> None:
    sizes = lambda i: 4 if 5 <= i < 7 else 8  # noqa: E731
    recorded = _train("mlp", "fused", replay=False, steps=12, batch_of=sizes)
    replayed = _train("mlp", "fused", replay=True, steps=12, batch_of=sizes)
    _assert_equal(replayed, recorded)
    assert replayed["fallbacks"] >= 1
    assert any("recorded" in r for r in replayed["reasons"]), replayed["reasons"]
    # the 8-row steps before and after the change are replayed
    assert replayed["replays"] >= 4, replayed["reasons"]
