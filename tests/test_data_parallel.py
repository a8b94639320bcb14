"""nn.DataParallel on "tpu" (tpuc/data_parallel.py): torch.nn.parallel.comm's CUDA-only
collectives replaced for tpu tensors. On one device and (in a subprocess with
TPUC_CPU_DEVICE_COUNT=2) over two, the wrapped model's outputs, gradients and BatchNorm
statistics equal the CPU's unwrapped ones."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from tpu_testing import quiet_fallback_warnings  # noqa: F401

SCRIPT = textwrap.dedent("""
    import torch, tpuc
    torch.manual_seed(0)
    def make():
        torch.manual_seed(1)
        return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.Tanh(),
                                   torch.nn.Linear(8, 3))
    x = torch.randn(8, 6)
    ref = make()
    want = ref(x)
    want.pow(2).sum().backward()
    m = make().to("tpu")
    dp = torch.nn.DataParallel(m)
    assert dp.device_ids == list(range(torch.tpu.device_count())), dp.device_ids
    got = dp(x.to("tpu"))
    got.pow(2).sum().backward()
    assert got.device == torch.device("tpu", 0)
    # two devices: each half of the batch is normalized with its own statistics, as on CUDA
    n = len(dp.device_ids)
    if n == 1:
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
        for p, q in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5)
    else:
        halves = [make()(c) for c in x.chunk(n)]
        torch.testing.assert_close(got.cpu(), torch.cat(halves), rtol=1e-5, atol=1e-5)
        ref2 = make()
        sum((h.pow(2).sum() for h in [ref2(c) for c in x.chunk(n)])).backward()
        for p, q in zip(m.parameters(), ref2.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5)
    print("ok", n)
""")


def _run(devices: int) -> str:
    env = dict(os.environ, TPUC_CPU_DEVICE_COUNT=str(devices))
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split()[-2:]


def test_data_parallel_on_one_and_two_devices() -> None:
    assert _run(1) == ["ok", "1"]
    assert _run(2) == ["ok", "2"]


def test_comm_functions_on_tpu_tensors_and_cpu_ones_untouched() -> None:
    from torch.nn.parallel import comm

    x = torch.arange(10.0).reshape(5, 2)
    parts = comm.scatter(x.to("tpu"), [0, 0], chunk_sizes=[2, 3])
    assert [p.shape[0] for p in parts] == [2, 3] and all(p.device.type == "tpu" for p in parts)
    assert torch.equal(comm.gather(parts, 0, destination=-1), x)
    assert torch.equal(comm.reduce_add([x.to("tpu"), x.to("tpu")], 0).cpu(), 2 * x)
    (copies,) = comm.broadcast_coalesced([x.to("tpu")], [0])
    assert torch.equal(copies[0].cpu(), x)
    # CPU tensors still reach PyTorch's own (CUDA-only) implementation: the same outcome
    assert getattr(comm.scatter, "_tpuc_patched", False)
    with pytest.raises(Exception) as ours:
        comm.scatter(x, [0])
    with pytest.raises(Exception) as theirs:
        comm.scatter.__wrapped__(x, [0])
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)
