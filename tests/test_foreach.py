"""_foreach_* ops (torch.optim's default implementations, clip_grad_norm_) run as ONE
program per call in strict mode (csrc/torch/foreach.cpp), with the results of
PyTorch's CPU kernels, and errors raised where the per-tensor op fails."""
from __future__ import annotations

import pytest
import torch

from tpu_testing import assert_same, quiet_fallback_warnings  # noqa: F401


def _lists(n: int = 4, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(3 + i, 5, generator=g) for i in range(n)]


CALLS = {
    "mul_scalar_": lambda a, b: torch._foreach_mul_(a, 1.5),
    "add_list_alpha_": lambda a, b: torch._foreach_add_(a, b, alpha=-0.5),
    "addcdiv_scalarlist_": lambda a, b: torch._foreach_addcdiv_(a, b, b, [0.1, 0.2, 0.3, 0.4]),
    "lerp_": lambda a, b: torch._foreach_lerp_(a, b, 0.25),
    "sqrt_of_abs": lambda a, b: torch._foreach_sqrt(torch._foreach_abs(a)),
    "norm": lambda a, b: torch._foreach_norm(a),
    "maximum": lambda a, b: torch._foreach_maximum(a, b),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_foreach_matches_cpu_in_one_program(name: str) -> None:
    a, b = _lists(seed=1), _lists(seed=2)
    x, y = [t.to("tpu") for t in a], [t.to("tpu") for t in b]
    torch.tpu.synchronize()
    before = torch.tpu.stats()["executions"]
    with torch.tpu.eager_mode("strict"):
        got = CALLS[name](x, y)
    ops = name.count("_of_") + 1  # calls made
    assert torch.tpu.stats()["executions"] - before <= ops
    want = CALLS[name](a, b)
    for t, r in zip(got if got is not None else x, want if want is not None else a):
        assert_same(t, r, rtol=1e-6, atol=1e-6)
    for t, r in zip(x, a):  # in-place ops changed the tpu tensors as the CPU's
        assert_same(t, r, rtol=1e-6, atol=1e-6)


def test_clip_grad_norm_and_adamw_step_launch_few_programs() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(6)]).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    model(torch.randn(4, 8).to("tpu")).sum().backward()
    opt.step()  # the first step creates the optimizer state
    torch.tpu.synchronize()
    before = torch.tpu.stats()["executions"]
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    torch.tpu.synchronize()
    # 12 parameters: one launch per tensor and op would be over 100 (measured: 8 + 6)
    assert torch.tpu.stats()["executions"] - before < 30


def test_error_in_the_list_raises_and_earlier_tensors_are_updated() -> None:
    a = [torch.ones(2, 2), torch.ones(2, 2), torch.ones(3, 3)]
    b = [torch.ones(2, 2), torch.ones(2, 2), torch.ones(2, 2)]
    x, y = [t.to("tpu") for t in a], [t.to("tpu") for t in b]
    with pytest.raises(RuntimeError):
        torch._foreach_add_(x, y)
    with pytest.raises(RuntimeError):
        torch._foreach_add_(a, b)
    for t, r in zip(x, a):
        assert_same(t, r)
    assert_same(x[0] * 1, torch.full((2, 2), 2.0))


def test_large_lists_run_in_bounded_chunks() -> None:
    """A list of more than 64 MiB runs as one program per run of at most 64 MiB
    (csrc/torch/foreach.cpp): the scratch memory of one program over a whole model's
    gradients was 2.25x the list (FLUX's clip_grad_norm_: +2.16 GiB over 0.96 GiB). Values
    are the per-tensor ops', as for a small list; the peak above the inputs stays within a
    chunk's scratch (2.25 x 64 MiB measured, bounded here by the 64 MiB chunk's 3x), not the
    whole list's."""
    n, size = 8, 4 << 20  # eight 16 MiB tensors: 128 MiB, two chunks (one program: ~288 MiB)
    a = [torch.randn(size, generator=torch.Generator().manual_seed(i)) for i in range(n)]
    x = [t.to("tpu") for t in a]
    b = [t * 0.5 for t in a]
    y = [t.to("tpu") for t in b]
    x0, a0 = [t.clone() for t in x], [t.clone() for t in a]
    torch.tpu.synchronize()
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    with torch.tpu.eager_mode("strict"):
        norms = torch._foreach_norm(x)
        torch.tpu.synchronize()
        norm_peak = torch.tpu.max_memory_allocated() - base
        torch._foreach_addcmul_(x, y, y, [0.5] * n)  # a per-tensor scalar list is cut too
        out = torch._foreach_mul(x, 2.0)
    assert len(norms) == n and len(out) == n
    for t, xt, r in zip(norms, x0, a0):
        # chunking keeps each tensor's op: equal to the norm of that tensor alone, bit for bit
        assert torch.equal(t.cpu(), torch._foreach_norm([xt])[0].cpu())
        # and a float32 sum of `size` squares: within size * eps32 of the float64 norm
        ref = r.double().norm()
        assert abs(t.cpu().double() - ref) <= size * 2.0**-24 * ref
    torch._foreach_addcmul_(a, b, b, [0.5] * n)
    for t, r, o in zip(x, a, out):
        assert_same(t, r, rtol=1e-6, atol=1e-6)
        assert_same(o, r * 2.0, rtol=1e-6, atol=1e-6)
    chunk = 64 << 20
    assert norm_peak <= 3 * chunk + (1 << 20), norm_peak / 2**20
