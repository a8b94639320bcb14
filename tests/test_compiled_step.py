"""The compiled training step (torch.compile(backend="tpu"), graphs replayed):
parameters and optimizer state are updated in place without copies, read from
the optimized programs XLA compiled; activation checkpointing
(torch.utils.checkpoint) compiles, recomputes with the forward's random
numbers and lowers the peak."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from tpuc._xla_dump import dump_copies, program_copies

ROOT = os.path.join(os.path.dirname(__file__), "..")

_STEP = textwrap.dedent("""
    import sys
    sys.path.insert(0, {examples!r})
    import torch, tpuc
    from llama import Llama, LlamaConfig
    cfg = LlamaConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_seq_len=16)
    torch.manual_seed(0)
    m = Llama(cfg).to("tpu")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, capturable=True)
    x = torch.randint(0, 64, (2, 16)).to("tpu"); y = torch.randint(0, 64, (2, 16)).to("tpu")
    @torch.compile(backend="tpu")
    def step():
        _, loss = m(x, y); opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
        return loss
    for _ in range(3):
        step().item()
    print("params", len(list(m.parameters())), "replays", torch.tpu.stats()["graph_replays"])
""")


def test_copy_counter_reads_aliased_parameter_copies() -> None:
    """The counter itself: a copy of a donated parameter (directly or through
    a bitcast) counts, a copy of an undonated one does not."""
    hlo = ("HloModule m, input_output_alias={ {0}: (0, {}, may-alias), {1}: (2, {}, may-alias) }, "
           "entry_computation_layout={...}\n\nENTRY %main (a: f32[4]) -> (f32[4], f32[4]) {\n"
           "  %Arg_0.1 = f32[4]{0} parameter(0)\n  %Arg_1.1 = f32[4]{0} parameter(1)\n"
           "  %Arg_2.1 = f32[2,2]{1,0} parameter(2)\n  %copy.1 = f32[4]{0} copy(%Arg_0.1)\n"
           "  %copy.2 = f32[4]{0} copy(%Arg_1.1)\n  %bitcast.3 = f32[4]{0} bitcast(%Arg_2.1)\n"
           "  %copy.4 = f32[4]{0} copy(%bitcast.3)\n  ROOT %t = (f32[4]{0}) tuple(%copy.1)\n}\n")
    assert program_copies(hlo) == {"aliased": 2, "copies": 2}


def _dumped_step(template: str, **env_vars: str) -> tuple[str, list[dict], int]:
    """Runs a step script in a fresh process with XLA's dump on: its stdout, the copy
    counts of the optimized programs (tpuc._xla_dump) and the model's parameter count."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={d}", TPUC_CACHE_DIR="off", **env_vars)
        env.pop("TPUC_CANONICAL", None)
        code = template.format(examples=os.path.join(ROOT, "examples"))
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        rows = dump_copies(d)
    return r.stdout, rows, int(r.stdout.split("params")[1].split()[0])


@pytest.mark.parametrize("mode", ["replay", "join"])
def test_compiled_step_updates_parameters_in_place_without_copies(mode: str) -> None:
    """The optimized programs of the example model's compiled AdamW step
    (XLA's own dump) copy none of the parameters and optimizer states they
    update in place: replayed (forward, backward and optimizer are separate
    programs) and joined (ONE program, where the backward's reads of a weight
    are ordered before its update by a dependency the core emits; without it
    XLA copied every weight the backward reads)."""
    out, rows, nparams = _dumped_step(_STEP, TPUC_GRAPH_REPLAY=mode)
    if mode == "replay":
        assert "replays 0" not in out, out  # the kept programs were launched again
    else:  # one program donates everything the step updates
        assert len([row for row in rows if row["aliased"] >= 3 * nparams]) == 1, rows
    # the optimizer program donates every parameter, both AdamW moments and the step
    assert max(row["aliased"] for row in rows) >= 3 * nparams, rows
    assert sum(row["copies"] for row in rows) == 0, [x for x in rows if x["copies"]]



_FUSED_STEP = textwrap.dedent("""
    import sys
    sys.path.insert(0, {examples!r})
    import torch, tpuc
    from llama import Llama, LlamaConfig
    cfg = LlamaConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_seq_len=16)
    torch.manual_seed(0)
    m = Llama(cfg).to("tpu")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x = torch.randint(0, 64, (2, 16)).to("tpu"); y = torch.randint(0, 64, (2, 16)).to("tpu")
    for _ in range(3):
        _, loss = m(x, y); opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
        loss.item()
    print("params", len(list(m.parameters())))
""")


@pytest.mark.parametrize("flat", ["1", "0"])
def test_fused_step_updates_parameters_in_place_without_copies(flat: str) -> None:
    """Fused mode records the eager step (forward, backward, AdamW) into one chunk: it
    donates every parameter and both moments, and XLA copies none of them, with rank-1
    storage buffers (the default) and without. With rank-1 buffers a moment's update read
    through a reshape let XLA fuse a second computation of it into the weight's update,
    which then read the old moment after its in-place write (a copy per tensor): a chunk
    records canonical rank-1 pointwise calls, so the update chain stays rank 1."""
    _, rows, nparams = _dumped_step(_FUSED_STEP, TPUC_EAGER="fused", TPUC_FLAT_BUFFERS=flat)
    assert max(row["aliased"] for row in rows) >= 3 * nparams, rows
    assert sum(row["copies"] for row in rows) == 0, [x for x in rows if x["copies"]]


class _Block(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.up, self.down, self.drop = nn.Linear(width, hidden), nn.Linear(hidden, width), nn.Dropout(0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.drop(torch.tanh(self.up(x))))


class _Net(nn.Module):
    def __init__(self, ac: bool, p: float, width: int = 32, hidden: int = 512, depth: int = 3) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Block(width, hidden) for _ in range(depth))
        for b in self.blocks:
            b.drop.p = p
        self.ac = ac

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False) if self.ac else b(x)
        return x.square().mean()


def _ac_run(ac: bool, p: float, steps: int = 3) -> dict:
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = _Net(ac, p).to("tpu")
    f = torch.compile(lambda x: net(x), backend="tpu")
    g = torch.Generator().manual_seed(3)
    torch.tpu.manual_seed(7)
    s0 = torch.tpu.stats()
    losses, peaks = [], []
    for _ in range(steps):
        x = torch.randn(256, 32, generator=g).to("tpu")
        torch.tpu.synchronize()
        torch.tpu.reset_peak_memory_stats()
        loss = f(x)
        loss.backward()
        torch.tpu.synchronize()
        peaks.append(torch.tpu.max_memory_allocated())
        losses.append(loss.detach().cpu())
    grads = {k: p.grad.cpu() for k, p in net.named_parameters()}
    s1 = torch.tpu.stats()
    torch._dynamo.reset()
    return {"losses": torch.stack(losses), "grads": grads, "peak": peaks[-1],
            "replays": s1["graph_replays"] - s0["graph_replays"],
            "unreplayed": [r for r in s1["graph_replay_reasons"]  # graph ids are new
                           if "not replayed" in r and r not in s0["graph_replay_reasons"]]}


def test_activation_checkpointing_recomputes_with_the_same_dropout() -> None:
    """torch.utils.checkpoint around blocks with dropout inside a compiled
    model: the backward recomputes each block, reading the dropout masks the
    forward drew and kept (tpuc's partitioner saves a checkpointed region's
    random bits), so losses and gradients equal the model without
    checkpointing; a different dropout mask in the recompute would change the
    gradients by O(1). The graphs are replayed, and the peak falls."""
    plain, ac = _ac_run(False, 0.3), _ac_run(True, 0.3)
    assert torch.equal(plain["losses"], ac["losses"])
    assert ac["peak"] < plain["peak"], (ac["peak"], plain["peak"])
    assert ac["replays"] > 0 and not ac["unreplayed"], ac
    for k, g in plain["grads"].items():
        # the recomputed forward is another program, which XLA may fuse
        # differently from the forward: float32 rounding in the last bits
        torch.testing.assert_close(ac["grads"][k], g, rtol=1e-5, atol=1e-6, msg=k)


def test_activation_checkpointing_lowers_the_compiled_peak() -> None:
    """Checkpointed blocks keep only their inputs for the backward (not the
    wide hidden activations), and the replayed backward program recomputes
    them: the peak device memory of the compiled step falls, and the
    gradients stay those of the model without checkpointing."""
    plain, ac = _ac_run(False, 0.0), _ac_run(True, 0.0)
    for k, g in plain["grads"].items():
        torch.testing.assert_close(ac["grads"][k], g, rtol=1e-5, atol=1e-6, msg=k)
    assert ac["peak"] < plain["peak"], (ac["peak"], plain["peak"])


def test_checkpointed_transformer_is_replayed_and_matches() -> None:
    """The example transformer with every block checkpointed: its fused
    attention op (tagged as random, drawing nothing without dropout) is called
    directly in the recompute, so the graphs are still replayed, and the
    losses equal the model without checkpointing bit for bit."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from llama import Llama, LlamaConfig

    cfg = LlamaConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_seq_len=16)
    res = {}
    for ac in (False, True):
        torch._dynamo.reset()
        torch.manual_seed(0)
        m = Llama(cfg).to("tpu")
        if ac:
            for blk in m.layers:
                blk.forward = (lambda f: lambda x, fr: checkpoint(f, x, fr, use_reentrant=False))(
                    blk.forward)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, capturable=True)
        x, y = torch.randint(0, 64, (2, 16)).to("tpu"), torch.randint(0, 64, (2, 16)).to("tpu")

        def step() -> torch.Tensor:
            _, loss = m(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss

        cstep = torch.compile(step, backend="tpu")
        s0 = torch.tpu.stats()["graph_replays"]
        res[ac] = (torch.stack([cstep().detach().cpu() for _ in range(5)]),
                   torch.tpu.stats()["graph_replays"] - s0)
    torch._dynamo.reset()
    assert torch.equal(res[True][0], res[False][0])
    assert res[True][1] == res[False][1] >= 3 * 3, res  # forward, backward, AdamW replayed


def test_activation_checkpointing_matches_cpu() -> None:
    """The checkpointed, replayed compiled model computes PyTorch's values:
    losses and gradients of three steps (no dropout) against the same model
    on the CPU, with the bound derived from the CPU's own float32 error
    against float64."""
    sys.path.insert(0, os.path.dirname(__file__))
    from tpu_testing import assert_as_accurate

    torch._dynamo.reset()
    torch.manual_seed(0)
    nets = {k: _Net(k == "tpu", 0.0) for k in ("tpu", "cpu", "f64")}
    nets["cpu"].load_state_dict(nets["tpu"].state_dict())
    nets["f64"].load_state_dict(nets["tpu"].state_dict())
    nets["tpu"].to("tpu")
    nets["f64"].double()
    f = torch.compile(lambda x: nets["tpu"](x), backend="tpu")
    g = torch.Generator().manual_seed(3)
    s0 = torch.tpu.stats()["graph_replays"]
    out: dict[str, list[torch.Tensor]] = {k: [] for k in nets}
    for _ in range(3):
        x = torch.randn(256, 32, generator=g)
        for k, net in nets.items():
            if k == "tpu":
                loss = f(x.to("tpu"))
            else:
                loss = net(x.double() if k == "f64" else x)
            loss.backward()
            out[k].append(loss.detach().cpu())
    assert torch.tpu.stats()["graph_replays"] - s0 >= 2 * 2  # forward and backward parts
    assert_as_accurate(*(torch.stack(out[k]) for k in ("tpu", "cpu", "f64")))
    for (name, p), q, r in zip(nets["tpu"].named_parameters(), nets["cpu"].parameters(),
                               nets["f64"].parameters()):
        assert_as_accurate(p.grad, q.grad, r.grad)  # accumulated over the three steps
    torch._dynamo.reset()
