"""What FSDP2 and DTensor need from the device, in one process: streams and
events with their ordering, storage resize (FSDP2 frees unsharded parameters
with it), the fsdp:: copy ops and the RNG state layout DTensor reads."""
from __future__ import annotations

import struct

import torch

import tpuc  # noqa: F401


def test_streams_and_events_order_work() -> None:
    s = torch.tpu.Stream(priority=-1)
    assert s.device == torch.device("tpu", 0)
    cur = torch.tpu.current_stream()
    assert cur == torch.tpu.default_stream()
    x = torch.arange(6.0, device="tpu")
    with torch.tpu.stream(s):
        assert torch.tpu.current_stream() == s
        y = x * 2
        ev = s.record_event()
    assert torch.tpu.current_stream() == cur
    cur.wait_event(ev)
    cur.wait_stream(s)
    z = y + 1  # after the wait: sees y
    assert torch.equal(z.cpu(), torch.arange(6.0) * 2 + 1)
    e = torch.tpu.Event()
    e.record()
    assert e.query() and s.query()  # answers after the work is done, never a stale False
    e.synchronize()


def test_storage_resize_frees_and_restores() -> None:
    x = torch.arange(8.0, device="tpu")
    st = x.untyped_storage()
    nbytes = st.nbytes()
    st.resize_(0)
    assert st.nbytes() == 0
    st.resize_(nbytes)
    assert st.nbytes() == nbytes
    x.copy_(torch.full((8,), 3.0))
    assert torch.equal(x.cpu(), torch.full((8,), 3.0))


def test_fsdp_copy_ops_on_device_match_cpu() -> None:
    import torch.distributed.fsdp._fully_shard._fsdp_collectives  # noqa: F401  (defines fsdp::)

    ins = [torch.randn(6), torch.randn(5), torch.randn(4)]  # FSDP2 passes flat views
    numel = sum(t.numel() for t in ins)
    sizes = [t.numel() for t in ins]

    def run(dev: str) -> tuple[torch.Tensor, torch.Tensor]:
        buf = torch.zeros(2 * numel, device=dev)  # world 2, this is rank 1
        return torch.ops.fsdp.all_gather_copy_in([t.to(dev) for t in ins], buf, sizes, numel, 1)

    ti, to = run("tpu")
    ci, co = run("cpu")
    assert ti.device.type == "tpu" and torch.equal(ti.cpu(), ci)
    assert to.device.type == "tpu" and torch.equal(to.cpu(), co)  # the input lands in rank 1's half
    flat = torch.randn(2, numel)
    outs_t = [torch.empty(2, n, device="tpu") for n in sizes]
    outs_c = [torch.empty(2, n) for n in sizes]
    torch.ops.fsdp.split_with_sizes_copy(flat.to("tpu"), sizes, dim=1, out=outs_t)
    torch.ops.fsdp.split_with_sizes_copy(flat, sizes, dim=1, out=outs_c)
    for a, b in zip(outs_t, outs_c):
        assert torch.equal(a.cpu(), b)
    grads = [torch.randn(4, 3), torch.randn(6)]
    out_t = torch.empty(2, 9, device="tpu")
    out_c = torch.empty(2, 9)
    torch.ops.fsdp.chunk_cat([g.to("tpu") for g in grads], 0, 2, out=out_t)
    torch.ops.fsdp.chunk_cat(grads, 0, 2, out=out_c)
    assert torch.equal(out_t.cpu(), out_c)


def test_rng_state_is_seed_and_offset() -> None:
    torch.tpu.manual_seed(1234)
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    seed, offset = struct.unpack("<QQ", bytes(state.tolist()))
    assert seed == 1234
    a = torch.rand(4, device="tpu")
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.rand(4, device="tpu").cpu(), a.cpu())
    del offset
