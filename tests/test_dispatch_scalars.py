"""Strict mode keeps the device buffer of a plan's scalar parameter for the next launch
(csrc/core/exec/plan.c): a changed value must still reach the program, and the kept buffers
are not counted as tensor memory."""
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
