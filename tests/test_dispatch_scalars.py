"""Strict mode keeps the device buffer of a plan's scalar parameter for the next launch
(csrc/core/exec/plan.c): a changed value must still reach the program, and the kept buffers
are not counted as tensor memory."""
import os

import pytest
import torch

import tpuc  # noqa: F401


def test_changed_scalar_values_reach_the_program() -> None:
    torch.tpu.set_eager_mode("strict")
    a, b = torch.randn(8), torch.randn(8)
    ta, tb = a.to("tpu"), b.to("tpu")
    # same plan each time; the value changes, returns, and changes sign bit only
    for alpha in (2.0, 3.0, 2.0, 0.0, -0.0, 1e-30, 2.0):
        got = torch.add(ta, tb, alpha=alpha).cpu()
        assert torch.equal(got, torch.add(a, b, alpha=alpha)), alpha
    for s in (3, 4, 3, True, False):
        assert torch.equal((ta * s).cpu(), a * s), s


def test_kept_scalar_buffers_are_not_tensor_memory() -> None:
    torch.tpu.set_eager_mode("strict")
    x = torch.randn(16, device="tpu")
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    buffers = torch.tpu.memory_stats()["allocation.all.current"]
    for i in range(5):
        y = x.add(x, alpha=0.5 + i)  # a new scalar value each time: a new kept buffer
        del y
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == before
    assert torch.tpu.memory_stats()["allocation.all.current"] == buffers


def test_python_numbers_and_zero_dim_tensors_promote_apart() -> None:
    """x + 2.5 (a wrapped number) and x + tensor(2.5, float64) have the same shapes but
    promote differently; the boxed kernel's Meta-result cache must tell them apart."""
    torch.tpu.set_eager_mode("strict")
    a = torch.arange(6, dtype=torch.int32)
    x = a.to("tpu")
    for other in (2.5, torch.tensor(2.5, dtype=torch.float64), 2.5, torch.tensor(3)):
        for op in (torch.add, torch.sub, torch.mul, torch.div):
            want = op(a, other)
            got = op(x, other).cpu()
            assert got.dtype == want.dtype, (op, other)
            assert torch.equal(got, want), (op, other)


def _zero_dim_ops() -> dict:
    """Ops of a 0-dim tensor and a Python number, as a loss scaling or an optimizer's
    scalar state writes them."""
    return {
        "mul": lambda t: t * 0.01, "div": lambda t: t / 0.03, "rsub": lambda t: 0.3 - t,
        "rdiv": lambda t: 0.7 / t, "add": lambda t: t + 0.013, "sub_": lambda t: t.clone().sub_(0.1),
        "mul_": lambda t: t.clone().mul_(0.01), "div_mode": lambda t: torch.div(t, 0.03, rounding_mode=None),
        "complex": lambda t: t * (0.3 + 0.1j),
    }


def zero_dim_mismatches(mode: str) -> dict:
    """{(dtype, op): how many of 64 values differ from the CPU}, for 0-dim float32,
    bfloat16 (multiplication and division) and complex64 tensors, and how many of 600
    elements of an int32 tensor."""
    with torch.tpu.eager_mode(mode):
        return _zero_dim_mismatches()


def _zero_dim_mismatches() -> dict:
    gen = torch.Generator().manual_seed(0)
    ops = _zero_dim_ops()
    out = {}
    for dt, names in ((torch.float32, list(ops)), (torch.bfloat16, ["mul", "div", "rdiv", "mul_"]),
                      (torch.complex64, ["mul", "add", "rsub"])):
        x = (torch.rand(64, generator=gen) + 0.5).to(dt)
        for name in names:
            f = ops[name]
            # uploaded one by one: views of one tensor would differ by offset (a program each)
            bad = sum(not torch.equal(f(v), f(v.to("tpu")).cpu()) for v in x.unbind())
            if bad:
                out[(str(dt), name)] = bad
    # integer tensors (dimensioned) with a float: computed in the default dtype, float32
    ints = torch.arange(-300, 300, dtype=torch.int32)
    for name in ("mul", "div", "rdiv", "add"):
        bad = int((ops[name](ints) != ops[name](ints.to("tpu")).cpu()).sum())
        if bad:
            out[("torch.int32", name)] = bad
    return out


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_zero_dim_tensor_and_python_number_compute_in_the_tensors_dtype(mode) -> None:
    """`loss * 0.01` with a 0-dim float32 loss computes in float32 with 0.01 rounded to
    float32, as the CPU and CUDA do. Uploaded as a float64 0-dim tensor the Python number
    promoted the computation to float64 (csrc/torch/operands.cpp host_operand_dtype): a result
    one rounding off in about a third of the values (ASGD's step sizes drifted from the
    CPU's), and a float64 program. Each op's first call takes the boxed kernel, the others
    the unboxed one (arith.cpp); test_zero_dim_boxed_path runs all through the boxed one.
    An int32 tensor times 0.1 computed in float64 too (a fifth of the elements differed)."""
    assert zero_dim_mismatches(mode) == {}


def test_zero_dim_boxed_path() -> None:
    import subprocess
    import sys
    code = ("import tpuc, torch, sys; sys.path.insert(0, 'tests');"
            "from test_dispatch_scalars import zero_dim_mismatches as z;"
            "r = {m: z(m) for m in ('strict', 'fused')}; print(r); assert r == {'strict': {}, 'fused': {}}")
    env = dict(os.environ, TPUC_UNBOXED="0")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_default_dtype_change_reaches_cached_meta_results(request, mode) -> None:
    """The Meta-result cache (csrc/torch/native.cpp) keyed calls by their arguments only, so
    after torch.set_default_dtype(torch.float64) `int tensor * 0.1` still returned float32
    (the first call's result). Every key now starts with the default dtype."""
    before = torch.tpu.get_eager_mode()
    request.addfinalizer(lambda: torch.tpu.set_eager_mode(before))
    torch.tpu.set_eager_mode(mode)
    a = torch.arange(6)
    t = a.to("tpu")
    ops = (lambda x: x * 0.1, lambda x: x / 3, lambda x: x + 0.5, lambda x: x.sqrt(),
           lambda x: torch.where(x > 2, x, 0.5))
    try:
        for dd in (torch.float32, torch.float64, torch.float32):
            torch.set_default_dtype(dd)
            for i, f in enumerate(ops):
                want, got = f(a), f(t).cpu()
                assert got.dtype == want.dtype == dd, (dd, i, got.dtype)
                assert torch.equal(got, want), (dd, i)
    finally:
        torch.set_default_dtype(torch.float32)
