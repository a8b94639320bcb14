"""One (op, dtype) checked against the CPU and classified.

For up to N sample inputs (reference_inputs, which start with sample_inputs) the op runs
on the CPU and, with the same inputs moved by `.to("tpu")`, on the device; the results are
compared with torch.testing.assert_close (equal_nan, exact dtype, PyTorch's per-dtype
tolerances unless policy.TOLERANCES says otherwise). The in-place variant and the out=
variant are checked the same way, and in float32 the input gradients of a sum of the
outputs. Fallbacks are counted only while the device runs the op (moving data is not)."""
from __future__ import annotations

import itertools
import os
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from . import catalog, distribution, policy
from .tree import clone, describe, tensors, to_cpu, to_device, tree_map

CLASSES = ("native_pass", "fallback_pass", "mismatch", "error", "skipped")
DEVICE = "tpu"
# TPUC_CONFORMANCE_COMPILED=1: the device side of the forward and in-place checks runs the op
# under torch.compile(backend="tpu") (a fresh Dynamo cache per call), graph breaks allowed
COMPILED = os.environ.get("TPUC_CONFORMANCE_COMPILED") == "1"


def _device_fn(fn: Callable[..., Any]) -> Callable[..., Any]:
    if not COMPILED:
        return fn
    torch._dynamo.reset()
    return torch.compile(lambda *a, **k: fn(*a, **k), backend="tpu", dynamic=False)


@dataclass
class Outcome:
    op: str
    dtype: str
    cls: str
    detail: str = ""
    fallbacks: dict[str, int] = field(default_factory=dict)
    checks: dict[str, int] = field(default_factory=dict)  # check -> samples compared
    cpu_raised: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _first_line(e: BaseException, limit: int = 300) -> str:
    msg = " ".join(str(e).split("\n")[:1]).strip() or repr(e)
    msg = f"{type(e).__name__}: {msg}"
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def _summary(e: AssertionError, limit: int = 400) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    msg = "; ".join(lines[:5])
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def _fallback_counts() -> dict[str, int]:
    return dict(torch.tpu.stats()["fallbacks"])


def _assert_meta(actual: Any, expected: Any) -> None:
    """Shape and dtype only (values of random or uninitialized outputs mean nothing)."""
    a, e = tensors(actual), tensors(expected)
    if len(a) != len(e):
        raise AssertionError(f"{len(a)} output tensors, expected {len(e)}")
    for i, (x, y) in enumerate(zip(a, e)):
        if x.shape != y.shape or x.dtype != y.dtype:
            raise AssertionError(f"output {i}: {x.dtype}{list(x.shape)}, expected {y.dtype}{list(y.shape)}")


def _same(a: Any, b: Any) -> bool:
    try:
        torch.testing.assert_close(a, b, equal_nan=True, rtol=0, atol=0)
        return True
    except Exception:
        return False


def _none_marked(x: Iterable[torch.Tensor | None], device: str = "cpu") -> list[Any]:
    """Gradients with None (input unused) as an empty tensor of dtype bool, which no real
    float32 gradient can equal, so "no gradient" on one side only is a mismatch."""
    return [torch.empty(0, dtype=torch.bool, device=device) if g is None else g for g in x]


def _loss(out: Any) -> torch.Tensor | None:
    """Sum of every differentiable output (complex ones by real and imaginary parts)."""
    parts = []
    for t in tensors(out):
        if not t.requires_grad:
            continue
        parts.append(t.real.sum() + t.imag.sum() if t.is_complex() else t.sum())
    if not parts:
        return None
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


class _Checker:
    def __init__(self, key: str, op: Any, dtype_name: str, max_samples: int, grad_samples: int):
        self.key, self.op, self.dtype_name = key, op, dtype_name
        self.dtype = catalog.DTYPES[dtype_name]
        self.max_samples, self.grad_samples = max_samples, grad_samples
        self.random_reason = policy.NONDETERMINISTIC.get(key)
        self.failures: list[tuple[str, str]] = []  # (mismatch | error, message)
        self.fallbacks: Counter[str] = Counter()
        self.checks: Counter[str] = Counter()
        self.cpu_raised = 0
        self.first_cpu_error = ""
        self.nondeterministic_samples = 0
        self.least_draws: int | None = None  # random ops: the fewest draws compared per side

    # -- helpers --------------------------------------------------------------------------

    def _samples(self, requires_grad: bool, n: int) -> Iterable[Any]:
        if catalog.is_foreach(self.op):
            gen = self.op.sample_inputs("cpu", self.dtype, requires_grad=requires_grad, num_input_tensors=[3])
        elif requires_grad:
            gen = self.op.sample_inputs("cpu", self.dtype, requires_grad=True)
        else:
            gen = self.op.reference_inputs("cpu", self.dtype, requires_grad=False)
        return itertools.islice(gen, n)

    def _to_device(self, sample: Any) -> tuple[Any, Any, Any]:
        """The sample's (input, args, kwargs) on the device (args stay where policy.CPU_ARGS says)."""
        if self.key in policy.CPU_ARGS:
            return to_device(sample.input, DEVICE), clone(sample.args), clone(sample.kwargs)
        return to_device((sample.input, sample.args, sample.kwargs), DEVICE)

    def _on_device(self, fn: Callable[[], Any]) -> Any:
        before = _fallback_counts()
        try:
            return fn()
        finally:
            for name, n in _fallback_counts().items():
                if n > before.get(name, 0):
                    self.fallbacks[name] += n - before.get(name, 0)

    def _cpu_failed(self, e: BaseException) -> None:
        self.cpu_raised += 1
        if not self.first_cpu_error:
            self.first_cpu_error = _first_line(e, 160)

    def _fail(self, kind: str, check: str, desc: str, msg: str) -> None:
        self.failures.append((kind, f"{check} {desc}: {msg}"))

    def _compare(self, check: str, desc: str, actual: Any, expected: Any, shape_only: bool,
                 anywhere: bool = False) -> None:
        elsewhere = [str(t.device) for t in tensors(actual) if t.device.type != DEVICE]
        if elsewhere and not anywhere:
            self._fail("mismatch", check, desc, f"a result is on {elsewhere[0]}, not on {DEVICE}")
            return
        try:
            got = to_cpu(actual)
        except Exception as e:  # a device error surfaces when the result is read
            self._fail("error", check, desc, _first_line(e))
            return
        try:
            if shape_only:
                _assert_meta(got, expected)
            else:
                tol = policy.tolerance(self.key, self.dtype_name, check)
                torch.testing.assert_close(got, expected, equal_nan=True, **tol)
        except AssertionError as e:
            self._fail("mismatch", check, desc, _summary(e))
            return
        except Exception as e:  # assert_close's type checks (list vs tensor, ...)
            self._fail("mismatch", check, desc, _first_line(e))
            return
        self.checks[check] += 1

    # -- checks ---------------------------------------------------------------------------

    def forward(self) -> None:
        for sample in self._samples(False, self.max_samples):
            desc = describe([sample.input, *sample.args]) + (f" {describe(sample.kwargs)}" if sample.kwargs else "")
            inp, args, kwargs = sample.input, sample.args, sample.kwargs
            try:
                expected = to_cpu(self.op(clone(inp), *clone(args), **clone(kwargs)))
            except Exception as e:
                self._cpu_failed(e)
                continue
            shape_only = self.random_reason is not None or policy.sample_is_random(self.key, sample)
            if shape_only and self.random_reason is None:
                self.nondeterministic_samples += 1
            elif not shape_only:
                again = to_cpu(self.op(clone(inp), *clone(args), **clone(kwargs)))
                if not _same(again, expected):
                    shape_only = True
                    self.nondeterministic_samples += 1
            d_inp, d_args, d_kwargs = self._to_device(sample)
            try:
                actual = self._on_device(lambda: _device_fn(self.op)(d_inp, *d_args, **d_kwargs))
            except Exception as e:
                self._fail("error", "forward", desc, _first_line(e))
                continue
            # a sample that names a device itself (x.to("cpu", ...)) may return a CPU tensor
            anywhere = any(isinstance(a, torch.device) or (isinstance(a, str) and a == "cpu") for a in sample.args)
            canon = self._canonical(sample)
            self._compare("forward", desc, canon(actual), canon(expected), shape_only, anywhere)
            if self.random_reason == policy.RANDOM and not self.failures:
                self._distribution(sample, desc)
            self._inplace(sample, desc, shape_only)
            self._out(sample, desc, expected, shape_only)

    def _distribution(self, sample: Any, desc: str) -> None:
        """A random op's draws against the CPU's, by distribution (distribution.py)."""
        d_inp, d_args, d_kwargs = self._to_device(sample)

        def dev() -> Any:
            return self._on_device(lambda: self.op(clone(d_inp), *clone(d_args), **clone(d_kwargs)))

        def cpu() -> Any:
            return self.op(clone(sample.input), *clone(sample.args), **clone(sample.kwargs))
        try:
            msg, draws = distribution.compare(dev, cpu, self.key in policy.DEPENDENT_DRAWS)
        except Exception as e:
            self._fail("error", "distribution", desc, _first_line(e))
            return
        if msg:
            self._fail("mismatch", "distribution", desc, msg)
            return
        if draws == 0:
            return  # every output empty: shape and dtype were all there was to compare
        self.checks["distribution"] += 1
        self.least_draws = draws if self.least_draws is None else min(self.least_draws, draws)

    def _canonical(self, sample: Any) -> Callable[[Any], Any]:
        """What forward and out= compare: the results, or for policy.CANONICAL_OUTPUTS
        entries the sample's output_process_fn_grad of them."""
        if self.key in policy.CANONICAL_OUTPUTS:
            return sample.output_process_fn_grad
        return lambda out: out

    def _inplace(self, sample: Any, desc: str, shape_only: bool) -> None:
        fn = self.op.inplace_variant
        if fn is None or sample.broadcasts_input:
            return  # in place on an input that broadcasts is invalid (test_ops skips it too)
        x = clone(sample.input)
        try:
            fn(x, *clone(sample.args), **clone(sample.kwargs))
        except Exception:
            return  # not valid in place for this sample (dtype promotion, broadcast input)
        xd, d_args, d_kwargs = self._to_device(sample)
        try:
            self._on_device(lambda: _device_fn(fn)(xd, *d_args, **d_kwargs))
        except Exception as e:
            self._fail("error", "inplace", desc, _first_line(e))
            return
        self._compare("inplace", desc, xd, x, shape_only)

    def _out(self, sample: Any, desc: str, expected: Any, shape_only: bool) -> None:
        if not self.op.supports_out or catalog.is_foreach(self.op):
            return
        if isinstance(expected, torch.Tensor):
            pass
        elif isinstance(expected, tuple) and expected and all(isinstance(t, torch.Tensor) for t in expected):
            expected = tuple(expected)
        else:
            return
        out_cpu = tree_map(torch.empty_like, expected)
        try:
            self.op(clone(sample.input), *clone(sample.args), **clone(sample.kwargs), out=out_cpu)
        except Exception:
            return  # this sample has no out= form on the CPU either
        out_dev = tree_map(lambda t: torch.empty_like(t, device=DEVICE), expected)
        d_inp, d_args, d_kwargs = self._to_device(sample)
        try:
            self._on_device(lambda: self.op(d_inp, *d_args, **d_kwargs, out=out_dev))
        except Exception as e:
            self._fail("error", "out", desc, _first_line(e))
            return
        # Against the functional result (as test_ops' test_out), or else the CPU's own out=
        # result: the CPU's two paths round differently for some samples (bfloat16 linear
        # on 3-d input: addmm's out= kernel vs matmul + add), and either is PyTorch's answer.
        canon = self._canonical(sample)
        out_dev, expected, out_cpu = canon(out_dev), canon(expected), canon(out_cpu)
        if not shape_only and not self._close("out", out_dev, expected) and self._close("out", out_dev, out_cpu):
            self.checks["out"] += 1
            return
        self._compare("out", desc, out_dev, expected, shape_only)

    def _close(self, check: str, actual: Any, expected: Any) -> bool:
        try:
            tol = policy.tolerance(self.key, self.dtype_name, check)
            torch.testing.assert_close(to_cpu(actual), expected, equal_nan=True, **tol)
            return True
        except Exception:
            return False

    def grad(self) -> None:
        if self.dtype != torch.float32 or not self.op.supports_autograd or self.random_reason:
            return
        if self.dtype not in set(self.op.supported_backward_dtypes("cpu")):
            return
        for sample in self._samples(True, self.grad_samples):
            desc = describe([sample.input, *sample.args]) + (f" {describe(sample.kwargs)}" if sample.kwargs else "")
            if policy.sample_is_random(self.key, sample):
                continue  # gradients through a random mask are not comparable either
            parts = clone((sample.input, sample.args, sample.kwargs))
            leaves = [t for t in tensors(parts) if t.requires_grad]
            if not leaves:
                continue
            try:
                out = sample.output_process_fn_grad(self.op(parts[0], *parts[1], **parts[2]))
                loss = _loss(out)
                if loss is None:
                    continue
                expected = _none_marked(torch.autograd.grad(loss, leaves, allow_unused=True))
            except Exception as e:
                self._cpu_failed(e)
                continue
            d_parts = self._to_device(sample)
            d_leaves = [t for t in tensors(d_parts) if t.requires_grad]

            def run() -> list[Any]:
                o = sample.output_process_fn_grad(self.op(d_parts[0], *d_parts[1], **d_parts[2]))
                d_loss = _loss(o)
                if d_loss is None:
                    raise RuntimeError("no differentiable output on the device")
                return _none_marked(torch.autograd.grad(d_loss, d_leaves, allow_unused=True), DEVICE)

            try:
                actual = self._on_device(run)
            except Exception as e:
                self._fail("error", "grad", desc, _first_line(e))
                continue
            self._compare("grad", desc, actual, expected, False)

    # -- classification -------------------------------------------------------------------

    def outcome(self, seconds: float) -> Outcome:
        o = Outcome(self.key, self.dtype_name, "", fallbacks=dict(self.fallbacks),
                    checks=dict(self.checks), cpu_raised=self.cpu_raised, seconds=round(seconds, 3))
        errors = [m for k, m in self.failures if k == "error"]
        mismatches = [m for k, m in self.failures if k == "mismatch"]
        ran = "natively" if not self.fallbacks else "fell back: " + ", ".join(sorted(self.fallbacks))
        if errors:
            o.cls, o.detail = "error", errors[0]
        elif mismatches:
            o.cls, o.detail = "mismatch", mismatches[0]
        elif not self.checks:
            o.cls = "skipped"
            if self.cpu_raised:
                o.detail = f"sample raised on CPU too (every sample; first: {self.first_cpu_error})"
            else:
                o.detail = "no sample inputs for this dtype"
        elif self.random_reason and self.checks.get("distribution"):
            o.cls = "native_pass" if not self.fallbacks else "fallback_pass"
            o.detail = (f"random op: compared with the CPU's draws by distribution "
                        f"({self.checks['distribution']} sample(s), >= {self.least_draws} draws "
                        f"a side, two-sample KS at alpha {distribution.ALPHA:g}); ran {ran}")
        elif self.random_reason:
            o.cls, o.detail = "skipped", f"{self.random_reason}; shape/dtype checked, ran {ran}"
        else:
            o.cls = "native_pass" if not self.fallbacks else "fallback_pass"
            notes = []
            if self.nondeterministic_samples:
                notes.append(f"{self.nondeterministic_samples} random sample(s) (policy.py or two CPU runs differ): shape/dtype only")
            if self.fallbacks:
                notes.append(ran)
            o.detail = "; ".join(notes)
        return o


def check(key: str, dtype_name: str, max_samples: int = 8, grad_samples: int | None = None) -> Outcome:
    """Checks one (op, dtype); never raises for the op's own failures."""
    start = time.perf_counter()
    op = catalog.entries()[key]
    if catalog.DTYPES[dtype_name] not in catalog.cpu_dtypes(op):
        return Outcome(key, dtype_name, "skipped", "no CPU support for dtype")
    torch.manual_seed(0)
    c = _Checker(key, op, dtype_name, max_samples, max_samples if grad_samples is None else grad_samples)
    try:
        c.forward()
        c.grad()
    except Exception as e:  # the harness itself (sample generation, ...) failed
        c.failures.append(("error", f"harness: {_first_line(e)} at {traceback.format_exc(limit=-1).splitlines()[-3].strip()}"))
    return c.outcome(time.perf_counter() - start)
