"""Write ``<bundle>/report/report.html`` and ``<bundle>/report/plots/*.png``.

The page is static: one HTML file with inline CSS, PNG plots referenced as
``plots/NAME.png`` (relative), no script, no external resource, so it opens
offline from the file system or an archive. Sections: summary metrics,
bottleneck with its evidence, latency histogram and timeline (a kernel
timeline for bundles without iterations), kernel-family breakdown, top
kernels, roofline (a one-line note when the bundle has no usable
``roofline.json``), drift status, and the ``diff`` verdict when
``regress/verdict.json`` exists. An earlier report is replaced.
"""

from __future__ import annotations

import shutil
from html import escape
from pathlib import Path
from typing import Any

from exporter.report import data, plots

CSS = """body{font-family:sans-serif;margin:24px;max-width:1000px;color:#222;background:#fff}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;margin-top:28px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
img{display:block;max-width:100%;height:auto;margin:8px 0}
p.note{color:#555;font-style:italic}.bad{color:#b00;font-weight:bold}"""


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _table(head: list[str], rows: list[list[Any]], numeric: set[int] | None = None) -> str:
    num = numeric or set()
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f'<td{" class=n" if i in num else ""}>{escape(_fmt(c))}</td>'
                         for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _img(p: plots.Plot) -> str:
    return (f'<img src="plots/{escape(p.file)}" width="{p.width}" height="{p.height}" '
            f'alt="{escape(p.alt)}">')


def _note(text: str) -> str:
    return f'<p class="note">{escape(text)}</p>'


def _summary(info: dict[str, Any], derived: dict[str, Any]) -> str:
    lat = derived.get("latency_ms") or {}
    rows: list[list[Any]] = [
        ["session", info.get("session_id")], ["kind", info.get("kind")],
        ["host", info.get("host")], ["model", info.get("model") or info.get("model_path")],
        ["inputs", ", ".join(map(str, info.get("inputs", []))) or None],
        ["iterations", derived.get("iterations")], ["kernel dispatches", derived.get(
            "kernel_count_total", derived.get("kernel_count"))],
        ["latency p50 / p99 / mean (ms)", " / ".join(_fmt(lat.get(k)) for k in
                                                     ("p50", "p99", "mean"))
         if lat.get("p50") is not None else None],
        ["KAR (kernels per graph node)", derived.get("kar")],
        ["LTS (launch tax)", derived.get("launch_tax")],
        ["SII (scheduler interference)", derived.get("sii")],
        ["GPU active ratio", derived.get("gpu_active_ratio")],
    ]
    return "<h2>Summary</h2>" + _table(["", "value"], [r for r in rows if r[1] is not None])


def _bottleneck(b: dict[str, Any] | None) -> str:
    out = "<h2>Bottleneck</h2>"
    if not b:
        return out + _note("no metrics/bottleneck.json in this bundle")
    out += (f"<p><b>{escape(str(b.get('class')))}</b>, confidence "
            f"{escape(_fmt(b.get('confidence')))}</p>")
    if b.get("recommendation"):
        out += f"<p>{escape(str(b['recommendation']))}</p>"
    ev = [[e.get("signal"), e.get("value"), e.get("op"), e.get("threshold"),
           "yes" if e.get("met") else "no", e.get("weight")] for e in b.get("evidence", [])]
    return out + (_table(["evidence", "value", "op", "threshold", "met", "weight"], ev,
                         {1, 3, 5}) if ev else _note("no evidence recorded"))


def _kernel_rows(rows: list[tuple[str, int, int]]) -> list[list[Any]]:
    total = sum(t for _, _, t in rows) or 1
    return [[k, n, t / 1e6, f"{100 * t / total:.1f}%"] for k, n, t in rows]


def _verdict(bundle: Path) -> str:
    v = data.read_json(bundle / "regress/verdict.json")
    if v is None:
        return ""
    ref = data.read_json(bundle / "regress/baseline_ref.json") or {}
    base = ref.get("baseline", {})
    who = base.get("name") or base.get("path") or "?"
    cls = ' class="bad"' if v.get("regression") else ""
    delta = v.get("latency_delta_pct", v.get("kernel_time_delta_pct"))
    if v.get("mode") == "kernels":
        delta = v.get("kernel_time_delta_pct")
    return ("<h2>Regression verdict</h2>"
            f"<p{cls}>regression: {escape(str(v.get('regression')))} "
            f"(severity {escape(str(v.get('severity')))}, mode {escape(str(v.get('mode')))}, "
            f"delta {escape(_fmt(delta))}%) against baseline {escape(str(who))}</p>")


def write_report(bundle: Path) -> Path:
    """Write the report of ``bundle``; returns the path of ``report.html``.

    Raises ``FileNotFoundError`` when ``bundle`` has no ``session.json``."""
    bundle = Path(bundle)
    info = data.read_json(bundle / "session.json")
    if info is None:
        raise FileNotFoundError(f"{bundle / 'session.json'}: missing (not a session bundle?)")
    derived = data.read_json(bundle / "metrics/derived_metrics.json") or {}
    out = bundle / "report"
    if out.exists():
        shutil.rmtree(out)
    pdir = out / "plots"
    pdir.mkdir(parents=True)
    parts = [f"<h1>aaco-exporter report: {escape(str(info.get('session_id')))}</h1>",
             _summary(info, derived),
             _bottleneck(data.read_json(bundle / "metrics/bottleneck.json")),
             _verdict(bundle), "<h2>Latency</h2>"]
    start, lat = data.latencies_ms(bundle)
    if len(lat):
        parts += [_img(plots.latency_histogram(lat, pdir)),
                  _img(plots.latency_timeline(start, lat, pdir))]
    else:
        parts.append(_note("no iterations in this bundle (a replay or capture -- CMD without "
                           "iteration markers): latency plots omitted; kernel timeline below"))
        ks, kd = data.kernel_timeline(bundle)
        if len(kd):
            parts.append(_img(plots.kernel_timeline(ks, kd, pdir)))
    fams = data.family_breakdown(bundle)
    parts.append("<h2>Kernel families</h2>")
    if fams:
        parts += [_img(plots.family_breakdown(fams, pdir)),
                  _table(["family", "dispatches", "total (ms)", "share"], _kernel_rows(fams),
                         {1, 2, 3})]
    else:
        parts.append(_note("no kernel spans in this bundle"))
    top, distinct = data.top_kernels(bundle)
    parts.append("<h2>Top kernels</h2>")
    if top:
        parts += [_img(plots.top_kernels(top, pdir)),
                  f"<p>top {len(top)} of {distinct} kernel names by total time</p>",
                  _table(["kernel", "dispatches", "total (ms)", "share of top"],
                         _kernel_rows(top), {1, 2, 3})]
    else:
        parts.append(_note("no kernel spans in this bundle"))
    parts.append("<h2>Roofline</h2>")
    roof = data.roofline(bundle)
    parts.append(_note(roof.note) if roof.note else _img(plots.roofline(roof, pdir)))
    parts.append("<h2>Drift status</h2>")
    drift = data.drift_status(bundle)
    parts.append(_table(
        ["stream", "key", "drifting now", "drift events", "samples", "detectors"],
        [[r["stream"], r["key"] or "-", ", ".join(r["drifting"]) or "none",
          r["drift_events_total"], r["samples"], ", ".join(r["detectors"])] for r in drift],
        {3, 4})
        if drift else _note("no metrics/drift_status.parquet in this bundle"))
    html = ("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
            f"<title>aaco-exporter report {escape(str(info.get('session_id')))}</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(p for p in parts if p)
            + "\n</body></html>\n")
    (out / "report.html").write_text(html, encoding="utf-8")
    return out / "report.html"
