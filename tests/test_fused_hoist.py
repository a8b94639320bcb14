"""Fills of new storages run before their fused chunk (csrc/core/exec/fused_hoist.c,
docs/execution.md "Fewer programs"; on by default, TPUC_FUSED_HOIST_FILLS=0 turns it off).

An optimizer's first step zeroes its new state inside the step's chunk; taken out of the
chunk, the first step's program is the steady steps' program: one whole-step compile
instead of two. The fills must keep their values (every dtype, the upload and the program
path), the chunk's other ops must see them, and fills that must stay in the chunk (a
temporary, a storage used earlier in the chunk, one that already has a value) must."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


OFF = os.environ.get("TPUC_FUSED_HOIST_FILLS") == "0"
in_process = pytest.mark.skipif(OFF, reason="TPUC_FUSED_HOIST_FILLS=0 in this process: "
                                "the in-process cases test the default")


@pytest.fixture(autouse=True)
def _fused():
    prev = torch.tpu.get_eager_mode()
    torch.tpu.set_eager_mode("fused")
    yield
    torch.tpu.set_eager_mode(prev)


def _hoisted() -> int:
    return torch.tpu.stats()["hoisted_fills"]


@in_process
def test_new_states_keep_their_values_and_leave_the_chunk() -> None:
    """Fills of every kind, each read by later ops of the same chunk: the results equal the
    CPU's exactly (a fill is exact, and so are these additions), and each fill of a storage
    that outlives the chunk was taken out of it, the >1 MiB one by its own program."""
    g = torch.Generator().manual_seed(0)
    xc = torch.randn(64, 32, generator=g)
    x = xc.to("tpu")
    torch.tpu.synchronize()
    h0 = _hoisted()

    def build(dev: str) -> list[torch.Tensor]:
        xs = xc.to(dev) if dev == "cpu" else x
        z = torch.zeros_like(xs)                                        # zero_, an upload
        big = torch.full((300, 1024), 2.5, device=dev)                  # 1.2 MB: a program
        i64 = torch.full((7,), -129, dtype=torch.int64, device=dev)
        bf = torch.full((3, 5), 1.5, dtype=torch.bfloat16, device=dev)
        b = torch.ones(6, dtype=torch.bool, device=dev)
        cz = torch.zeros(4, dtype=torch.complex64, device=dev)
        z.add_(xs)
        big.mul_(2.0)
        i64.add_(3)
        bf.add_(0.25)
        b[1] = False
        cz.add_(1.0)
        return [z, big, i64, bf, b, cz]

    want = build("cpu")
    got = build("tpu")
    assert torch.tpu.get_eager_mode() == "fused"
    assert _hoisted() - h0 == 0  # nothing ran yet: all of it is pending
    got_cpu = [t.cpu() for t in got]  # the read runs the chunk
    assert _hoisted() - h0 == 6, _hoisted() - h0
    for w, t in zip(want, got_cpu):
        assert t.dtype == w.dtype and torch.equal(t, w), (w, t)


@in_process
def test_fills_that_must_stay_in_the_chunk_stay() -> None:
    """A temporary (freed before the chunk runs), a storage an earlier op of the chunk
    wrote, and a storage that already holds a value: none is taken out, and every value
    is right."""
    x = torch.arange(8.0).to("tpu")
    old = torch.ones(8).to("tpu")
    torch.tpu.synchronize()
    h0 = _hoisted()
    s = (torch.ones_like(x) * x).sum()       # the ones are a temporary
    a = torch.empty(8, device="tpu")
    a[:4].fill_(3.0)                          # a view: a partial write first ...
    a.zero_()                                 # ... so this whole fill follows a use
    a.add_(x)
    old.zero_()                               # already has a buffer
    old.add_(2.0)
    assert s.item() == 28.0
    assert torch.equal(a.cpu(), torch.arange(8.0))
    assert torch.equal(old.cpu(), torch.full((8,), 2.0))
    assert _hoisted() - h0 == 0, _hoisted() - h0


@in_process
def test_a_new_state_every_step_stays_right() -> None:
    """A fill of a new storage in every step (a fresh accumulator kept past the step):
    taken out each time, the chunks still compute each step's value."""
    w = torch.linspace(-1.0, 1.0, 16).to("tpu")
    torch.tpu.synchronize()
    h0 = _hoisted()
    for step in range(5):
        acc = torch.zeros(16, device="tpu")
        acc.add_(w * step)
        acc.mul_(0.5)
        got = acc.sum().item()
        want = (torch.linspace(-1.0, 1.0, 16) * step * 0.5).sum().item()
        assert got == pytest.approx(want, abs=1e-6), (step, got, want)
        assert torch.equal(acc.cpu(), torch.linspace(-1.0, 1.0, 16) * step * 0.5)
    assert _hoisted() - h0 == 5


def _train(hoist: str) -> dict:
    env = dict(os.environ, TPUC_CACHE_DIR="off", TPUC_EAGER="fused",
               TPUC_FUSED_HOIST_FILLS=hoist)
    r = subprocess.run([sys.executable, os.path.join(HERE, "train_check.py"), "transformer",
                        "--steps", "4"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_adamw_first_step_shares_the_steady_program() -> None:
    """4 AdamW steps of the small transformer in fused mode, parameters and state updated
    in place: with the fills taken out the first step's chunk is the steady one (one
    program for the run, two without), and both runs stay within test_training's
    float64-derived bound."""
    on, off = _train("1"), _train("0")
    assert on["eager_mode"] == off["eager_mode"] == "fused"
    assert on["hoisted_fills"] == 2 * on["n_params"], on  # AdamW's exp_avg and exp_avg_sq
    assert off["hoisted_fills"] == 0, off
    assert on["compiles_per_step"] == [1] * 4, on["compiles_per_step"]
    assert off["compiles_per_step"][-1] == 2, off["compiles_per_step"]
    f32_eps = 2.0 ** -24
    for rep in (on, off):
        assert rep["fallbacks"] == {}, rep["fallbacks"]
        assert rep["tpu_loss_err"] <= 8.0 * rep["cpu_loss_err"] + 64 * f32_eps, rep
        assert rep["tpu_param_err"] <= 8.0 * rep["cpu_param_err"] + 64 * f32_eps, rep
