"""pow of bool tensors with a bool exponent on "tpu", as on the CPU: the result stays bool
(b ** True is b, b ** False is all True). The glue takes pow's C++ structured meta
(fallback.cpp) instead of the Python Meta kernel, whose promotion gives int64 and then
refuses to write it to the bool output; the core lowers bool ** bool as b | !e."""
from __future__ import annotations

import pytest
import torch

from tpu_testing import quiet_fallback_warnings  # noqa: F401


@pytest.mark.parametrize("e", [True, False])
def test_pow_bool_scalar(e: bool) -> None:
    b = torch.tensor([[True, False, True], [False, False, True]])
    want = torch.pow(b, e)
    got = torch.pow(b.to("tpu"), e)
    assert got.dtype == torch.bool and torch.equal(got.cpu(), want)
    got_ = b.to("tpu")
    got_.pow_(e)
    assert torch.equal(got_.cpu(), want)
    out = torch.empty(2, 3, dtype=torch.bool, device="tpu")
    torch.pow(b.to("tpu"), e, out=out)
    assert torch.equal(out.cpu(), want)


def test_foreach_pow_bool() -> None:
    ts = [torch.tensor([True, False]), torch.tensor([[False, True], [True, True]])]
    for e in (True, False):
        want = torch._foreach_pow(ts, e)
        got = torch._foreach_pow([t.to("tpu") for t in ts], e)
        for g, w in zip(got, want):
            assert g.dtype == torch.bool and torch.equal(g.cpu(), w)


def test_pow_scalar_other_dtypes_unchanged() -> None:
    """The C++ meta gives the CPU's result dtypes for the other cases too."""
    b = torch.tensor([True, False])
    for x, e in ((b, 2), (b, 2.5), (torch.tensor([1, 2, 3]), 2), (torch.tensor([1, 2, 3]), 0.5),
                 (torch.tensor([1.5, 2.0], dtype=torch.float16), 2)):
        want = torch.pow(x, e)
        got = torch.pow(x.to("tpu"), e).cpu()
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
    with pytest.raises(RuntimeError):  # as on the CPU: float result into an int tensor
        torch.tensor([1, 2]).to("tpu").pow_(0.5)
