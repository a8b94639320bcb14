"""fractional_max_pool2d/3d and their backwards on "tpu" (csrc/core/lower/nn_pool_frac.c):
with the random samples given, the op is deterministic, so values, indices and input gradients
must equal the CPU's exactly (a max picks an element; the backward adds each gradient once
per window that picked it, and with the same samples the same windows pick the same
elements, so the sums are of the same terms in the same order of one or two terms)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

DEV = "tpu"


pytestmark = pytest.mark.usefixtures("tpu_no_fallbacks")  # tests/conftest.py


CASES = [  # (input shape, kernel, output size)
    ((2, 3, 9, 11), (2, 3), (5, 4)),
    ((3, 10, 10), (3, 3), (4, 7)),     # no batch dim
    ((1, 2, 6, 6), (2, 2), (5, 5)),    # overlapping windows
    ((2, 2, 7, 8, 9), (2, 3, 2), (4, 5, 3)),
    ((2, 5, 6, 7), (1, 2, 3), (4, 3, 4)),  # 3-D without a batch dim
]


@pytest.mark.parametrize("shape,kernel,out", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_values_indices_and_grad_equal_the_cpu(shape, kernel, out, dtype) -> None:
    g = torch.Generator().manual_seed(len(shape) * 7 + kernel[0])
    x = torch.randn(*shape, dtype=dtype, generator=g)
    s = len(kernel)
    n = shape[0] if len(shape) == s + 2 else 1
    u = torch.rand(n, shape[-s - 1], s, dtype=dtype, generator=g)
    fn = F.fractional_max_pool2d if s == 2 else F.fractional_max_pool3d
    xc = x.clone().requires_grad_()
    ref, ri = fn(xc, kernel, output_size=out, return_indices=True, _random_samples=u)
    xd = x.to(DEV).requires_grad_()
    got, gi = fn(xd, kernel, output_size=out, return_indices=True, _random_samples=u.to(DEV))
    assert torch.equal(got.detach().cpu(), ref.detach()) and torch.equal(gi.cpu(), ri)
    w = torch.randn(ref.shape, dtype=dtype, generator=g)
    (ref * w).sum().backward()
    (got * w.to(DEV)).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=0, atol=0)


def test_drawn_samples_run_natively() -> None:
    """Without _random_samples the functional draws them on "tpu": still no fallback."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 12, 12, device=DEV)
    y = F.fractional_max_pool2d(x, 3, output_ratio=(0.5, 0.5))
    assert y.shape == (2, 3, 6, 6)
    # every output is one of its plane's inputs
    planes = x.reshape(6, -1).cpu()
    assert all(torch.isin(y.reshape(6, -1)[i].cpu(), planes[i]).all() for i in range(6))
