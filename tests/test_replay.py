"""torch.compile(backend="tpu") graphs replayed: a graph recorded once is
launched again from its kept program on the new arguments, without recording
its ops. Replayed training steps must equal steps that record every graph
again (TPUC_GRAPH_REPLAY=record, the same programs), bit for bit: the
arguments mapped onto the program, donation, the outputs, and the device
generator (dropout) advancing exactly as recording advances it."""
from __future__ import annotations

import gc

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from replay_models import DropLlama as _DropLlama, batches as _batches, mlp as _mlp
from tpu_testing import assert_as_accurate


def _train(kind: str, mode: str, steps: int = 20, batch_of=lambda i: 8) -> dict:
    """Runs `steps` compiled AdamW steps with graph replay mode `mode`."""
    torch._dynamo.reset()
    torch.tpu.set_graph_replay(mode)
    try:
        torch.manual_seed(0)
        model = (_mlp() if kind == "mlp" else _DropLlama()).to("tpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1, capturable=True)

        def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            out = model(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss

        cstep = torch.compile(step, backend="tpu")
        torch.tpu.manual_seed(123)
        s0 = torch.tpu.stats()
        losses = []
        for x, y in _batches(kind, steps, batch_of):
            losses.append(cstep(x.to("tpu"), y.to("tpu")))
        losses = torch.stack([l.detach().cpu() for l in losses])
        s1 = torch.tpu.stats()
        state = {k: v.cpu() for k, v in model.state_dict().items()}
        for i, st in enumerate(opt.state.values()):
            for k, v in st.items():
                state[f"opt.{i}.{k}"] = v.cpu()
        counts = {k: s1[k] - s0[k]
                  for k in ("graph_records", "graph_replays", "graph_rerecords", "donations")}
        # the reasons noted during these steps only (the process keeps the last 64 of all)
        noted = s1["graph_replay_notes"] - s0["graph_replay_notes"]
        reasons = s1["graph_replay_reasons"][-noted:] if noted else []
        return {"losses": losses, "state": state, "rng": torch.tpu.get_rng_state(),
                "counts": counts, "reasons": reasons}
    finally:
        torch.tpu.set_graph_replay("replay")
        torch._dynamo.reset()


def _assert_bitwise(a: dict, b: dict) -> None:
    assert torch.equal(a["losses"], b["losses"]), (a["losses"], b["losses"])
    assert a["state"].keys() == b["state"].keys()
    for k in a["state"]:
        assert torch.equal(a["state"][k], b["state"][k]), k
    assert torch.equal(a["rng"], b["rng"])  # the generator advanced identically


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_replayed_steps_match_recorded_steps_bit_for_bit(kind: str) -> None:
    rep = _train(kind, "replay")
    rec = _train(kind, "record")
    _assert_bitwise(rep, rec)
    # the forward, backward and optimizer graphs are each recorded once, then
    # replayed (the optimizer's first step records its state's creation)
    c = rep["counts"]
    assert c["graph_replays"] >= 3 * 20 - 8, (c, rep["reasons"])
    # (with compile-ahead on, as on GPU and TPU plugins, each graph's first call records
    # without keeping the program and the second records again: python/tpuc/dynamo.py)
    from tpuc.dynamo import _compile_ahead
    assert c["graph_records"] <= (16 if _compile_ahead() else 8), (c, rep["reasons"])
    assert rec["counts"]["graph_replays"] == 0
    # donation is decided per launch as when recording
    assert c["donations"] == rec["counts"]["donations"] > 0
    # dropout drew different masks step after step (the generator advances)
    assert len(set(rep["losses"].tolist())) == 20


def test_replayed_mlp_matches_cpu_without_dropout() -> None:
    """The replayed program computes the step: against PyTorch on the CPU."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    # no BatchNorm here: it makes the first bias's gradient ~0, which AdamW
    # normalises into rounding noise (BatchNorm is in the bit-for-bit tests)
    cpu = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    dev = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    dev.load_state_dict(cpu.state_dict())
    dev.to("tpu")
    exact = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    exact.load_state_dict(cpu.state_dict())
    exact.double()  # the float64 reference the bound is derived from
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, capturable=m is dev)
            for m in (cpu, dev, exact)]

    def make(model: nn.Module, opt: torch.optim.Optimizer):
        def step(x: torch.Tensor) -> torch.Tensor:
            loss = model(x).square().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss
        return step

    cstep = torch.compile(make(dev, opts[1]), backend="tpu")
    ref, ref64 = make(cpu, opts[0]), make(exact, opts[2])
    g = torch.Generator().manual_seed(2)
    s0 = torch.tpu.stats()
    losses: dict[str, list[torch.Tensor]] = {"tpu": [], "cpu": [], "f64": []}
    for _ in range(6):
        x = torch.randn(8, 16, generator=g)
        losses["tpu"].append(cstep(x.to("tpu")).detach().cpu())
        losses["cpu"].append(ref(x).detach())
        losses["f64"].append(ref64(x.double()).detach())
    # several AdamW steps: the bound follows from the CPU's own float32 error
    # against float64 (tpu_testing.assert_as_accurate), not from one machine
    assert_as_accurate(*(torch.stack(losses[k]) for k in ("tpu", "cpu", "f64")))
    for p, q, r in zip(dev.state_dict().values(), cpu.state_dict().values(),
                       exact.state_dict().values()):
        assert_as_accurate(p, q, r)
    assert torch.tpu.stats()["graph_replays"] - s0["graph_replays"] >= 3 * 4
    torch._dynamo.reset()


def test_shape_change_rerecords_and_still_matches() -> None:
    def batch_of(i: int) -> int:
        return 8 if i < 4 or i >= 8 else 4  # 8, then 4, then 8 again

    rep = _train("mlp", "replay", steps=12, batch_of=batch_of)
    rec = _train("mlp", "record", steps=12, batch_of=batch_of)
    _assert_bitwise(rep, rec)
    c = rep["counts"]
    # the new shape is recorded (a new dynamo graph, or the same graph again
    # with a reason); the old shape's program is replayed when it comes back
    assert c["graph_replays"] >= 3 * 12 - 16, (c, rep["reasons"])
    assert c["graph_records"] >= 6, c


def test_replay_keeps_guards_on_strides_and_storage_sharing() -> None:
    """A graph compiled for contiguous inputs, called with a transposed one
    or with two inputs sharing a storage, records again instead of reading
    the wrong elements."""
    torch._dynamo.reset()

    @torch.compile(backend="tpu", dynamic=False)
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * 2 + b

    base = torch.arange(16.0).reshape(4, 4)
    a, b = base.to("tpu"), (base + 1).to("tpu")
    for _ in range(3):
        torch.testing.assert_close(f(a, b).cpu(), base * 2 + base + 1)
    s0 = torch.tpu.stats()
    torch.testing.assert_close(f(a, b).cpu(), base * 2 + base + 1)
    assert torch.tpu.stats()["graph_replays"] == s0["graph_replays"] + 1
    # the same storage twice
    torch.testing.assert_close(f(a, a).cpu(), base * 3)
    torch.testing.assert_close(f(a.t(), b).cpu(), base.t() * 2 + base + 1)
    torch._dynamo.reset()


def test_inference_graph_updates_inputs_in_place_on_replay() -> None:
    """An in-place update inside a compiled function (kept in the graph)
    lands in the caller's tensor on every replay."""
    torch._dynamo.reset()

    @torch.compile(backend="tpu")
    def bump(acc: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        acc.add_(x)
        return acc.sum()

    acc = torch.zeros(5, device="tpu")
    ref = torch.zeros(5)
    s0 = torch.tpu.stats()
    with torch.no_grad():
        for i in range(5):
            x = torch.full((5,), float(i + 1))
            total = bump(acc, x.to("tpu"))
            ref.add_(x)
            torch.testing.assert_close(total.cpu(), ref.sum())
    torch.testing.assert_close(acc.cpu(), ref)
    assert torch.tpu.stats()["graph_replays"] - s0["graph_replays"] >= 3
    torch._dynamo.reset()


def test_graph_replay_mode_rejects_unknown() -> None:
    with pytest.raises(ValueError, match="replay"):
        torch.tpu.set_graph_replay("sometimes")


def _llama_losses_on_cpu(dtype: torch.dtype) -> torch.Tensor:
    """The losses of _llama_peak's three training steps run by PyTorch on the CPU in
    `dtype` (float64: the reference of the bounds below; float32: the CPU's own error)."""
    from llama import Llama, LlamaConfig

    cfg = LlamaConfig(vocab_size=256, dim=64, n_layers=2, n_heads=4, hidden_dim=176,
                      max_seq_len=32)
    torch.manual_seed(0)
    m = Llama(cfg)
    if dtype == torch.float64:
        m = m.double()  # (not .to(dtype): that makes the complex RoPE buffer real)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (4, 32), generator=g)
    y = torch.randint(0, 256, (4, 32), generator=g)
    losses = []
    for _ in range(3):
        _, loss = m(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses)


def _llama_peak(mode: str, ac: bool = False) -> tuple[int, torch.Tensor]:
    """Peak device bytes of the third training step of the example model
    (the bench's tiny configuration, 4 x 32 tokens) in `mode`, and its losses."""
    from llama import Llama, LlamaConfig
    from torch.utils.checkpoint import checkpoint

    torch._dynamo.reset()
    gc.collect()  # an earlier call's checkpointed model (a reference cycle) counts in no peak
    cfg = LlamaConfig(vocab_size=256, dim=64, n_layers=2, n_heads=4, hidden_dim=176,
                      max_seq_len=32)
    torch.manual_seed(0)
    m = Llama(cfg).to("tpu")
    if ac:
        for blk in m.layers:
            blk.forward = (lambda f: lambda x, fr: checkpoint(f, x, fr, use_reentrant=False))(
                blk.forward)
    compiled = mode != "strict"
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, capturable=compiled)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (4, 32), generator=g).to("tpu")
    y = torch.randint(0, 256, (4, 32), generator=g).to("tpu")

    def step() -> torch.Tensor:
        _, loss = m(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    run = torch.compile(step, backend="tpu") if compiled else step
    losses = []
    for _ in range(3):
        torch.tpu.synchronize()
        torch.tpu.reset_peak_memory_stats()
        losses.append(run().detach().cpu())
        torch.tpu.synchronize()
    peak = torch.tpu.max_memory_allocated()
    torch._dynamo.reset()
    return peak, torch.stack(losses)


def test_compiled_step_peaks_no_higher_than_strict_eager() -> None:
    """The replayed compiled step of the example model at the same batch
    needs no more device memory than strict eager, with and without every
    block checkpointed: the min-cut partitioner saves fewer activations, and
    the backward runs as consecutive programs cut where the fewest bytes
    cross, so that the saved activations of the upper layers are freed before
    the lower layers' gradients and scratch memory exist, and the recompute of
    a checkpointed block lives only in its own part (bytes, from the runtime's
    counters: live buffers plus each program's scratch)."""
    strict, ls = _llama_peak("strict")
    compiled, lc = _llama_peak("replay")
    assert compiled <= strict, (compiled, strict)
    # the same training: each run's losses as close to PyTorch's float64 ones as the
    # CPU's float32 run is (the compiled step's programs fuse differently from strict
    # mode's, and the checkpointed step's from the plain one: their float32 roundings
    # differ, by an amount the CPU's own error bounds on any machine)
    exact, cpu32 = _llama_losses_on_cpu(torch.float64), _llama_losses_on_cpu(torch.float32)
    for losses in (ls, lc):
        assert_as_accurate(losses, cpu32, exact)
    # checkpointing every block lowers the compiled peak further, and it stays
    # at or below strict eager's checkpointed peak (the recompute is kept)
    strict_ac, lsa = _llama_peak("strict", ac=True)
    ac, la = _llama_peak("replay", ac=True)
    assert ac < compiled, (ac, compiled)
    assert ac <= strict_ac, (ac, strict_ac)
    assert_as_accurate(la, cpu32, exact)
    assert torch.equal(lsa, ls)  # strict mode recomputes with the very same programs


class _CkptDropLlama(_DropLlama):
    """The example transformer whose blocks are checkpointed with dropout
    inside each of them (on the block's output)."""

    def __init__(self) -> None:
        super().__init__()
        from torch.utils.checkpoint import checkpoint

        for blk in self.llama.layers:
            drop = nn.Dropout(0.25)
            blk.forward = (lambda f, d: lambda x, fr: checkpoint(
                lambda a, b: d(f(a, b)), x, fr, use_reentrant=False))(blk.forward, drop)


def test_checkpointed_dropout_is_replayed_bit_for_bit() -> None:
    """Dropout inside checkpointed blocks: the graphs are replayed (the
    recompute reads the forward's kept dropout masks, no generator state on
    the host), and 20 replayed steps equal 20 re-recorded ones bit for bit."""
    global _DropLlama
    plain = _DropLlama
    try:
        _DropLlama = _CkptDropLlama  # type: ignore[misc]
        rep = _train("transformer", "replay")
        rec = _train("transformer", "record")
    finally:
        _DropLlama = plain  # type: ignore[misc]
    _assert_bitwise(rep, rec)
    c = rep["counts"]
    assert c["graph_replays"] >= 4 * 20 - 10, (c, rep["reasons"])
    assert not [r for r in rep["reasons"] if "not replayed" in r], rep["reasons"]
    assert len(set(rep["losses"].tolist())) == 20  # fresh masks every step
