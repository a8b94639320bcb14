"""Out-of-range indices raise PyTorch's own error instead of a silent wrong answer.

Every indexing op is run on the CPU and on "tpu" with the same out-of-range index (too
large, and too negative or negative where PyTorch forbids negatives). The reference is
the CPU's exception: the same class (IndexError or RuntimeError) and its words; tpuc adds
the op's name and, where the CPU's words omit it, the offending value.

- debug mode (torch.tpu.set_eager_mode("debug"), TPUC_LAUNCH_BLOCKING=1): raised by the op,
  and an in-place op leaves its target unchanged, as on the CPU;
- strict, fused and compiled execution with TPUC_CHECK_BOUNDS=1 (torch.tpu.set_check_bounds):
  the check is computed on the device with no per-op host wait, and raised at the next
  synchronisation (a host read, torch.tpu.synchronize()), as CUDA reports device asserts;
- in-range indices (negative ones where allowed) still give the CPU's values with checks on.
"""
from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

Op = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _x(device: str) -> torch.Tensor:
    return torch.arange(12.0, device=device).reshape(4, 3)


def _ones(n: int, device: str) -> torch.Tensor:
    return torch.ones(n, 3, device=device)


# name -> f(x [4, 3], idx [k]) -> tensor; idx indexes dim 0 (size 4) or the 12 elements
OPS: dict[str, Op] = {
    "index": lambda x, i: x[i],
    "index_2d": lambda x, i: x[i, i.clamp(0, 2)],
    "index_put": lambda x, i: x.clone().index_put_((i,), torch.tensor(1.0, device=x.device)),
    "index_put_acc": lambda x, i: x.clone().index_put_((i,), torch.tensor(1.0, device=x.device), accumulate=True),
    "setitem": lambda x, i: x.clone().__setitem__(i, 5.0) or x,
    "gather": lambda x, i: x.gather(0, i[:, None].expand(-1, 3)),
    "scatter": lambda x, i: x.clone().scatter_(0, i[:, None].expand(-1, 3), 1.0),
    "scatter_src": lambda x, i: x.clone().scatter_(0, i[:, None].expand(-1, 3), _ones(len(i), x.device)),
    "scatter_add": lambda x, i: x.clone().scatter_add_(0, i[:, None].expand(-1, 3), _ones(len(i), x.device)),
    "scatter_reduce": lambda x, i: x.clone().scatter_reduce_(0, i[:, None].expand(-1, 3), _ones(len(i), x.device), "amax"),
    "take": lambda x, i: x.take(i * 3),
    "put": lambda x, i: x.clone().put_(i * 3, torch.ones(len(i), device=x.device)),
    "put_acc": lambda x, i: x.clone().put_(i * 3, torch.ones(len(i), device=x.device), accumulate=True),
    "embedding": lambda x, i: F.embedding(i, x),
    "index_select": lambda x, i: x.index_select(0, i),
    "index_add": lambda x, i: x.clone().index_add_(0, i, _ones(len(i), x.device)),
    "index_copy": lambda x, i: x.clone().index_copy_(0, i, _ones(len(i), x.device)),
    "index_fill": lambda x, i: x.clone().index_fill_(0, i, -1.0),
    # class targets over 4 classes (x's dim 0): a wrong target matched no class, a loss of 0
    "cross_entropy": lambda x, i: F.cross_entropy(x.t()[: len(i)], i),
    "nll_loss_none": lambda x, i: F.nll_loss(x.t()[: len(i)], i, reduction="none"),
    "nll_loss2d": lambda x, i: F.nll_loss(x[None, :, None, : len(i)], i[None, None]),
}

LOSSES = ("cross_entropy", "nll_loss_none", "nll_loss2d")

BAD = [[1, 7], [-5, 0], [0, -1]]  # too large; too negative; negative (allowed by some ops)


def _cpu_error(op: Op, idx: list[int]) -> BaseException | None:
    try:
        op(_x("cpu"), torch.tensor(idx))
    except (IndexError, RuntimeError) as e:
        return e
    return None


def _words(e: BaseException) -> str:
    """The CPU's message without its trailing detail, as a regex fragment."""
    first = str(e).splitlines()[0]
    return re.escape(first.split(" (")[0])


def _cases() -> list[tuple[str, list[int]]]:
    return [(name, idx) for name in OPS for idx in BAD]


@pytest.mark.parametrize("name,idx", _cases(), ids=lambda v: str(v))
def test_debug_mode_raises_like_the_cpu(name: str, idx: list[int]) -> None:
    op = OPS[name]
    ref = _cpu_error(op, idx)
    torch.tpu.set_eager_mode("debug")
    x = _x("tpu")
    i = torch.tensor(idx, device="tpu")
    if ref is None:  # in range for this op (a negative index that wraps): the CPU's values
        torch.testing.assert_close(op(x, i).cpu(), op(_x("cpu"), torch.tensor(idx)), rtol=0, atol=0)
        return
    with pytest.raises(type(ref), match=_words(ref)) as info:
        op(x, i)
    negatives_ok = _cpu_error(op, [-1]) is None
    bad = next(v for v in idx if v >= 4 or v < -4 or (v < 0 and not negatives_ok))
    assert str(bad * 3 if name in ("take", "put", "put_acc") else bad) in str(info.value), info.value
    assert "aten::" in str(info.value)  # names the op
    # the process and the tensors stay usable; an in-place op changed nothing
    torch.testing.assert_close(x.cpu(), _x("cpu"), rtol=0, atol=0)


def test_debug_mode_inplace_target_unchanged() -> None:
    torch.tpu.set_eager_mode("debug")
    x = _x("tpu")
    with pytest.raises(IndexError):
        x.index_put_((torch.tensor([0, 9], device="tpu"),), torch.tensor(100.0, device="tpu"))
    with pytest.raises(RuntimeError):
        x.scatter_add_(0, torch.tensor([[0, 0, 8]], device="tpu"), torch.ones(1, 3, device="tpu"))
    torch.testing.assert_close(x.cpu(), _x("cpu"), rtol=0, atol=0)


def test_embedding_backward_checked_in_debug_mode() -> None:
    # PyTorch's CPU kernel of embedding_dense_backward silently drops out-of-range rows
    # (the forward raised already); tpuc raises, a documented difference
    torch.tpu.set_eager_mode("debug")
    g = torch.ones(2, 3, device="tpu")
    with pytest.raises(IndexError, match="index out of range in self"):
        torch.ops.aten.embedding_dense_backward(g, torch.tensor([1, 4], device="tpu"), 4, -1, False)
    w = torch.ops.aten.embedding_dense_backward(g, torch.tensor([1, 1], device="tpu"), 4, -1, False)
    ref = torch.ops.aten.embedding_dense_backward(torch.ones(2, 3), torch.tensor([1, 1]), 4, -1, False)
    torch.testing.assert_close(w.cpu(), ref, rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_check_bounds_reports_at_the_next_sync(mode: str) -> None:
    torch.tpu.set_check_bounds(True)
    torch.tpu.set_eager_mode(mode)
    x = _x("tpu")
    y = x[torch.tensor([2, 9], device="tpu")]  # no host wait here
    z = x * 2
    with pytest.raises(IndexError, match=r"index 9 is out of bounds for dimension 0 with size 4.*TPUC_LAUNCH_BLOCKING"):
        z.cpu()
    del y
    # reported once; later work is unaffected
    torch.testing.assert_close(z.cpu(), _x("cpu") * 2, rtol=0, atol=0)
    g = x.gather(1, torch.tensor([[0], [5], [1], [2]], device="tpu"))
    with pytest.raises(RuntimeError, match="index 5 is out of bounds for dimension 1 with size 3"):
        torch.tpu.synchronize()
    del g


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("name", list(OPS))
def test_check_bounds_every_op_at_the_next_sync(name: str, mode: str) -> None:
    """Each op's check computed inside its program raises the CPU's error class and words at
    the next host read; the process stays usable."""
    op, idx = OPS[name], [1, 7]
    ref = _cpu_error(op, idx)
    assert ref is not None
    torch.tpu.set_check_bounds(True)
    torch.tpu.set_eager_mode(mode)
    y = op(_x("tpu"), torch.tensor(idx, device="tpu"))
    with pytest.raises(type(ref), match=_words(ref) + ".*TPUC_LAUNCH_BLOCKING"):
        y.cpu()
    torch.testing.assert_close((_x("tpu") + 1).cpu(), _x("cpu") + 1, rtol=0, atol=0)


def test_check_bounds_in_a_compiled_step() -> None:
    torch.tpu.set_check_bounds(True)
    emb = torch.nn.Embedding(10, 4).to("tpu")

    @torch.compile(backend="tpu")
    def step(i: torch.Tensor) -> torch.Tensor:
        return emb(i).sum()

    ok = step(torch.tensor([1, 2, 9], device="tpu"))
    torch.testing.assert_close(ok.cpu(), emb.cpu()(torch.tensor([1, 2, 9])).sum(), rtol=1e-6, atol=1e-6)
    emb.to("tpu")
    bad = step(torch.tensor([1, 2, 10], device="tpu"))
    with pytest.raises(IndexError, match="index 10"):
        bad.item()


def test_in_range_values_unchanged_with_checks_on() -> None:
    torch.tpu.set_check_bounds(True)
    for name, op in OPS.items():
        idx = [3, -1, 0] if _cpu_error(op, [3, -1, 0]) is None else [3, 1, 0]
        got = op(_x("tpu"), torch.tensor(idx, device="tpu")).cpu()
        if name in LOSSES:  # a log_softmax and a mean: a few float32 roundings, not the CPU's bits
            exact = op(_x("cpu").double(), torch.tensor(idx))
            bound = 16 * torch.finfo(torch.float32).eps * exact.abs().max().item()
            assert (got.double() - exact).abs().max().item() <= bound, name
        else:
            ref = op(_x("cpu"), torch.tensor(idx))
            torch.testing.assert_close(got, ref, rtol=0, atol=0, msg=name)


def test_strict_mode_without_the_switch_does_not_check() -> None:
    # the default (documented): strict mode computes no check, so costs nothing
    torch.tpu.set_check_bounds(False)
    x = _x("tpu")
    x[torch.tensor([9], device="tpu")].cpu()  # XLA clamps; no error raised


def test_launch_blocking_environment_variable() -> None:
    code = (
        "import torch\n"
        "x = torch.arange(4., device='tpu')\n"
        "try:\n"
        "    x[torch.tensor([7], device='tpu')]\n"
        "except IndexError as e:\n"
        "    print('raised', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env={**__import__("os").environ, "TPUC_LAUNCH_BLOCKING": "1"},
                         capture_output=True, text=True, timeout=120)
    assert "raised" in out.stdout and "index 7 is out of bounds for dimension 0 with size 4" in out.stdout, out


def test_check_bounds_environment_variable() -> None:
    code = (
        "import torch\n"
        "x = torch.arange(4., device='tpu')\n"
        "y = x.index_select(0, torch.tensor([1, 4], device='tpu'))\n"
        "try:\n"
        "    y.cpu()\n"
        "except IndexError as e:\n"
        "    print('raised', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env={**__import__("os").environ, "TPUC_CHECK_BOUNDS": "1"},
                         capture_output=True, text=True, timeout=120)
    assert "raised" in out.stdout and "index out of range in self" in out.stdout, out
