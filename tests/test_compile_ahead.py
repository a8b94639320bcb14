"""Strict mode's compile-ahead queue (csrc/core/exec/ahead.c, docs/execution.md "Compile-ahead";
TPUC_COMPILE_AHEAD: on by default on GPU and TPU plugins, asked for with 1 on the XLA CPU plugin
that runs here): ops whose programs are not compiled are queued while a pool compiles them, and the
queue runs in order when something reads. Each case runs in a fresh process with the disk
cache off, so every program is new to it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))


def _run(code: str, **env: str) -> dict:
    full = dict(os.environ, TPUC_CACHE_DIR="off", TPUC_COMPILE_AHEAD="1")  # (off on the CPU plugin)
    full.update(env)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=600, env=full, cwd=_HERE)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


_WITHOUT_QUEUE: dict[str, dict] = {}


def _run_without_queue(code: str) -> dict:
    """`code` run with the queue off: the reference each test's parameters (1 and 4 compile
    threads) compare with, run once per script (the file stays in one worker)."""
    if code not in _WITHOUT_QUEUE:
        _WITHOUT_QUEUE[code] = _run(code, TPUC_COMPILE_AHEAD="0")
    return _WITHOUT_QUEUE[code]


_OVERLAP = r"""
import json, torch
xs = [torch.randn(n) for n in range(40, 80)]       # 40 shapes: 40 programs never compiled
dev = [x.to("tpu") for x in xs]
torch.tpu.synchronize()
s0 = torch.tpu.stats()
outs = [(d * 3 + 1).tanh() for d in dev]          # recorded while the pool compiles
s1 = torch.tpu.stats()
got = [o.cpu() for o in outs]                      # reading runs the queue
s2 = torch.tpu.stats()
ok = all(torch.equal(g, (x * 3 + 1).tanh()) or torch.allclose(g, (x * 3 + 1).tanh(), rtol=1e-6, atol=1e-6)
         for g, x in zip(got, xs))
print(json.dumps({"ok": ok, "queued": s1["ahead_ops"] - s0["ahead_ops"],
                  "ahead": s1["compiles_ahead"] - s0["compiles_ahead"],
                  "compiles": s2["compiles"] - s0["compiles"],
                  "queued_after": s2["ahead_ops"] - s1["ahead_ops"]}))
"""


def test_ops_are_recorded_while_their_programs_compile() -> None:
    """120 ops over 40 new shapes: the host queues them (it does not wait for a compile
    before the next op), the pool compiles their programs, the read runs them all, and the
    values are the CPU's. Without the queue each op would wait for its compile in turn."""
    out = _run(_OVERLAP)
    assert out["ok"]
    assert out["queued"] >= 100, out      # nearly every op queued behind the first compile
    assert out["ahead"] >= 100, out       # mul, add and tanh for each of 40 shapes
    assert out["compiles"] <= 120, out    # each program compiled once (joined, not twice)
    assert out["queued_after"] == 0, out  # the read ran the queue: nothing is queued by reading


_FEW = r"""
import json, torch
d = torch.randn(37).to("tpu")
outs = [(d * 3 + 1).tanh(), d.exp()]   # new programs: queued if the queue is on
print(json.dumps({"queued": torch.tpu.stats()["ahead_ops"]}))
"""


@pytest.mark.parametrize("value", ["", "auto", "0", "1"])
def test_off_on_the_cpu_plugin_by_default(value: str) -> None:
    """The default ("" or auto) is off on the XLA CPU plugin, 0 too, 1 turns it on (on for GPU
    and TPU plugins by default: the C test test_runtime's test_compile_ahead_default checks the
    decision per plugin kind)."""
    out = _run(_FEW, TPUC_COMPILE_AHEAD=value)
    assert (out["queued"] > 0) == (value == "1"), out


def test_a_value_it_does_not_know_is_an_error_that_names_it() -> None:
    env = dict(os.environ, TPUC_CACHE_DIR="off", TPUC_COMPILE_AHEAD="true")
    r = subprocess.run([sys.executable, "-c", "import torch; torch.ones(2, device='tpu')"],
                       capture_output=True, text=True, timeout=300, env=env, cwd=_HERE)
    assert r.returncode != 0
    assert "TPUC_COMPILE_AHEAD=true: use 1" in r.stderr, r.stderr[-2000:]


def test_info_says_whether_it_is_on() -> None:
    """`tpuc info` (and its --json) says whether the queue is on and with how many threads."""
    tpuc = os.path.join(os.path.dirname(sys.executable), "tpuc")
    env = dict(os.environ)
    env.pop("TPUC_COMPILE_AHEAD", None)
    env.pop("TPUC_COMPILE_THREADS", None)
    out = subprocess.run([tpuc, "info"], env=env, capture_output=True, text=True, timeout=120)
    assert "compile-ahead:     off (the default: off on the XLA CPU plugin" in out.stdout, out.stdout
    env.update(TPUC_COMPILE_AHEAD="1", TPUC_COMPILE_THREADS="3")
    out = subprocess.run([tpuc, "info"], env=env, capture_output=True, text=True, timeout=120)
    assert "compile-ahead:     on (TPUC_COMPILE_AHEAD=1), 3 compile thread(s)" in out.stdout, out.stdout
    out = subprocess.run([tpuc, "info", "--json"], env=env, capture_output=True, text=True,
                         timeout=120)
    info = json.loads(out.stdout)
    assert info["compile_ahead"] is True and info["compile_threads"] == 3, info


_TRAIN = r"""
import json, sys, torch
sys.path.insert(0, "../examples")
from llama import Llama, LlamaConfig
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_seq_len=16)
m = Llama(cfg).to("tpu")
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(1)
losses, mid = [], None
for step in range(4):
    x = torch.randint(0, 64, (4, 16), generator=g).to("tpu")
    _, loss = m(x, x)
    if step == 1:
        mid = m.layers[0].attention.wq.weight[0, :4].tolist()  # a read in the middle of a step
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())
params = {n: p.detach().cpu().flatten().tolist() for n, p in m.named_parameters()}
s = torch.tpu.stats()
print(json.dumps({"losses": losses, "mid": mid, "params": params,
                  "queued": s["ahead_ops"], "fallbacks": sum(s["fallbacks"].values())}))
"""


@pytest.mark.parametrize("threads", ["1", "4"])
def test_training_is_bit_identical_with_and_without_the_queue(threads: str) -> None:
    """Four AdamW steps (parameters updated in place, a host read in the middle of a step):
    the queue runs the same programs in the same order over the same buffers, so every loss
    and parameter is equal bit for bit to the run without it."""
    on = _run(_TRAIN, TPUC_COMPILE_THREADS=threads)
    off = _run_without_queue(_TRAIN)
    assert on["queued"] > 0 and off["queued"] == 0
    assert on["fallbacks"] == off["fallbacks"] == 0
    assert on["losses"] == off["losses"]
    assert on["mid"] == off["mid"]
    assert on["params"] == off["params"]


# fused mode: 4 layers, so that chunks are cut at the layers' loop boundaries (and queue)
_TRAIN_FUSED = (_TRAIN.replace("n_layers=2", "n_layers=4")
                .replace("torch.manual_seed(0)", "torch.tpu.set_eager_mode('fused'); torch.manual_seed(0)")
                .replace('"queued": s["ahead_ops"]',
                         '"queued": s["ahead_chunks"], "compiles": s["compiles"], '
                         '"mode": torch.tpu.get_eager_mode()'))


@pytest.mark.parametrize("threads", ["1", "4"])
def test_fused_chunks_queue_and_train_bit_identically(threads: str) -> None:
    """Fused mode (csrc/core/exec/fused_ahead.c): chunks cut at loop boundaries while their
    programs compile queue behind them; four AdamW steps with a host read in the middle of a
    step give every loss and parameter bit for bit as without the queue, from as many
    programs (the queue changes neither where chunks are cut nor what they compile)."""
    on = _run(_TRAIN_FUSED, TPUC_COMPILE_THREADS=threads)
    off = _run_without_queue(_TRAIN_FUSED)
    assert on["mode"] == off["mode"] == "fused"
    _assert_same_training(on, off)


def _assert_same_training(on: dict, off: dict) -> None:
    """Chunks queued with the queue on and none without; no fallback; as many programs; every
    loss, the mid-step read and every parameter equal bit for bit."""
    assert on["queued"] > 0 and off["queued"] == 0, (on["queued"], off["queued"])
    assert on["fallbacks"] == off["fallbacks"] == 0
    assert on["compiles"] == off["compiles"], (on["compiles"], off["compiles"])
    assert on["losses"] == off["losses"]
    assert on["mid"] == off["mid"]
    assert on["params"] == off["params"]


_FALLBACK = r"""
import json, warnings, torch
warnings.simplefilter("ignore")
x = torch.linspace(-2, 2, 37)
d = x.to("tpu")
y = (d * 1.5 + 0.25).sin()            # queued: new programs
z = torch.special.gammainc(y.abs() + 0.5, y.abs())  # no lowering: the CPU fallback reads y
w = (z * 2).cos()                     # back on the device
c = (x * 1.5 + 0.25).sin()
ref = (torch.special.gammainc(c.abs() + 0.5, c.abs()) * 2).cos()
s = torch.tpu.stats()
print(json.dumps({"err": (w.cpu() - ref).abs().max().item(), "queued": s["ahead_ops"],
                  "fallbacks": sum(s["fallbacks"].values())}))
"""


def test_a_cpu_fallback_reads_what_the_queue_computes() -> None:
    out = _run(_FALLBACK, TPUC_FALLBACK="silent")
    assert out["queued"] > 0 and out["fallbacks"] >= 1, out  # igamma has no lowering (yet)
    assert out["err"] <= 1e-6, out


# torch.compile(backend="tpu"): the first call of each graph (the forward, each part of the
# backward) queues behind its compile; the second records again and keeps the program
_TRAIN_COMPILED = (_TRAIN.replace("opt = torch.optim", "cm = torch.compile(m, backend='tpu')\nopt = torch.optim")
                   .replace("_, loss = m(x, x)", "_, loss = cm(x, x)")
                   .replace('"queued": s["ahead_ops"]',
                            '"queued": s["ahead_chunks"], "compiles": s["compiles"], '
                            '"replays": s["graph_replays"], "records": s["graph_records"]'))


@pytest.mark.parametrize("threads", ["1", "4"])
def test_compiled_graphs_queue_on_their_first_call_and_train_bit_identically(threads: str) -> None:
    """A compiled step's graphs queue behind their compiles on their first call
    (python/tpuc/dynamo.py, tpuc_flush_cut): four AdamW steps with a host read in the middle
    give every loss and parameter bit for bit as without the queue, from as many programs
    (the second call records the same program and finds it compiled); from the third step on
    the graphs replay as without the queue."""
    on = _run(_TRAIN_COMPILED, TPUC_COMPILE_THREADS=threads)
    off = _run_without_queue(_TRAIN_COMPILED)
    _assert_same_training(on, off)
    assert on["records"] == 2 * off["records"], (on["records"], off["records"])
    assert on["replays"] > 0 and on["replays"] + on["records"] == off["replays"] + off["records"]
