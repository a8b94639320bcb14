"""PyTorch's device-generic test machinery on "tpu" (`make conformance-upstream`).

`instantiate_device_type_tests(..., only_for="tpu")` builds TestTPUOpsTPU from the class
below through PyTorch's PrivateUse1TestBase, and `@ops` parametrizes it over a small
subset of op_db in float32, exactly as test_ops.py's device-generic tests are built; the
test bodies are this project's, written in that style:
- test_compare_cpu: samples made on "tpu" by the OpInfo's own sample_inputs (so factory
  ops and make_tensor run on the device), results against the same samples on the CPU,
  with PyTorch's TestCase.assertEqual (its dtype-aware tolerances);
- test_noncontiguous_samples: the op on non-contiguous copies of its inputs equals the op
  on contiguous ones, on the device (strided views through tpuc's storage model).
Run by pytest on this file; not part of `make test` (it is slower and optional)."""
from __future__ import annotations

import itertools
import os
import warnings
from typing import Any

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase

os.environ.setdefault("TPUC_FALLBACK", "silent")
warnings.filterwarnings("ignore", message="tpuc: .* has no lowering")

SUBSET = {
    "add", "mul", "sub", "div", "neg", "exp", "log", "sqrt", "rsqrt", "pow", "tanh", "sigmoid",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.relu", "softmax", "log_softmax",
    "nn.functional.layer_norm", "nn.functional.rms_norm", "nn.functional.embedding",
    "nn.functional.linear", "matmul", "mm", "bmm", "addmm", "sum", "mean", "amax", "var",
    "transpose", "permute", "reshape", "cat", "stack", "where", "masked_fill", "tril", "triu",
    "index_select", "gather", "clamp",
}
OPS = [op for op in op_db if op.name in SUBSET]
MAX_SAMPLES = 4


def _to_cpu(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(_to_cpu(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_cpu(v) for k, v in x.items()}
    return x


class TestTPUOps(TestCase):
    @ops(OPS, allowed_dtypes=(torch.float32,))
    def test_compare_cpu(self, device: str, dtype: torch.dtype, op: Any) -> None:
        for sample in itertools.islice(op.sample_inputs(device, dtype), MAX_SAMPLES):
            self.assertEqual(torch.device(device).type, "tpu")
            cpu = sample.transform(_to_cpu)
            actual = op(sample.input, *sample.args, **sample.kwargs)
            expected = op(cpu.input, *cpu.args, **cpu.kwargs)
            self.assertEqual(_to_cpu(actual), expected)

    @ops(OPS, allowed_dtypes=(torch.float32,))
    def test_noncontiguous_samples(self, device: str, dtype: torch.dtype, op: Any) -> None:
        for sample in itertools.islice(op.sample_inputs(device, dtype), MAX_SAMPLES):
            nc = sample.noncontiguous()
            expected = op(sample.input, *sample.args, **sample.kwargs)
            actual = op(nc.input, *nc.args, **nc.kwargs)
            self.assertEqual(_to_cpu(actual), _to_cpu(expected))


instantiate_device_type_tests(TestTPUOps, globals(), only_for="tpu")
