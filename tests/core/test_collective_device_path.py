"""tpuc.distributed._device_path — the device path of the tpu_dist backend —
on PyTorch tensors on tpu:0..tpu:3 of one process (TPUC_CPU_DEVICE_COUNT=4),
against the same collectives computed on the CPU: every collective, several
dtypes, views as inputs and outputs, in-place results, groups, fused mode, and
the errors users see.

The device count is fixed when the runtime starts, so the tests run in a child
pytest process started with TPUC_CPU_DEVICE_COUNT=4 (bounded by a timeout);
the parent's single test reports the child's result."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

CHILD = os.environ.get("_TPUC_COLLECTIVE_CHILD") == "1"

if not CHILD:

    def test_device_path_in_a_process_with_four_devices():
        env = dict(os.environ, TPUC_CPU_DEVICE_COUNT="4", _TPUC_COLLECTIVE_CHILD="1")
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                            os.path.abspath(__file__)], env=env, capture_output=True, text=True,
                           timeout=900, cwd=os.path.dirname(os.path.abspath(__file__)))
        assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
        assert " passed" in r.stdout and "skipped" not in r.stdout, r.stdout[-2000:]

else:
    import torch

    import tpuc  # noqa: F401  (registers "tpu")
    from tpuc.distributed import _device_path as dp

    DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.uint8, torch.bool,
              torch.float16, torch.complex64]

    def ints(n, dtype, shape, seed=0, lo=-3, hi=4):
        """Small integers: sums, products and averages are exact in every dtype."""
        g = torch.Generator().manual_seed(seed)
        if dtype in (torch.uint8, torch.bool):
            lo = 0
        xs = [torch.randint(lo, hi, shape, generator=g) for _ in range(n)]
        if dtype == torch.bool:
            return [x != 0 for x in xs]
        if dtype.is_complex:
            return [torch.complex(x.float(), -x.float()).to(dtype) for x in xs]
        return [x.to(dtype) for x in xs]

    def on_devices(xs):
        return [x.to(f"tpu:{i}") for i, x in enumerate(xs)]

    def test_four_devices_in_this_process():
        assert torch.tpu.device_count() == 4
        assert dp.supported([torch.device("tpu", i) for i in range(4)])
        assert dp.supported(["tpu:1", "tpu:3"])
        assert not dp.supported(["tpu:0", "tpu:0"])
        assert not dp.supported(["tpu:0", "tpu:9"])
        assert not dp.supported(["cpu", "tpu:1"])

    @pytest.mark.parametrize("n", [2, 4])
    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    @pytest.mark.parametrize("op", ["sum", "avg", "product", "min", "max"])
    def test_all_reduce(n, dtype, op):
        if (dtype.is_complex and op in ("min", "max")) or (dtype == torch.bool and op == "avg"):
            with pytest.raises(ValueError):
                dp.all_reduce(on_devices(ints(n, dtype, (3,))), op)
            return
        xs = ints(n, dtype, (4, 5), lo=-1 if op == "product" else -3, hi=2 if op == "product" else 4)
        s = torch.stack([x.to(torch.complex128 if dtype.is_complex else torch.float64) for x in xs])
        ref = {"sum": lambda: s.sum(0), "product": lambda: s.prod(0), "min": lambda: s.amin(0),
               "max": lambda: s.amax(0), "avg": lambda: s.sum(0) / n}
        want = ref[op]()
        if op == "avg" and not (dtype.is_floating_point or dtype.is_complex):
            want = torch.trunc(want)
        want = (want != 0) if dtype == torch.bool else want.to(dtype)
        ts = on_devices(xs)
        dp.all_reduce(ts, op)
        for i, t in enumerate(ts):
            assert t.device == torch.device("tpu", i)
            assert torch.equal(t.cpu(), want)

    def test_reduce_op_enum():
        import torch.distributed as dist

        ts = on_devices(ints(2, torch.int64, (6,)))
        want = torch.maximum(ts[0].cpu(), ts[1].cpu())
        dp.all_reduce(ts, dist.ReduceOp.MAX)
        assert torch.equal(ts[1].cpu(), want)
        dp.all_reduce(ts, dist.ReduceOp(dist.ReduceOp.SUM))  # the object c10d passes backends
        assert torch.equal(ts[0].cpu(), 2 * want)
        with pytest.raises(dp.DevicePathError, match="host path"):
            dp.all_reduce(ts, dist.ReduceOp.BAND)

    @pytest.mark.parametrize("n", [2, 4])
    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    def test_gather_scatter_all_to_all_permute_broadcast(n, dtype):
        xs = ints(n, dtype, (2 * n, 3), seed=1)
        ts = on_devices(xs)
        for dim in (0, 1):
            for i, o in enumerate(dp.all_gather(ts, dim=dim)):
                assert o.device == ts[i].device and torch.equal(o.cpu(), torch.cat(xs, dim))
        if dtype != torch.bool:
            total = sum(x.to(torch.complex128 if dtype.is_complex else torch.float64) for x in xs)
            for k, o in enumerate(dp.reduce_scatter(ts, "sum", dim=0)):
                assert torch.equal(o.cpu(), total.to(dtype).chunk(n, 0)[k])
        for k, o in enumerate(dp.all_to_all(ts)):
            assert torch.equal(o.cpu(), torch.cat([x.chunk(n, 0)[k] for x in xs], 0))
        ring = [(r, (r + 1) % n) for r in range(n)]
        for k, o in enumerate(dp.permute(ts, ring)):
            assert torch.equal(o.cpu(), xs[(k - 1) % n])
        dp.broadcast(ts, root=n - 1)
        for t in ts:
            assert torch.equal(t.cpu(), xs[n - 1])

    def test_views_in_and_out():
        base = [torch.arange(24.0).reshape(4, 6) * (i + 1) for i in range(2)]
        ts = on_devices(base)
        cols = [t[:, 1:5:2] for t in ts]  # a strided view: in place through it
        dp.all_reduce(cols, "sum")
        want = base[0].clone()
        want[:, 1:5:2] = base[0][:, 1:5:2] + base[1][:, 1:5:2]
        assert torch.equal(ts[0].cpu(), want)
        want1 = base[1].clone()
        want1[:, 1:5:2] = want[:, 1:5:2]
        assert torch.equal(ts[1].cpu(), want1)
        # transposed inputs, outputs written into slices of bigger tensors
        xs = [torch.randint(-5, 5, (3, 4)).float() for _ in range(2)]
        tt = [x.to(f"tpu:{i}").t() for i, x in enumerate(xs)]
        big = [torch.full((3, 8), -1.0, device=f"tpu:{i}") for i in range(2)]
        outs = [b[:, :8].view(3, 8)[:, :].narrow(1, 0, 8) for b in big]
        dp.all_gather_into([o.view(24).view(8, 3) for o in outs], tt, dim=0)
        for b in big:
            assert torch.equal(b.cpu().view(8, 3), torch.cat([x.t() for x in xs], 0))

    def test_groups_and_reduce_scatter_into():
        xs = ints(4, torch.float32, (4, 2), seed=4)
        ts = on_devices(xs)
        dp.all_reduce(ts, "sum", group_size=2)
        assert torch.equal(ts[1].cpu(), xs[0] + xs[1])
        assert torch.equal(ts[2].cpu(), xs[2] + xs[3])
        outs = [torch.empty(1, 2, device=f"tpu:{i}") for i in range(4)]
        dp.reduce_scatter(on_devices(xs), "max", dim=0, outputs=outs)
        m = torch.stack(xs).amax(0)
        for k, o in enumerate(outs):
            assert torch.equal(o.cpu(), m[k:k + 1])

    def test_fused_mode_pending_ops_run_first():
        xs = [torch.arange(6.0) + i for i in range(2)]
        with torch.tpu.eager_mode("fused"):
            ts = [x.to(f"tpu:{i}") * 2 for i, x in enumerate(xs)]  # pending, not yet run
            dp.all_reduce(ts, "sum")
            ys = [t + 1 for t in ts]
        for y in ys:
            assert torch.equal(y.cpu(), (xs[0] + xs[1]) * 2 + 1)

    def test_errors():
        a = torch.ones(3, device="tpu:0")
        with pytest.raises(ValueError, match="same dtype and shape"):
            dp.all_reduce([a, torch.ones(4, device="tpu:1")])
        with pytest.raises(ValueError, match="one participant per device"):
            dp.all_reduce([a, torch.ones(3, device="tpu:0")])
        with pytest.raises(ValueError, match="does not divide"):
            dp.reduce_scatter([a, torch.ones(3, device="tpu:1")])
        with pytest.raises(ValueError, match="'tpu' tensors"):
            dp.all_reduce([torch.ones(3), torch.ones(3)])
        dp.all_reduce([a, torch.ones(3, device="tpu:1")])  # still usable
        assert torch.equal(a.cpu(), torch.full((3,), 2.0))
