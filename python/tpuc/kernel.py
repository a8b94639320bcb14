"""User kernels: StableHLO (written by hand, or exported from JAX — including
Pallas kernels) as PyTorch ops on "tpu".

    import tpuc.kernel

    rms = tpuc.kernel.from_stablehlo(TEXT, name="rmsnorm", backward=RMS_BWD_TEXT)
    y = rms(x, w)                           # a torch.library custom op: tpuc_kernels::rmsnorm

    import jax.numpy as jnp
    rms = tpuc.kernel.from_jax(lambda x, w: x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True)
                                                             + 1e-6) * w,
                               x_example, w_example, name="rmsnorm")   # backward from jax.vjp

A kernel is a ``torch.library`` custom op with a fake (meta) implementation
taken from the module's signature (static shapes), so it works in eager
code, under autograd (with a backward), in fused mode and inside
``torch.compile(backend="tpu")``, where it is an opaque op of the graph.
The module runs on the tensors' device buffers (csrc/torch/kernel.cpp),
compiled once per process through the core's executable cache (and once per
machine with the disk cache). Inside a fused program or a compiled graph
the kernel is a boundary: the ops before it run, then the kernel, then the
rest (XLA does not fuse across it).

JAX is optional (``pip install jax``, CPU build); without it
``from_stablehlo`` still works. A JAX function is exported with
``jax.export`` for the active plugin's platform; a Pallas kernel is exported
as written (``interpret=True`` on the CPU plugin, compiled by Mosaic on TPU).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence, Union

import torch

__all__ = ["Kernel", "TensorType", "from_stablehlo", "from_jax", "signature"]

_DTYPES = {
    "f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
    "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8,
    "ui8": torch.uint8, "i1": torch.bool, "complex<f32>": torch.complex64,
    "complex<f64>": torch.complex128,
}
_TENSOR = re.compile(r"tensor<((?:[0-9?]+x)*)(complex<f(?:32|64)>|[a-z]+[0-9]*)>")


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: torch.dtype

    def __str__(self) -> str:
        return f"{str(self.dtype).replace('torch.', '')}{list(self.shape)}"


def _balanced(text: str, start: int) -> int:
    """Index just past the bracket group opening at text[start]."""
    pairs = {"(": ")", "{": "}", "<": ">", "[": "]"}
    stack = [pairs[text[start]]]
    i, quote = start + 1, False
    while i < len(text) and stack:
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == '"':
                quote = False
        elif c == '"':
            quote = True
        elif c in pairs:
            stack.append(pairs[c])
        elif c == stack[-1]:
            stack.pop()
        i += 1
    if stack:
        raise ValueError("tpuc.kernel: unbalanced brackets in the module")
    return i


def _types(segment: str) -> list[TensorType]:
    out = []
    for dims, elt in _TENSOR.findall(segment):
        if "?" in dims:
            raise ValueError("tpuc.kernel: the module has a dynamic shape "
                             f"(tensor<{dims}{elt}>); export it with static shapes")
        if elt not in _DTYPES:
            raise ValueError(f"tpuc.kernel: element type {elt} has no torch dtype")
        out.append(TensorType(tuple(int(d) for d in dims.split("x") if d), _DTYPES[elt]))
    return out


def signature(text: str) -> tuple[list[TensorType], list[TensorType]]:
    """The argument and result types of the module's public ``@main``."""
    m = re.search(r"func\.func\s+(?:public\s+)?@main\s*\(", text)
    if not m:
        raise ValueError("tpuc.kernel: the module has no `func.func public @main(...)`")
    args_end = _balanced(text, m.end() - 1)
    args = _types(text[m.end() - 1:args_end])
    rest = text[args_end:].lstrip()
    if not rest.startswith("->"):
        return args, []
    rest = rest[2:].lstrip()
    if rest.startswith("("):
        res_seg = rest[:_balanced(rest, 0)]
    else:  # one result, maybe with attributes: up to the body's brace
        mt = _TENSOR.match(rest)
        if not mt:
            raise ValueError("tpuc.kernel: cannot read the result type of @main")
        res_seg = mt.group(0)
    return args, _types(res_seg)


BackwardFn = Callable[[Sequence[torch.Tensor], Sequence[torch.Tensor], Sequence[torch.Tensor]],
                      Sequence[Union[torch.Tensor, None]]]


class Kernel:
    """A StableHLO module as the op ``torch.ops.tpuc_kernels.<name>``."""

    def __init__(self, text: str, name: str, backward: "Kernel | BackwardFn | None" = None):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"tpuc.kernel: name {name!r} must be a Python identifier")
        self.text = text
        self.inputs, self.outputs = signature(text)
        if not self.outputs:
            raise ValueError("tpuc.kernel: @main returns nothing")
        self.name = name
        self.qualname = f"tpuc_kernels::{name}"
        self.backward = backward
        self.op = _define(self)

    def __call__(self, *xs: torch.Tensor) -> Any:
        return self.op(*xs)

    def __repr__(self) -> str:
        ins = ", ".join(map(str, self.inputs))
        outs = ", ".join(map(str, self.outputs))
        return f"Kernel({self.qualname}: ({ins}) -> ({outs}))"

    def check(self, xs: Sequence[torch.Tensor]) -> None:
        if len(xs) != len(self.inputs):
            raise TypeError(f"{self.qualname} takes {len(self.inputs)} tensors, got {len(xs)}")
        for i, (x, t) in enumerate(zip(xs, self.inputs)):
            if tuple(x.shape) != t.shape or x.dtype != t.dtype:
                raise ValueError(
                    f"{self.qualname}: input {i} is {str(x.dtype).replace('torch.', '')}"
                    f"{list(x.shape)}, the kernel was built for {t} (StableHLO has static "
                    "shapes: build one kernel per shape, e.g. per bucket)")

    def run(self, xs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Runs the module on tpu tensors (no autograd)."""
        from . import _C

        self.check(xs)
        return list(_C._kernel_run(self.text, list(xs)))


_defined: dict[str, str] = {}  # qualname -> text hash (a name is one kernel per process)


def _define(k: Kernel) -> Any:
    digest = hashlib.sha256(k.text.encode()).hexdigest()
    if k.qualname in _defined:
        if _defined[k.qualname] != digest:
            raise ValueError(f"tpuc.kernel: {k.qualname} is already defined with another module; "
                             "give each kernel its own name")
        return getattr(torch.ops.tpuc_kernels, k.name)
    n, m = len(k.inputs), len(k.outputs)
    params = ", ".join(f"Tensor x{i}" for i in range(n))
    rets = "Tensor" if m == 1 else "(" + ", ".join(["Tensor"] * m) + ")"

    def impl(*xs: torch.Tensor) -> Any:
        if any(x.device.type != "tpu" for x in xs):
            raise RuntimeError(f"{k.qualname} runs on tpu tensors; got "
                               f"{sorted({str(x.device) for x in xs})}")
        outs = k.run(xs)
        return outs[0] if m == 1 else tuple(outs)

    op = torch.library.custom_op(k.qualname, impl, mutates_args=(),
                                 schema=f"({params}) -> {rets}")

    @op.register_fake
    def _fake(*xs: torch.Tensor) -> Any:
        k.check(xs)
        dev = xs[0].device if xs else torch.device("tpu")
        outs = [torch.empty(t.shape, dtype=t.dtype, device=dev) for t in k.outputs]
        return outs[0] if m == 1 else tuple(outs)

    if k.backward is not None:
        bwd = k.backward

        def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
            ctx.save_for_backward(*inputs, *(output if m > 1 else (output,)))

        def backward(ctx: Any, *grads: torch.Tensor) -> Any:
            saved = ctx.saved_tensors
            xs, ys = saved[:n], saved[n:]
            gs = [g if g is not None else torch.zeros_like(y) for g, y in zip(grads, ys)]
            if isinstance(bwd, Kernel):
                out = bwd(*xs, *gs)
                out = (out,) if isinstance(out, torch.Tensor) else tuple(out)
            else:
                out = tuple(bwd(xs, ys, gs))
            if len(out) != n:
                raise RuntimeError(f"{k.qualname}: the backward returned {len(out)} gradients "
                                   f"for {n} inputs")
            return out if n > 1 else out[0]

        op.register_autograd(backward, setup_context=setup_context)
    _defined[k.qualname] = digest
    return op


def from_stablehlo(text: str, *, name: str, backward: "Kernel | str | BackwardFn | None" = None) -> Kernel:
    """A kernel from StableHLO text (a module with a public ``@main`` of
    static shapes). ``backward``: another module (or Kernel) taking the
    inputs then one cotangent per result and returning one gradient per
    input, or a Python function ``(inputs, outputs, grad_outputs) -> grads``."""
    if isinstance(backward, str):
        backward = Kernel(backward, name + "_backward")
    return Kernel(text, name, backward)


def _platform() -> str:
    try:
        return torch.tpu.get_device_properties(0).platform.lower()
    except Exception:  # no device: export for the CPU, the embedded plugin
        return "cpu"


def from_jax(fn: Callable, *example_args: torch.Tensor, name: str | None = None,
             backward: bool = True, platform: str | None = None) -> Kernel:
    """A kernel from a JAX function, exported with ``jax.export`` for the
    shapes and dtypes of ``example_args`` (torch tensors) and the active
    plugin's platform. ``backward=True`` also exports its VJP (``jax.vjp``)
    as the backward kernel."""
    try:
        import jax
        from jax import export
    except ImportError as e:
        raise ImportError("tpuc.kernel.from_jax needs JAX: pip install jax (the CPU build is "
                          "enough; keep torch pinned: pip install -c <(echo torch==2.13.0) jax)"
                          ) from e
    import numpy as np

    def spec(t: torch.Tensor) -> Any:
        dt = {torch.bfloat16: jax.numpy.bfloat16}.get(t.dtype)
        if dt is None:
            dt = np.dtype(str(t.dtype).replace("torch.", ""))
        return jax.ShapeDtypeStruct(tuple(t.shape), dt)

    plat = platform or _platform()
    specs = [spec(t) for t in example_args]
    name = name or getattr(fn, "__name__", "jax_kernel").strip("<>").replace("lambda", "jax_lambda")
    exp = export.export(jax.jit(fn), platforms=[plat])(*specs)
    text = exp.mlir_module()
    bwd = None
    if backward:
        n = len(specs)
        out_specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in exp.out_avals]
        multi = len(out_specs) > 1 or isinstance(jax.eval_shape(fn, *specs), (tuple, list))

        def vjp_fn(*args: Any) -> Any:
            _, pull = jax.vjp(fn, *args[:n])
            cts = tuple(args[n:]) if multi else args[n]
            return tuple(pull(cts))

        bexp = export.export(jax.jit(vjp_fn), platforms=[plat])(*specs, *out_specs)
        bwd = Kernel(bexp.mlir_module(), name + "_backward")
    return Kernel(text, name, bwd)
