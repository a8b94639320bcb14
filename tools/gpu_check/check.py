"""The GPU check's driver: runs each phase in its own processes under the run's deadline and
appends one JSON line per finding to $OUT/results.jsonl as it goes (run.sh has already built
tpuc; report.py turns the lines into report.md).

Phases, in order (GPU_CHECK_PHASES picks some): machine, info, coexist, memory, train, ctests,
pytest, micro. Each phase may run until the deadline less what the later phases are
guaranteed (PHASE_MIN), and each process it starts has its own timeout, so one hang costs
one bounded slot, never the report.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checklib as common  # noqa: E402

S = common.settings()
LOGS = os.path.join(S.out, "logs")

# seconds each phase is guaranteed (the earlier phases stop short of it); GPU / dry
PHASE_MIN: dict[str, tuple[float, float]] = {
    "machine": (5, 1), "info": (10, 1), "coexist": (20, 2), "memory": (20, 2), "train": (60, 5),
    "ctests": (40, 1), "pytest": (40, 2), "micro": (15, 1),
}


def log(msg: str) -> None:
    print(f"[{S.elapsed():6.1f}s] {msg}", flush=True)


@dataclass
class Proc:
    rc: int | None          # None: killed by its timeout
    seconds: float
    output: str
    result: dict[str, Any] | None = field(default=None)

    @property
    def timed_out(self) -> bool:
        return self.rc is None

    def tail(self, n: int = 12) -> str:
        lines = [ln for ln in self.output.splitlines() if ln.strip()]
        return "\n".join(ln[:300] for ln in lines[-n:])


def run(name: str, argv: list[str], env: dict[str, str], timeout: float,
        cwd: str | None = None) -> Proc:
    """argv in a session of its own (its whole process group dies at the timeout); output
    to logs/NAME.log; the last `RESULT {json}` line it printed, parsed."""
    os.makedirs(LOGS, exist_ok=True)
    path = os.path.join(LOGS, re.sub(r"[^A-Za-z0-9_.-]+", "_", name) + ".log")
    t0 = time.time()
    with open(path, "w") as f:
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env,
                             cwd=cwd or S.src, start_new_session=True)
        try:
            rc: int | None = p.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = None
    with open(path, errors="replace") as f:
        text = f.read()
    res = None
    for line in text.splitlines():
        if line.startswith("RESULT "):
            try:
                res = json.loads(line[7:])
            except json.JSONDecodeError:
                pass
    return Proc(rc, round(time.time() - t0, 2), text, res)


def base_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYTHONUNBUFFERED="1", GPU_CHECK_SRC=S.src, GPU_CHECK_T0=str(S.t_start))
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(S.src, "tests")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def ref_env() -> dict[str, str]:
    """A plain PyTorch user's process: no TPUC_* switch, autoload as installed."""
    env = base_env()
    for k in ("TPUC_PLATFORM", "TPUC_ENABLE", "TORCH_DEVICE_BACKEND_AUTOLOAD", "TPUC_PJRT_PLUGIN"):
        env.pop(k, None)
    return env


def tpu_env(cache_dir: str | None = None) -> dict[str, str]:
    env = base_env()
    env["TPUC_PLATFORM"] = S.tpu_platform
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    if cache_dir:
        env["TPUC_CACHE_DIR"] = cache_dir
    if S.dry and "TPUC_COMPILE_AHEAD" not in env:
        # the dry run rehearses the GPU's defaults: there the compile-ahead queue is on (the
        # CPU plugin's default is off)
        env["TPUC_COMPILE_AHEAD"] = "1"
    return env


FACTS: dict[str, Any] = {}  # what the machine phase found (plugin path, torch's features)
TMP = tempfile.mkdtemp(prefix="gpu_check-")


# ---------------------------------------------------------------------------------- phases

MACHINE_PY = r"""
import json, os, platform, subprocess, sys, importlib.metadata as md, inspect
out = {"python": sys.version.split()[0], "executable": sys.executable, "nproc": os.cpu_count(),
       "cpu": platform.processor() or platform.machine()}
try:
    with open("/proc/meminfo") as f:
        out["host_mem_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
except OSError:
    pass
def ver(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
out["packages"] = {n: ver(n) for n in ("torch", "tpuc", "jax", "jaxlib", "jax-cuda13-pjrt",
                   "jax-cuda13-plugin", "jax-cuda12-pjrt", "xla-cpu-pjrt", "numpy", "pytest")}
import torch
out["torch"] = torch.__version__
out["torch_cuda"] = torch.version.cuda
out["cuda_available"] = bool(torch.version.cuda) and torch.cuda.is_available()
from torch.fx.passes.split_module import split_module
out["split_module_tuple_return"] = "tuple_return" in inspect.signature(split_module).parameters
try:
    import tpuc._plugin as p
    c = p.find_plugin()
    out["plugin"] = c.path
    out["plugin_source"] = c.source
except Exception as e:
    out["plugin_error"] = f"{type(e).__name__}: {e}"
try:
    q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                        "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    out["nvidia_smi"] = q.stdout.strip() or q.stderr.strip()
except (OSError, subprocess.SubprocessError) as e:
    out["nvidia_smi"] = None
print("RESULT " + json.dumps(out))
"""


def phase_machine(end: float) -> None:
    p = run("machine", [S.python, "-c", MACHINE_PY], tpu_env(), min(60, end - time.time()))
    facts = p.result or {"error": p.tail()}
    try:
        git = subprocess.run(["git", "-C", S.src, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        facts["commit"] = git.stdout.strip() or None
        dirty = subprocess.run(["git", "-C", S.src, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        facts["dirty"] = bool(dirty.stdout.strip()) if git.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        facts["commit"] = None
    FACTS.update(facts)
    smi = facts.get("nvidia_smi") or ""
    facts["device_name"] = smi.split(",")[0].strip() if smi and "," in smi else None
    FACTS["device_name"] = facts["device_name"]
    common.record(S.out, "machine", dry=S.dry, deadline_s=S.deadline_s, steps=S.steps,
                  dtype=S.dtype, loss_rtol=S.loss_rtol, **facts)
    log(f"machine: torch {facts.get('torch')} cuda={facts.get('cuda_available')} "
        f"gpu={facts.get('device_name')} plugin={facts.get('plugin')}")


SMOKE_PY = r"""
import json, torch
x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
y = (x.to("tpu") @ x.to("tpu")).relu().sum().item()
ref = (x @ x).relu().sum().item()
print("RESULT " + json.dumps({"device_name": torch.tpu.get_device_name(), "tpu": y, "cpu": ref,
      "ok": abs(y - ref) <= 1e-3 * abs(ref)}))
"""


def phase_info(end: float) -> None:
    p = run("info", [S.python, "-m", "tpuc", "info"], tpu_env(), min(60, end - time.time()))
    q = run("smoke", [S.python, "-c", SMOKE_PY], tpu_env(), min(60, end - time.time()))
    common.record(S.out, "info", rc=p.rc, seconds=p.seconds, text=p.output[-3000:],
                  smoke=q.result, smoke_rc=q.rc, smoke_tail=None if q.result else q.tail())
    log(f"info rc={p.rc}; smoke {q.result}")


def phase_coexist(end: float) -> None:
    ref = S.ref_device
    cases: list[tuple[str, dict[str, str]]] = [("ref", ref_env()), ("tpu", tpu_env()),
                                               ("both", tpu_env())]
    ref_losses: list[float] = []
    for case, env in cases:
        left = end - time.time()
        if left < 5:
            common.record(S.out, "coexist", case=case, status="skipped (deadline)")
            continue
        p = run(f"coexist-{case}", [S.python, os.path.join(HERE, "coexist.py"), case, ref], env,
                min(90, left))
        r = p.result or {}
        ok = bool(r.get("ok")) and not p.timed_out
        expect = None
        if case == "ref":  # a plain `import torch` on a CUDA machine keeps CUDA
            expect = "cuda" if not S.dry else None
        status = "pass" if ok else ("timeout" if p.timed_out else "fail")
        if ok and expect is not None and r.get("accelerator") != expect:
            ok, status = False, f"fail (torch.accelerator is {r.get('accelerator')}, not {expect})"
        if case == "both" and not ok:
            status = "fail (informative: one process using both)"
        if r.get("tpu_losses") and ref_losses:
            r["loss_vs_ref"] = loss_agreement(r["tpu_losses"], ref_losses)
            if not r["loss_vs_ref"]["within_rtol"]:
                ok, status = False, "fail (tpu losses differ from the reference's)"
        ref_losses = ref_losses or r.get("ref_losses") or []
        common.record(S.out, "coexist", case=case, status=status, rc=p.rc, seconds=p.seconds,
                      expect_accelerator=expect, **{k: v for k, v in r.items() if k != "case"},
                      tail=None if ok else p.tail())
        log(f"coexist {case}: {status} accelerator={r.get('accelerator')} "
            f"losses={r.get('ref_losses') or ''}{r.get('tpu_losses') or ''}")


def _gpu_memory() -> dict[str, Any] | None:
    if S.dry or not shutil.which("nvidia-smi"):
        return None
    try:
        g = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=15)
        a = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=15)
        used, total = (int(v) for v in g.stdout.strip().split(",")[:2])
        apps = {}
        for line in a.stdout.strip().splitlines():
            pid, mib = (v.strip() for v in line.split(","))
            apps[pid] = int(mib)
        return {"used_mib": used, "total_mib": total, "per_pid_mib": apps}
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return {"error": str(e)}


def _pair(case: str, a: tuple[str, dict[str, str]], b: tuple[str, dict[str, str]],
          mib: tuple[int, int], timeout: float) -> None:
    """Two memprobe processes alive at once; the GPU's memory looked at while both hold theirs."""
    ready = tempfile.mkdtemp(prefix="mem-", dir=TMP)
    procs = []
    t0 = time.time()
    for i, (dev, env) in enumerate((a, b)):
        name = f"{i}-{dev}"
        f = open(os.path.join(LOGS, f"memory-{case}-{name}.log"), "w")
        argv = [S.python, os.path.join(HERE, "memprobe.py"), name, dev, ready, str(mib[0]), str(mib[1])]
        procs.append((name, f, subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env,
                                                cwd=S.src, start_new_session=True)))
    names = [n for n, _, _ in procs]
    while time.time() - t0 < timeout * 0.7:
        if all(os.path.exists(os.path.join(ready, n + ".ready")) for n in names):
            break
        if any(p.poll() is not None for _, _, p in procs):
            break
        time.sleep(0.1)
    snapshot = _gpu_memory()
    open(os.path.join(ready, "go"), "w").close()
    results: dict[str, Any] = {}
    for name, f, p in procs:
        try:
            rc: int | None = p.wait(timeout=max(1.0, timeout - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = None
        f.close()
        with open(f.name, errors="replace") as fh:
            text = fh.read()
        res = next((json.loads(ln[7:]) for ln in reversed(text.splitlines())
                    if ln.startswith("RESULT ")), None)
        results[name] = {"rc": rc, **(res or {"tail": text[-800:]})}
    ok = all(r.get("ok") for r in results.values())
    common.record(S.out, "memory", case=case, status="pass" if ok else "fail",
                  seconds=round(time.time() - t0, 2), mib=list(mib), gpu_memory=snapshot,
                  processes=results)
    errs = "; ".join(f"{n}: {r.get('error', '')[:160]}" for n, r in results.items() if not r.get("ok"))
    log(f"memory {case}: {'pass' if ok else 'FAIL'} {snapshot or ''} {errs}")


# env variables the CUDA plugin might read (JAX's Python reads the XLA_PYTHON_CLIENT_* ones and
# passes create options; whether the plugin itself reads any is what the probe finds out)
ALLOC_ENV_PROBE = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_PYTHON_CLIENT_MEM_FRACTION": ".3",
                   "TF_FORCE_GPU_ALLOW_GROWTH": "true"}


def phase_memory(end: float) -> None:
    mib = (8, 16) if S.dry else (1024, 4096)
    ref = S.ref_device
    cases = [("two-tpuc", ("tpu", tpu_env()), ("tpu", tpu_env())),
             ("tpuc+torch-" + ref, ("tpu", tpu_env()), (ref, ref_env())),
             ("two-tpuc-env-probe", ("tpu", {**tpu_env(), **ALLOC_ENV_PROBE}),
              ("tpu", {**tpu_env(), **ALLOC_ENV_PROBE}))]
    if S.dry:
        cases = cases[:2]  # the probe asks the CUDA plugin; the CPU plugin has nothing to say
    for case, a, b in cases:
        left = end - time.time()
        if left < (3 if S.dry else 15):
            common.record(S.out, "memory", case=case, status="skipped (deadline)")
            continue
        _pair(case, a, b, mib, min(90, left))


@dataclass(frozen=True)
class Contender:
    size: str
    device: str   # tpu | cuda | cpu
    mode: str     # strict | fused | compile | eager
    cache: str    # cold | warm | "" (the reference)
    timeout: float

    @property
    def name(self) -> str:
        dev = "tpu" if self.device == "tpu" else f"torch-{self.device}"
        return f"{self.size}/{dev}/{self.mode}" + (f"/{self.cache}" if self.cache else "")


def plan() -> list[Contender]:
    """Per size: the reference's eager run first (the losses every other run is compared
    with), then each "tpu" mode cold and warm, the reference's torch.compile last. At the
    large size fused goes first: strict's per-op compiles took the most time there."""
    ref = S.ref_device
    out: list[Contender] = []
    for size in S.sizes:
        big = size == "large"
        t_cold, t_warm = ((120, 60) if big else (60, 40)) if not S.dry else (60, 60)
        out.append(Contender(size, ref, "eager", "", 60))
        for mode in ("fused", "strict", "compile") if big else ("strict", "fused", "compile"):
            if mode in S.modes:
                out.append(Contender(size, "tpu", mode, "cold", t_cold))
                out.append(Contender(size, "tpu", mode, "warm", t_warm))
            if mode == "fused" and mode in S.modes and not big:
                # fused mode without compile-ahead for its chunks (exec/fused_ahead.c): what
                # compiling the first step's chunks side by side buys, cold
                out.append(Contender(size, "tpu", "fused-serial", "cold", t_cold))
            if mode == "strict" and mode in S.modes and not big:
                # strict mode without the compile-ahead queue (TPUC_COMPILE_AHEAD=0; on by
                # default but on the XLA CPU plugin): what the queue buys on this plugin, cold
                out.append(Contender(size, "tpu", "strict-serial", "cold", t_cold))
                if not S.dry:
                    # strict mode with XLA's GEMM autotuning on for the per-op programs
                    # (TPUC_OP_XLA_OPTIONS=none): what the GPU default
                    # xla_gpu_autotune_level=0 saves, and what it costs per step (issue 30)
                    out.append(Contender(size, "tpu", "strict-autotune", "cold", t_cold))
            if mode == "compile" and mode in S.modes and not big and not S.dry:
                # compiled graphs without compile-ahead (their first call waits for its
                # compile: python/tpuc/dynamo.py): what compiling them side by side buys, cold
                out.append(Contender(size, "tpu", "compile-serial", "cold", t_cold))
        if "ref_compile" in S.modes:  # inductor's first compile of fwd + bwd + AdamW: long
            out.append(Contender(size, ref, "compile", "", 150 if big else 90))
    return out


def loss_agreement(losses: list[float], ref: list[float]) -> dict[str, Any]:
    n = min(len(losses), len(ref))
    rel = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses[:n], ref[:n])]
    return {"steps_compared": n, "max_rel_diff": max(rel) if rel else None,
            "rel_diff": [float(f"{r:.3g}") for r in rel],
            "within_rtol": (max(rel) <= S.loss_rtol) if rel else None, "rtol": S.loss_rtol}


def _wait_c_build(limit: float) -> None:
    """The C core's background build (run.sh) competes for the host's cores with the
    training runs' host side: let it finish first, for at most `limit` seconds."""
    build = os.environ.get("GPU_CHECK_C_BUILD", "")
    if os.environ.get("GPU_CHECK_C_BUILD_BG") != "1" or not build:
        return
    t0 = time.time()
    marker = os.path.join(build, "gpu_check_build.rc")
    while not os.path.exists(marker) and time.time() - t0 < limit:
        time.sleep(0.5)
    if time.time() - t0 > 1:
        log(f"train: waited {time.time() - t0:.0f}s for the C core build"
            + ("" if os.path.exists(marker) else " (still building: timings may suffer)"))


def phase_train(end: float) -> None:
    _wait_c_build(min(45.0, max(0.0, (end - time.time()) / 6)))
    refs: dict[str, list[float]] = {}
    cold_first: dict[tuple[str, str], str] = {}  # (size, mode) -> why a warm run is pointless
    caches: dict[tuple[str, str], str] = {}
    split_ok = FACTS.get("split_module_tuple_return", True)
    for c in plan():
        left = end - time.time()
        skip = cold_first.get((c.size, c.mode)) if c.cache == "warm" else None
        if not skip and left < (5 if S.dry else 20):
            skip = "deadline"
            if c.cache == "cold":
                cold_first[(c.size, c.mode)] = "deadline"
        if skip:
            common.record(S.out, "train", contender=c.name, size=c.size, device=c.device,
                          mode=c.mode, cache=c.cache, status=f"skipped ({skip})")
            log(f"train {c.name}: skipped ({skip})")
            continue
        result = os.path.join(TMP, c.name.replace("/", "_") + ".json")
        argv = [S.python, os.path.join(HERE, "bench_one.py"), "--device", c.device, "--mode",
                c.mode.split("-")[0], "--size", c.size, "--steps", str(S.steps), "--dtype", S.dtype,
                "--result", result]
        extra: dict[str, str] = {}
        if c.device == "tpu":
            key = (c.size, c.mode)
            if c.cache == "cold":
                caches[key] = tempfile.mkdtemp(prefix="cache-", dir=TMP)
            env = tpu_env(caches[key])
            if c.mode.endswith("-serial"):
                extra["TPUC_COMPILE_AHEAD"] = "0"
            if c.mode.endswith("-autotune"):
                extra["TPUC_OP_XLA_OPTIONS"] = "none"
            if c.mode == "compile" and not split_ok:
                # torch.fx's split_module has no tuple_return before torch 2.12 (notes/gpu.md):
                # one backward program needs no split
                extra["TPUC_BACKWARD_PROGRAMS"] = "1"
        else:
            env = ref_env()
            extra["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-", dir=TMP)
            if c.mode == "compile":
                # inductor on the CPU compiles C++ for a minute: the dry run checks the path
                # through AOTAutograd only
                argv += ["--backend", "aot_eager" if S.dry else "inductor"]
        env.update(extra)
        timeout = min(c.timeout, left)
        p = run("train-" + c.name, argv, env, timeout)
        try:
            with open(result) as f:
                res = json.load(f)
        except (OSError, json.JSONDecodeError):
            res = {}
        status = "ok" if p.rc == 0 and res.get("status") == "ok" else (
            f"timeout after {timeout:.0f}s" if p.timed_out else f"failed rc={p.rc}")
        res.update(contender=c.name, size=c.size, device=c.device, mode=c.mode, cache=c.cache,
                   status=status, seconds=p.seconds, timeout_s=round(timeout, 1), env=extra or None)
        res.pop("steps_asked", None)
        if c.device != "tpu" and c.mode == "eager" and res.get("losses"):
            refs[c.size] = res["losses"]
        elif refs.get(c.size) and res.get("losses"):
            res["loss_vs_ref"] = loss_agreement(res["losses"], refs[c.size])
        if c.cache == "cold" and "first_step_s" not in res:
            cold_first[(c.size, c.mode)] = "the cold run took no step"
        if status != "ok":
            res["tail"] = p.tail()
        common.record(S.out, "train", **res)
        agree = res.get("loss_vs_ref", {}).get("max_rel_diff")
        log(f"train {c.name}: {status} first={res.get('first_step_s')} steady={res.get('steady_s')} "
            f"steps={len(res.get('losses', []))} loss_rel_diff={agree} ({p.seconds:.0f}s)")


C_TESTS = ("test_runtime", "test_engine", "test_replay", "test_reliability", "test_disk_cache",
           "test_collective", "test_kv_bridge")


def phase_ctests(end: float) -> None:
    build = os.environ.get("GPU_CHECK_C_BUILD", "")
    done = os.path.join(build, "gpu_check_build.rc") if build else ""
    if not build:
        common.record(S.out, "ctests", status="skipped (no C build: GPU_CHECK_C_BUILD unset)")
        log("ctests: skipped (no C build)")
        return
    build_rc: int | None = 0
    if os.environ.get("GPU_CHECK_C_BUILD_BG") == "1":  # run.sh builds it in the background
        while not os.path.exists(done) and end - time.time() > 5:
            time.sleep(0.5)
        try:
            with open(done) as f:
                build_rc = int(f.read().strip() or 1)
        except (OSError, ValueError):
            build_rc = None  # still building at the deadline
    if build_rc != 0:
        common.record(S.out, "ctests", status=f"C core build rc={build_rc}", build=build)
        log(f"ctests: C core build rc={build_rc}")
        return
    plugin = FACTS.get("plugin") or ""
    per = float(os.environ.get("GPU_CHECK_C_TIMEOUT", "25"))
    for t in os.environ.get("GPU_CHECK_C_TESTS", ",".join(C_TESTS)).split(","):
        exe = os.path.join(build, "csrc", "core", t)
        left = end - time.time()
        if left < 3:
            common.record(S.out, "ctest", test=t, status="skipped (deadline)")
            continue
        if not os.path.exists(exe):
            common.record(S.out, "ctest", test=t, status="missing")
            continue
        env = base_env()
        env["TPUC_PJRT_PLUGIN"] = plugin
        p = run("ctest-" + t, [exe], env, min(per, left))
        status = "pass" if p.rc == 0 else ("timeout" if p.timed_out else f"fail rc={p.rc}")
        fails = [ln[:240] for ln in p.output.splitlines() if re.search(r"fail|error", ln, re.I)][:8]
        common.record(S.out, "ctest", test=t, status=status, seconds=p.seconds,
                      last_line=p.tail(1), fail_lines=fails)
        log(f"ctest {t}: {status} ({p.seconds:.0f}s)")


def phase_pytest(end: float) -> None:
    # test_training.py last: 150 s on a 2-core CPU; a slice cut by the deadline still counts
    default = "tests/test_autograd.py" if S.dry else (
        "tests/test_autograd.py tests/test_views.py tests/test_ops_nn.py tests/test_coexistence.py "
        "tests/test_training.py")
    files = os.environ.get("GPU_CHECK_PYTEST", default).split()
    left = end - time.time()
    if left < 5:
        common.record(S.out, "pytest", files=files, status="skipped (deadline)")
        return
    p = run("pytest", [S.python, "-m", "pytest", "-v", "-p", "no:cacheprovider", "--maxfail=25",
                       "--tb=line", *files], tpu_env(), left)
    # -v: one line per test as it ends, so a slice cut by its timeout still counts
    counts: dict[str, int] = {}
    failed: list[str] = []
    for ln in p.output.splitlines():
        m = re.match(r"(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b", ln)
        if m:
            counts[m.group(2).lower()] = counts.get(m.group(2).lower(), 0) + 1
            if m.group(2) in ("FAILED", "ERROR"):
                failed.append(m.group(1)[:200])
    status = "timeout" if p.timed_out else ("pass" if p.rc == 0 else f"fail rc={p.rc}")
    common.record(S.out, "pytest", files=files, status=status, seconds=p.seconds, counts=counts,
                  failed=failed, summary=p.tail(1))
    log(f"pytest: {status} {counts} ({p.seconds:.0f}s)")


def phase_micro(end: float) -> None:
    k, n = (256, 200) if S.dry else (8192, 2000)
    for dev, env in (("tpu", tpu_env()), (S.ref_device, ref_env())):
        left = end - time.time()
        if left < 3:
            common.record(S.out, "micro", device=dev, status="skipped (deadline)")
            continue
        p = run("micro-" + dev, [S.python, os.path.join(HERE, "micro.py"), dev, str(k), str(n)],
                env, min(60, left))
        status = "ok" if p.result else ("timeout" if p.timed_out else f"failed rc={p.rc}")
        common.record(S.out, "micro", status=status, seconds=p.seconds, **(p.result or {"device": dev}),
                      tail=None if p.result else p.tail())
        log(f"micro {dev}: {p.result or status}")


PHASES: dict[str, Callable[[float], None]] = {
    "machine": phase_machine, "info": phase_info, "coexist": phase_coexist,
    "memory": phase_memory, "train": phase_train, "ctests": phase_ctests,
    "pytest": phase_pytest, "micro": phase_micro,
}


def main() -> int:
    order = [p for p in common.DEFAULT_PHASES if p in S.phases]
    unknown = [p for p in S.phases if p not in PHASES]
    if unknown:
        print(f"GPU_CHECK_PHASES: unknown {unknown}; phases are {list(PHASES)}", file=sys.stderr)
        return 2
    if "machine" not in order:
        order.insert(0, "machine")  # the facts every later phase needs
    col = 1 if S.dry else 0
    try:
        for i, name in enumerate(order):
            reserve = sum(PHASE_MIN[p][col] for p in order[i + 1:])
            end = S.t_end - reserve
            log(f"== {name} (until {end - S.t_start:.0f}s of {S.deadline_s:.0f}s)")
            t0 = time.time()
            try:
                PHASES[name](end)
            except Exception as e:  # noqa: BLE001 — a phase's bug must not cost the others
                common.record(S.out, "error", phase=name, error=f"{type(e).__name__}: {e}")
                log(f"{name}: driver error {type(e).__name__}: {e}")
            common.record(S.out, "phase", phase=name, seconds=round(time.time() - t0, 2))
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    common.record(S.out, "done", elapsed_s=round(S.elapsed(), 1))
    log("check done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
