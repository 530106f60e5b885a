"""The report's plots, drawn with matplotlib's Agg renderer into PNG files.

Figures are built with :class:`matplotlib.figure.Figure` (no pyplot, no
global state, no display). Every function writes ``<out>/<name>.png`` at
:data:`DPI` and returns a :class:`Plot` (file name, pixel size, alt text)
for the HTML page. Needs the ``report`` extra (matplotlib).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from exporter.report.data import F64, Roofline

DPI = 100
SIZE = (9.0, 3.6)  # inches: 900 x 360 px


@dataclass(frozen=True)
class Plot:
    """One PNG under ``plots/``: ``file`` name, ``width`` x ``height`` pixels, ``alt`` text."""

    file: str
    width: int
    height: int
    alt: str


def _save(fig: Figure, out: Path, name: str, alt: str) -> Plot:
    fig.tight_layout()
    path = out / f"{name}.png"
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    w, h = fig.get_size_inches() * DPI
    return Plot(path.name, round(w), round(h), alt)


def latency_histogram(lat_ms: F64, out: Path) -> Plot:
    """Histogram of iteration latency (ms) with p50 and p99 marked."""
    fig = Figure(figsize=SIZE)
    ax = fig.add_subplot()
    ax.hist(lat_ms, bins=min(60, max(10, len(lat_ms) // 5)), color="C0")
    for q, style in ((50, "--"), (99, ":")):
        v = float(np.percentile(lat_ms, q))
        ax.axvline(v, color="C3", linestyle=style, label=f"p{q} {v:.3g} ms")
    ax.set_xlabel("iteration latency (ms)")
    ax.set_ylabel("iterations")
    ax.legend()
    return _save(fig, out, "latency_histogram", f"latency histogram of {len(lat_ms)} iterations")


def latency_timeline(start_s: F64, lat_ms: F64, out: Path) -> Plot:
    """Iteration latency (ms) against start time (s since the first iteration)."""
    fig = Figure(figsize=SIZE)
    ax = fig.add_subplot()
    ax.plot(start_s, lat_ms, marker=".", linestyle="-", linewidth=0.8, color="C0")
    ax.set_xlabel("time since first iteration (s)")
    ax.set_ylabel("latency (ms)")
    return _save(fig, out, "latency_timeline", "iteration latency over time")


def kernel_timeline(start_s: F64, dur_ms: F64, out: Path) -> Plot:
    """Kernel duration (ms, log scale) against start time: for bundles without iterations."""
    fig = Figure(figsize=SIZE)
    ax = fig.add_subplot()
    ax.scatter(start_s, np.maximum(dur_ms, 1e-6), s=4, color="C0")
    ax.set_yscale("log")
    ax.set_xlabel("time since first dispatch (s)")
    ax.set_ylabel("kernel duration (ms)")
    return _save(fig, out, "kernel_timeline", "kernel durations over time")


def shorten(name: str, n: int) -> str:
    """``name`` cut to ``n`` characters in the middle (head and tail both
    tell kernels apart: a C++ signature's head, an ONNX node path's tail).

    >>> shorten("abcdefghij", 7)
    'abc…hij'
    """
    if len(name) <= n:
        return name
    head = (n - 1) // 2
    return name[:head] + "…" + name[len(name) - (n - 1 - head):]


def _barh(rows: list[tuple[str, int, int]], out: Path, name: str, alt: str,
          label_chars: int) -> Plot:
    fig = Figure(figsize=(SIZE[0], max(2.0, 0.5 + 0.3 * len(rows))))
    ax = fig.add_subplot()
    labels = [shorten(k, label_chars) for k, _, _ in rows]
    total = sum(t for _, _, t in rows) or 1
    y = np.arange(len(rows))
    ax.barh(y, [t / 1e6 for _, _, t in rows], color="C0")
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("total kernel time (ms)")
    for i, (_, n, t) in enumerate(rows):
        ax.annotate(f" {n} calls, {100 * t / total:.1f}%", (t / 1e6, i), va="center",
                    fontsize=7)
    ax.margins(x=0.25)
    return _save(fig, out, name, alt)


def family_breakdown(rows: list[tuple[str, int, int]], out: Path) -> Plot:
    """Total kernel time per kernel family (horizontal bars, % of all)."""
    return _barh(rows, out, "kernel_families", "kernel time per family", 30)


def top_kernels(rows: list[tuple[str, int, int]], out: Path) -> Plot:
    """Total time of the top kernel names (names cut to 60 characters in the middle)."""
    return _barh(rows, out, "top_kernels", f"top {len(rows)} kernels by time", 60)


def roofline(r: Roofline, out: Path) -> Plot:
    """Kernels on a log-log roofline: the memory roof (bandwidth x intensity)
    up to the compute roof (peak FLOP/s), when the ceilings are known."""
    fig = Figure(figsize=(SIZE[0], 4.5))
    ax = fig.add_subplot()
    ai = np.asarray(r.intensity)
    lo, hi = float(ai.min()) / 4, float(ai.max()) * 4
    if r.peak_flops and r.bandwidth:
        lo, hi = min(lo, r.peak_flops / r.bandwidth / 8), max(hi, r.peak_flops / r.bandwidth * 8)
        x = np.geomspace(lo, hi, 200)
        ax.plot(x, np.minimum(r.peak_flops, r.bandwidth * x), color="C3", label="roofline")
    ax.scatter(ai, r.flops, color="C0", zorder=3, label="kernels")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("performance (FLOP/s)")
    ax.legend()
    return _save(fig, out, "roofline", f"roofline with {len(ai)} kernels")
