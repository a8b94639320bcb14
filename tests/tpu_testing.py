"""Shared helpers for the device tests (imported by tests/test_*.py).

The reference is always PyTorch on the CPU with the same data. The `native`
fixture runs a test twice: through the op engine (ops with a lowering run on
the device) and with every op forced through the CPU fallback (as
TPUC_NATIVE=0 does), so the glue's own paths are checked either way."""
from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator

import pytest
import torch

import tpuc  # noqa: F401  (registers "tpu" even with TORCH_DEVICE_BACKEND_AUTOLOAD=0)
from tpuc import _C


@pytest.fixture(autouse=True)
def quiet_fallback_warnings() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="tpuc: .* runs on the CPU")
        yield


@pytest.fixture
def no_fallback() -> Iterator[None]:
    """The test runs with nothing on the CPU fallback (warnings silenced): a fallback fails it.
    Apply to a whole file with ``pytestmark = pytest.mark.usefixtures("no_fallback")``."""
    torch.tpu.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    fell = {k: v for k, v in torch.tpu.stats()["fallbacks"].items() if v}
    assert not fell, f"ran on the CPU: {fell}"


@pytest.fixture(params=[True, False], ids=["native", "cpu-fallback"])
def native(request: pytest.FixtureRequest) -> Iterator[bool]:
    before = _C._native_enabled()
    _C._set_native_enabled(request.param)
    try:
        yield request.param
    finally:
        _C._set_native_enabled(before)


def assert_same(tpu: torch.Tensor, ref: torch.Tensor, **tol: float) -> None:
    """tpu (a tpu tensor) equals ref (a CPU tensor): device, dtype, shape, values."""
    assert tpu.device.type == "tpu", tpu.device
    assert tpu.dtype == ref.dtype, (tpu.dtype, ref.dtype)
    assert tpu.shape == ref.shape, (tpu.shape, ref.shape)
    got = tpu.cpu()
    if tol:
        torch.testing.assert_close(got, ref, **tol)
    else:
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6, equal_nan=True)


def fallback_counts() -> dict[str, int]:
    """CPU fallbacks so far, op name -> calls (torch.tpu.stats()["fallbacks"])."""
    return dict(torch.tpu.stats()["fallbacks"])


def new_fallbacks(before: dict[str, int]) -> list[str]:
    """The ops that fell back since `before` (a fallback_counts())."""
    return sorted(k for k, v in fallback_counts().items() if v > before.get(k, 0))


def relative_error(x: torch.Tensor, exact: torch.Tensor) -> float:
    """max |x - exact| relative to exact's largest magnitude (x and exact on the CPU)."""
    exact = exact.double()
    return ((x.double() - exact).abs().max() / exact.abs().max().clamp_min(1e-30)).item()


def assert_as_accurate(tpu: torch.Tensor, cpu: torch.Tensor, exact: torch.Tensor,
                       factor: float = 8.0, floor_ulps: float = 64.0,
                       scale: float | None = None) -> None:
    """A bound derived from the computation itself, for results that rounding makes
    chaotic (several optimizer steps, long reductions): `tpu` and `cpu` are the same
    computation in the same low precision, `exact` the CPU's float64 result. The
    device's error against `exact` must be at most `factor` times the CPU's own error
    (two evaluation orders of one computation err by the same order of magnitude;
    the factor covers the spread between orders), plus `floor_ulps` units of
    roundoff where the CPU happens to be nearly exact. Holds on any CPU, because
    the CPU's error is measured on the machine that runs the test. `scale`: for
    results that are sums of cancelling terms (a loss near 0 made of terms near 1),
    a bound on the terms' magnitude; the floor is then that many roundoffs of the
    terms, not of the results (a sum's rounding error scales with its terms)."""
    got = tpu.cpu() if tpu.device.type != "cpu" else tpu
    assert got.shape == cpu.shape == exact.shape, (got.shape, cpu.shape, exact.shape)
    eps = torch.finfo(cpu.dtype).eps / 2
    e_dev, e_cpu = relative_error(got, exact), relative_error(cpu, exact)
    top = exact.double().abs().max().clamp_min(1e-30).item()
    floor = floor_ulps * eps * (max(1.0, scale / top) if scale is not None else 1.0)
    assert e_dev <= factor * e_cpu + floor, (
        f"device error {e_dev:.3g} vs the CPU's {e_cpu:.3g} (float64 reference)")


def assert_trains_as_on_the_cpu(make: Callable[[], torch.nn.Module],
                                loss: Callable[[torch.nn.Module, str], torch.Tensor],
                                mode: str, steps: int = 4) -> None:
    """`make()`'s model in float64 on the CPU and on "tpu" (eager mode `mode`), `steps` SGD
    steps with momentum on `loss(model, device)`; the parameters, updated in place, are read
    back and compared with the CPU's after every step."""
    models = {d: make().to(d, torch.float64) for d in ("cpu", "tpu")}
    opts = {d: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for d, m in models.items()}
    with torch.tpu.eager_mode(mode):
        for step in range(steps):
            for d, m in models.items():
                loss(m, d).backward()
                opts[d].step()
                opts[d].zero_grad()
            for (name, pc), pt in zip(models["cpu"].named_parameters(), models["tpu"].parameters()):
                torch.testing.assert_close(pt.detach().cpu(), pc.detach(),
                                           msg=lambda m, n=name, s=step: f"step {s} {n}: {m}")


def run_with_kernels_off(switch: str, module: str, expr: str, ops: tuple[str, ...],
                         out_dir: str) -> tuple[int, object]:
    """`module.expr` evaluated in a fresh process with the environment variable `switch` set to 0
    (a composed kernel's switch back to the CPU fallback, read when tpuc registers the device):
    (the calls of `ops` that fell back, the value). The differential test of a kernel compares
    it with the same expression run here, with the kernels on."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(out_dir, f"{switch}-off.pt")
    code = ("import sys, torch; sys.path.insert(0, 'tests');"
            f"import {module} as t; out = t.{expr};"
            f"print(sum(torch.tpu.stats()['fallbacks'].get(k, 0) for k in {ops!r}));"
            "torch.save(out, sys.argv[1])")
    env = dict(os.environ, TPUC_FALLBACK="silent", **{switch: "0"})
    r = subprocess.run([sys.executable, "-c", code, path], cwd=root, env=env,
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    return int(r.stdout.split()[-1]), torch.load(path)


def kernels_on_and_off(switch: str, module: str, expr: str, ops: tuple[str, ...], out_dir: str,
                       namespace: dict[str, object]) -> tuple[object, object]:
    """A composed kernel's differential test across its switch: `expr` evaluated here (in the test
    module's `namespace`; none of `ops` may fall back) and in a fresh process with `switch`=0
    (run_with_kernels_off; some of `ops` must fall back). Returns (on, off) to compare."""
    before = fallback_counts()
    on = eval(expr, namespace)  # noqa: S307 - the test's own expression
    assert not [k for k in new_fallbacks(before) if k in ops]
    off_fallbacks, off = run_with_kernels_off(switch, module, expr, ops, out_dir)
    assert off_fallbacks > 0
    return on, off


def assert_runs_as_on_the_cpu(run: Callable[[str], list[torch.Tensor]], mode: str,
                              rtol: float, atol: float) -> None:
    """`run(device)` on "tpu" in eager mode `mode` with nothing on the CPU fallback, then on the
    CPU: every tensor it returns (CPU tensors) within rtol/atol of the CPU's."""
    before = fallback_counts()
    with torch.tpu.eager_mode(mode):
        got = run("tpu")
    assert not new_fallbacks(before)
    for a, b in zip(got, run("cpu")):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
