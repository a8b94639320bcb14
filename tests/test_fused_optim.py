"""Adam(fused=True) / AdamW(fused=True) / SGD(fused=True) run on the device (python/tpuc/fused_optim.py),
matching PyTorch's own fused CPU kernel step for step, in eager modes and in a
compiled whole step, with no CPU fallback."""
from __future__ import annotations

import pytest
import torch

from tpu_testing import assert_same, quiet_fallback_warnings  # noqa: F401


def _fallbacks() -> int:
    return sum(torch.tpu.stats()["fallbacks"].values())


def _train(device: str, opt_cls, steps: int = 5, compile_step: bool = False, **kw):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    model = model.to(device)
    opt = opt_cls(model.parameters(), fused=True, **kw)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 6, generator=g).to(device)
    y = torch.randn(16, 3, generator=g).to(device)

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
    ref_losses, ref_params, ref_opt = _train("cpu", opt_cls, **kw)
    before = _fallbacks()
    with torch.tpu.eager_mode(mode):
        losses, params, opt = _train("tpu", opt_cls, **kw)
    assert _fallbacks() == before
    torch.testing.assert_close(losses, ref_losses, rtol=1e-5, atol=1e-6)
    for p, r in zip(params, ref_params):
        torch.testing.assert_close(p, r, rtol=1e-5, atol=1e-6)
    for s, rs in zip(opt.state.values(), ref_opt.state.values()):
        for k in rs:
            if torch.is_tensor(rs[k]):
                torch.testing.assert_close(s[k].cpu(), rs[k], rtol=1e-5, atol=1e-6)


def test_fused_adamw_in_a_compiled_step() -> None:
    ref_losses, ref_params, _ = _train("cpu", torch.optim.AdamW, lr=1e-2, weight_decay=0.1)
    before = _fallbacks()
    losses, params, _ = _train("tpu", torch.optim.AdamW, compile_step=True, lr=1e-2,
                               weight_decay=0.1)
    assert _fallbacks() == before
    torch.testing.assert_close(losses, ref_losses, rtol=1e-5, atol=1e-6)
    for p, r in zip(params, ref_params):
        torch.testing.assert_close(p, r, rtol=1e-5, atol=1e-6)


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
