"""``aten::linalg_matrix_exp`` (``torch.linalg.matrix_exp``, ``torch.matrix_exp``) on the device
"tpu", composed of matrix products the core lowers.

Scaling and squaring with a Taylor polynomial: A is divided by 2^s, where s is the smallest
power keeping the 1-norm of A / 2^s within a bound theta; the degree-19 Taylor polynomial of that
matrix is evaluated with the Paterson-Stockmeyer scheme (X^2, X^3, X^4, then Horner's rule in
X^4: 7 products), and squared s times. theta is chosen so that the series' remainder, in norm
at most theta^20 e^theta / 20!, stays below the unit roundoff: 1.2 for float64 and complex128
(5.2e-17 against 1.1e-16), 3.0 for float32 and complex64 (2.9e-8 against 6.0e-8). PyTorch's
CPU kernel picks its polynomial's degree from the same norm (a Taylor approximation optimised
by Bader, Blanes and Casas); both are accurate to a few units of roundoff times the squarings'
growth, so the two agree to the conformance tolerances, not bit for bit.

s is read on the host, one read per call, as PyTorch's CUDA kernel reads its norms; a batch
squares each matrix its own number of times. A matrix with an inf or a NaN gives NaN
everywhere, as on the CPU. float16 and bfloat16 compute in float32 (PyTorch's CPU kernel gives
infinities for them). The gradient is PyTorch's own (the exponential of a block matrix, which
comes back here). Before, every call ran on the CPU fallback; ``nn.utils.parametrizations.
orthogonal`` calls it at every forward of a square weight. Registered when tpuc registers the
device (python/tpuc/__init__.py); ``TPUC_MATRIX_EXP_KERNEL=0`` leaves it on the fallback."""
from __future__ import annotations

import math
import os
from typing import Optional

import torch
from torch import Tensor

from . import _aten_impl

_lib: Optional[torch.library.Library] = None

DEGREE = 19
THETA = {torch.float64: 1.2, torch.float32: 3.0}


def _taylor(x: Tensor) -> Tensor:
    """sum_{k<=19} x^k / k! for a batch of matrices x, in 7 matrix products."""
    n = x.shape[-1]
    eye = torch.eye(n, dtype=x.dtype, device=x.device)
    x2 = x @ x
    x3 = x2 @ x
    x4 = x2 @ x2
    c = [1.0 / math.factorial(k) for k in range(DEGREE + 1)]

    def block(j: int) -> Tensor:  # c[4j] + c[4j+1] x + c[4j+2] x^2 + c[4j+3] x^3
        return eye * c[4 * j] + x * c[4 * j + 1] + x2 * c[4 * j + 2] + x3 * c[4 * j + 3]

    p = block(4)
    for j in (3, 2, 1, 0):
        p = p @ x4 + block(j)
    return p


def matrix_exp(a: Tensor) -> Tensor:
    if a.dim() < 2:
        raise RuntimeError("linalg.matrix_exp: The input tensor A must have at least 2 dimensions.")
    if a.shape[-1] != a.shape[-2]:
        raise RuntimeError("linalg.matrix_exp: A must be batches of square matrices, but they are "
                           f"{a.shape[-2]} by {a.shape[-1]} matrices")
    if not (a.is_floating_point() or a.is_complex()):
        raise RuntimeError("linalg.matrix_exp: Expected a floating point or complex tensor as "
                           f"input. Got {_aten_impl.scalar_type_name(a.dtype)}")
    if a.numel() == 0:
        return a.clone()
    if a.shape[-1] == 1:
        return a.exp()
    out_dtype = a.dtype
    if a.dtype in (torch.float16, torch.bfloat16):
        a = a.float()
    n = a.shape[-1]
    x = a.reshape(-1, n, n)
    real = torch.float64 if a.dtype in (torch.float64, torch.complex128) else torch.float32
    norm = x.abs().sum(-2).amax(-1).to(real)  # the 1-norm: the largest column sum
    finite = torch.isfinite(norm)
    s = torch.ceil(torch.log2(norm / THETA[real])).clamp_min(0)
    s = torch.where(finite, s, torch.zeros_like(s))
    squarings = int(s.max().item())  # the one host read
    x = x * torch.exp2(-s).to(x.dtype)[:, None, None]  # a power of 2: exact
    e = _taylor(x)
    for k in range(squarings):
        e = torch.where((s > k)[:, None, None], e @ e, e)
    e = torch.where(finite[:, None, None], e, torch.full_like(e, math.nan))
    return e.reshape(a.shape).to(out_dtype)


def register() -> None:
    """Registers the kernel for the device "tpu" (idempotent; not with TPUC_MATRIX_EXP_KERNEL=0)."""
    global _lib
    if _lib is not None or os.environ.get("TPUC_MATRIX_EXP_KERNEL") == "0":
        return
    _lib = _aten_impl.register({"linalg_matrix_exp": matrix_exp})
