"""torch.compile(model) without a backend on "tpu" tensors runs on the "tpu"
backend (tpuc/compile_default.py); graphs of CPU tensors still go to
Inductor."""
from __future__ import annotations

import torch


def test_default_backend_on_tpu_runs_the_tpu_backend() -> None:
    torch._dynamo.reset()
    before = torch.tpu.stats()["dynamo_compiles"]
    model = torch.nn.Linear(8, 4).to("tpu")
    x = torch.randn(3, 8)
    compiled = torch.compile(model)  # no backend: Inductor by default
    y = compiled(x.to("tpu"))
    assert y.device.type == "tpu"
    # the tpu backend compiled it (it counts its graphs); values are the CPU's
    assert torch.tpu.stats()["dynamo_compiles"] > before
    ref = torch.nn.functional.linear(x, model.weight.detach().cpu(), model.bias.detach().cpu())
    torch.testing.assert_close(y.detach().cpu(), ref)


def test_mode_options_warn_and_still_run() -> None:
    import warnings

    from tpuc import compile_default

    torch._dynamo.reset()
    compile_default._warned = False
    f = torch.compile(lambda a: (a * 2).sum(), mode="max-autotune-no-cudagraphs")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = f(torch.arange(4.0, device="tpu"))
    assert out.item() == 12.0
    assert any("Inductor's mode/options are ignored" in str(x.message) for x in w)


def test_cpu_graphs_still_use_inductor(monkeypatch) -> None:
    """A graph of CPU tensors reaches Inductor's compile_fx unchanged."""
    import torch._inductor.compile_fx as cfx

    seen = []

    def fake_compile_fx(gm, inputs, **kwargs):
        seen.append([t.device.type for t in inputs if isinstance(t, torch.Tensor)])
        return gm.forward

    monkeypatch.setattr(cfx, "compile_fx", fake_compile_fx)
    torch._dynamo.reset()
    f = torch.compile(lambda a: a + 1)
    assert f(torch.zeros(3)).tolist() == [1.0, 1.0, 1.0]
    assert seen == [["cpu"]]
    torch._dynamo.reset()


_FRESH = r"""
import json, sys, torch
imported = "torch._dynamo" in sys.modules
f = torch.compile(lambda a: (a * 2).sum(), backend="tpu")   # the name, found by entry point
out = f(torch.arange(4.0, device="tpu")).item()
print(json.dumps({"dynamo_at_import": imported, "out": out,
                  "listed": "tpu" in torch._dynamo.list_backends(exclude_tags=())}))
"""


def test_import_torch_leaves_dynamo_until_a_compile() -> None:
    """`import torch` imports tpuc (its autoload entry point) but not torch._dynamo (1.2 s):
    the backend name "tpu" is declared as a torch_dynamo_backends entry point, which Dynamo
    reads when it first looks a name up; torch.compile(backend="tpu") then works and
    list_backends shows it."""
    import json
    import os
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", _FRESH], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, TPUC_CACHE_DIR="off"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"dynamo_at_import": False, "out": 12.0, "listed": True}, out
