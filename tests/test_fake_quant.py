"""Quantization-aware training's fake-quantize kernels on "tpu" (python/tpuc/fake_quant.py): each
equals PyTorch's CPU kernel bit for bit (outputs, masks, and the fused observer's running
statistics, scale and zero point), NaN, infinities and ties included; QAT with the default
qconfig runs with nothing on the fallback; and TPUC_FAKE_QUANT_KERNELS=0 (the CPU fallback)
trains bit for bit the same."""
from __future__ import annotations

import math

import pytest
import torch

from tpu_testing import fallback_counts, kernels_on_and_off, new_fallbacks

A = torch.ops.aten
MODES = ("strict", "fused")
OPS = ("aten::fake_quantize_per_tensor_affine_cachemask",
       "aten::_fake_quantize_per_tensor_affine_cachemask_tensor_qparams",
       "aten::fake_quantize_per_channel_affine_cachemask", "aten::_fused_moving_avg_obs_fq_helper")
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def _values(scale: float, zp: int, n: int = 64) -> torch.Tensor:
    """Random values over and beyond the range, exact ties (k + 0.5) * scale, NaN and +-inf."""
    g = torch.Generator().manual_seed(int(scale * 1e6) + zp)
    x = torch.randn(n, generator=g, dtype=torch.float64) * 150 * scale
    ties = (torch.arange(-6, 6, dtype=torch.float64) + 0.5 - zp) * scale
    special = torch.tensor([math.nan, math.inf, -math.inf, 0.0, -0.0])
    return torch.cat([x, ties, special.double()])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale,zp,qmin,qmax", [(0.1, 0, -128, 127), (1 / 3, 3, 0, 255),
                                                (2.0 ** -5, -2, -8, 7)])
def test_per_tensor_bit_for_bit(mode: str, dtype: torch.dtype, scale: float, zp: int,
                                qmin: int, qmax: int) -> None:
    x = _values(scale, zp).to(dtype)
    want = A.fake_quantize_per_tensor_affine_cachemask(x, scale, zp, qmin, qmax)
    before = fallback_counts()
    with torch.tpu.eager_mode(mode):
        got = A.fake_quantize_per_tensor_affine_cachemask(x.to("tpu"), scale, zp, qmin, qmax)
        for enabled in (1, 0):
            args = (torch.tensor([scale]), torch.tensor([zp], dtype=torch.int32),
                    torch.tensor([enabled]), qmin, qmax)
            want_t = A._fake_quantize_per_tensor_affine_cachemask_tensor_qparams(x, *args)
            got_t = A._fake_quantize_per_tensor_affine_cachemask_tensor_qparams(
                x.to("tpu"), *(a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args))
            for g, w in zip(got_t, want_t):
                _same(g, w)
    assert not new_fallbacks(before)
    for g, w in zip(got, want):
        _same(g, w)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("zp_dtype", [torch.int32, torch.float32])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_per_channel_bit_for_bit(mode: str, dtype: torch.dtype, zp_dtype: torch.dtype,
                                 axis: int) -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 5, 4, generator=g, dtype=torch.float64) * 3
    x[0, 0, 0], x[1, 1, 1], x[2, 2, 2] = math.nan, math.inf, -math.inf
    x = x.to(dtype)
    n = x.shape[axis]
    scale = torch.rand(n, generator=g) * 0.05 + 0.01
    zp = (torch.arange(n) % 5 - 2).to(zp_dtype)
    if zp_dtype.is_floating_point:
        zp = zp + 0.25  # a fractional zero point takes the other formula
    want = A.fake_quantize_per_channel_affine_cachemask(x, scale, zp, axis, -128, 127)
    before = fallback_counts()
    with torch.tpu.eager_mode(mode):
        got = A.fake_quantize_per_channel_affine_cachemask(x.to("tpu"), scale.to("tpu"),
                                                           zp.to("tpu"), axis, -128, 127)
    assert not new_fallbacks(before)
    for gt, w in zip(got, want):
        _same(gt, w)


def test_errors_as_on_the_cpu() -> None:
    x = torch.randn(4, 3)
    s, z = torch.full((3,), 0.1), torch.zeros(3, dtype=torch.int32)
    calls = [
        lambda d: A.fake_quantize_per_tensor_affine_cachemask(x.to(d), 0.1, 0, 5, 2),
        lambda d: A.fake_quantize_per_tensor_affine_cachemask(x.to(d), 0.1, 9, -8, 7),
        lambda d: A.fake_quantize_per_channel_affine_cachemask(x.to(d), s.to(d), z.long().to(d), 1, -8, 7),
        lambda d: A.fake_quantize_per_channel_affine_cachemask(x.to(d), s.double().to(d), z.to(d), 1, -8, 7),
        lambda d: A.fake_quantize_per_channel_affine_cachemask(x.to(d), s[:2].to(d), z.to(d), 1, -8, 7),
        lambda d: A.fake_quantize_per_channel_affine_cachemask(x.to(d), s.to(d), z.to(d), -1, -8, 7),
    ]
    for call in calls:
        with pytest.raises(RuntimeError) as cpu_error:
            call("cpu")
        with pytest.raises(RuntimeError) as tpu_error:
            call("tpu")
        assert str(tpu_error.value) == str(cpu_error.value)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("per_row", [False, True])
@pytest.mark.parametrize("symmetric", [False, True])
def test_fused_observer_bit_for_bit(mode: str, per_row: bool, symmetric: bool) -> None:
    """Eight calls with the observer and the fake quantization switched off and on, over inputs
    of changing range: every output, mask, running min/max, scale and zero point as the CPU's."""
    g = torch.Generator().manual_seed(7)
    state = {}
    for dev in ("cpu", "tpu"):
        inf = math.inf
        size = 5 if per_row else 1
        state[dev] = [torch.full((size,), inf) if not per_row else torch.empty(0),
                      torch.full((size,), -inf) if not per_row else torch.empty(0),
                      torch.ones(size), torch.zeros(size, dtype=torch.int32)]
        state[dev] = [t.to(dev) for t in state[dev]]
    flags = [(1, 1), (1, 1), (0, 1), (1, 0), (1, 1), (0, 0), (1, 1), (1, 1)]
    before = fallback_counts()
    with torch.tpu.eager_mode(mode):
        for i, (obs, fq) in enumerate(flags):
            x = torch.randn(5, 3, 4, generator=g) * (1 + i) + (0.5 * i - 1)
            outs = {}
            for dev in ("cpu", "tpu"):
                outs[dev] = A._fused_moving_avg_obs_fq_helper(
                    x.to(dev), torch.tensor([obs]).to(dev), torch.tensor([fq]).to(dev),
                    *state[dev], 0.01, -128, 127, 0, per_row, symmetric)
            for got, want in zip(list(outs["tpu"]) + state["tpu"], list(outs["cpu"]) + state["cpu"]):
                _same(got, want)
    assert not new_fallbacks(before)


def _qat(device: str, steps: int = 4) -> list[torch.Tensor]:
    """Eager-mode QAT with the default x86 qconfig (fused moving-average observers on every
    weight, per channel, and activation, per tensor)."""
    import torch.ao.quantization as tq

    torch.manual_seed(0)
    model = torch.nn.Sequential(tq.QuantStub(), torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4), tq.DeQuantStub())
    model.qconfig = tq.get_default_qat_qconfig("x86")
    model.train()
    tq.prepare_qat(model, inplace=True)
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    out = []
    for step in range(steps):
        x = torch.randn(16, 8, generator=g).to(device)
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        if step == steps - 2:
            model.apply(tq.disable_observer)  # freeze the ranges, as a QAT schedule does
        out.append(loss.detach().cpu().reshape(1))
    return out + [t.detach().cpu() for t in model.state_dict().values() if t.is_floating_point()]


@pytest.mark.parametrize("mode", MODES)
def test_qat_runs_on_the_device_as_on_the_cpu(mode: str) -> None:
    """No fallback. Against the CPU: the linear layers' float32 sums run in another order, so a
    value within rounding of a quantization tie may land on the other side; the bound is one
    quantization step's effect on the loss (scale ~ max|x| / 255 ~ 1e-2 here), not rounding."""
    before = fallback_counts()
    with torch.tpu.eager_mode(mode):
        got = _qat("tpu")
    assert not new_fallbacks(before)
    want = _qat("cpu")
    for g, w in zip(got[:4], want[:4]):
        torch.testing.assert_close(g, w, rtol=1e-2, atol=1e-4)


def test_the_switch_gives_the_fallback_and_the_same_bits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """TPUC_FAKE_QUANT_KERNELS=0 runs the fake quantization through the CPU fallback; everything
    else runs on the device in both runs, so the runs must agree bit for bit."""
    on, off = kernels_on_and_off("TPUC_FAKE_QUANT_KERNELS", "test_fake_quant", "_qat('tpu')",
                                 OPS, str(tmp_path), globals())
    assert len(on) == len(off)  # type: ignore[arg-type]
    for a, b in zip(on, off):  # type: ignore[call-overload]
        assert torch.equal(a, b)
