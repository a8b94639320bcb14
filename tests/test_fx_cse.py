"""tpuc's merge of repeated computations in a joint graph (python/tpuc/_fx_cse.py), run by the
compiled backend's partitioner in place of PyTorch's pass (which imports Inductor): the same
graph as PyTorch's pass on real joint graphs, the cases that must stay apart, no Inductor
import, and compiled training bit for bit as with PyTorch's pass (TPUC_OWN_CSE=0)."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.compile_utils import fx_graph_cse
from torch._functorch.partitioners import default_partition

from tpuc import _fx_cse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))


def _joint_graphs(fn, *inputs) -> list[torch.fx.GraphModule]:
    """The joint graphs AOTAutograd builds for fn (on the CPU: the pass is device-agnostic)."""
    graphs: list[torch.fx.GraphModule] = []

    def keep(joint, joint_inputs, **kwargs):
        graphs.append(copy.deepcopy(joint))
        return default_partition(joint, joint_inputs, **kwargs)

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=lambda gm, _: gm, partition_fn=keep)
    out = torch.compile(fn, backend=backend)(*inputs)
    sum(o.sum() for o in (out if isinstance(out, tuple) else (out,))).backward()
    assert graphs, "no joint graph was built"
    return graphs


def _code(g: torch.fx.Graph) -> str:
    return torch.fx.GraphModule(torch.nn.Module(), g).code


def _llama():
    from llama import Llama, LlamaConfig
    torch.manual_seed(0)
    m = Llama(LlamaConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                          max_seq_len=16))
    x = torch.randint(0, 64, (2, 16))
    return (lambda t: m(t, t)[1]), x


def _repeats():
    def f(x, w):
        a = torch.nn.functional.linear(x, w).relu()
        b = torch.nn.functional.linear(x, w).relu()  # the same again
        return (a * b).sum() + x.sin().sum() + x.sin().sum() + (x * 2).mean()
    return f, torch.randn(8, 16, requires_grad=True), torch.randn(4, 16, requires_grad=True)


def _batchnorm():
    bn = torch.nn.BatchNorm1d(16)  # train mode: the running stats are updated in place
    return (lambda x: bn(x).tanh() + bn(x).tanh()), torch.randn(8, 16, requires_grad=True)


def _dropout():
    return (lambda x: torch.nn.functional.dropout(x, 0.5) + torch.nn.functional.dropout(x, 0.5),
            torch.randn(8, 16, requires_grad=True))


def _attention():
    def f(q):
        a = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        return a + torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    return f, torch.randn(2, 4, 8, 16, requires_grad=True)


@pytest.mark.parametrize("case", [_llama, _repeats, _batchnorm, _dropout])
def test_the_same_graph_as_pytorchs_pass(case) -> None:
    """On each joint graph the pass gives the graph PyTorch's fx_graph_cse gives, node for
    node (the Llama example, repeated linear/sin chains, a BatchNorm in training mode whose
    running stats are mutated, dropout twice), with torch 2.13 and 2.14 (the version slice)."""
    fn, *inputs = case()
    for joint in _joint_graphs(fn, *inputs):
        ours, theirs = _fx_cse.merge_common(joint.graph), fx_graph_cse(joint.graph)
        assert _code(ours) == _code(theirs)


def test_repeats_are_merged_and_what_differs_is_not() -> None:
    """Repeated computations go (fewer nodes); random ops, ops tagged as seeded, outputs
    computed alike and calls whose arguments differ only in type or in the sign of a zero stay
    apart."""
    fn, *inputs = _repeats()
    joint = _joint_graphs(fn, *inputs)[0]
    merged = _fx_cse.merge_common(joint.graph)
    assert len(merged.nodes) < len(joint.graph.nodes)

    def kept(fn, *inputs, target) -> bool:  # every call of target still there, at least 2
        joint = _joint_graphs(fn, *inputs)[0]
        count = lambda g: sum(n.target == target for n in g.nodes)  # noqa: E731
        return count(_fx_cse.merge_common(joint.graph)) == count(joint.graph) >= 2

    aten = torch.ops.aten
    x = torch.randn(8, 16, requires_grad=True)
    assert kept(_dropout()[0], x, target=aten.native_dropout.default)
    assert kept(lambda x: (x.sin(), x.sin()), x, target=aten.sin.default)
    # an op tagged as seeded, though it draws nothing without dropout: kept apart, as
    # PyTorch 2.14's pass does (2.13's merged it)
    fn, q = _attention()
    assert kept(fn, q, target=aten._scaled_dot_product_flash_attention_for_cpu.default)
    assert kept(lambda x: x + 0.0 + (x + -0.0), x, target=aten.add.Tensor)
    n = torch.arange(16)
    assert kept(lambda x: x * (n + 1) + x * (n + 1.0), x, target=aten.add.Tensor)
    # and the same shapes with equal arguments do merge (the checks above can fail)
    assert not kept(lambda x: x + 0.0 + (x + 0.0), x, target=aten.add.Tensor)


def test_a_mutation_separates_what_it_may_change() -> None:
    """b * 2 before and after b.add_(1) are two computations (a mutation starts a new region),
    as PyTorch's pass has it; without the add_ they merge."""
    aten = torch.ops.aten

    def graph(mutate: bool) -> torch.fx.Graph:
        g = torch.fx.Graph()
        b = g.placeholder("b")
        first = g.call_function(aten.mul.Tensor, (b, 2))
        if mutate:
            g.call_function(aten.add_.Tensor, (b, 1))
        second = g.call_function(aten.mul.Tensor, (b, 2))
        g.output([g.call_function(aten.add.Tensor, (first, second))])
        return g

    for mutate in (True, False):
        ours = _fx_cse.merge_common(graph(mutate))
        assert _code(ours) == _code(fx_graph_cse(graph(mutate)))
        assert sum(n.target == aten.mul.Tensor for n in ours.nodes) == (2 if mutate else 1)


_TRAIN = r"""
import json, sys, torch
sys.path.insert(0, "../examples")
from llama import Llama, LlamaConfig
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_seq_len=16)
m = Llama(cfg).to("tpu")
cm = torch.compile(m, backend="tpu")
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(1)
losses = []
for step in range(4):
    x = torch.randint(0, 64, (4, 16), generator=g).to("tpu")
    _, loss = cm(x, x)
    loss.backward(); opt.step(); opt.zero_grad()
    losses.append(loss.item())
s = torch.tpu.stats()
print(json.dumps({"losses": losses, "compiles": s["compiles"],
                  "params": {n: p.detach().cpu().flatten().tolist() for n, p in m.named_parameters()},
                  "inductor": "torch._inductor.pattern_matcher" in sys.modules}))
"""


def _run(**env: str) -> dict:
    r = subprocess.run([sys.executable, "-c", _TRAIN], capture_output=True, text=True,
                       timeout=600, cwd=HERE,
                       env=dict(os.environ, TPUC_CACHE_DIR="off", TPUC_EAGER="strict", **env))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_compiled_training_is_bit_identical_without_inductor() -> None:
    """Four AdamW steps of the compiled Llama with tpuc's pass and with PyTorch's
    (TPUC_OWN_CSE=0): every loss and parameter equal bit for bit, from as many programs;
    only PyTorch's pass imports Inductor's pattern matcher."""
    ours, theirs = _run(), _run(TPUC_OWN_CSE="0")
    assert not ours["inductor"] and theirs["inductor"]
    assert ours["compiles"] == theirs["compiles"]
    assert ours["losses"] == theirs["losses"]
    assert ours["params"] == theirs["params"]
