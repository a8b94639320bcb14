"""The names a script written for torch.cuda reaches on torch.tpu once "cuda" is replaced by
"tpu": the helpers libraries test for (is_bf16_supported, ...), the deprecated spellings of
memory and mixed-precision calls (torch.tpu.amp), device_of and the NVTX ranges."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from tpu_testing import quiet_fallback_warnings  # noqa: F401


def test_capability_queries() -> None:
    assert torch.tpu.is_bf16_supported() is True
    assert torch.tpu.is_bf16_supported(including_emulation=False) is True
    assert torch.tpu.is_tf32_supported() is False
    assert torch.tpu.is_current_stream_capturing() is False
    torch.tpu.init()
    torch.tpu.ipc_collect()
    assert torch.tpu.is_initialized()


def test_deprecated_memory_names_and_nested_stats() -> None:
    torch.tpu.reset_max_memory_allocated()
    x = torch.arange(1 << 16, device="tpu", dtype=torch.float32) + 1  # a live buffer
    with pytest.warns(FutureWarning, match="memory_reserved"):
        assert torch.tpu.memory_cached() == torch.tpu.memory_reserved()
    with pytest.warns(FutureWarning, match="max_memory_reserved"):
        assert torch.tpu.max_memory_cached() == torch.tpu.max_memory_reserved()
    nested = torch.tpu.memory_stats_as_nested_dict()
    flat = torch.tpu.memory_stats()
    assert nested["allocated_bytes"]["all"]["current"] == flat["allocated_bytes.all.current"]
    assert nested["allocated_bytes"]["all"]["current"] >= x.numel() * 4
    del x
    torch.tpu.reset_max_memory_cached()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated()
    torch.tpu.reset_accumulated_memory_stats()


def test_device_of() -> None:
    with torch.tpu.device_of(torch.ones(1, device="tpu:0")):
        assert torch.tpu.current_device() == 0
    with torch.tpu.device_of(torch.ones(1)):  # not on tpu: nothing changes
        assert torch.tpu.current_device() == 0


def test_amp_old_spelling_equals_torch_amp() -> None:
    """torch.tpu.amp.autocast()/GradScaler() warn as torch.cuda.amp's do and train exactly as
    torch.amp.autocast("tpu")/GradScaler("tpu"), float16 by default as on CUDA."""
    from torch.tpu.amp import GradScaler, autocast, custom_bwd, custom_fwd

    class Square(torch.autograd.Function):
        @staticmethod
        @custom_fwd(cast_inputs=torch.float32)
        def forward(ctx, x):  # type: ignore[no-untyped-def]
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @custom_bwd
        def backward(ctx, g):  # type: ignore[no-untyped-def]
            (x,) = ctx.saved_tensors
            return 2 * x * g

    def run(old: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        m = torch.nn.Linear(8, 8).to("tpu")
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = GradScaler(init_scale=256.0) if old else torch.amp.GradScaler("tpu", init_scale=256.0)
        out = []
        for step in range(3):
            x = torch.randn(4, 8).to("tpu")
            with (autocast() if old else torch.amp.autocast("tpu")):
                y = m(x)
                z = Square.apply(y)
                assert y.dtype == torch.float16 and z.dtype == torch.float32
            opt.zero_grad()
            scaler.scale(z.mean()).backward()
            scaler.step(opt)
            scaler.update()
            out += [z.detach().cpu(), m.weight.detach().cpu(), torch.tensor(scaler.get_scale())]
        return out

    with pytest.warns(FutureWarning, match="torch.tpu.amp"):
        got = run(True)
    for a, b in zip(got, run(False)):
        assert torch.equal(a, b)


def test_import_torch_tpu_amp_as_a_module() -> None:
    code = textwrap.dedent("""
        import torch
        import torch.tpu.amp
        from torch.tpu.nvtx import range_push
        print(torch.tpu.amp.autocast.__module__, range_push.__module__)
    """)
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.split() == ["tpuc.amp", "tpuc.nvtx"]


def test_nvtx_ranges_show_in_the_profiler() -> None:
    nvtx = torch.tpu.nvtx
    assert nvtx.range_pop() == -1  # nothing open
    assert nvtx.range_push("outer") == 0
    assert nvtx.range_push("inner") == 1
    assert nvtx.range_pop() == 1
    assert nvtx.range_pop() == 0
    x = torch.ones(4, device="tpu")
    with torch.profiler.profile() as prof:
        with nvtx.range("step {}", 7):
            (x * 2).sum().item()
        rid = nvtx.range_start("across")
        nvtx.range_end(rid)
        nvtx.mark("here")
    names = {e.name for e in prof.events()}
    assert {"step 7", "across", "here"} <= names
