"""torch._grouped_mm on "tpu" takes what the CPU kernel takes: float32 inputs
(Hugging Face's MoE experts in float32 call it through F.grouped_mm).
PyTorch's Meta kernel states CUDA's rules (bf16 only, 16-byte aligned
strides); tpuc computes the output metadata itself (csrc/torch/native.cpp,
grouped_mm_meta) and the core lowers the op whole. Sizes keep the CPU
kernel's own rule (16-byte aligned rows) so that it can be the reference."""
from __future__ import annotations

import pytest
import torch

import tpuc  # noqa: F401

EPS32 = torch.finfo(torch.float32).eps


def _bound(ref64: torch.Tensor, cpu: torch.Tensor) -> float:
    # "tpu" may round differently from the CPU: allow 4x the CPU's own error
    # against float64 plus a few ulps of the result's magnitude.
    return 4 * (cpu.double() - ref64).abs().max().item() + 16 * EPS32 * ref64.abs().max().item()


def _ref(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None) -> torch.Tensor:
    """The grouped product by its definition, group by group (any dtype;
    the CPU's _grouped_mm has no float64 kernel)."""
    if offs is None:
        return a @ b
    ends = offs.tolist()
    starts = [0] + ends[:-1]
    if a.dim() == 2 and b.dim() == 3:  # row groups, one weight each
        out = a.new_zeros(a.shape[0], b.shape[-1])
        for i, (s, e) in enumerate(zip(starts, ends)):
            out[s:e] = a[s:e] @ b[i]
        return out
    if a.dim() == 2 and b.dim() == 2:  # K groups: one product per group
        return torch.stack([a[:, s:e] @ b[s:e] for s, e in zip(starts, ends)])
    out = a.new_zeros(a.shape[1], b.shape[-1])  # 3d x 2d: N groups
    for i, (s, e) in enumerate(zip(starts, ends)):
        out[:, s:e] = a[i] @ b[:, s:e]
    return out


def _forms() -> list[tuple[str, list[int], list[int], list[int] | None]]:
    return [
        ("2d x 3d", [7, 8], [3, 8, 12], [2, 2, 7]),   # rows grouped; group 1 empty
        ("3d x 3d", [3, 5, 8], [3, 8, 12], None),     # batched
        ("2d x 2d", [4, 12], [12, 8], [4, 4, 12]),    # K grouped (weight gradients)
        ("3d x 2d", [3, 5, 8], [8, 12], [4, 8, 12]),  # N grouped (runs on the CPU: not lowered)
    ]


@pytest.mark.parametrize("form", _forms(), ids=lambda f: f[0])
def test_grouped_mm_float32_unaligned_matches_cpu(form) -> None:
    _, sa, sb, offs = form
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(sa, generator=g), torch.randn(sb, generator=g)
    o = None if offs is None else torch.tensor(offs, dtype=torch.int32)
    cpu = torch._grouped_mm(a, b, offs=o)
    ref = _ref(a.double(), b.double(), o)
    dev = torch._grouped_mm(a.to("tpu"), b.to("tpu"), offs=None if o is None else o.to("tpu"))
    assert dev.dtype == torch.float32 and dev.shape == cpu.shape
    assert (dev.cpu().double() - ref).abs().max().item() <= _bound(ref, cpu)


def test_grouped_mm_float32_gradients_match_cpu() -> None:
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(7, 8, generator=g), torch.randn(3, 8, 12, generator=g)
    o = torch.tensor([2, 2, 7], dtype=torch.int32)
    grads = {}
    for name, dev, dt in (("cpu", "cpu", torch.float32), ("f64", "cpu", torch.float64),
                          ("tpu", "tpu", torch.float32)):
        x = a.to(dev, dt).detach().requires_grad_()
        w = b.to(dev, dt).detach().requires_grad_()
        fn = _ref if dt == torch.float64 else torch._grouped_mm
        fn(x, w, offs=o.to(dev)).square().sum().backward()
        grads[name] = (x.grad.cpu(), w.grad.cpu())
    for i in range(2):
        ref, cpu, tpu = grads["f64"][i], grads["cpu"][i], grads["tpu"][i]
        assert (tpu.double() - ref).abs().max().item() <= _bound(ref, cpu)


def test_grouped_mm_keeps_pytorch_errors() -> None:
    a, b = torch.randn(4, 8, device="tpu"), torch.randn(3, 12, 4, device="tpu")
    with pytest.raises(RuntimeError, match="contraction dimension"):
        torch._grouped_mm(a, b, offs=torch.tensor([1, 2, 4], dtype=torch.int32, device="tpu"))
    with pytest.raises(RuntimeError, match="int32"):
        torch._grouped_mm(a, torch.randn(3, 8, 4, device="tpu"),
                          offs=torch.tensor([1, 2, 4], device="tpu"))
