"""torch.profiler on "tpu": the core's compiles, launches, transfers and the
CPU fallbacks appear as events (tpuc::compile / tpuc::execute /
tpuc::to_host / tpuc::to_device / tpuc::cpu_fallback, named by the op), nested
under the aten op that caused them, and in the exported Chrome trace."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from tpu_testing import quiet_fallback_warnings  # noqa: F401


def names(prof: profile) -> list[str]:
    return [e.name for e in prof.events()]


def has(prof_names: list[str] | set[str], prefix: str) -> bool:
    """An event named `prefix` (the op may be its .out form: aten::mm.out)."""
    return any(n == prefix or n.startswith(prefix + ".") for n in prof_names)


def parent_names(prof: profile, prefix: str) -> set[str]:
    out = set()
    for e in prof.events():
        if e.name.startswith(prefix):
            p = e.cpu_parent
            while p is not None and p.name.startswith("tpuc::"):
                p = p.cpu_parent
            out.add(p.name if p is not None else "")
    return out


def test_strict_mode_events(tmp_path: Path) -> None:
    a = torch.randn(37, 41)  # a shape no other test compiles
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        x = a.to("tpu")
        y = torch.mm(x, x.t())
        host = y.cpu()
    n = names(prof)
    assert "tpuc::to_device" in n
    assert has(n, "tpuc::compile aten::mm")
    assert has(n, "tpuc::execute aten::mm")
    assert "tpuc::to_host" in n
    # launched by the op itself
    assert "aten::mm" in parent_names(prof, "tpuc::execute aten::mm")
    assert torch.allclose(host, a @ a.t(), rtol=1e-5, atol=1e-4)
    # a second call hits the signature cache: launched, not compiled
    with profile(activities=[ProfilerActivity.CPU]) as prof2:
        torch.mm(x, x.t()).cpu()
    n2 = names(prof2)
    assert has(n2, "tpuc::execute aten::mm") and not has(n2, "tpuc::compile aten::mm")
    # the Chrome trace has them
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    tnames = {e.get("name") for e in events}
    assert has(tnames, "tpuc::compile aten::mm") and has(tnames, "tpuc::execute aten::mm")
    assert "tpuc::to_host" in tnames


def test_fallback_events(quiet_fallback_warnings: None) -> None:
    x = torch.tensor([3.0, 1.0, 3.0, 2.0], device="tpu")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        u = torch.unique(x)
    assert "tpuc::cpu_fallback aten::_unique2" in names(prof)
    assert "aten::_unique2" in parent_names(prof, "tpuc::cpu_fallback")
    assert u.cpu().tolist() == [1.0, 2.0, 3.0]


def test_fused_mode_events() -> None:
    a = torch.randn(29, 31)
    with torch.tpu.eager_mode("fused"):
        x = a.to("tpu")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            y = (x * 3 + 1).sum()
            y.item()
    n = names(prof)
    assert "tpuc::execute fused chunk" in n
    assert torch.allclose(torch.tensor(y.item()), (a * 3 + 1).sum(), rtol=1e-5)


def test_recompile_marker() -> None:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for n in (5, 6):
            (torch.ones(n, 3, device="tpu") * 2).cpu()
    assert any(s.startswith("tpuc::recompile aten::") for s in names(prof))

