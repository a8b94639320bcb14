"""The torch-version shims (python/tpuc/_torch_compat.py), exercised on whatever torch runs
the tests: each emulation is forced on and checked against the torch it replaces."""
from __future__ import annotations

import copy
import operator

import pytest
import torch
import torch.nn as nn

from tpuc import _torch_compat as C


def _graph() -> torch.fx.GraphModule:
    """Three parts: the first hands one value on, the second two, the third returns."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(torch.ops.aten.mul.Tensor, (x, x))          # part 0: one output
    b = g.call_function(torch.ops.aten.add.Tensor, (a, x))          # part 1
    c = g.call_function(torch.ops.aten.sub.Tensor, (a, x))          # part 1: two outputs
    d = g.call_function(torch.ops.aten.mul.Tensor, (b, c))          # part 2
    g.output((d,))
    return torch.fx.GraphModule({}, g)


def _split(emulate: bool, monkeypatch: pytest.MonkeyPatch) -> torch.fx.GraphModule:
    gm = _graph()
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    part = dict(zip(nodes, [0, 1, 1, 2]))
    if emulate:
        monkeypatch.setattr(C, "_split_module_has_tuple_return", lambda: False)
    return C.split_module_tuple_return(gm, lambda n: part[n])


def test_split_module_parts_always_return_tuples(monkeypatch: pytest.MonkeyPatch) -> None:
    top = _split(True, monkeypatch)
    x = torch.randn(3)
    subs = dict(top.named_children())
    assert len(subs) == 3
    for name, sub in subs.items():
        out = sub.graph.output_node().args[0]
        assert isinstance(out, (tuple, list)), (name, out)
    # the caller of a one-output part reads its element 0
    reads = [n for n in top.graph.nodes if n.op == "call_function" and n.target is operator.getitem]
    assert reads and all(isinstance(n.args[0], torch.fx.Node) for n in reads)
    torch.testing.assert_close(top(x)[0], _graph()(x)[0], rtol=0, atol=0)


def test_split_module_emulation_matches_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    if not C._split_module_has_tuple_return():
        pytest.skip("this torch has no tuple_return to compare with (2.11)")
    native = _split(False, monkeypatch)
    emulated = _split(True, monkeypatch)
    x = torch.randn(5)
    torch.testing.assert_close(emulated(x), native(x), rtol=0, atol=0)
    for (n1, s1), (n2, s2) in zip(native.named_children(), emulated.named_children()):
        assert n1 == n2
        assert len(s1.graph.output_node().args[0]) == len(s2.graph.output_node().args[0])


def test_compiled_backward_with_the_emulated_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.compile(backend="tpu") end to end with torch 2.11's split_module path: the
    backward launched in parts gives eager's gradients."""
    import torch._dynamo

    monkeypatch.setattr(C, "_split_module_has_tuple_return", lambda: False)
    monkeypatch.setenv("TPUC_BACKWARD_PROGRAMS", "3")
    torch._dynamo.reset()
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 2))
    dev = copy.deepcopy(cpu).to("tpu")
    x = torch.randn(4, 8)
    torch.compile(dev, backend="tpu")(x.to("tpu")).square().sum().backward()
    cpu(x).square().sum().backward()
    for p, q in zip(dev.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()


def test_active_names_versions() -> None:
    for s in C.active():
        assert "torch 2." in s, s
