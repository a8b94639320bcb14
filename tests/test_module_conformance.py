"""PyTorch's ModuleInfo database (torch.testing._internal.common_modules.module_db) on "tpu".

The OpInfo sweep (tests/conformance, `make conformance`) checks ops one by one; a module can
still fail on "tpu" through the path ATen takes for a non-CPU device. nn.LSTM and nn.GRU did:
ATen calls the fused cell kernels for a PrivateUse1 input, kernels PyTorch has for CUDA
only (csrc/torch/rnn_cells.cpp now gives "tpu" its own). Each module here is built from
PyTorch's own sample constructor arguments and inputs, in float64, once on the CPU and once
as a copy on "tpu", in eval and in training mode; its outputs, the gradients of its inputs
and of its parameters (backward of the sum of its floating outputs) must match the CPU's
with torch.testing.assert_close's float64 tolerances (NaN where the CPU has NaN). A third
mode, inference (eval under no_grad, inputs without grad), takes the modules' fused fast
paths (nn.MultiheadAttention, nn.Transformer*: csrc/torch/fastpath.cpp) and compares outputs.

CI runs the slice below (recurrent layers and their cells, attention, convolution, norms,
pools, losses); `make conformance-modules` (TPUC_MODULE_SWEEP=all) runs all of module_db
with every sample input (342 tests, about two minutes cold on 2 cores)."""
from __future__ import annotations

import copy
import os
import subprocess
import sys
from typing import Any, Callable

import pytest
import torch
from torch.testing._internal.common_modules import module_db
from torch.utils._pytree import tree_flatten, tree_map

import tpuc  # noqa: F401

SLICE = [
    "nn.LSTM", "nn.GRU", "nn.RNN", "nn.LSTMCell", "nn.GRUCell", "nn.RNNCell",
    "nn.MultiheadAttention", "nn.TransformerEncoderLayer", "nn.TransformerEncoder", "nn.Conv2d", "nn.ConvTranspose1d",
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


def _check_one(info: Any, sample: Any, training: bool, inference: bool = False) -> None:
    ctor = sample.constructor_input
    torch.manual_seed(0)
    ref = info.module_cls(*ctor.args, **ctor.kwargs).double().train(training)
    args = (sample.forward_input.args, sample.forward_input.kwargs)
    if inference:  # eval under no_grad: the modules' inference fast paths (fastpath.cpp)
        with torch.no_grad():
            if "Lazy" in info.name:
                ref(*tree_map(_mover("cpu"), args)[0], **tree_map(_mover("cpu"), args)[1])
            dev = copy.deepcopy(ref).to("tpu")
        # "tpu" has no nested tensors: its encoder keeps the padded batch, as the CPU's does
        # with enable_nested_tensor=False (padded positions then hold values, not zeros)
        for mod in ref.modules():
            if isinstance(mod, torch.nn.TransformerEncoder):
                mod.use_nested_tensor = False
        with torch.no_grad():
            a_cpu = tree_map(lambda t: _mover("cpu")(t).requires_grad_(False)
                             if isinstance(t, torch.Tensor) else t, args)
            a_tpu = tree_map(lambda t: _mover("tpu")(t).requires_grad_(False)
                             if isinstance(t, torch.Tensor) else t, args)
            torch.manual_seed(1)
            out_cpu = tree_flatten(ref(*a_cpu[0], **a_cpu[1]))[0]
            torch.manual_seed(1)
            out_tpu = tree_flatten(dev(*a_tpu[0], **a_tpu[1]))[0]
        for i, (want, got) in enumerate(zip(out_cpu, out_tpu)):
            if isinstance(want, torch.Tensor):
                assert got.device.type == "tpu", f"output {i} left the device"
                _close(got, want, f"output {i}")
        return
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


# the modules whose inference (eval under no_grad) takes another path than eval: their fused
# fast paths; in the slice only they run the third mode
FAST_PATHS = {"nn.MultiheadAttention", "nn.TransformerEncoderLayer", "nn.TransformerEncoder"}
CASES = [(n, m) for n in NAMES for m in ("eval", "train", "inference")
         if SWEEP or m != "inference" or n in FAST_PATHS]


@pytest.mark.parametrize("name,mode", CASES)
def test_module_matches_the_cpu(name: str, mode: str) -> None:
    info = BY_NAME[name]
    training = mode == "train"
    samples = info.module_inputs_func(info, device="cpu", dtype=torch.float64,
                                      requires_grad=mode != "inference", training=training)
    checked = 0
    for k, sample in enumerate(samples[:MAX_INPUTS]):
        if sample.forward_input is None:
            continue
        try:
            _check_one(info, sample, training, inference=mode == "inference")
        except AssertionError as e:
            raise AssertionError(f"{name} sample {k} ({mode}): {e}") from e
        checked += 1
    assert checked, f"{name}: no sample input was checked"


def test_encoder_with_a_padding_mask_in_inference_keeps_the_padded_batch() -> None:
    """nn.TransformerEncoder in eval under no_grad with a src_key_padding_mask: the CPU packs
    the batch into a nested tensor (padded positions come back as zeros); "tpu" has none, so
    it keeps the padded batch (fastpath.cpp), says so once, and its unpadded positions equal
    the CPU's nested result."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    ref = torch.nn.TransformerEncoder(layer, 2).double().eval()
    dev = copy.deepcopy(ref).to("tpu")
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    with torch.no_grad():
        want = ref(x, src_key_padding_mask=pad)
        got = dev(x.to("tpu"), src_key_padding_mask=pad.to("tpu")).cpu()
    assert torch.equal(want[pad], torch.zeros_like(want[pad]))  # the CPU took the nested path
    torch.testing.assert_close(got[~pad], want[~pad])
    assert got[pad].abs().max() > 0
    # the warning is once per process: a fresh one sees it
    code = ("import torch, warnings\n"
            "m = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 1)\n"
            "m = m.eval().to('tpu')\n"
            "pad = torch.tensor([[False, False, True]], device='tpu')\n"
            "with warnings.catch_warnings(record=True) as w, torch.no_grad():\n"
            "    warnings.simplefilter('always')\n"
            "    m(torch.randn(1, 3, 8, device='tpu'), src_key_padding_mask=pad)\n"
            "print(sum('keeps the padded batch' in str(x.message) for x in w))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "1"
