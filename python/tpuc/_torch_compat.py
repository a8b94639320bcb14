"""Differences between the torch versions tpuc supports (2.11 to 2.15), one shim each.

Each shim names the versions it covers and decides by feature, not by version number,
so a nightly or a point release that backports the feature takes the direct path.
``active()`` lists the shims this torch needs (``tpuc info`` prints them).
"""
from __future__ import annotations

import functools
import inspect
import operator
from typing import Callable

import torch

SUPPORTED = ("2.11", "2.15")  # oldest and newest minor release built and tested


@functools.cache
def _split_module_has_tuple_return() -> bool:
    from torch.fx.passes.split_module import split_module

    return "tuple_return" in inspect.signature(split_module).parameters


def split_module_tuple_return(gm: torch.fx.GraphModule,
                              callback: Callable[[torch.fx.Node], int]) -> torch.fx.GraphModule:
    """``split_module(gm, None, callback, keep_original_order=True, tuple_return=True)``.

    torch 2.11 has no ``tuple_return`` (added in 2.12): there a part with a single output
    returns it bare. Emulated: such a part's output is wrapped in a 1-tuple, and its caller
    in the top graph reads element 0, which is what ``tuple_return=True`` builds."""
    from torch.fx.passes.split_module import split_module

    if _split_module_has_tuple_return():
        return split_module(gm, None, callback, keep_original_order=True,  # type: ignore[call-arg]
                            tuple_return=True)
    top = split_module(gm, None, callback, keep_original_order=True)
    changed = False
    for n in list(top.graph.nodes):
        if n.op != "call_module":
            continue
        sub = top.get_submodule(n.target)
        assert isinstance(sub, torch.fx.GraphModule)
        out = sub.graph.output_node()
        if isinstance(out.args[0], (tuple, list)):
            continue  # several outputs (or none): already a tuple
        out.args = ((out.args[0],),)
        sub.recompile()
        with top.graph.inserting_after(n):
            first = top.graph.call_function(operator.getitem, (n, 0))
        n.replace_all_uses_with(first, delete_user_cb=lambda u: u is not first)
        changed = True
    if changed:
        top.recompile()
    return top


def active() -> list[str]:
    """The shims this torch needs, each with the versions it covers."""
    shims = []
    if not _split_module_has_tuple_return():
        shims.append("split_module without tuple_return (torch 2.11)")
    return shims
