"""The linalg lowerings (csrc/core/lower/linalg.c) through tpuc_op_run,
against PyTorch on the CPU: functional, in-place and out= overloads,
non-contiguous inputs, bfloat16, runtime beta/alpha."""
import pytest
import torch

from harness_nn import check, core, noncontig

A = torch.ops.aten
torch.manual_seed(0)


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mm_family(dtype):
    a, b = r(3, 4, dtype=dtype), r(4, 5, dtype=dtype)
    check(A.mm.default, a, b)
    check(A.mm.default, noncontig(r(3, 4, dtype=dtype)), noncontig(r(4, 5, dtype=dtype)))
    check(A.mm.out, a, b, out=torch.empty(3, 5, dtype=dtype))
    check(A.bmm.default, r(2, 3, 4, dtype=dtype), r(2, 4, 5, dtype=dtype))
    check(A.mv.default, a, r(4, dtype=dtype))
    check(A.dot.default, r(7, dtype=dtype), r(7, dtype=dtype))


def test_int_and_f64():
    a, b = torch.randint(-5, 5, (3, 4)), torch.randint(-5, 5, (4, 2))
    check(A.mm.default, a, b)
    check(A.mm.default, a.double(), b.double())


def test_addmm_scalars_and_inplace():
    a, b = r(3, 4), r(4, 5)
    check(A.addmm.default, r(5), a, b)
    check(A.addmm.default, r(3, 5), a, b, beta=0.5, alpha=2.0)
    check(A.addmm.out, r(1, 5), a, b, beta=2, alpha=-1, out=torch.empty(3, 5))
    check(A.addmm_.default, r(3, 5), a, b, beta=0.25, alpha=3.0)
    # beta == 0 ignores self, NaN included
    check(A.addmm.default, torch.full((3, 5), float("nan")), a, b, beta=0.0)
    check(A.addmm.default, r(3, 5, dtype=torch.bfloat16), a.bfloat16(), b.bfloat16(),
          beta=0.5, alpha=1.5)


def test_batched_and_vector_adds():
    check(A.baddbmm.default, r(2, 3, 5), r(2, 3, 4), r(2, 4, 5), beta=0.5, alpha=2.0)
    check(A.baddbmm_.default, r(2, 3, 5), r(2, 3, 4), r(2, 4, 5))
    check(A.addbmm.default, r(3, 5), r(2, 3, 4), r(2, 4, 5), beta=1.5, alpha=0.5)
    check(A.addmv.default, r(3), r(3, 4), r(4), beta=0.5, alpha=2.0)
    check(A.addmv_.default, r(3), noncontig(r(3, 4)), r(4))


def test_vdot_complex():
    a, b = torch.randn(5, dtype=torch.complex64), torch.randn(5, dtype=torch.complex64)
    check(A.vdot.default, a, b)
    check(A.dot.default, a, b)


def test_scalar_change_does_not_recompile():
    a, b, c = r(3, 4), r(4, 5), r(3, 5)
    check(A.addmm.default, c, a, b, beta=0.5, alpha=2.0)
    misses = core().stats().fast_misses
    check(A.addmm.default, c, a, b, beta=0.75, alpha=-3.0)
    assert core().stats().fast_misses == misses


def test_registered_names_are_aten_overloads():
    """Every name in the linalg/shape/index/nn tables is an ATen overload
    and is found through tpuc_op_find."""
    import os
    import re

    root = os.path.join(os.path.dirname(__file__), "..", "..", "csrc", "core", "lower")
    names = set()
    for f in ("linalg.c", "shape.c", "index.c", "nn.c"):
        with open(os.path.join(root, f)) as fh:
            names |= set(re.findall(r'\{"(aten::[A-Za-z0-9_.]+)"', fh.read()))
    assert len(names) > 200
    registered = set(core().op_names())
    for n in sorted(names):
        base, _, overload = n[len("aten::"):].partition(".")
        packet = getattr(torch.ops.aten, base)
        assert (overload or "default") in packet.overloads(), n
        assert n in registered, n
