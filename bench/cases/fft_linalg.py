"""The FFT and factorisation lowerings (lower/fft.c, lower/linalg.c, linalg_lu.c, linalg_qr.c,
linalg_eig.c), and grid_sample's (lower/nn_grid.c), against the CPU fallback they replaced.

Side by side in one process, interleaved: each op with the op engine on (its lowering
runs on the device) and with every op forced through the CPU fallback
(tpuc._C._set_native_enabled(False), as TPUC_NATIVE=0 does), which is how these ops ran
before they had a lowering: the inputs copied to the host, PyTorch's CPU kernel (pocketfft,
LAPACK), the result copied back. Cases: a batch of 4096-point FFTs (rfft and complex
fft), a 512x512 Cholesky factorisation and a 512x512 triangular solve with 512 right-hand
sides; the decompositions written out of elementwise ops: a 512 x 512 solve (LU, 512
right-hand sides) and QR (column steps in one stablehlo.while, lower/linalg_steps.c), and
in a batch of 64 a 32 x 32 solve, a 16 x 16 QR (their old unroll caps; now loops too) and
an 8 x 8 eigh and SVD (unrolled, capped in size: docs/op_coverage.md) (quick: 16 x 16
solve, 8 x 8 QR, batch 16); a bilinear grid_sample
of an 8 x 16 x 128 x 128 input at an 8 x 128 x 128 grid (quick: batch 2, 64 x 64); a bicubic
2x upsample of the same input (lower/upsample.c). Ratios of medians (fallback / native: > 1 is the lowering faster); never asserted.
On the XLA CPU plugin both paths run on the same cores, so the ratio measures the round
trip and the two libraries, not what a TPU gains (there the fallback also crosses PCIe)."""
from __future__ import annotations

import torch

from ..timing import interleave
from .common import sync, tpu_available

COMMAND = "python -m bench.run --cases fft_linalg"


def _cases(quick: bool):
    g = torch.Generator().manual_seed(0)
    batch = 16 if quick else 64
    x = torch.randn(batch, 4096, generator=g).to("tpu")
    z = torch.randn(batch, 4096, dtype=torch.complex64, generator=g).to("tpu")
    n = 512
    m = torch.randn(n, n, generator=g)
    spd = (m @ m.T / n + torch.eye(n)).to("tpu")
    tri = (torch.randn(n, n, generator=g) / n).tril() + 2 * torch.eye(n)
    tri, rhs = tri.to("tpu"), torch.randn(n, n, generator=g).to("tpu")
    a_big = torch.randn(n, n, generator=g).to("tpu")
    nb, lu_n, qr_n, eig_n = (16, 16, 8, 8) if quick else (64, 32, 16, 8)
    a_lu = (torch.randn(nb, lu_n, lu_n, generator=g) + lu_n * torch.eye(lu_n)).to("tpu")
    b_lu = torch.randn(nb, lu_n, lu_n, generator=g).to("tpu")
    a_qr = torch.randn(nb, qr_n, qr_n, generator=g).to("tpu")
    s_eig = torch.randn(nb, eig_n, eig_n, generator=g)
    s_eig = (s_eig + s_eig.mT).to("tpu")
    a_svd = torch.randn(nb, eig_n, eig_n, generator=g).to("tpu")
    gb, gs = (2, 64) if quick else (8, 128)
    img = torch.randn(gb, 16, gs, gs, generator=g).to("tpu")
    grid = (torch.rand(gb, gs, gs, 2, generator=g) * 2.2 - 1.1).to("tpu")
    return [
        (f"rfft, {batch} x 4096 f32", lambda: torch.fft.rfft(x)),
        (f"fft, {batch} x 4096 complex64", lambda: torch.fft.fft(z)),
        ("cholesky, 512 x 512 f32", lambda: torch.linalg.cholesky_ex(spd)[0]),
        ("solve_triangular, 512 x 512, 512 rhs f32",
         lambda: torch.linalg.solve_triangular(tri, rhs, upper=False)),
        ("solve (LU), 512 x 512, 512 rhs f32", lambda: torch.linalg.solve(a_big, rhs)),
        ("qr, 512 x 512 f32", lambda: torch.linalg.qr(a_big)[1]),
        (f"solve (LU), {nb} x {lu_n} x {lu_n}, {lu_n} rhs f32", lambda: torch.linalg.solve(a_lu, b_lu)),
        (f"qr, {nb} x {qr_n} x {qr_n} f32", lambda: torch.linalg.qr(a_qr)[1]),
        (f"eigh, {nb} x {eig_n} x {eig_n} f32", lambda: torch.linalg.eigh(s_eig)[0]),
        (f"svd, {nb} x {eig_n} x {eig_n} f32", lambda: torch.linalg.svd(a_svd)[1]),
        (f"grid_sample bilinear, {gb} x 16 x {gs} x {gs} f32",
         lambda: torch.nn.functional.grid_sample(img, grid, align_corners=False)),
        (f"upsample bicubic 2x, {gb} x 16 x {gs} x {gs} f32",
         lambda: torch.nn.functional.interpolate(img, scale_factor=2, mode="bicubic",
                                                 align_corners=False)),
    ]


def _timed(fn, native: bool, reps: int):
    from tpuc import _C

    def run():
        before = _C._native_enabled()
        _C._set_native_enabled(native)
        try:
            for _ in range(reps):
                fn()
            sync("tpu")
        finally:
            _C._set_native_enabled(before)

    return run


def run(quick: bool) -> dict:
    title = "FFT and factorisations: native lowering vs the CPU fallback"
    if not tpu_available():
        return {"title": title, "command": COMMAND, "rows": [], "error": "no tpu device"}
    repeats, reps = (3, 3) if quick else (9, 10)
    rows = []
    for name, fn in _cases(quick):
        res = interleave({"native": _timed(fn, True, reps), "fallback": _timed(fn, False, reps)}, repeats)
        nat, fb = res["native"].summary(1e3 / reps), res["fallback"].summary(1e3 / reps)
        rows.append({"workload": name, "unit": "ms/call", "native": nat, "fallback": fb,
                     "ratio": fb["median"] / nat["median"]})
    return {"title": title, "command": COMMAND, "rows": rows,
            "notes": "medians [min, max] of interleaved repetitions in one process; ratio = "
                     "fallback / native (> 1: the lowering is faster)."}
