"""The doctor's three outputs: text for the terminal, a JSON file for tools,
and an HTML page with plots (matplotlib PNGs embedded)."""
from __future__ import annotations

import base64
import html
import io
import json
from typing import Any

_MARK = {"high": "!!", "medium": "! ", "low": "- ", "info": "  "}


def text(report: dict[str, Any]) -> str:
    s = report["summary"]
    lines = [
        f"tpuc doctor: {' '.join(report['argv'])}",
        f"  platform {report['platform'] or '?'} (advice for {report['target']}), eager mode "
        f"{report['eager_mode'] or '?'}, {report['wall_seconds']:.2f} s",
        f"  {s['executions']} programs run, {s['compiles']} compiled "
        f"({s['compile_seconds']:.2f} s), {s['recompiles']} recompiles, {s['fallbacks']} CPU "
        f"fallbacks, {s['dynamo_graphs']} torch.compile graphs, peak "
        f"{s['peak_bytes'] / 2**20:.1f} MiB",
        "",
    ]
    if not report["findings"]:
        lines.append("  no findings")
    for f in report["findings"]:
        lines.append(f"{_MARK.get(f['severity'], '  ')} [{f['check']}] {f['title']}")
        for site in f["sites"]:
            lines.append(f"     at {site}")
        lines.append(f"     -> {f['advice']}")
        lines.append("")
    return "\n".join(lines)


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def plots(report: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, base64 PNG) pairs; none when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out = []
    t = report["time"]
    keys = ["compile", "cpu_fallbacks", "waiting_for_data", "launch", "to_device", "device_busy"]
    fig, ax = plt.subplots(figsize=(6, 2.6))
    ax.barh(keys, [t[k] for k in keys], color="#4477aa")
    ax.axvline(t["wall"], color="#cc6677", linestyle="--", label=f"wall {t['wall']:.2f} s")
    ax.set_xlabel("seconds")
    ax.legend(loc="lower right")
    out.append(("Where the time went", _png(fig)))
    plt.close(fig)
    rows = report["top_ops"]
    if rows:
        fig, ax = plt.subplots(figsize=(6, 0.35 * len(rows) + 1))
        ax.barh([r["program"][:40] for r in rows][::-1], [r["seconds"] * 1e3 for r in rows][::-1],
                color="#228833")
        ax.set_xlabel("device ms")
        out.append(("Programs with the most device time", _png(fig)))
        plt.close(fig)
    for f in report["findings"]:
        if f["check"] == "recompile" and "sizes" in f["data"]:
            d = f["data"]
            fig, ax = plt.subplots(figsize=(6, 2.4))
            ax.scatter(d["sizes"], [1] * len(d["sizes"]), marker="|", s=300, label="sizes seen")
            for b in d["buckets"]:
                ax.axvline(b, color="#cc6677", linestyle="--")
            ax.set_yticks([])
            ax.set_xlabel(f"dimension {d['dim']} (dashed: suggested buckets {d['buckets']})")
            out.append((f"Sizes that caused recompiles (dimension {d['dim']})", _png(fig)))
            plt.close(fig)
    return out


def html_page(report: dict[str, Any]) -> str:
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>tpuc doctor</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
        ".high{border-left:6px solid #cc3311}.medium{border-left:6px solid #ee7733}"
        ".low,.info{border-left:6px solid #0077bb}.f{padding:.3em 1em;margin:1em 0;"
        "background:#f6f6f6}code{font-size:90%}</style></head><body>",
        f"<h1>tpuc doctor</h1><p><code>{e(' '.join(report['argv']))}</code></p>",
        f"<pre>{e(text(report).split(chr(10) + chr(10))[0])}</pre>",
        "<h2>Findings</h2>",
    ]
    for f in report["findings"]:
        parts.append(f"<div class='f {e(f['severity'])}'><h3>[{e(f['check'])}] {e(f['title'])}</h3>")
        if f["sites"]:
            parts.append("<ul>" + "".join(f"<li><code>{e(s)}</code></li>" for s in f["sites"]) + "</ul>")
        parts.append(f"<p>{e(f['advice'])}</p></div>")
    parts.append("<h2>Plots</h2>")
    for title, png in plots(report):
        parts.append(f"<h3>{e(title)}</h3><img alt='{e(title)}' src='data:image/png;base64,{png}'>")
    parts.append("<h2>Raw</h2><pre>" + e(json.dumps(report, indent=1)[:200000]) + "</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)
