"""Tied (shared) parameters and buffers stay tied when a module moves to or
from "tpu", exactly as on the CPU: nn.Module._apply (.to(), .tpu(), .cpu(),
.to(dtype), to_empty) updates each Parameter in place through `.data =`
when torch._has_compatible_shallow_copy_type says it may, which tpuc answers
for "tpu" tensors (csrc/torch/shallow_copy.cpp). The reference for every
structure is the same sequence of moves done on the CPU (or CPU dtypes)."""
from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn as nn

from tpu_testing import quiet_fallback_warnings  # noqa: F401


class Tied(nn.Module):
    """An embedding and an output projection sharing one weight, a parameter
    shared by two submodules, and a buffer registered under two names."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(11, 6)
        self.mid = nn.Linear(6, 6)
        self.mid2 = nn.Linear(6, 6)
        self.mid2.weight = self.mid.weight
        self.head = nn.Linear(6, 11, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("scale", torch.full((6,), 0.5))
        self.mid.register_buffer("scale_alias", self.scale)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids) * self.scale
        h = torch.tanh(self.mid(h)) + self.mid2(h) * self.mid.scale_alias
        return self.head(h)


def identity_groups(m: nn.Module) -> list[list[str]]:
    """Names of parameters and buffers grouped by object identity (the tie
    structure), sorted, duplicates included."""
    groups: dict[int, list[str]] = {}
    for name, t in list(m.named_parameters(remove_duplicate=False)) + list(
        m.named_buffers(remove_duplicate=False)
    ):
        groups.setdefault(id(t), []).append(name)
    return sorted(sorted(g) for g in groups.values())


def storage_groups(m: nn.Module) -> list[list[str]]:
    """The same, by shared storage (what `load_state_dict(assign=True)` keeps)."""
    groups: dict[tuple[str, int], list[str]] = {}
    for name, t in list(m.named_parameters(remove_duplicate=False)) + list(
        m.named_buffers(remove_duplicate=False)
    ):
        key = (str(t.device), t.untyped_storage().data_ptr())
        groups.setdefault(key, []).append(name)
    return sorted(sorted(g) for g in groups.values())


# name: (the move to "tpu", a CPU move that converts every tensor as well
# (a dtype change), so buffers are replaced as a device move replaces them:
# PyTorch keeps Parameters in place but gives each buffer name fn(buffer), on
# CUDA as here, so a buffer registered under two names becomes two tensors)
MOVES: dict[str, tuple[Callable[[nn.Module], nn.Module], Callable[[nn.Module], nn.Module]]] = {
    "to": (lambda m: m.to("tpu"), lambda m: m.double()),
    "tpu()": (lambda m: m.tpu(), lambda m: m.double()),
    "to-device-and-dtype": (lambda m: m.to("tpu", torch.float64), lambda m: m.double()),
    "to-then-dtype": (lambda m: m.to("tpu").to(torch.bfloat16), lambda m: m.double().bfloat16()),
    "double-half": (lambda m: m.tpu().double().half(), lambda m: m.double().half()),
    "round-trip": (lambda m: m.to("tpu").cpu().to("tpu"), lambda m: m.double().float().double()),
    "to_empty": (lambda m: m.to_empty(device="tpu"), lambda m: m.to_empty(device="cpu")),
}


@pytest.mark.parametrize("move", list(MOVES))
def test_ties_survive_moves(move: str) -> None:
    on_tpu, on_cpu = MOVES[move]
    ref = on_cpu(Tied())
    got = on_tpu(Tied())
    assert identity_groups(got) == identity_groups(ref)
    assert got.head.weight is got.emb.weight and got.mid2.weight is got.mid.weight
    for _, t in list(got.named_parameters()) + list(got.named_buffers()):
        assert t.device.type == "tpu"
    for _, p in got.named_parameters():
        assert isinstance(p, nn.Parameter) and p.requires_grad


def test_ties_keep_the_original_parameter_objects() -> None:
    # As on CUDA: .to() updates the Parameters in place, so references held
    # before the move (an optimizer built early) still see the module's.
    m = Tied()
    before = [id(p) for p in m.parameters()]
    m.to("tpu")
    assert [id(p) for p in m.parameters()] == before


def test_tied_gradients_match_cpu() -> None:
    torch.manual_seed(0)
    cpu = Tied().double()
    dev = copy.deepcopy(cpu).to("tpu")
    ids = torch.tensor([[1, 4, 9, 2], [0, 10, 3, 3]])
    cpu(ids).square().mean().backward()
    dev(ids.to("tpu")).square().mean().backward()
    names = [n for n, _ in cpu.named_parameters()]
    assert names == [n for n, _ in dev.named_parameters()]
    for (n, pc), pd in zip(cpu.named_parameters(), dev.parameters()):
        assert pd.grad is not None, n
        assert pd.grad.device.type == "tpu"
        # float64 on both sides: the sums differ only in order of additions
        torch.testing.assert_close(pd.grad.cpu(), pc.grad, rtol=1e-12, atol=1e-12)


def test_optimizer_steps_keep_ties() -> None:
    torch.manual_seed(0)
    cpu = Tied().double()
    dev = copy.deepcopy(cpu).to("tpu")
    ids = torch.tensor([[1, 4, 9, 2]])
    for m, x in ((cpu, ids), (dev, ids.to("tpu"))):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        for _ in range(3):
            opt.zero_grad()
            m(x).square().mean().backward()
            opt.step()
    assert dev.head.weight is dev.emb.weight
    for (n, pc), pd in zip(cpu.named_parameters(), dev.parameters()):
        torch.testing.assert_close(pd.detach().cpu(), pc.detach(), rtol=1e-10, atol=1e-12)


def test_set_data_moves_a_parameter() -> None:
    p = nn.Parameter(torch.randn(3))
    grad_fn_before = p.grad_fn
    p.data = torch.arange(3.0, device="tpu")
    assert p.device.type == "tpu" and isinstance(p, nn.Parameter) and p.requires_grad
    assert p.grad_fn is grad_fn_before
    (p * p).sum().backward()
    assert p.grad is not None and p.grad.device.type == "tpu"
    torch.testing.assert_close(p.grad.cpu(), 2 * torch.arange(3.0))
    p.data = torch.ones(2, 2, dtype=torch.float64)  # back to the CPU, new shape and dtype
    assert p.device.type == "cpu" and p.dtype == torch.float64 and p.shape == (2, 2)


def test_shallow_copy_answers() -> None:
    cpu, dev = torch.zeros(2), torch.zeros(2, device="tpu")
    ask = torch._has_compatible_shallow_copy_type
    assert ask(cpu, dev) and ask(dev, cpu) and ask(dev, dev)
    assert ask(dev, dev.double())
    assert not ask(dev, torch.zeros(2, 2).to_sparse())
    assert not ask(torch.zeros(2, 2).to_sparse(), dev)


def test_load_state_dict_assign_matches_cpu() -> None:
    # assign=True wraps each state-dict tensor in a new Parameter: the tie
    # structure afterwards is PyTorch's own; it must be the CPU's.
    def run(device: str) -> nn.Module:
        with torch.device("meta"):
            m = Tied()
        # tied entries are one tensor; converted on both sides (see MOVES)
        sd = Tied().to(device, torch.float64).state_dict()
        m.load_state_dict(sd, assign=True)
        return m

    ref, got = run("cpu"), run("tpu")
    assert identity_groups(got) == identity_groups(ref)
    assert storage_groups(got) == storage_groups(ref)
    assert all(p.device.type == "tpu" for p in got.parameters())


def test_load_state_dict_copy_keeps_ties() -> None:
    m = Tied().to("tpu")
    src = Tied()
    m.load_state_dict(src.state_dict())
    assert m.head.weight is m.emb.weight
    torch.testing.assert_close(m.emb.weight.detach().cpu(), src.emb.weight.detach())
