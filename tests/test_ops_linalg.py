"""Matrix products, and the shape and indexing ops around them, on the device
"tpu" against PyTorch on the CPU, through the real PyTorch device: values,
gradients, in-place and out= forms, and no fallback for these families."""
from __future__ import annotations

import warnings

import torch

import tpuc  # noqa: F401  (registers "tpu")
from test_ops_nn import _fallbacks, _own_fallbacks, compare, rq

DEV = "tpu"
torch.manual_seed(0)


def same(fn, *inputs, tol=None):
    """fn on CPU inputs and on their tpu copies gives the same tensor, and no
    op of these families falls back."""
    tol = tol or dict(rtol=1e-4, atol=1e-5)
    before = _fallbacks()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = fn(*inputs)
        got = fn(*[x.to(DEV) if isinstance(x, torch.Tensor) else x for x in inputs])
    assert got.device.type == DEV
    torch.testing.assert_close(got.cpu(), want, **tol)
    assert _own_fallbacks(before) == []


def test_matmul_shapes_and_grads():
    assert compare(lambda m, a, b: a @ b, rq(3, 4), rq(4, 5)) == []
    assert compare(lambda m, a, b: a @ b, rq(2, 3, 4), rq(4, 5)) == []
    assert compare(lambda m, a, b: a @ b, rq(2, 1, 3, 4), rq(5, 4, 2)) == []
    assert compare(lambda m, a, b: a @ b, rq(4), rq(4, 5)) == []
    assert compare(lambda m, a, b: torch.outer(a, b), rq(3), rq(4)) == []
    assert compare(lambda m, a, b: torch.einsum("bij,bjk->bik", a, b), rq(2, 3, 4), rq(2, 4, 5)) == []


def test_products_and_scalars():
    a, b, c = torch.randn(3, 4), torch.randn(4, 5), torch.randn(3, 5)
    same(torch.mm, a, b)
    same(lambda c_, a_, b_: torch.addmm(c_, a_, b_, beta=0.5, alpha=2.0), c, a, b)
    same(lambda c_, a_, b_: torch.addmm(c_, a_, b_, beta=0.0), torch.full((3, 5), float("nan")), a, b)
    same(torch.bmm, torch.randn(2, 3, 4), torch.randn(2, 4, 5))
    same(lambda x, y, z: torch.baddbmm(x, y, z, alpha=0.5), torch.randn(2, 3, 5), torch.randn(2, 3, 4),
         torch.randn(2, 4, 5))
    same(torch.mv, a, torch.randn(4))
    same(torch.dot, torch.randn(6), torch.randn(6))
    same(lambda x, y: torch.mm(x, y), a.bfloat16(), b.bfloat16(), tol=dict(rtol=2e-2, atol=2e-2))


def test_inplace_and_out():
    a, b, c = torch.randn(3, 4), torch.randn(4, 5), torch.randn(3, 5)

    def inplace(c_, a_, b_):
        c_ = c_.clone()
        c_.addmm_(a_, b_, alpha=3.0)
        return c_
    same(inplace, c, a, b)

    def out(a_, b_):
        o = torch.empty(3, 5, device=a_.device)
        torch.mm(a_, b_, out=o)
        return o
    same(out, a, b)

    def into_view(c_, a_, b_):  # the result written through a view of a bigger tensor
        big = torch.zeros(6, 5, device=a_.device)
        big[1:4].addmm_(a_, b_)
        return big
    same(into_view, c, a, b)


def test_noncontiguous():
    a = torch.randn(4, 3).t()
    b = torch.randn(5, 4).t()
    same(torch.mm, a, b)
    same(lambda x: x.t() @ x, torch.randn(6, 4)[::2])


def test_shape_ops():
    x = torch.randn(3, 4)
    same(lambda u, v: torch.cat([u, v], 1), x, torch.randn(3, 2))
    same(lambda u, v: torch.stack([u, v], 0), x, torch.randn(3, 4))
    same(lambda u: torch.flip(u, [0, 1]), x)
    same(lambda u: torch.roll(u, 2, 1), x)
    same(lambda u: u.repeat(2, 3), x)
    same(torch.tril, torch.randn(4, 4))
    same(lambda u: torch.triu(u, 1), torch.randn(4, 4))
    same(lambda u: torch.nn.functional.pad(u, (1, 2, 0, 1), value=0.5), x)
    same(lambda u: torch.nn.functional.pad(u, (2, 1), mode="reflect"), torch.randn(2, 3, 5))
    assert compare(lambda m, u, v: torch.cat([u, v], 0).sum(0) * torch.arange(4.0, device=u.device),
                   rq(2, 4), rq(3, 4)) == []


def test_index_ops():
    x = torch.randn(5, 4)
    i = torch.tensor([4, 0, 2])
    same(lambda u, j: u.index_select(0, j), x, i)
    same(lambda u, j: torch.gather(u, 1, j), x, torch.randint(0, 4, (5, 2)))
    same(lambda u, j: u[j], x, i)
    same(lambda u, j, k: u[j, k], x, i, torch.tensor([1, 3, 0]))

    def put(u, j):
        u = u.clone()
        u[j] = 7.0
        return u
    same(put, x, i)

    def acc(u, j):
        u = u.clone()
        u.index_put_((j,), torch.ones(3, 4, device=u.device), accumulate=True)
        return u
    same(acc, x, torch.tensor([1, 1, 3]))
    same(lambda u, j: torch.zeros(3, 4, device=u.device).scatter_add(0, j, u[:2]), x,
         torch.randint(0, 3, (2, 4)))
    assert compare(lambda m, u, j: u[j].sum(0), rq(5, 4), i) == []


def test_index_with_slices():
    x = torch.randn(5, 4)
    same(lambda u, j: u[:, j], x, torch.tensor([3, 0]))


def test_linear_forward_puts_the_weight_on_the_left(tmp_path, monkeypatch):
    """x @ W^T with fewer rows in x than in W (a linear layer's forward at small batch) is
    computed as (W @ x^T)^T behind an optimization barrier: XLA CPU's dot was ~3x slower with
    the weight on the right (csrc/core/lower/linalg.c). Same sums; checked against float64
    with the CPU's own float32 error as the scale. Odd sizes: emitted (and dumped) here."""
    from tpu_testing import assert_as_accurate

    monkeypatch.setenv("TPUC_DUMP_DIR", str(tmp_path))
    x, w, b = torch.randn(11, 37), torch.randn(103, 37), torch.randn(103)
    for fn in (lambda x, w, b: x @ w.t(), lambda x, w, b: torch.nn.functional.linear(x, w, b)):
        got = fn(x.to(DEV), w.to(DEV), b.to(DEV))
        assert_as_accurate(got, fn(x, w, b), fn(x.double(), w.double(), b.double()))
    texts = [p.read_text() for p in tmp_path.iterdir()]
    dots = [t for t in texts if "stablehlo.dot_general" in t]
    assert dots and all("stablehlo.optimization_barrier" in t for t in dots), texts
    assert all("(tensor<103x37xf32>, tensor<11x37xf32>) -> tensor<103x11xf32>" in t for t in dots)
