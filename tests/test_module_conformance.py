"""PyTorch's ModuleInfo database (torch.testing._internal.common_modules.module_db) on "tpu".

The OpInfo sweep (tests/conformance, `make conformance`) checks ops one by one; a module can
still fail on "tpu" through the path ATen takes for a non-CPU device. nn.LSTM and nn.GRU did:
ATen calls the fused cell kernels for a PrivateUse1 input, kernels PyTorch has for CUDA
only (csrc/torch/rnn_cells.cpp now gives "tpu" its own). Each module here is built from
PyTorch's own sample constructor arguments and inputs, in float64, once on the CPU and once
as a copy on "tpu", in eval and in training mode; its outputs, the gradients of its inputs
and of its parameters (backward of the sum of its floating outputs) must match the CPU's
with torch.testing.assert_close's float64 tolerances (NaN where the CPU has NaN).

CI runs the slice below (recurrent layers and their cells, attention, convolution, norms,
pools, losses); `make conformance-modules` (TPUC_MODULE_SWEEP=all) runs all of module_db,
about a minute cold on 2 cores (228 tests)."""
from __future__ import annotations

import copy
import os
from typing import Any, Callable

import pytest
import torch
from torch.testing._internal.common_modules import module_db
from torch.utils._pytree import tree_flatten, tree_map

import tpuc  # noqa: F401

SLICE = [
    "nn.LSTM", "nn.GRU", "nn.RNN", "nn.LSTMCell", "nn.GRUCell", "nn.RNNCell",
    "nn.MultiheadAttention", "nn.TransformerEncoderLayer", "nn.Conv2d", "nn.ConvTranspose1d",
    "nn.BatchNorm2d", "nn.GroupNorm", "nn.FractionalMaxPool3d", "nn.LPPool2d",
    "nn.CTCLoss", "nn.CrossEntropyLoss", "nn.KLDivLoss", "nn.Embedding",
]
SWEEP = os.environ.get("TPUC_MODULE_SWEEP") == "all"
# sample inputs per module and mode in the slice (module_db has up to a few dozen); all in the sweep
MAX_INPUTS = None if SWEEP else 6

BY_NAME = {m.name: m for m in module_db}
NAMES = sorted(BY_NAME) if SWEEP else SLICE


def _mover(device: str) -> Callable[[Any], Any]:
    def move(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            return t.detach().to(device).requires_grad_(t.requires_grad)
        return t
    return move


def _close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(got.detach().cpu(), want.detach(), equal_nan=True,
                               msg=lambda m: f"{what}: {m}")


def _check_one(info: Any, sample: Any, training: bool) -> None:
    ctor = sample.constructor_input
    torch.manual_seed(0)
    ref = info.module_cls(*ctor.args, **ctor.kwargs).double().train(training)
    args = (sample.forward_input.args, sample.forward_input.kwargs)
    if "Lazy" in info.name:  # the CPU's first call sizes the parameters both copies then share
        with torch.no_grad():
            ref(*tree_map(_mover("cpu"), args)[0], **tree_map(_mover("cpu"), args)[1])
    dev = copy.deepcopy(ref).to("tpu")
    a_cpu, a_tpu = tree_map(_mover("cpu"), args), tree_map(_mover("tpu"), args)
    torch.manual_seed(1)
    out_cpu = tree_flatten(ref(*a_cpu[0], **a_cpu[1]))[0]
    torch.manual_seed(1)
    out_tpu = tree_flatten(dev(*a_tpu[0], **a_tpu[1]))[0]
    assert len(out_cpu) == len(out_tpu)
    for i, (want, got) in enumerate(zip(out_cpu, out_tpu)):
        if isinstance(want, torch.Tensor):
            assert got.device.type == "tpu", f"output {i} left the device"
            _close(got, want, f"output {i}")
    floats = [i for i, t in enumerate(out_cpu)
              if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    if not floats:
        return
    sum(out_cpu[i].sum() for i in floats).backward()
    sum(out_tpu[i].sum() for i in floats).backward()
    for i, (want, got) in enumerate(zip(tree_flatten(a_cpu)[0], tree_flatten(a_tpu)[0])):
        if isinstance(want, torch.Tensor) and want.grad is not None:
            _close(got.grad, want.grad, f"gradient of input {i}")
    for (name, want), got in zip(ref.named_parameters(), dev.parameters()):
        if want.grad is not None:
            _close(got.grad, want.grad, f"gradient of {name}")


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("name", NAMES)
def test_module_matches_the_cpu(name: str, training: bool) -> None:
    info = BY_NAME[name]
    samples = info.module_inputs_func(info, device="cpu", dtype=torch.float64,
                                      requires_grad=True, training=training)
    checked = 0
    for k, sample in enumerate(samples[:MAX_INPUTS]):
        if sample.forward_input is None:
            continue
        try:
            _check_one(info, sample, training)
        except AssertionError as e:
            raise AssertionError(f"{name} sample {k} ({'train' if training else 'eval'}): {e}") from e
        checked += 1
    assert checked, f"{name}: no sample input was checked"
