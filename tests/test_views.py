"""Views share their base's storage on "tpu" exactly as on the CPU: reading
through every kind of view, writing through views (in-place ops, setitem,
out=), resize_ and set_."""
from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from tpu_testing import assert_same, native, quiet_fallback_warnings  # noqa: F401


def base() -> torch.Tensor:
    return torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)


VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "view": lambda t: t.view(6, 4),
    "view_flat": lambda t: t.view(-1),
    "view_dtype": lambda t: t.view(torch.int32),
    "reshape_noncontig": lambda t: t.transpose(0, 2).reshape(4, 6),
    "as_strided": lambda t: t.as_strided((3, 3), (5, 2), 1),
    "transpose": lambda t: t.transpose(0, 2),
    "t": lambda t: t[0].t(),
    "permute": lambda t: t.permute(2, 0, 1),
    "expand": lambda t: t[:, :1, :].expand(2, 5, 4),
    "select": lambda t: t.select(1, 2),
    "index_int": lambda t: t[1, 2],
    "slice": lambda t: t[:, 1:3],
    "slice_step": lambda t: t[..., ::3],
    "narrow": lambda t: t.narrow(2, 1, 2),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "squeeze": lambda t: t[:, :1].squeeze(1),
    "unfold": lambda t: t.unfold(2, 2, 1),
    "diagonal": lambda t: t.diagonal(0, 1, 2),
    "split": lambda t: t.split(2, dim=2)[1],
    "chunk": lambda t: t.chunk(3, dim=1)[2],
    "unbind": lambda t: t.unbind(0)[1],
    "movedim": lambda t: t.movedim(0, -1),
    "flatten": lambda t: t.flatten(1),
    "view_as_real": lambda t: torch.view_as_real(torch.view_as_complex(t.view(2, 3, 2, 2))),
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_reads(name: str, native: bool) -> None:
    make = VIEWS[name]
    a = base()
    x = a.to("tpu")
    v = make(x)
    r = make(a)
    assert v.shape == r.shape and v.stride() == r.stride()
    assert v.storage_offset() == r.storage_offset()
    if not name.startswith("reshape"):
        assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert_same(v, r)
    assert_same(v + 0 if v.dtype.is_floating_point else v.clone(), r + 0 if r.dtype.is_floating_point else r.clone())


@pytest.mark.parametrize("name", [n for n in VIEWS if n not in ("expand", "unfold", "reshape_noncontig", "view_dtype")])
def test_inplace_through_view_changes_base(name: str, native: bool) -> None:
    make = VIEWS[name]
    a = base()
    x = a.to("tpu")
    make(x).mul_(2).add_(1)
    make(a).mul_(2).add_(1)
    assert_same(x, a)


def test_brief_examples(native: bool) -> None:
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    x = a.to("tpu")
    x[:, 0].mul_(2)
    a[:, 0].mul_(2)
    assert_same(x, a)
    x.view(-1)[3] = 7
    a.view(-1)[3] = 7
    assert_same(x, a)
    x.t().add_(1)
    a.t().add_(1)
    assert_same(x, a)


def test_setitem_forms(native: bool) -> None:
    a = torch.zeros(4, 5)
    x = a.to("tpu")
    for key, value in [((1,), 3.0), ((slice(None), 2), 4.0), ((slice(1, 3), slice(0, 5, 2)), -1.0),
                       ((Ellipsis, 4), torch.tensor(9.0))]:
        x[key] = value.to("tpu") if isinstance(value, torch.Tensor) else value
        a[key] = value
    assert_same(x, a)
    x[2] = torch.arange(5.0, device="tpu")
    a[2] = torch.arange(5.0)
    assert_same(x, a)


def test_views_of_views_and_base_changes(native: bool) -> None:
    a = base()
    x = a.to("tpu")
    v = x.transpose(0, 2)[1:3]
    x.add_(100)  # a change of the base is seen through the view
    assert_same(v, (a + 100).transpose(0, 2)[1:3])
    v.zero_()
    a = a + 100
    a.transpose(0, 2)[1:3].zero_()
    assert_same(x, a)


@pytest.mark.parametrize("where", ["whole", "slice", "strided"])
def test_out_variants(where: str, native: bool) -> None:
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    b = torch.ones(3, 4)
    x, y = a.to("tpu"), b.to("tpu")
    if where == "whole":
        out, ref = torch.empty(3, 4, device="tpu"), torch.empty(3, 4)
        o, r = out, ref
    elif where == "slice":
        out, ref = torch.zeros(5, 4, device="tpu"), torch.zeros(5, 4)
        o, r = out[1:4], ref[1:4]
    else:
        out, ref = torch.zeros(3, 8, device="tpu"), torch.zeros(3, 8)
        o, r = out[:, ::2], ref[:, ::2]
    res = torch.add(x, y, alpha=2, out=o)
    torch.add(a, b, alpha=2, out=r)
    assert res is o
    assert_same(out, ref)
    torch.mul(x, 3, out=o)
    torch.mul(a, 3, out=r)
    assert_same(out, ref)


def test_out_resizes_empty_output(native: bool) -> None:
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    x = a.to("tpu")
    out = torch.empty(0, device="tpu")
    torch.add(x, 1, out=out)
    assert out.shape == (2, 3)
    assert_same(out, a + 1)
    out2 = torch.empty(0, device="tpu", dtype=torch.int64)
    torch.sum(x.long(), dim=1, out=out2)
    assert_same(out2, a.long().sum(1))


def test_resize_(native: bool) -> None:
    a = torch.arange(6, dtype=torch.float32)
    x = a.to("tpu")
    x.resize_(2, 3)
    assert x.shape == (2, 3) and x.is_contiguous()
    assert_same(x, a.view(2, 3))
    x.resize_(4, 4)  # grows the storage, keeps the first bytes
    assert x.untyped_storage().nbytes() >= 16 * 4
    assert torch.equal(x.cpu().view(-1)[:6], a)
    x.resize_(3)
    assert_same(x, a[:3])
    x.resize_(0)
    assert x.numel() == 0
    y = torch.empty(0, device="tpu")
    y.resize_(2, 3, 4, 5, memory_format=torch.channels_last)
    assert y.is_contiguous(memory_format=torch.channels_last)
    s = x.untyped_storage()
    s.resize_(8)
    assert s.nbytes() == 8


def test_set_(native: bool) -> None:
    a = torch.arange(12, dtype=torch.float32)
    x = a.to("tpu")
    y = torch.empty(0, device="tpu")
    y.set_(x.untyped_storage(), 2, (2, 3), (3, 1))
    assert_same(y, a.as_strided((2, 3), (3, 1), 2))
    assert y.is_set_to(y) and y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    y.mul_(10)  # writes into x's storage
    ref = a.clone()
    ref.as_strided((2, 3), (3, 1), 2).mul_(10)
    assert_same(x, ref)
    z = torch.empty(0, device="tpu").set_(x)
    assert z.shape == x.shape and z.is_set_to(x)
    w = torch.empty(0, device="tpu").set_(x.untyped_storage())
    assert w.shape == (12,)
    z.set_()
    assert z.numel() == 0
    with pytest.raises(RuntimeError):
        y.set_(a.untyped_storage())  # a CPU storage under a tpu tensor


def test_split_and_cat_round_trip(native: bool) -> None:
    a = torch.arange(20, dtype=torch.float32).reshape(4, 5)
    x = a.to("tpu")
    parts = x.split([1, 3, 1], dim=1)
    assert [p.shape for p in parts] == [p.shape for p in a.split([1, 3, 1], dim=1)]
    assert_same(torch.cat(parts, dim=1), a)
    assert_same(torch.stack(x.unbind(0), dim=1), torch.stack(a.unbind(0), dim=1))


# Writes through views whose strides divide each other (transposes, permutes,
# steps, sub-blocks) are a transpose + dynamic_update_slice of the storage, not
# a scatter with one index per element (XLA CPU runs such scatters element by
# element: a [8, 8, 128, 32] attention output written through its permuted
# strides cost ~0.3 ms each). Odd sizes keep these programs out of the caches.
STRIDED_WRITES: dict[str, Callable[[torch.Tensor], None]] = {
    "t": lambda s: s.view(7, 11).t().mul_(3),
    "permute": lambda s: s.view(7, 11)[:6, :10].reshape(2, 3, 10).permute(2, 0, 1).add_(5),
    "step": lambda s: s[:72].view(6, 12)[:, ::3].sub_(1),
    "sub_block_past_end": lambda s: s.view(7, 11)[2:, 8:10].mul_(-2),
    "out_permuted": lambda s: torch.mul(s[:30].view(5, 6), 2, out=s[40:70].view(6, 5).t()),
}


@pytest.mark.parametrize("name", list(STRIDED_WRITES))
def test_strided_writes_are_not_scatters(name: str, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TPUC_DUMP_DIR", str(tmp_path))
    a = torch.randn(77)
    x = a.to("tpu")
    STRIDED_WRITES[name](x)
    STRIDED_WRITES[name](a)
    assert_same(x, a)
    texts = [p.read_text() for p in tmp_path.iterdir()]
    assert texts, "no program was dumped"
    assert not any("stablehlo.scatter" in t for t in texts)
    assert any("stablehlo.dynamic_update_slice" in t for t in texts)


# In-place ops on a contiguous slice of a bigger storage (FSDP2's gradients are views into one
# flat buffer, torch.split's pieces, x[a:b].mul_()): the program reads the slice with a
# dynamic_slice and writes it back with a dynamic_update_slice at one start that XLA cannot fold
# (csrc/core/exec/view.h). With a static slice XLA CPU emitted a loop over the whole storage,
# every element copied, per view: clip_grad_norm_'s _foreach_mul_ over qwen3 debugmodel's
# gradient views took 51 ms a step (docs/torchtitan.md). Odd sizes keep these programs out of
# the caches, so that they are emitted (and dumped) here.
SLICE_UPDATES: dict[str, Callable[[torch.Tensor, torch.Tensor], None]] = {
    "mul_": lambda s, o: s[501:598].mul_(3),
    "add_alpha": lambda s, o: s[3:100].add_(o, alpha=2),
    "view_2d": lambda s, o: s[200:297].view(97, 1).sub_(o.view(97, 1)),
    "foreach_mul_": lambda s, o: torch._foreach_mul_(list(s[:1030].split([97, 400, 533])), 0.5),
    "foreach_add_list": lambda s, o: torch._foreach_add_(list(s[:194].split(97)), [o, o]),
}


@pytest.mark.parametrize("name", list(SLICE_UPDATES))
def test_inplace_on_a_slice_updates_it_in_place(name: str, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TPUC_DUMP_DIR", str(tmp_path))
    a, o = torch.randn(1031), torch.randn(97)
    x, ox = a.to("tpu"), o.to("tpu")
    SLICE_UPDATES[name](x, ox)
    SLICE_UPDATES[name](a, o)
    assert_same(x, a)
    writes = [t for t in (p.read_text() for p in tmp_path.iterdir())
              if "stablehlo.dynamic_update_slice" in t]
    assert writes, "no program writing a view was dumped"
    for t in writes:  # the slice is read at the update's opaque start, never as a static slice
        assert "stablehlo.dynamic_slice" in t and "stablehlo.replica_id" in t, t
        assert '"stablehlo.slice"' not in t, t


def test_resize_to_zero_and_back_needs_no_host_copy(native: bool) -> None:
    """FSDP2 frees an unsharded parameter with storage().resize_(0) and grows it back before
    the all-gather writes it. Those resizes keep nothing, so the storage just drops its buffer
    and stays unwritten (reads as zeros) until written: before, each resize downloaded the old
    bytes and uploaded a new buffer of zeros (a host round trip per parameter, twice a step),
    so the regrown storage held a device buffer again."""
    n = 4093
    x = torch.randn(n, device="tpu")
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    s = x.untyped_storage()
    s.resize_(0)
    s.resize_(n * 4)
    torch.tpu.synchronize()
    assert s.nbytes() == n * 4
    assert torch.tpu.memory_allocated() == before - n * 4  # old buffer freed, no new one yet
    assert torch.equal(x.cpu(), torch.zeros(n))
    x.add_(1)
    assert torch.equal(x.cpu(), torch.ones(n))


def _element_size_views(device: str) -> list[torch.Tensor]:
    """Views of another element size over storages a program wrote (not an upload), read and
    written, bit patterns chosen so that no float result is subnormal (the XLA CPU plugin's
    programs flush those)."""
    x = torch.arange(4.0, device=device) + 0.1
    v = x.view(torch.int16)
    v[::2] = 7  # the low halves of x's floats
    w = x.view(torch.uint8)
    w[3] = 0x3F  # one byte of x[0]
    y = (torch.arange(4, dtype=torch.int16, device=device) + 16000).view(torch.float32) * 2
    z = (torch.arange(6, dtype=torch.int32, device=device) * 3)[:4].view(torch.float64)
    b = (torch.tensor([1.5, -2.25], dtype=torch.bfloat16, device=device) * 1).view(torch.int32)
    q = (torch.arange(3.0, device=device) + 0.1)[:2].view(torch.float64)  # 12 bytes: padded
    q.mul_(2)
    u = torch.arange(5.0, device=device) + 0.3
    u[:4].view(torch.float64).add_(1)  # writes x's first 4 floats through 2 doubles
    k = (torch.arange(8.0, device=device) * 1.3).view(torch.uint8).view(torch.int64)
    return [x, v, w, y.view(torch.int32), z.view(torch.int64), b, q.view(torch.int64), u, k]


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_views_of_another_element_size(mode: str) -> None:
    # fused mode raised "reading a i16 view of a storage holding f32 data" at the next read
    ref = _element_size_views("cpu")
    before = torch.tpu.get_eager_mode()
    torch.tpu.set_eager_mode(mode)
    try:
        got = _element_size_views("tpu")
        for g, r in zip(got, ref):
            assert torch.equal(g.cpu(), r), (g.cpu(), r)
    finally:
        torch.tpu.set_eager_mode(before)


_OVERLAP_CASES = {
    "copy_ into an expand": lambda d: torch.zeros(1, device=d).expand(3).copy_(torch.arange(3., device=d)),
    "copy_ from the host into an expand": lambda d: torch.zeros(1, device=d).expand(3).copy_(torch.arange(3.)),
    "copy_ overlapping in part": lambda d: (lambda x: x[1:].copy_(x[:-1]))(torch.arange(5., device=d)),
    "in-place add overlapping in part": lambda d: (lambda x: x[1:].add_(x[:-1]))(torch.arange(5., device=d)),
    "in-place addcmul overlapping in part": lambda d: (lambda x: x[1:].addcmul_(x[:-1], x[:-1]))(
        torch.arange(5., device=d)),
    "out= overlapping its input in part": lambda d: (lambda x: torch.mul(x[:-1], 2, out=x[1:]))(
        torch.arange(5., device=d)),
    "out= an expand": lambda d: torch.exp(torch.ones(3, device=d), out=torch.zeros(1, device=d).expand(3)),
}
_NO_OVERLAP_CASES = {
    "copy_ from itself": lambda d: (lambda x: x.copy_(x.view(5)))(torch.arange(5., device=d)),
    "in-place add of itself": lambda d: (lambda x: x.add_(x))(torch.arange(5., device=d)),
    "disjoint halves": lambda d: (lambda x: (x[3:].add_(x[:2]), x[3:].copy_(x[:2] * 3), x)[2])(
        torch.arange(5., device=d)),
    "x[1:] = x[1:] + x[:-1]": lambda d: (lambda x: (x.__setitem__(slice(1, None), x[1:] + x[:-1]), x)[1])(
        torch.arange(5., device=d)),
}


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("case", sorted(_OVERLAP_CASES))
def test_overlapping_writes_raise_pytorchs_error(request, mode, case) -> None:
    """A write that holds one element twice or overlaps its input in part raises on the CPU
    and CUDA (TensorIterator's checks); on "tpu" it gave a clone's result, because copy_ hands a
    tpu copy to _copy_from before those checks and the Meta kernels do not check (copy.cpp,
    operands.cpp check_written_overlap, arith.cpp)."""
    before = torch.tpu.get_eager_mode()
    request.addfinalizer(lambda: torch.tpu.set_eager_mode(before))
    torch.tpu.set_eager_mode(mode)
    f = _OVERLAP_CASES[case]
    with pytest.raises(RuntimeError, match="unsupported operation") as cpu:
        f("cpu")
    with pytest.raises(RuntimeError, match="unsupported operation") as tpu:
        f("tpu")
    assert str(tpu.value).split(".")[0] == str(cpu.value).split(".")[0]


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("case", sorted(_NO_OVERLAP_CASES))
def test_writes_pytorch_allows_still_run(request, mode, case) -> None:
    before = torch.tpu.get_eager_mode()
    request.addfinalizer(lambda: torch.tpu.set_eager_mode(before))
    torch.tpu.set_eager_mode(mode)
    f = _NO_OVERLAP_CASES[case]
    assert torch.equal(f("tpu").cpu(), f("cpu"))
