"""Issue 29's reproducer, as a user wrote it: a Linear layer's input gradient after its
weight was updated in place must come from the updated weight, in every mode, with and
without host reads between the backward and the update, for the shapes reported (and
their neighbours). Reference: go @ W computed in float64 on the CPU from the weight the
step used (one matmul of K terms: a float32 result is within ~sqrt(K) ulps of it; a
stale weight is off by ~100%)."""
from __future__ import annotations

import pytest
import torch

import tpuc  # noqa: F401

SHAPES = [((8, 64), 128, 512), ((520,), 128, 512), ((16,), 128, 512), ((1024,), 128, 512),
          ((8, 64), 512, 128), ((4, 130), 344, 128)]
READS = ["none", "weight.grad", "weight", "loss"]


def _train(lead: tuple[int, ...], fin: int, fout: int, mode: str, read: str) -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(fin, fout, bias=False).to("tpu")
    w64 = lin.weight.detach().cpu().double()
    x = torch.randn(*lead, fin, device="tpu", requires_grad=True)
    go = torch.randn(*lead, fout, device="tpu")
    fwd = torch.compile(lin, backend="tpu") if mode == "compiled" else lin
    go64 = go.cpu().double()
    for step in range(3):
        x.grad = None
        out = fwd(x)
        out.backward(go)
        if read == "weight.grad":
            lin.weight.grad.cpu()
        elif read == "weight":
            lin.weight.cpu()
        elif read == "loss":
            out.sum().item()
        with torch.no_grad():
            lin.weight.add_(1.0)  # in place, as every optimizer does
        exact = go64 @ w64
        got = x.grad.cpu().double()
        err = ((got - exact).abs().max() / exact.abs().max()).item()
        assert err < 1e-4, f"step {step}: input gradient off by {err:.3g} (relative)"
        w64 = w64 + 1.0


@pytest.mark.parametrize("read", READS)
@pytest.mark.parametrize("mode", ["strict", "fused", "compiled"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, (*s[0], s[1], s[2]))))
def test_input_grad_uses_updated_weight(shape: tuple, mode: str, read: str) -> None:
    if mode == "compiled":
        torch._dynamo.reset()
    with torch.tpu.eager_mode("fused" if mode == "fused" else "strict"):
        _train(*shape, mode, read)


# ---- the cause (XLA CPU's XNNPACK dots reuse a parameter's packing by address) ----------------

_SCRIPT = r"""
import torch
lin = torch.nn.Linear(128, 512, bias=False).to("tpu")
x = torch.randn(8, 64, 128, device="tpu", requires_grad=True)
for _ in range(2):
    lin(x).backward(torch.ones(8, 64, 512, device="tpu"))
    with torch.no_grad():
        lin.weight.add_(1.0)
print(x.grad.sum().item())
"""


def _dump(tmp_path, xla_flags: str = "") -> dict[str, str]:
    """Runs _SCRIPT in a fresh process with XLA's dump on; the dump's files by name."""
    import os
    import subprocess
    import sys

    dump = tmp_path / "dump"
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "TPUC_XLA_DEFAULTS")}
    env.update(TPUC_CACHE_DIR="off",
               XLA_FLAGS=f"--xla_dump_to={dump} --xla_dump_hlo_as_text {xla_flags}".strip())
    subprocess.run([sys.executable, "-c", _SCRIPT], env=env, check=True, timeout=300,
                   capture_output=True, text=True)
    return {p.name: p.read_text(errors="replace") for p in dump.iterdir()
            if p.is_file() and (p.name.endswith(".txt") or p.name.endswith(".debug_options"))}


def test_xnnpack_is_off_on_the_cpu_plugin(tmp_path) -> None:
    """tpuc turns XLA CPU's XNNPACK off (python/tpuc/_xla_flags.py): the options XLA
    compiled every program with say so."""
    files = _dump(tmp_path)
    opts = [t for n, t in files.items() if n.endswith(".debug_options")]
    assert opts, sorted(files)[:5]
    assert all("xla_cpu_use_xnnpack: false" in t for t in opts), opts[0]


def test_no_dot_reads_a_bare_parameter_when_xnnpack_is_on(tmp_path) -> None:
    """A user who turns XNNPACK back on (XLA_FLAGS names the option) gets the core's guard:
    in every optimized program no dot's right operand is a parameter, so XNNPACK has no
    parameter to keep a packing of (csrc/core/ir/ir.h, ir_graph_set_guard_dot_rhs)."""
    import re

    files = _dump(tmp_path, "--xla_cpu_use_xnnpack=true")
    dots = 0
    for name, text in files.items():
        if not name.endswith("after_optimizations.txt"):
            continue
        params = set(re.findall(r"(%[\w.]+) = \S+ parameter\(", text))
        for m in re.finditer(r" dot\((%[\w.]+), (%[\w.]+)\)", text):
            dots += 1
            assert m.group(2) not in params, f"{name}: {m.group(0)}"
    assert dots >= 3, dots  # forward, input gradient, weight gradient


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_input_grad_with_xnnpack_on(mode: str, tmp_path) -> None:
    """The reproducer with XNNPACK on (the guard), in a fresh process: on an AMD Rome or
    Milan CPU this is the configuration that computed the stale gradient."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(XLA_FLAGS="--xla_cpu_use_xnnpack=true", TPUC_EAGER=mode,
               TPUC_CACHE_DIR=str(tmp_path / "cache"))
    code = ("import sys; sys.path.insert(0, %r); import test_inplace_weight_grads as t; "
            "[t._train(*s, %r, 'weight.grad') for s in t.SHAPES]") % (
        os.path.dirname(os.path.abspath(__file__)), mode)
    r = subprocess.run([sys.executable, "-c", code], env=env, timeout=600,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
