"""Errors on "tpu" are PyTorch's own: the same exception type as the same
call on the CPU, raised before anything runs; the process stays usable
after each one."""
from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from tpu_testing import assert_same, native, quiet_fallback_warnings  # noqa: F401

Case = Callable[[str], object]

CASES: dict[str, Case] = {
    "add_shapes": lambda d: torch.ones(2, 3, device=d) + torch.ones(4, 5, device=d),
    "mm_shapes": lambda d: torch.ones(2, 3, device=d) @ torch.ones(4, 5, device=d),
    "cat_shapes": lambda d: torch.cat([torch.ones(2, 3, device=d), torch.ones(2, 4, device=d)]),
    "view_size": lambda d: torch.ones(2, 3, device=d).view(7),
    "view_stride": lambda d: torch.ones(2, 3, device=d).t().view(6),
    "index_range": lambda d: torch.ones(2, 3, device=d)[5],
    "dim_range": lambda d: torch.ones(2, 3, device=d).sum(dim=4),
    "out_dtype_cast": lambda d: torch.add(torch.ones(2, device=d), 0.5,
                                          out=torch.empty(2, dtype=torch.int64, device=d)),
    "inplace_dtype_cast": lambda d: torch.ones(2, dtype=torch.int64, device=d).add_(0.5),
    "inplace_broadcast": lambda d: torch.ones(3, device=d).add_(torch.ones(2, 3, device=d)),
    "gather_index_dtype": lambda d: torch.gather(torch.ones(2, 3, device=d), 1,
                                                 torch.zeros(2, 3, dtype=torch.float32, device=d)),
    "bool_sub": lambda d: torch.ones(2, dtype=torch.bool, device=d) - torch.ones(2, dtype=torch.bool, device=d),
    "expand_bad": lambda d: torch.ones(2, 3, device=d).expand(4, 3),
    "reshape_bad": lambda d: torch.ones(2, 3, device=d).reshape(4, 2),
    "narrow_bad": lambda d: torch.ones(2, 3, device=d).narrow(1, 2, 5),
    "item_many": lambda d: torch.ones(2, device=d).item(),
    "arg_type": lambda d: torch.add(torch.ones(2, device=d), "x"),
    "softmax_dim": lambda d: torch.softmax(torch.ones(2, 3, device=d), dim=3),
    "linear_shapes": lambda d: torch.nn.functional.linear(torch.ones(2, 3, device=d), torch.ones(4, 5, device=d)),
    "embedding_index_dtype": lambda d: torch.nn.functional.embedding(
        torch.ones(2, dtype=torch.float32, device=d), torch.ones(4, 3, device=d)),
    "pad_odd": lambda d: torch.nn.functional.pad(torch.ones(2, 3, device=d), (1,)),
    "split_bad": lambda d: torch.ones(2, 3, device=d).split([1, 1], dim=1),
}


def cpu_error(case: Case) -> type[BaseException]:
    try:
        case("cpu")
    except Exception as e:  # noqa: BLE001
        return type(e)
    raise AssertionError("the case does not fail on the CPU")


@pytest.mark.parametrize("name", list(CASES))
def test_same_exception_type_as_cpu(name: str, native: bool) -> None:
    case = CASES[name]
    expected = cpu_error(case)
    with pytest.raises(Exception) as info:
        case("tpu")
    assert type(info.value) is expected, (type(info.value), expected, str(info.value)[:300])
    # still usable
    assert_same(torch.arange(4.0, device="tpu") * 2, torch.arange(4.0) * 2)


def test_bad_input_does_not_change_the_output(native: bool) -> None:
    out = torch.full((2,), 3, dtype=torch.int64, device="tpu")
    with pytest.raises(RuntimeError):
        torch.add(torch.ones(2, device="tpu"), 0.5, out=out)
    assert_same(out, torch.full((2,), 3, dtype=torch.int64))


def test_device_mismatch() -> None:
    with pytest.raises(RuntimeError, match="device"):
        torch.ones(2, 3, device="tpu") + torch.ones(2, 3)
    with pytest.raises(RuntimeError):
        torch.ones(2, 3, device="tpu") @ torch.ones(3, 2)
    assert torch.ones(2, device="tpu").sum().item() == 2.0


def test_device_index_out_of_range_is_runtime_error() -> None:
    n = torch.tpu.device_count()
    with pytest.raises(RuntimeError, match="out of range"):
        torch.ones(2, device=f"tpu:{n + 3}")
    with pytest.raises(RuntimeError, match="out of range"):
        torch.ones(2).to(f"tpu:{n}")
    with pytest.raises(RuntimeError, match="out of range"):
        with torch.tpu.device(n):
            pass
    assert torch.ones(2).to("tpu").sum().item() == 2.0


def test_errors_on_the_autograd_thread_propagate() -> None:
    x = torch.ones(2, 3, device="tpu", requires_grad=True)
    y = (x * 2).sum()

    def bad_hook(g: torch.Tensor) -> torch.Tensor:
        return g @ torch.ones(5, 5, device="tpu")  # shapes do not match

    x.register_hook(bad_hook)
    with pytest.raises(RuntimeError):
        y.backward()
    z = torch.ones(2, device="tpu", requires_grad=True)
    (z * 3).sum().backward()
    assert_same(z.grad, torch.full((2,), 3.0))


def test_out_of_memory_is_torch_out_of_memory_error() -> None:
    """A device allocation that cannot succeed raises torch.OutOfMemoryError at the
    op (the child's address space is capped so nothing is really allocated)."""
    import resource
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import warnings, torch
        warnings.simplefilter("ignore")
        try:
            torch.empty(2**35, device="tpu").fill_(1.0)  # 128 GiB
            torch.tpu.synchronize()
            print("no error")
        except torch.OutOfMemoryError as e:
            print("OutOfMemoryError")
        print(torch.ones(3, device="tpu").sum().item())
    """)

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (20 << 30, 20 << 30))

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, preexec_fn=cap)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["OutOfMemoryError", "3.0"], r.stdout
