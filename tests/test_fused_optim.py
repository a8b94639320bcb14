"""Adam(fused=True) / AdamW(fused=True) / SGD(fused=True) run on the device (python/tpuc/fused_optim.py),
matching PyTorch's own fused CPU kernel step for step, in eager modes and in a
compiled whole step, with no CPU fallback."""
from __future__ import annotations

import pytest
import torch

from tpu_testing import assert_as_accurate, assert_same, quiet_fallback_warnings  # noqa: F401


def _fallbacks() -> int:
    return sum(torch.tpu.stats()["fallbacks"].values())


def _train(device: str, opt_cls, steps: int = 5, compile_step: bool = False,
           dtype: torch.dtype = torch.float32, **kw):
    """dtype float64 (on the CPU): the exact reference the float32 runs are measured against."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    model = model.to(device, dtype)
    if torch.is_tensor(kw.get("lr")):
        kw = dict(kw, lr=kw["lr"].to(dtype))
    opt = opt_cls(model.parameters(), fused=True, **kw)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 6, generator=g).to(device, dtype)
    y = torch.randn(16, 3, generator=g).to(device, dtype)

    def step():
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    if compile_step:
        step = torch.compile(step, backend="tpu")
    losses = [step().item() for _ in range(steps)]
    return losses, [p.detach().cpu() for p in model.parameters()], opt


CASES = {
    "adamw": (torch.optim.AdamW, {"lr": 1e-2, "weight_decay": 0.1}),
    "adam_l2": (torch.optim.Adam, {"lr": 1e-2, "weight_decay": 0.1}),
    "amsgrad": (torch.optim.AdamW, {"lr": 1e-2, "amsgrad": True}),
    "maximize": (torch.optim.Adam, {"lr": 1e-2, "maximize": True}),
    "tensor_lr": (torch.optim.AdamW, {"lr": torch.tensor(1e-2), "betas": (0.8, 0.95)}),
    "sgd_plain": (torch.optim.SGD, {"lr": 0.05}),
    "sgd_momentum_wd": (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "dampening": 0.1,
                                          "weight_decay": 0.01}),
    "sgd_nesterov_max": (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "nesterov": True,
                                           "maximize": True}),
}


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("case", list(CASES))
def test_fused_adam_matches_cpu(case: str, mode: str) -> None:
    opt_cls, kw = CASES[case]
    exact = _train("cpu", opt_cls, dtype=torch.float64, **kw)
    ref = _train("cpu", opt_cls, **kw)
    before = _fallbacks()
    with torch.tpu.eager_mode(mode):
        got = _train("tpu", opt_cls, **kw)
    assert _fallbacks() == before
    _assert_runs_agree(got, ref, exact)


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("case", ["adamw", "adam_l2", "amsgrad", "tensor_lr"])
def test_fused_adam_in_float64_follows_the_cpus_float64_kernel(case: str, mode: str) -> None:
    """float64 parameters: the update follows PyTorch's CPU kernel to float64 rounding. The
    bias correction 1 - beta2^t was computed in float32 as beta2^t - 1 (1.3e-5 relative at
    t = 1 by cancellation): every update was off by ~7e-6 of lr, 10^8 float64 ulps."""
    opt_cls, kw = CASES[case]
    exact = _train("cpu", opt_cls, dtype=torch.float64, **kw)
    with torch.tpu.eager_mode(mode):
        got = _train("tpu", opt_cls, dtype=torch.float64, **kw)
    eps = torch.finfo(torch.float64).eps
    # float64 on both sides: only the order of roundings differs (5 steps of ~20 ops)
    for p, e in zip(got[1], exact[1]):
        assert p.dtype == torch.float64
        assert ((p - e).abs() <= 1000 * eps * e.abs().clamp(min=1)).all(), (p - e).abs().max()


def _assert_runs_agree(got, ref, exact) -> None:
    """Losses, parameters and optimizer state of a tpu run as accurate as the CPU's
    float32 run, both measured against the CPU's float64 run."""
    assert_as_accurate(torch.tensor(got[0]), torch.tensor(ref[0]), torch.tensor(exact[0],
                       dtype=torch.float64))
    for p, r, e in zip(got[1], ref[1], exact[1]):
        assert p.dtype == r.dtype
        assert_as_accurate(p, r, e)
    for s, rs, es in zip(got[2].state.values(), ref[2].state.values(), exact[2].state.values()):
        for k in rs:
            if torch.is_tensor(rs[k]):
                assert s[k].device.type == "tpu" and s[k].dtype == rs[k].dtype
                assert_as_accurate(s[k], rs[k], es[k])


def test_fused_adamw_in_a_compiled_step() -> None:
    kw = dict(lr=1e-2, weight_decay=0.1)
    exact = _train("cpu", torch.optim.AdamW, dtype=torch.float64, **kw)
    ref = _train("cpu", torch.optim.AdamW, **kw)
    before = _fallbacks()
    got = _train("tpu", torch.optim.AdamW, compile_step=True, **kw)
    assert _fallbacks() == before
    _assert_runs_agree(got, ref, exact)


@pytest.mark.parametrize("found_inf", [0.0, 1.0])
def test_grad_scale_and_found_inf(found_inf: float) -> None:
    """The op as GradScaler calls it: gradients divided by the scale and written back
    unscaled; found_inf == 1 leaves every tensor as it was."""
    g = torch.Generator().manual_seed(2)
    lists = [[torch.randn(5, 4, generator=g) for _ in range(3)] for _ in range(5)]
    lists[3] = [t.abs() for t in lists[3]]  # exp_avg_sq >= 0
    lists[4] = [t.abs() for t in lists[4]]  # max_exp_avg_sq >= 0
    steps = [torch.tensor(float(i + 1)) for i in range(3)]
    kw = dict(lr=1e-2, beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=True,
              maximize=False)
    ref = [[t.clone() for t in lst] for lst in lists]
    torch._fused_adamw_(*ref, steps, grad_scale=torch.tensor(4.0),
                        found_inf=torch.tensor(found_inf), **kw)
    dev = [[t.to("tpu") for t in lst] for lst in lists]
    before = _fallbacks()
    torch._fused_adamw_(*dev, [s.to("tpu") for s in steps], grad_scale=torch.tensor(4.0).to("tpu"),
                        found_inf=torch.tensor(found_inf).to("tpu"), **kw)
    assert _fallbacks() == before
    for lst, rlst in zip(dev, ref):
        for t, r in zip(lst, rlst):
            assert_same(t, r, rtol=1e-5, atol=1e-6)
    if found_inf == 1.0:
        for lst, orig in zip(dev, lists):
            for t, o in zip(lst, orig):
                assert_same(t, o)


@pytest.mark.parametrize("case", ["adamw", "amsgrad", "sgd_momentum_wd"])
def test_chunked_update_matches_cpu(case: str, monkeypatch) -> None:
    """The in-place kernels update the parameters in chunks of bounded bytes (the temporaries
    of a whole-model update were ~10x the parameters' bytes); with a chunk smaller than one
    parameter every parameter is its own chunk: the same results as the CPU kernel."""
    import tpuc.fused_optim as fo

    monkeypatch.setattr(fo, "_CHUNK_BYTES", 64)  # 16 floats: the 6x8 weight is a chunk alone
    chunks = fo._chunks(([torch.zeros(48), torch.zeros(8), torch.zeros(3)], [], [1, 2, 3]))
    assert [len(c[0]) for c in chunks] == [1, 2] and all(c[1] == [] for c in chunks)
    opt_cls, kw = CASES[case]
    exact = _train("cpu", opt_cls, dtype=torch.float64, **kw)
    ref = _train("cpu", opt_cls, **kw)
    before = _fallbacks()
    got = _train("tpu", opt_cls, **kw)
    assert _fallbacks() == before
    _assert_runs_agree(got, ref, exact)


def test_fused_adamw_step_is_one_program_in_strict_mode() -> None:
    """In strict mode the fused kernel's math (about 15 foreach ops) runs as one fused program,
    a single pass over the parameters like PyTorch's CPU kernel; one program per foreach op
    read and wrote every list ~15 times (qwen3 debugmodel's AdamW step: ~3x the CPU kernel's
    time). Its values stay within test_fused_adam_matches_cpu's bounds of the CPU kernel."""
    with torch.tpu.eager_mode("strict"):
        launched = _adamw_step_launches()
    # PyTorch's own _foreach_add_ of the step counts, then the whole update
    assert launched <= 2, launched


def _adamw_step_launches() -> int:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), fused=True, lr=1e-2, weight_decay=0.1)
    x = torch.randn(16, 6, device="tpu")
    for _ in range(3):  # the last one is timed: programs compiled, state created
        model(x).square().mean().backward()
        torch.tpu.synchronize()
        before = torch.tpu.stats()["executions"]
        opt.step()
        torch.tpu.synchronize()
        launched = torch.tpu.stats()["executions"] - before
        opt.zero_grad()
    assert torch.tpu.get_eager_mode() == "strict"  # the kernel restored the mode
    return launched
