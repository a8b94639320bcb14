"""Weight normalization on "tpu" (python/tpuc/weight_norm.py): the fused kernels
``_weight_norm_interface`` and its backward match PyTorch's CPU kernels (float64 exactly up to
rounding, float32 and bfloat16 as accurately as the CPU against a float64 reference), weight-
normalized layers train as on the CPU step for step, a double backward works, and nothing falls
back to the CPU. TPUC_WEIGHT_NORM_KERNELS=0 (the CPU fallback) trains to the same values."""
from __future__ import annotations

import pytest
import torch

from tpu_testing import (assert_as_accurate, assert_runs_as_on_the_cpu, fallback_counts,
                         kernels_on_and_off, new_fallbacks)

# the old hook API is a user's code we run as it is, deprecation and all
pytestmark = pytest.mark.filterwarnings("ignore:`torch.nn.utils.weight_norm` is deprecated")
MODES = ("strict", "fused")
OPS = ("aten::_weight_norm_interface", "aten::_weight_norm_interface_backward")
SHAPES = [((8, 4, 3), 0), ((8, 4, 3), 2), ((5, 7), 0), ((5, 7), 1), ((6,), 0)]


def _g_shape(shape: tuple, dim: int) -> list[int]:
    dim = dim % len(shape)
    return [s if i == dim else 1 for i, s in enumerate(shape)]


def _inputs(shape: tuple, dim: int, dtype: torch.dtype) -> tuple:
    gen = torch.Generator().manual_seed(len(shape) * 10 + dim)
    v = torch.randn(shape, generator=gen, dtype=torch.float64)
    g = torch.rand(_g_shape(shape, dim), generator=gen, dtype=torch.float64) + 0.5
    grad_w = torch.randn(shape, generator=gen, dtype=torch.float64)
    return v.to(dtype), g.to(dtype), grad_w.to(dtype)


def _both(v, g, grad_w, dim, device: str) -> list[torch.Tensor]:
    v, g, grad_w = v.to(device), g.to(device), grad_w.to(device)
    w, norms = torch._weight_norm_interface(v, g, dim)
    gv, gg = torch.ops.aten._weight_norm_interface_backward(grad_w, v, g, norms, dim)
    return [t.cpu() for t in (w, norms, gv, gg)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape,dim", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_kernels_match_the_cpu(mode: str, shape: tuple, dim: int, dtype: torch.dtype) -> None:
    v, g, grad_w = _inputs(shape, dim, dtype)
    exact = _both(v.double(), g.double(), grad_w.double(), dim, "cpu")
    cpu = _both(v, g, grad_w, dim, "cpu")
    before = fallback_counts()
    with torch.tpu.eager_mode(mode):
        tpu = _both(v, g, grad_w, dim, "tpu")
    assert not [k for k in new_fallbacks(before) if k in OPS]
    for name, t, c, e in zip(("w", "norms", "grad_v", "grad_g"), tpu, cpu, exact):
        assert t.dtype == c.dtype and t.shape == c.shape, name
        if dtype == torch.float64:  # both sides nearly exact: a few roundoffs of the result
            torch.testing.assert_close(t, c, rtol=1e-13, atol=1e-13, msg=name)
        else:
            assert_as_accurate(t, c, e)


def _model() -> torch.nn.Module:
    """A HiFi-GAN-like stack: weight-normalized convolutions (the old hook API, dim 0) and a
    linear layer through the parametrization API with the norm along the last dim."""
    torch.manual_seed(0)
    conv1 = torch.nn.utils.weight_norm(torch.nn.Conv1d(3, 6, 5, padding=2))
    conv2 = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(6, 4, 3, padding=1))
    lin = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(4, 2), dim=1)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.conv2, self.lin = conv1, conv2, lin

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.nn.functional.leaky_relu(self.conv1(x), 0.1)
            h = torch.nn.functional.leaky_relu(self.conv2(h), 0.1)
            return self.lin(h.transpose(1, 2))

    return Net()


def _train(device: str, steps: int = 5) -> list[torch.Tensor]:
    model = _model().to(device, torch.float64)
    opt = torch.optim.AdamW(model.parameters(), lr=0.02)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 16, generator=gen, dtype=torch.float64).to(device)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        y = model(x)
        loss = y.pow(2).mean()
        loss.backward()
        opt.step()
        out.append(loss.detach().cpu().reshape(1))
    return out + [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("mode", MODES)
def test_weight_normalized_layers_train_as_on_the_cpu(mode: str) -> None:
    """float64 on both sides: 1e-10 relative; a stale g or v (a wrong gradient) is off by
    the learning rate's order (2e-2)."""
    assert_runs_as_on_the_cpu(_train, mode, rtol=1e-10, atol=1e-12)


def test_double_backward_through_weight_norm() -> None:
    """A gradient penalty (create_graph=True) takes PyTorch's differentiable backward."""
    def penalty(device: str) -> list[torch.Tensor]:
        lin = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(4, 3))
        lin = lin.to(device, torch.float64)
        x = torch.linspace(-1, 1, 20, dtype=torch.float64).reshape(5, 4).to(device)
        x.requires_grad_(True)
        (gx,) = torch.autograd.grad(lin(x).tanh().sum(), x, create_graph=True)
        gx.pow(2).sum().backward()
        return [p.grad.cpu() for p in lin.parameters()]

    torch.manual_seed(0)
    ref = penalty("cpu")
    torch.manual_seed(0)
    for a, b in zip(penalty("tpu"), ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_the_switch_gives_the_fallback_and_the_same_training(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """TPUC_WEIGHT_NORM_KERNELS=0 leaves both ops to the CPU fallback; the run trains to the
    same values (float64; the two sum in different orders, so within 1e-12, not bit for bit)."""
    on, off = kernels_on_and_off("TPUC_WEIGHT_NORM_KERNELS", "test_weight_norm", "_train('tpu')",
                                 OPS, str(tmp_path), globals())
    for a, b in zip(on, off):  # type: ignore[call-overload]
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
