"""PyTorch's OptimizerInfo database (torch.testing._internal.common_optimizers.optim_db) on "tpu".

Every optimizer with every constructor configuration PyTorch's own tests use (learning rate
as a float or a tensor, weight decay, momentum, Nesterov, amsgrad, maximize, ...), in each
implementation it has (the for-loop default, foreach, and fused where the CPU has a fused
kernel to compare with), trains a small two-layer model for four steps in float64, once on the
CPU and once on "tpu" (strict eager mode; fused mode too for Adam, AdamW and SGD, and for every
optimizer in `make conformance-modules`), its parameters updated in place each step. The parameters after every
step and the optimizer's state at the end must match the CPU's with assert_close's float64
tolerances: float64 shows a slip that float32's rounding would hide (fused Adam's bias
correction was computed in float32 on "tpu"; python/tpuc/fused_optim.py).

SparseAdam is left out: it needs sparse gradients, and sparse ops run on the CPU fallback on
"tpu" (docs/api.md, Limits)."""
from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from torch.testing._internal.common_optimizers import optim_db

import tpuc  # noqa: F401

INFOS = {i.optim_cls.__name__: i for i in optim_db if not i.only_supports_sparse_grads}
STEPS = 4


def _impls(info: Any) -> list[str]:
    impls = ["default"]
    if "foreach" in info.supported_impls:
        impls.append("foreach")
    if "fused" in info.supported_impls and "cpu" in (info.supports_fused_on or ()):
        impls.append("fused")
    if info.has_capturable_arg:  # "tpu" is among the devices PyTorch allows it on
        impls += ["capturable", "capturable-foreach"]
    return impls


def _train(info: Any, kwargs: dict, device: str) -> tuple[list[list[torch.Tensor]], dict]:
    torch.manual_seed(0)
    w1 = torch.randn(5, 4, dtype=torch.float64)
    w2 = torch.randn(3, 5, dtype=torch.float64)
    b = torch.randn(5, dtype=torch.float64)
    muon = info.optim_cls.__name__ == "Muon"  # 2-D parameters only
    params = [t.to(device).requires_grad_() for t in ([w1, w2] if muon else [w1, w2, b])]
    if isinstance(kwargs.get("lr"), torch.Tensor):
        kwargs = dict(kwargs, lr=kwargs["lr"].clone())
    opt = info.optim_cls(params, **kwargs)
    x = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(3, 4).to(device)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        h = x @ params[0].t()
        if not muon:
            h = h + params[2]
        loss = ((h.tanh() @ params[1].t()) ** 2).sum()
        loss.backward()
        return loss

    seen = []
    for _ in range(STEPS):
        if info.step_requires_closure:
            opt.step(closure)
        else:
            closure()
            opt.step()
        seen.append([p.detach().cpu().clone() for p in params])
    state = {(i, k): _to_cpu(v) for i, p in enumerate(params) for k, v in opt.state[p].items()}
    return seen, state


def _to_cpu(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return v.detach().cpu()
    if isinstance(v, (list, tuple)):  # LBFGS keeps lists of tensors (its history)
        return type(v)(_to_cpu(x) for x in v)
    return v


def _assert_same_state(got: Any, want: Any, where: str) -> None:
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want, msg=lambda m: f"{where}: {m}")
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_same_state(g, w, f"{where}[{i}]")
    elif isinstance(want, float):
        torch.testing.assert_close(got, want, msg=lambda m: f"{where}: {m}")
    else:
        assert got == want, where


# fused eager mode for the optimizers most models train with in make test; for every one in
# make conformance-modules (TPUC_MODULE_SWEEP=all)
FUSED_MODE = sorted(INFOS) if os.environ.get("TPUC_MODULE_SWEEP") == "all" else ["Adam", "AdamW", "SGD"]
CASES = [(n, "strict") for n in sorted(INFOS)] + [(n, "fused") for n in FUSED_MODE]


@pytest.mark.parametrize("name,mode", CASES)
def test_optimizer_matches_the_cpu(name: str, mode: str) -> None:
    """Each step's parameters are read back before the next (fused mode's chunks then end
    between steps, with the parameters updated in place)."""
    info = INFOS[name]
    inputs = info.optim_inputs_func(device="cpu", dtype=torch.float64)
    checked = 0
    for k, oi in enumerate(inputs):
        for impl in _impls(info):
            kwargs = dict(oi.kwargs)
            if kwargs.get("capturable"):
                continue  # the CPU refuses it: the capturable impls below set it on "tpu"
            for flag in ("foreach", "fused"):
                if flag in impl:
                    kwargs[flag] = True
            where = f"{name} input {k} ({oi.desc}), {impl}"
            # capturable: the step counts are tensors of the default dtype on the device, and
            # PyTorch's capturable math runs in their dtype (float32 loses 1 - beta2^t to
            # cancellation on any device): float64 makes both sides compute alike
            dtype = torch.get_default_dtype()
            if "capturable" in impl:
                torch.set_default_dtype(torch.float64)
            try:
                want, want_state = _train(info, kwargs, "cpu")
                with torch.tpu.eager_mode(mode):
                    got, got_state = _train(
                        info, dict(kwargs, capturable=True) if "capturable" in impl else kwargs,
                        "tpu")
            finally:
                torch.set_default_dtype(dtype)
            for step, (ws, gs) in enumerate(zip(want, got)):
                assert not any(torch.equal(w, g0) for w, g0 in zip(ws, _train_start(name))), \
                    f"{where}: step {step} changed nothing"
                for i, (w, g) in enumerate(zip(ws, gs)):
                    torch.testing.assert_close(g, w, msg=lambda m: f"{where}: step {step}, "
                                               f"parameter {i}: {m}")
            assert want_state.keys() == got_state.keys(), where
            for key, w in want_state.items():
                _assert_same_state(got_state[key], w, f"{where}: state {key}")
            checked += 1
    assert checked, f"{name}: no configuration was checked"


def _train_start(name: str) -> list[torch.Tensor]:
    """The parameters before any step (as _train draws them)."""
    torch.manual_seed(0)
    w1 = torch.randn(5, 4, dtype=torch.float64)
    w2 = torch.randn(3, 5, dtype=torch.float64)
    b = torch.randn(5, dtype=torch.float64)
    return [w1, w2] if name == "Muon" else [w1, w2, b]
