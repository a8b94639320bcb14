"""Turns what the probe recorded (probe.py) into findings: each one a check
name, a severity, a title, the user's file:line where it applies, the
evidence and what to change."""
from __future__ import annotations

import collections
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

# What to do about the ops that commonly fall back.
_FALLBACK_ADVICE = {
    "aten::_unique2": "torch.unique's output size depends on the data: compute it once outside "
    "the step (or on the host), or use a fixed-size alternative (torch.bincount with minlength, "
    "a mask).",
    "aten::unique_dim": "as torch.unique: keep it out of the step or use a fixed-size mask.",
    "aten::unique_consecutive": "as torch.unique: keep it out of the step.",
    "aten::_local_scalar_dense": "a .item() / bool(tensor) / int(tensor) reads a value back to the "
    "host: keep such reads out of the step (log every N steps).",
}

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}


@dataclass
class Finding:
    check: str
    severity: str  # high | medium | low | info
    title: str
    advice: str
    sites: list[str] = field(default_factory=list)  # "file:line (function): code"
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _site(frames: list[dict[str, Any]], innermost: bool = True) -> str:
    if not frames:
        return "(no user frame: inside PyTorch, e.g. autograd's backward)"
    f = frames[-1] if innermost else frames[0]
    return f"{f['file']}:{f['line']} ({f['function']}): {f['code']}"


def _chain(frames: list[dict[str, Any]]) -> str:
    """'inner file:line, called from outer file:line'."""
    if not frames:
        return _site(frames)
    s = _site(frames)
    if len(frames) > 1:
        o = frames[0]
        s += f"  [called from {o['file']}:{o['line']}]"
    return s


# ---- fallbacks ---------------------------------------------------------------------------


def check_fallbacks(raw: dict[str, Any]) -> list[Finding]:
    counts: dict[str, int] = raw.get("stats", {}).get("fallbacks", {}) or {}
    events = raw.get("events", {}).get("fallback", [])
    times = raw.get("observer", {}).get("fallback_by_name", {})
    by_op: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for e in events:
        by_op[e["op"]].append(e)
    out = []
    for op, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        evs = by_op.get(op, [])
        sites = collections.Counter(_chain(e["frames"]) for e in evs)
        why = evs[0]["detail"] if evs else ""
        secs = times.get(op, {}).get("seconds", 0.0)
        advice = _FALLBACK_ADVICE.get(op, "")
        if not advice:
            advice = (f"{op} has no device lowering ({why or 'see the warning'}): each call moves "
                      "its tensors to the host and back. Use an equivalent op the device runs, "
                      "move the call out of the hot loop, or open an issue asking for a lowering. "
                      "TPUC_FALLBACK=error turns every fallback into an error at its line.")
        out.append(Finding(
            check="fallback", severity="high" if n > 1 else "medium",
            title=f"{op} ran on the CPU {n} time(s) ({secs * 1e3:.1f} ms)",
            advice=advice,
            sites=[f"{s}  x{c}" for s, c in sites.most_common(5)],
            data={"op": op, "count": n, "why": why, "seconds": secs},
        ))
    return out


# ---- recompiles ------------------------------------------------------------------------------

_SHAPE = re.compile(r"^(?P<op>[^:]+::[^:]+): input (?P<i>\d+) shape \[(?P<a>[^\]]*)\] -> \[(?P<b>[^\]]*)\]$")


def _dims(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s.split(",") if x.strip())


def buckets_for(values: list[int], multiple: int = 8) -> list[int]:
    """Powers of two (at least `multiple`, rounded up to a multiple of it)
    covering every observed value: padding each value up to the next bucket
    leaves one program per bucket."""
    out = set()
    for v in values:
        b = max(multiple, 1 << max(0, math.ceil(math.log2(max(v, 1)))))
        b = ((b + multiple - 1) // multiple) * multiple
        out.add(b)
    return sorted(out)


def check_recompiles(raw: dict[str, Any], multiple: int) -> list[Finding]:
    """A call site whose op kept compiling for new shapes. The core notes a
    recompile whenever an op compiles for a signature other than its last
    one, which includes the first call at each of several sites (two Linear
    layers of different sizes); what matters is one site seeing several
    shapes, so the shapes are collected per (site, op, input)."""
    events = raw.get("events", {}).get("recompile", [])
    per_site: dict[tuple, dict[str, Any]] = {}
    unattributed = 0
    other: collections.Counter[str] = collections.Counter()
    for e in events:
        if not e["frames"]:
            unattributed += 1  # autograd's backward: no user frame
            continue
        site = _chain(e["frames"])
        m = _SHAPE.match(e["detail"])
        if not m:
            other[(site, e["detail"].split(":")[0])] += 1
            continue
        key = (site, m["op"], int(m["i"]))
        rec = per_site.setdefault(key, {"shapes": set(), "events": 0, "example": e["detail"]})
        rec["shapes"].add(_dims(m["b"]))
        rec["events"] += 1
    # a dimension that varies at a site; findings merge sites with the same sizes
    groups: dict[tuple, dict[str, Any]] = {}
    for (site, op, _i), rec in per_site.items():
        shapes = rec["shapes"]
        # two sizes at one line are often two layers (fc2(fc1(x))): three or more vary
        if len(shapes) < 3 or len({len(s) for s in shapes}) != 1:
            continue
        rank = len(next(iter(shapes)))
        for d in range(rank):
            vals = {s[d] for s in shapes}
            if len(vals) < 3:
                continue
            g = groups.setdefault(tuple(sorted(vals)), {"sites": collections.Counter(),
                                                        "ops": collections.Counter(),
                                                        "events": 0, "dim": d, "rank": rank,
                                                        "example": rec["example"]})
            g["sites"][site] += rec["events"]
            g["ops"][op] += rec["events"]
            g["events"] += rec["events"]
    # a set of sizes inside a larger one (a site that saw fewer of the lengths) joins it
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[0]), -kv[1]["events"]))
    merged: list[tuple[tuple, dict[str, Any]]] = []
    for vals_t, g in ranked:
        host = next((h for hv, h in merged if set(vals_t) <= set(hv) and h["dim"] == g["dim"]), None)
        if host is None:
            merged.append((vals_t, g))
            continue
        host["sites"].update(g["sites"])
        host["ops"].update(g["ops"])
        host["events"] += g["events"]
    merged.sort(key=lambda kv: -kv[1]["events"])
    out = []
    for vals_t, g in merged[:3]:
        vals = list(vals_t)
        bk = buckets_for(vals, multiple)
        d = g["dim"]
        extra = (f" (plus {unattributed} in autograd's backward, from the same shapes)"
                 if unattributed else "")
        out.append(Finding(
            check="recompile", severity="high" if len(vals) > 2 else "medium",
            title=(f"{g['events']} recompile(s){extra}: dimension {d} of rank-{g['rank']} inputs "
                   f"took {len(vals)} sizes ({_short(vals)})"),
            advice=(f"Every new size compiles new programs. Pad dimension {d} up to a few bucket "
                    f"sizes: {bk} cover every size seen ({len(bk)} program set(s) instead of "
                    f"{len(vals)}), e.g. torch.nn.functional.pad(x, (0, bucket - x.shape[{d}])) "
                    "with a mask for the padding (attention mask / ignore_index=-100 in the "
                    "loss); or keep sequence lengths fixed in the data loader."),
            sites=[f"{s}  x{c}" for s, c in g["sites"].most_common(5)],
            data={"dim": d, "rank": g["rank"], "sizes": vals, "buckets": bk,
                  "recompiles": g["events"], "unattributed": unattributed,
                  "ops": dict(g["ops"].most_common(10)), "example": g["example"]},
        ))
    repeated = {k: n for k, n in other.items() if n >= 3}
    if repeated:
        out.append(Finding(
            check="recompile", severity="medium",
            title=f"{sum(repeated.values())} recompile(s) for other changes at the same lines "
                  "(dtype, strides, static arguments)",
            advice=("A changing dtype, memory layout (strides: a transpose or slice fed in) or "
                    "static argument (an int or list given to the op, e.g. a dim or a size) "
                    "compiles a new program. Keep them the same from step to step "
                    "(.contiguous() once, fixed dtypes)."),
            sites=[f"{site} ({op})  x{n}" for (site, op), n in sorted(repeated.items(), key=lambda kv: -kv[1])[:5]],
            data={"count": sum(repeated.values())},
        ))
    return out


def _short(vals: list[int]) -> str:
    return ", ".join(map(str, vals)) if len(vals) <= 12 else \
        ", ".join(map(str, vals[:6])) + f", ... ({len(vals)} in all) ..., " + ", ".join(map(str, vals[-3:]))


# ---- torch.compile -----------------------------------------------------------------------------

_BREAK_AT = re.compile(r"(/[^\s:\"']+\.py):(\d+)|File \"(/[^\"]+\.py)\", line (\d+)")


def check_graph_breaks(raw: dict[str, Any]) -> list[Finding]:
    dyn = raw.get("dynamo", {})
    counters = dyn.get("graph_break", {}) or {}
    logs = [r for r in raw.get("dynamo_logs", []) if "graph_break" in r["logger"]]
    if not counters and not logs:
        return []
    sites: collections.Counter[str] = collections.Counter()
    for r in logs:
        for m in _BREAK_AT.finditer(r["message"]):
            path, line = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            if "site-packages" not in path and "/lib/python3" not in path:
                sites[f"{path}:{line}"] += 1
                break
    total = sum(counters.values()) if counters else len(logs)
    why: collections.Counter[str] = collections.Counter()
    for r in logs:
        for ln in r["message"].splitlines():
            if "reason" in ln.lower():
                why[ln.split(":", 1)[-1].strip()[:200]] += 1
                break
    reasons = sorted(counters.items(), key=lambda kv: -kv[1])[:8]
    return [Finding(
        check="graph_break", severity="high" if total > 1 else "medium",
        title=f"torch.compile: {total} graph break(s)"
              + (f" ({why.most_common(1)[0][0]})" if why else ""),
        advice=("Each break splits the compiled function: the code between graphs runs eagerly "
                "and each graph is its own program. Move what breaks (print, .item(), "
                "data-dependent Python control flow, unsupported calls) out of the compiled "
                "function, or replace it (torch.where instead of `if tensor:`); "
                "torch._dynamo.explain(fn)(*args) lists them too."),
        sites=[f"{s}  x{c}" for s, c in sites.most_common(5)],
        data={"reasons": dict(reasons) or dict(why.most_common(8)), "log_records": len(logs)},
    )]


def check_dynamo_recompiles(raw: dict[str, Any]) -> list[Finding]:
    logs = [r for r in raw.get("dynamo_logs", []) if "recompiles" in r["logger"]]
    if not logs:
        return []
    reasons = collections.Counter()
    for r in logs:
        lines = [ln.strip() for ln in r["message"].splitlines() if ln.strip()]
        reasons[" / ".join(lines[1:3])[:300] if len(lines) > 1 else lines[0][:300]] += 1
    return [Finding(
        check="dynamo_recompile", severity="medium",
        title=f"torch.compile recompiled {len(logs)} time(s)",
        advice=("A guard failed (a new shape, dtype or Python value): pad inputs to fixed "
                "buckets, or mark the varying dimension dynamic only if the backend handles "
                "it (backend 'tpu' compiles per static shape: bucket instead)."),
        sites=[s for s, _ in reasons.most_common(5)],
        data={"count": len(logs)},
    )]


# ---- time ------------------------------------------------------------------------------------


def time_breakdown(raw: dict[str, Any]) -> dict[str, float]:
    obs = raw.get("observer", {})
    k = obs.get("by_kind", {})
    wall = float(raw.get("wall_seconds", 0.0))
    device = sum(v["seconds"] for v in obs.get("device_by_name", {}).values())
    compile_s = k.get("compile", {}).get("seconds", 0.0)
    fallback_s = k.get("fallback", {}).get("seconds", 0.0)
    wait_s = k.get("to_host", {}).get("seconds", 0.0)
    return {
        "wall": wall,
        "device_busy": device,
        "compile": compile_s,
        "cpu_fallbacks": fallback_s,
        "waiting_for_data": wait_s,
        "launch": k.get("execute", {}).get("seconds", 0.0),
        "to_device": k.get("to_device", {}).get("seconds", 0.0),
        "host_other": max(0.0, wall - compile_s - fallback_s - wait_s),
    }


def check_time(raw: dict[str, Any]) -> list[Finding]:
    t = time_breakdown(raw)
    wall = t["wall"]
    if wall <= 0:
        return []
    out = []
    if t["compile"] > 0.25 * wall:
        out.append(Finding(
            check="compile_time", severity="high" if t["compile"] > 0.5 * wall else "medium",
            title=f"compiling took {t['compile']:.2f} s of {wall:.2f} s ({100 * t['compile'] / wall:.0f}%)",
            advice=("Programs are compiled once per shape: fewer shapes (see recompiles) or a "
                    "warm disk cache (TPUC_CACHE_DIR, kept between runs) remove this. Fused mode "
                    "(TPUC_EAGER=fused) or torch.compile(backend='tpu') compile a step as one "
                    "program instead of one per op."),
            data=t,
        ))
    busy = t["device_busy"] / wall
    bound = "device-bound" if busy > 0.6 else "host-bound"
    adv = ("The device is busy most of the time: speed comes from the programs themselves "
           "(larger batches per program, bf16, the ops with most device time below)."
           if bound == "device-bound" else
           "The device is idle most of the time: the host (Python, dispatch of one program per "
           "op, compiles, fallbacks, reads with .item()) is the limit. Fused mode "
           "(TPUC_EAGER=fused) or torch.compile(model, backend='tpu') run a step as one "
           "program; keep .item()/.cpu() out of the loop.")
    out.append(Finding(
        check="bound", severity="info",
        title=f"{bound}: device busy {100 * busy:.0f}% of {wall:.2f} s wall",
        advice=adv, data={"bound": bound, **t},
    ))
    return out


def top_ops(raw: dict[str, Any], n: int = 10) -> list[dict[str, Any]]:
    dev = raw.get("observer", {}).get("device_by_name", {})
    total = sum(v["seconds"] for v in dev.values()) or 1.0
    rows = sorted(dev.items(), key=lambda kv: -kv[1]["seconds"])[:n]
    return [{"program": k, "count": v["count"], "seconds": v["seconds"],
             "share": v["seconds"] / total} for k, v in rows]


def check_top_ops(raw: dict[str, Any]) -> list[Finding]:
    rows = top_ops(raw)
    if not rows:
        return []
    head = ", ".join(f"{r['program']} {100 * r['share']:.0f}%" for r in rows[:3])
    return [Finding(
        check="top_ops", severity="info", title=f"most device time: {head}",
        advice="The programs (one per op in strict mode, one per chunk/graph otherwise) with "
               "the most device time, launch to ready, serialised per device.",
        data={"rows": rows},
    )]


# ---- memory ---------------------------------------------------------------------------------


def check_memory(raw: dict[str, Any]) -> list[Finding]:
    mem = raw.get("memory", {})
    peak = int(mem.get("peak_bytes", 0))
    if not peak:
        return []
    live = mem.get("live_at_exit", {})
    held = {k: int(v) for k, v in live.items()}
    known = held.get("parameters", 0) + held.get("gradients", 0) + held.get("optimizer_state", 0)
    rest = max(0, peak - known)
    parts = ", ".join(f"{k} {_mb(v)}" for k, v in held.items() if v)
    return [Finding(
        check="memory", severity="info",
        title=f"peak device memory {_mb(peak)}",
        advice=(f"At exit: {parts or 'no tpu tensors alive'}. The rest of the peak "
                f"({_mb(rest)}) is activations, temporaries and program scratch. To lower it: "
                "bf16 parameters/activations, torch.utils.checkpoint on blocks, a smaller batch "
                "per step with gradient accumulation, optimizer steps inside "
                "torch.compile(backend='tpu') (updated in place)."),
        data={"peak_bytes": peak, "live_at_exit": held, "activations_and_temporaries": rest},
    )]


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


# ---- hardware ----------------------------------------------------------------------------------


def check_hardware(raw: dict[str, Any], target: str) -> list[Finding]:
    """Advice for TPUs (MXU 128x128; (8, 128) vreg tiles; bf16 native)."""
    if target != "tpu":
        return []
    shapes = raw.get("shapes", [])
    out = []
    head_sites: collections.Counter[str] = collections.Counter()
    head_dims: set[int] = set()
    dim_sites: collections.Counter[str] = collections.Counter()
    bad_dims: set[int] = set()
    f32_sites: collections.Counter[str] = collections.Counter()
    for s in shapes:
        site = _site([s["site"]] if s.get("site") else [])
        if s["kind"] == "attention" and s["shapes"]:
            hd = s["shapes"][0][-1]
            if hd % 128:
                head_dims.add(hd)
                head_sites[site] += 1
        if s["kind"] in ("linear", "matmul") and len(s["shapes"]) >= 2:
            w = s["shapes"][1]
            dims = list(w[-2:]) if s["kind"] == "linear" else list(s["shapes"][0][-1:]) + list(w[-1:])
            for d in dims:
                if d % 128 and d > 8:
                    bad_dims.add(d)
                    dim_sites[site] += 1
        if any(dt == "torch.float32" for dt in s["dtypes"]) and s["kind"] in ("linear", "matmul", "attention"):
            f32_sites[site] += 1
    if head_dims:
        out.append(Finding(
            check="hw_head_dim", severity="medium",
            title=f"attention head_dim {sorted(head_dims)} is not a multiple of 128",
            advice=("The TPU's matrix units are 128 wide: head_dim 64 leaves half of each unit "
                    "idle in q@k^T and p@v. Prefer head_dim 128 (fewer, wider heads: "
                    "n_heads = d_model // 128)."),
            sites=[f"{s}  x{c}" for s, c in head_sites.most_common(5)],
            data={"head_dims": sorted(head_dims)},
        ))
    if bad_dims:
        out.append(Finding(
            check="hw_dims", severity="medium",
            title=f"matmul dimensions not multiples of 128: {sorted(bad_dims)[:10]}",
            advice=("TPU tiles are (8, 128): a dimension that is not a multiple of 128 (of 8 for "
                    "the second-to-last) is padded, wasting the padding's work and memory. Round "
                    "hidden sizes, vocabulary and feature sizes up to multiples of 128."),
            sites=[f"{s}  x{c}" for s, c in dim_sites.most_common(5)],
            data={"dims": sorted(bad_dims)},
        ))
    if f32_sites:
        out.append(Finding(
            check="hw_f32", severity="medium",
            title="matmuls/attention in float32",
            advice=("TPUs compute matmuls in bf16 natively (float32 takes several passes) and "
                    "bf16 halves memory traffic: use torch.autocast('tpu', dtype=torch.bfloat16) "
                    "around the forward, or model.to(torch.bfloat16) with float32 optimizer "
                    "state."),
            sites=[f"{s}  x{c}" for s, c in f32_sites.most_common(5)],
        ))
    return out


# ---- all -------------------------------------------------------------------------------------


def analyze(raw: dict[str, Any], target: str | None = None) -> dict[str, Any]:
    platform = (raw.get("platform") or "").lower()
    tgt = (target or platform or "cpu").lower()
    multiple = 128 if tgt == "tpu" else 8
    findings: list[Finding] = []
    findings += check_fallbacks(raw)
    findings += check_recompiles(raw, multiple)
    findings += check_graph_breaks(raw)
    findings += check_dynamo_recompiles(raw)
    findings += check_time(raw)
    findings += check_top_ops(raw)
    findings += check_memory(raw)
    findings += check_hardware(raw, tgt)
    findings.sort(key=lambda f: SEVERITY_ORDER.get(f.severity, 9))
    stats = raw.get("stats", {})
    return {
        "argv": raw.get("argv", []),
        "platform": platform,
        "target": tgt,
        "eager_mode": raw.get("eager_mode", ""),
        "wall_seconds": raw.get("wall_seconds", 0.0),
        "summary": {
            "fallbacks": sum((stats.get("fallbacks") or {}).values()),
            "recompiles": stats.get("recompiles", 0),
            "compiles": stats.get("compiles", 0),
            "executions": stats.get("executions", 0),
            "compile_seconds": stats.get("compile_seconds", 0.0),
            "dynamo_graphs": stats.get("dynamo_compiles", 0),
            "peak_bytes": raw.get("memory", {}).get("peak_bytes", 0),
        },
        "time": time_breakdown(raw),
        "top_ops": top_ops(raw),
        "findings": [f.to_dict() for f in findings],
    }
