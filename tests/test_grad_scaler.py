"""torch.amp.GradScaler on "tpu" (python/tpuc/grad_scaler.py): its two kernels match PyTorch's
CPU kernels bit for bit, a training loop with a GradScaler matches the CPU's step for step
(skipped steps and the scale's growth and back-off included), and nothing falls back to the
CPU. The switch TPUC_AMP_KERNELS=0 (the CPU fallback) gives the same bits."""
from __future__ import annotations

import math

import pytest
import torch

from tpu_testing import fallback_counts, kernels_on_and_off, new_fallbacks

AMP_OPS = ("aten::_amp_foreach_non_finite_check_and_unscale_", "aten::_amp_update_scale_")
MODES = ("strict", "fused")


def _grads(seed: int) -> list[torch.Tensor]:
    """One list per dtype, as GradScaler groups them; a few values across float16's range."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        for shape in ((7,), (3, 5), (2, 3, 4)):
            t = torch.randn(shape, generator=g, dtype=torch.float64) * 10 ** torch.randint(
                -4, 4, shape, generator=g).double()
            out.append(t.to(dtype))
    return out


def _poison(grads: list[torch.Tensor], which: int, value: float) -> None:
    grads[which].view(-1)[1] = value


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("inv_scale", [1.0, 2.0 ** -16, 1 / 3, 1 / 65504])
@pytest.mark.parametrize("bad", [None, math.inf, -math.inf, math.nan])
def test_unscale_matches_the_cpu_bit_for_bit(mode: str, inv_scale: float, bad) -> None:
    with torch.tpu.eager_mode(mode):
        for dtype_start in (0, 3, 6, 9):  # one call per dtype group
            cpu = _grads(1)[dtype_start:dtype_start + 3]
            if bad is not None:
                _poison(cpu, 2, bad)
            for preset in (0.0, 1.0):  # found_inf is only ever set, never cleared
                c = [t.clone() for t in cpu]
                t = [x.to("tpu") for x in c]
                inv = torch.full((), inv_scale, dtype=torch.float32)
                f_cpu = torch.full((), preset)
                f_tpu = f_cpu.to("tpu")
                before = fallback_counts()
                torch._amp_foreach_non_finite_check_and_unscale_(c, f_cpu, inv)
                torch._amp_foreach_non_finite_check_and_unscale_(t, f_tpu, inv.to("tpu"))
                assert not [k for k in new_fallbacks(before) if k in AMP_OPS]
                assert f_tpu.item() == f_cpu.item() == (1.0 if (bad is not None or preset) else 0.0)
                for a, b in zip(c, t):
                    assert b.dtype == a.dtype
                    torch.testing.assert_close(b.cpu(), a, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("growth,backoff,interval", [(2.0, 0.5, 1), (2.0, 0.5, 3),
                                                      (1.1, 0.3, 2)])
def test_update_scale_matches_the_cpu_over_a_run(mode: str, growth: float, backoff: float,
                                                 interval: int) -> None:
    """A run of clean and overflowing steps; (1.1, 0.3) are not exact in float32, so the
    product has to be taken in double as the CPU kernel does; the scale starts near float32's
    largest value, where growing would overflow to inf and must not."""
    found = [0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    for start in (65536.0, 3.0e38, 1.0 / 3):
        s_cpu = torch.full((), start, dtype=torch.float32)
        g_cpu = torch.zeros((), dtype=torch.int32)
        with torch.tpu.eager_mode(mode):
            s_tpu, g_tpu = s_cpu.to("tpu"), g_cpu.to("tpu")
            for f in found:
                fi = torch.full((), float(f))
                torch._amp_update_scale_(s_cpu, g_cpu, fi, growth, backoff, interval)
                out = torch._amp_update_scale_(s_tpu, g_tpu, fi.to("tpu"), growth, backoff,
                                               interval)
                assert out is s_tpu
                assert s_tpu.item() == s_cpu.item() and math.isfinite(s_tpu.item())
                assert g_tpu.item() == g_cpu.item()


def test_the_kernels_refuse_what_the_cpu_refuses() -> None:
    t = [torch.ones(3, device="tpu")]
    with pytest.raises(RuntimeError, match="inv_scale must be a float tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(
            t, torch.zeros((), device="tpu"), torch.ones((), dtype=torch.float64, device="tpu"))
    with pytest.raises(RuntimeError, match="growth_tracker must be an int tensor"):
        torch._amp_update_scale_(torch.ones((), device="tpu"), torch.zeros((), device="tpu"),
                                 torch.zeros((), device="tpu"), 2.0, 0.5, 2)


def _train(device: str, mode: str, fused: bool, steps: int = 8) -> tuple:
    """float64 parameters (the exact reference), a GradScaler growing every 2 clean steps, and
    an overflow (an inf in one gradient) at steps 3 and 6: those steps are skipped and the
    scale backs off, on both devices alike."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(),
                                torch.nn.Linear(16, 3)).to(device, torch.float64)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, fused=fused or None)
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 10, growth_interval=2)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 6, generator=g, dtype=torch.float64).to(device)
    y = torch.randn(16, 3, generator=g, dtype=torch.float64).to(device)
    scales, losses = [], []
    with torch.tpu.eager_mode(mode) if device == "tpu" else _nothing():
        for step in range(steps):
            opt.zero_grad(set_to_none=False)
            loss = torch.nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            if step in (3, 6):
                with torch.no_grad():
                    model[0].weight.grad[0, 0] = math.inf
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
            losses.append(loss.item())
    return scales, losses, [p.detach().cpu() for p in model.parameters()]


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fused", [False, True], ids=["foreach", "fused"])
def test_training_with_a_grad_scaler_matches_the_cpu(mode: str, fused: bool) -> None:
    """The bound: both sides compute in float64 (1e-10 relative); a skipped step that was taken
    (or the reverse) moves the parameters by ~lr = 5e-2, and a wrong scale shows exactly."""
    before = fallback_counts()
    scales, losses, params = _train("tpu", mode, fused)
    assert not new_fallbacks(before)
    ref_scales, ref_losses, ref_params = _train("cpu", mode, fused)
    assert scales == ref_scales
    assert ref_scales[3] < ref_scales[2] and ref_scales[6] < ref_scales[5]  # the back-offs ran
    assert max(ref_scales) > 2.0 ** 10  # and a growth
    for a, b in zip(params, ref_params):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert losses == pytest.approx(ref_losses, rel=1e-10)


def test_float16_autocast_with_a_grad_scaler_runs_on_the_device() -> None:
    """The loop a CUDA user writes for float16 mixed precision, with "tpu" for "cuda": no CPU
    fallback, and the same scales as the CPU's run of the same loop."""
    def run(device: str) -> list[float]:
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 10)).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 12, growth_interval=1)
        x = torch.randn(8, 32).to(device)
        y = torch.randint(0, 10, (8,)).to(device)
        out = []
        for _ in range(4):
            opt.zero_grad()
            with torch.autocast(device, dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(m(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            out.append(scaler.get_scale())
        return out

    before = fallback_counts()
    got = run("tpu")
    assert not new_fallbacks(before)
    assert got == run("cpu") == [2.0 ** 13, 2.0 ** 14, 2.0 ** 15, 2.0 ** 16]


def test_the_switch_gives_the_fallback_and_the_same_bits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """TPUC_AMP_KERNELS=0 leaves both ops to the CPU fallback: the same training run's
    parameters then equal the device kernels' bit for bit."""
    on, off = kernels_on_and_off("TPUC_AMP_KERNELS", "test_grad_scaler",
                                 "_train('tpu', 'strict', False)[2]", AMP_OPS, str(tmp_path),
                                 globals())
    for a, b in zip(on, off):  # type: ignore[call-overload]
        assert torch.equal(a, b)
