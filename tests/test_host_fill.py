"""Constant fills without a program (csrc/core/exec/fill.c, docs/execution.md "Fewer
programs"; on by default, TPUC_HOST_FILL_MAX_KB=0 turns it off): in strict mode a zero_ or
fill_ over a whole tensor uploads the constant instead of compiling a program. It must give
the bits the program gives (and the CPU's), for every dtype and the awkward values (-0.0,
NaN, infinities, float16 subnormals and rounding, values out of a type's range), and train
exactly as the program path does. Each case runs in fresh processes with the disk cache
off, once with the uploads and once without."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))

_FILLS = r"""
import json, sys, torch
torch.tpu.set_eager_mode("strict")
values = [0, 1, -1, 7, 300, -129, 2 ** 31 - 1, 2 ** 40 + 1, True, False,
          0.0, -0.0, 1.5, -2.75, 1 / 3, 0.1, 2.5, 3.9, -3.9, 65504.0, 65519.0, 65520.0, 1e9,
          6.0e-8, 2.0 ** -24, 3 * 2.0 ** -25, 2.0 ** -14 - 2.0 ** -25, 1e-40, 1e300,
          float("inf"), float("-inf"), float("nan"), 2.0 ** 24 + 1, 1.0 + 2.0 ** -9,
          1.0 + 3 * 2.0 ** -9, 1.0 + 2.0 ** -8]
dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
          torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64]
out, cases = {}, 0
s0 = torch.tpu.stats()["compiles"]
for dt in dtypes:
    for v in values:
        try:
            want = torch.empty(5, 3, dtype=dt).fill_(v)
        except RuntimeError:  # PyTorch refuses it (an overflowing integer): so must tpu
            continue
        got = torch.empty(5, 3, dtype=dt, device="tpu").fill_(v).cpu()
        bits = lambda t: (torch.view_as_real(t) if t.is_complex() else t).contiguous().view(-1).view(torch.uint8).tolist()
        w = want.double() if not want.is_complex() else torch.view_as_real(want).double()
        sub = bool((dt.is_floating_point or dt.is_complex) and ((w != 0) & (w.abs() < torch.finfo(dt).tiny)).any())
        out[f"{dt} {v!r}"] = [bits(got), bits(want), sub]
        cases += 1
    z = torch.ones(4, 8, dtype=dt, device="tpu").zero_().cpu()
    out[f"{dt} zero_"] = [z.view(-1).view(torch.uint8).tolist() if not z.is_complex() else
                          torch.view_as_real(z).view(-1).view(torch.uint8).tolist()] * 2 + [False]
fill_compiles = torch.tpu.stats()["compiles"] - s0
# views and shapes the uploads must not take, with their reads
x = torch.arange(24.0, device="tpu").view(4, 6)
x[:, 1:3].zero_(); x[2].fill_(-5.0); x.t()[0].fill_(9.0)
y = torch.arange(12.0, device="tpu").view(3, 4).t().contiguous().t()  # column-major whole storage
y.fill_(4.0)
e = torch.empty(0, device="tpu").fill_(1.0)
print(json.dumps({"fills": out, "cases": cases, "fill_compiles": fill_compiles,
                  "views": [x.cpu().tolist(), y.cpu().tolist(), e.numel()]}))
"""


def _run(code: str, *args: str, **env: str) -> dict:
    full = dict(os.environ, TPUC_CACHE_DIR="off")
    full.update(env)
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       timeout=600, env=full, cwd=HERE)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_fills_give_the_programs_bits_and_the_cpus() -> None:
    """Every dtype with 36 values: the uploaded fill equals the program's
    (TPUC_HOST_FILL_MAX_KB=0) bit for bit, NaN payloads included, and the CPU's except
    where the program flushes a subnormal to zero (then the upload leaves it to the
    program); a float16 fill
    of 1/3 or 0.1 (not exact in float32) and a complex one still compile. The uploads
    compile far fewer programs; partial writes through views (a column, a row, a
    transposed row) and an empty tensor are right either way."""
    on, off = _run(_FILLS), _run(_FILLS, TPUC_HOST_FILL_MAX_KB="0")
    assert on["cases"] == off["cases"] >= 300, (on["cases"], off["cases"])
    flushed = 0
    for name, (got, want, subnormal) in on["fills"].items():
        assert got == off["fills"][name][0], f"upload differs from the program: {name}"
        # XLA's CPU programs flush subnormal floats to zero (so the upload leaves them to
        # the program): the CPU's fill keeps them
        if subnormal and got != want:
            flushed += 1
            continue
        assert got == want, f"upload differs from the CPU: {name}"
    assert flushed <= 12, flushed
    # with the uploads only what the host does not decide compiles (complex values,
    # float16/bfloat16 values not exact in float32, NaN into an integer...)
    assert off["fill_compiles"] >= 40, off["fill_compiles"]  # a program per dtype and scalar kind
    assert on["fill_compiles"] <= off["fill_compiles"] // 4, (on["fill_compiles"], off["fill_compiles"])
    want_x = torch.arange(24.0).view(4, 6)
    want_x[:, 1:3].zero_(); want_x[2].fill_(-5.0); want_x.t()[0].fill_(9.0)
    for rep in (on, off):
        assert rep["views"] == [want_x.tolist(), [[4.0] * 4] * 3, 0], rep["views"]


def test_training_equals_the_program_path_bit_for_bit() -> None:
    """6 AdamW steps of the small transformer in strict mode (parameters and optimizer
    state updated in place every step; zeros_like for the state and ones_like for the
    loss's gradient are fills): the same losses bit for bit with and without the uploads,
    both within test_training's float64-derived bound, with fewer programs."""
    reps = []
    for kb in ("1024", "0"):
        env = dict(os.environ, TPUC_CACHE_DIR="off", TPUC_EAGER="strict", TPUC_HOST_FILL_MAX_KB=kb)
        r = subprocess.run([sys.executable, os.path.join(HERE, "train_check.py"), "transformer",
                            "--steps", "6"], capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        reps.append(json.loads(r.stdout.strip().splitlines()[-1]))
    on, off = reps
    assert on["tpu_losses"] == off["tpu_losses"], (on["tpu_losses"], off["tpu_losses"])
    assert on["tpu_param_err"] == off["tpu_param_err"], (on, off)
    f32_eps = 2.0 ** -24
    for rep in (on, off):
        assert rep["fallbacks"] == {}, rep["fallbacks"]
        assert rep["tpu_loss_err"] <= 8.0 * rep["cpu_loss_err"] + 64 * f32_eps, rep
        assert rep["tpu_param_err"] <= 8.0 * rep["cpu_param_err"] + 64 * f32_eps, rep
    assert on["compiles_per_step"][-1] < off["compiles_per_step"][-1], (on, off)
