"""Host-first (opt-in, TPUC_HOST_FIRST=1; docs/execution.md "Host-first"): in strict mode an
op whose program is not compiled yet runs on the host as PyTorch's CPU kernel while the
compile pool compiles it, instead of waiting for the compile; once compiled, the op runs
its program. The optimizer's foreach programs take the same path. Each case is a fresh
process with a fresh (cold) compile cache, so every program is new to it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
F32_EPS = 2.0 ** -24


def _env(cache_dir: str, **extra: str) -> dict:
    env = dict(os.environ, TPUC_CACHE_DIR=cache_dir, TPUC_HOST_FIRST="1", TPUC_EAGER="strict",
               TPUC_LAUNCH_BLOCKING="0")
    env.update(extra)
    return env


def _run_code(code: str, env: dict) -> dict:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=600, env=env, cwd=HERE)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_training_matches_float64_while_ops_run_on_the_host(tmp_path) -> None:
    """20 AdamW steps of the small transformer from a cold cache: the first steps' ops run
    on the host while their programs compile, later ones on the device; losses and
    parameters stay as close to the float64 CPU run as the CPU's float32 run is (the bound
    of test_training._within), nothing is counted as a fallback."""
    cmd = [sys.executable, os.path.join(HERE, "train_check.py"), "transformer"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(str(tmp_path)), timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    assert rep["host_first_ops"] > 0, rep  # the path was taken
    assert rep["fallbacks"] == {}, rep["fallbacks"]
    assert rep["tpu_loss_err"] <= 8.0 * rep["cpu_loss_err"] + 64 * F32_EPS, rep
    assert rep["tpu_param_err"] <= 8.0 * rep["cpu_param_err"] + 64 * F32_EPS, rep


_STEADY = r"""
import json, sys, time, torch
sys.path.insert(0, "../examples")
from llama import Llama, LlamaConfig
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_seq_len=16)
m = Llama(cfg).to("tpu")
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(1)
counts, still, t0 = [], 0, time.monotonic()
while still < 3 and time.monotonic() - t0 < 240:
    x = torch.randint(0, 64, (4, 16), generator=g).to("tpu")
    _, loss = m(x, x); loss.backward(); opt.step(); opt.zero_grad(); loss.item()
    counts.append(torch.tpu.stats()["host_first_ops"])
    still = still + 1 if len(counts) > 1 and counts[-1] == counts[-2] else 0
    if len(counts) > 1 and counts[-1] > counts[-2]:
        time.sleep(0.05)  # (give the pool's thread the core on a loaded machine)
s = torch.tpu.stats()
print(json.dumps({"counts": counts, "still": still, "compiles": s["compiles"],
                  "disk_hits": s["disk_hits"] + s["preloaded"],  # on demand or preloaded
                  "fallbacks": sum(s["fallbacks"].values())}))
"""


def test_steps_reach_compiled_programs_and_a_warm_cache_needs_no_host(tmp_path) -> None:
    """Host-first ops stop once the pool has compiled every program (three steps in a row
    with none); a second process on the same cache directory loads the programs from disk
    and runs no op on the host at all."""
    cold = _run_code(_STEADY, _env(str(tmp_path)))
    assert cold["still"] >= 3, cold
    assert cold["counts"][0] > 0 and cold["fallbacks"] == 0, cold
    warm = _run_code(_STEADY, _env(str(tmp_path)))
    assert warm["counts"][-1] == 0 and warm["disk_hits"] > 0, warm


_DROPOUT = r"""
import json, torch
torch.tpu.manual_seed(7)
x = torch.ones(64, 64, device="tpu")
y = torch.nn.functional.dropout(x, 0.5) * 3 + 1      # dropout: a generator, never host-first
z = torch._foreach_add([x, y], 2.0)                  # a foreach program
s = torch.tpu.stats()
print(json.dumps({"mask": (y.cpu() > 1).flatten().tolist(), "z1": z[1].cpu().flatten().tolist(),
                  "y": y.cpu().flatten().tolist(), "host": s["host_first_ops"],
                  "fallbacks": sum(s["fallbacks"].values())}))
"""


def test_random_ops_are_never_run_on_the_host(tmp_path) -> None:
    """A host run would draw other numbers than the device's program: dropout's mask with
    host-first equals the one without it (same seed); the ops around it did run on the
    host, and the foreach result is the CPU's."""
    on = _run_code(_DROPOUT, _env(str(tmp_path / "on")))
    off = _run_code(_DROPOUT, _env(str(tmp_path / "off"), TPUC_HOST_FIRST="0"))
    assert on["host"] > 0 and off["host"] == 0, (on["host"], off["host"])
    assert on["mask"] == off["mask"]
    assert on["y"] == off["y"]
    assert on["z1"] == [v + 2.0 for v in on["y"]]
    assert on["fallbacks"] == off["fallbacks"] == 0


_EVERY_RANDOM_OP = r"""
import json, torch, torch.nn.functional as F
d = "tpu"
def x(*s): return torch.full(s, 0.5, device=d)
cases = {
 "rand": lambda: torch.rand(64, device=d), "randn": lambda: torch.randn(64, device=d),
 "randint": lambda: torch.randint(0, 100, (64,), device=d), "randperm": lambda: torch.randperm(50, device=d),
 "rand_like": lambda: torch.rand_like(x(64)), "randn_like": lambda: torch.randn_like(x(64)),
 "randint_like": lambda: torch.randint_like(x(64), 10),
 "bernoulli": lambda: torch.bernoulli(x(64)), "bernoulli_p": lambda: torch.bernoulli(x(64), 0.3),
 "bernoulli_": lambda: x(64).bernoulli_(0.3),
 "normal_tt": lambda: torch.normal(x(64), x(64)), "normal_tf": lambda: torch.normal(x(64), 2.0),
 "normal_ft": lambda: torch.normal(1.0, x(64)), "normal_ff": lambda: torch.normal(0.0, 1.0, (64,), device=d),
 "normal_": lambda: x(64).normal_(), "uniform_": lambda: x(64).uniform_(),
 "exponential_": lambda: x(64).exponential_(), "cauchy_": lambda: x(64).cauchy_(),
 "log_normal_": lambda: x(64).log_normal_(), "geometric_": lambda: x(64).geometric_(0.3),
 "random_": lambda: x(64).random_(0, 10), "multinomial": lambda: torch.multinomial(x(4, 8), 3),
 "multinomial_r": lambda: torch.multinomial(x(4, 8), 20, replacement=True),
 "dropout": lambda: F.dropout(x(64), 0.5, training=True),
 "dropout_": lambda: F.dropout(x(64), 0.5, training=True, inplace=True),
 "alpha_dropout": lambda: F.alpha_dropout(x(64), 0.5, training=True),
 "feature_alpha_dropout": lambda: F.feature_alpha_dropout(x(4, 8, 2), 0.5, training=True),
 "dropout2d": lambda: F.dropout2d(x(4, 8, 2, 2), 0.5, training=True),
 "rrelu": lambda: F.rrelu(x(64) - 1, training=True), "rrelu_": lambda: F.rrelu_(x(64) - 1, training=True),
 "native_dropout": lambda: torch.ops.aten.native_dropout(x(64), 0.5, True)[0],
 "sdpa_dropout": lambda: F.scaled_dot_product_attention(x(1, 2, 8, 4), x(1, 2, 8, 4), x(1, 2, 8, 4),
                                                        dropout_p=0.5),
}
out = {}
for k, f in cases.items():
    torch.manual_seed(0)
    cold = f().cpu()
    torch.manual_seed(0)
    warm = f().cpu()
    out[k] = [cold.double().flatten().tolist(), warm.double().flatten().tolist()]
out["host"] = torch.tpu.stats()["host_first_ops"]
print(json.dumps(out))
"""


def test_every_random_op_draws_what_it_draws_without_host_first(tmp_path) -> None:
    """Every sampling op of ATen, called cold (its program compiling) and again warm with the
    same seed: host-first changes no draw (a seeded op that ran on the host would draw the
    CPU generator's numbers, and the cold call would then differ from the warm one)."""
    on = _run_code(_EVERY_RANDOM_OP, _env(str(tmp_path / "on")))
    off = _run_code(_EVERY_RANDOM_OP, _env(str(tmp_path / "off"), TPUC_HOST_FIRST="0"))
    assert on.pop("host") > 0 and off.pop("host") == 0  # the ops around the draws ran on the host
    assert on.keys() == off.keys()
    for k in on:
        assert on[k][0] == on[k][1] == off[k][0], k


_ERROR_POLICY = r"""
import json, torch
x = torch.linspace(-1, 1, 300, device="tpu")
w = torch.randn(300, 7).to("tpu")
y = (x.sin() @ w).relu().sum()
s = torch.tpu.stats()
print(json.dumps({"y": y.item(), "ref": (torch.linspace(-1, 1, 300).sin() @ w.cpu()).relu().sum().item(),
                  "host": s["host_first_ops"]}))
"""


@pytest.mark.parametrize("max_mb", ["16", "0"])
def test_host_runs_are_no_fallbacks_and_the_size_cap_holds(tmp_path, max_mb: str) -> None:
    """TPUC_FALLBACK=error forbids CPU fallbacks, not host-first runs (the op has a lowering:
    only its program is late); with TPUC_HOST_FIRST_MAX_MB=0 every op is over the cap and
    waits for its compile as without host-first."""
    out = _run_code(_ERROR_POLICY, _env(str(tmp_path), TPUC_FALLBACK="error",
                                        TPUC_HOST_FIRST_MAX_MB=max_mb))
    assert abs(out["y"] - out["ref"]) <= 1e-4 * max(1.0, abs(out["ref"])), out
    assert (out["host"] > 0) == (max_mb != "0"), out


_ATTENTION = r"""
import json, torch, torch.nn.functional as F
torch.manual_seed(0)
q, k, v = (torch.randn(2, 4, 16, 8, dtype=torch.float64) for _ in range(3))
ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
cpu = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
qt, kt, vt = (t.float().to("tpu").requires_grad_() for t in (q, k, v))
before = torch.tpu.stats()["host_first_ops"]
out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
host = torch.tpu.stats()["host_first_ops"] - before  # the forward alone
out.sum().backward()
torch.tpu.manual_seed(3); plain = torch.rand(5, device="tpu").cpu()
torch.tpu.manual_seed(3); F.scaled_dot_product_attention(qt, kt, vt); after = torch.rand(5, device="tpu").cpu()
print(json.dumps({"host": host, "err": (out.detach().cpu().double() - ref).abs().max().item(),
                  "cpu_err": (cpu.double() - ref).abs().max().item(),
                  "grad": bool(torch.isfinite(qt.grad.cpu()).all()),
                  "same_draws": plain.tolist() == after.tolist()}))
"""


def test_attention_runs_on_the_host_and_draws_nothing(tmp_path) -> None:
    """PyTorch's CPU flash attention (what scaled_dot_product_attention picks on tpu) is
    tagged as seeded but supports no dropout: it takes no generator, so host-first runs it
    on the host while its program compiles (it used to wait ~0.1 s per shape), within the
    float32 bound of the CPU's own kernel against float64, and it leaves the tpu generator
    where it was (rand after it draws what rand without it does, as on the CPU)."""
    out = _run_code(_ATTENTION, _env(str(tmp_path)))
    assert out["host"] >= 1, out
    assert out["err"] <= 8.0 * out["cpu_err"] + 64 * F32_EPS, out
    assert out["grad"] and out["same_draws"], out


_NICE = r"""
import json, os, time, torch
from tpuc import _C
x = torch.arange(1000, dtype=torch.float32, device="tpu")
t0 = time.monotonic()
while torch.tpu.stats()["compiles"] < 1 and time.monotonic() - t0 < 120:
    (x * 3.0 + 1.0).sum().item()  # a program the pool compiles (host-first or ahead)
nices = []
for tid in os.listdir("/proc/self/task"):
    with open(f"/proc/self/task/{tid}/comm") as f:
        if f.read().strip() != "tpuc-compile":
            continue
    with open(f"/proc/self/task/{tid}/stat") as f:
        stat = f.read()
    nices.append(int(stat[stat.rindex(")") + 2:].split()[16]))  # field 19: nice
print(json.dumps({"nices": nices, "info": _C._runtime_info()["compile_nice"],
                  "host": torch.tpu.stats()["host_first_ops"],
                  "own": os.getpriority(os.PRIO_PROCESS, 0)}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
@pytest.mark.parametrize("host_first, setting, want", [("1", "19", 19), ("1", None, 0),
                                                        ("0", "7", 7), ("0", None, 0)])
def test_compile_threads_take_the_nice_value_asked_for(tmp_path, host_first: str,
                                                       setting: str | None, want: int) -> None:
    """TPUC_COMPILE_NICE=19 lets host-first's host runs keep the cores while programs compile
    (the compile pool's threads, named "tpuc-compile", run at that nice value); by default,
    with host-first or compile-ahead, they run at the caller's priority. Only they change:
    the calling thread keeps its own."""
    env = _env(str(tmp_path), TPUC_HOST_FIRST=host_first, TPUC_COMPILE_AHEAD="1")
    env.pop("TPUC_COMPILE_NICE", None)
    if setting is not None:
        env["TPUC_COMPILE_NICE"] = setting
    out = _run_code(_NICE, env)
    assert out["nices"] and all(n == want for n in out["nices"]), out
    assert out["info"] == want and out["own"] == 0, out
    assert (out["host"] > 0) == (host_first == "1"), out
