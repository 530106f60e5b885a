"""What the report shows, read from a session bundle (no plotting here).

Every reader takes the bundle directory and returns plain numpy arrays or
small dicts; a missing file gives an empty result, never an error, so a
report can be made of any bundle (``capture``, ``capture -- CMD``,
``replay``). Kernel tables are reduced with Arrow group-bys (no Python
object per dispatch).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

TOP_KERNELS = 15
ROOFLINE_PATHS = ("roofline.json", "metrics/roofline.json", "profiler/roofline.json")
F64 = npt.NDArray[np.float64]


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object at ``path``, or ``None`` when absent or not an object."""
    try:
        v = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return v if isinstance(v, dict) else None


def latencies_ms(bundle: Path) -> tuple[F64, F64]:
    """``(start_s, latency_ms)`` of every iteration, by start time; start in
    seconds since the first iteration. Empty arrays without iterations."""
    p = bundle / "metrics/inference_iters.parquet"
    if not p.is_file():
        return np.zeros(0), np.zeros(0)
    t = pq.read_table(p, columns=["start_ns", "duration_ns"]).sort_by("start_ns")
    if t.num_rows == 0:
        return np.zeros(0), np.zeros(0)
    start = t.column("start_ns").to_numpy().astype(np.int64)
    dur = t.column("duration_ns").to_numpy().astype(np.float64)
    return (start - start[0]).astype(np.float64) / 1e9, dur / 1e6


def _kernels(bundle: Path, columns: list[str]) -> pa.Table | None:
    p = bundle / "profiler/kernels.parquet"
    if not p.is_file():
        return None
    t = pq.read_table(p, columns=columns)
    return t if t.num_rows else None


def _by(t: pa.Table, key: str) -> list[tuple[str, int, int]]:
    """``(key, count, total_ns)`` per value of ``key``, most time first."""
    t = t.set_column(t.schema.get_field_index(key), key, pc.cast(t.column(key), pa.string()))
    g = t.group_by(key).aggregate([("duration_ns", "count"), ("duration_ns", "sum")])
    rows = zip(g.column(key).to_pylist(), g.column("duration_ns_count").to_pylist(),
               g.column("duration_ns_sum").to_pylist(), strict=True)
    return sorted(((str(k), int(c), int(s)) for k, c, s in rows), key=lambda r: (-r[2], r[0]))


def family_breakdown(bundle: Path) -> list[tuple[str, int, int]]:
    """``(kernel_family, dispatches, total_ns)``, most time first."""
    t = _kernels(bundle, ["kernel_family", "duration_ns"])
    return _by(t, "kernel_family") if t is not None else []


def top_kernels(bundle: Path, n: int = TOP_KERNELS) -> tuple[list[tuple[str, int, int]], int]:
    """The ``n`` kernel names with the most time ``(name, dispatches, total_ns)``
    and the number of distinct names."""
    t = _kernels(bundle, ["kernel_name", "duration_ns"])
    if t is None:
        return [], 0
    rows = _by(t, "kernel_name")
    return rows[:n], len(rows)


def kernel_timeline(bundle: Path, max_points: int = 20_000) -> tuple[F64, F64]:
    """``(start_s, duration_ms)`` of kernel dispatches (every k-th one when
    there are more than ``max_points``), start relative to the first."""
    t = _kernels(bundle, ["start_ns", "duration_ns"])
    if t is None:
        return np.zeros(0), np.zeros(0)
    t = t.sort_by("start_ns")
    step = max(1, -(-t.num_rows // max_points))
    start = t.column("start_ns").to_numpy()[::step].astype(np.int64)
    dur = t.column("duration_ns").to_numpy()[::step].astype(np.float64)
    return (start - start[0]).astype(np.float64) / 1e9, dur / 1e6


def drift_status(bundle: Path) -> list[dict[str, Any]]:
    """One row per (stream, key) of ``metrics/drift_status.parquet``, from each
    detector's last row: ``stream``, ``key``, ``drifting`` (detectors that
    report drift now), ``detectors``, ``drift_events_total`` (sum over
    detectors), ``samples`` (max)."""
    p = bundle / "metrics/drift_status.parquet"
    if not p.is_file():
        return []
    last: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in pq.read_table(p).sort_by("ts_ns").to_pylist():  # one row per detector flush
        last[(r["stream"], r["key"], r["detector"])] = r
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for (stream, key, det), r in sorted(last.items()):
        o = out.setdefault((stream, key), {"stream": stream, "key": key, "drifting": [],
                                           "detectors": [], "drift_events_total": 0,
                                           "samples": 0})
        o["detectors"].append(det)
        if r["drift_detected"]:
            o["drifting"].append(det)
        o["drift_events_total"] += int(r["drift_events_total"])
        o["samples"] = max(o["samples"], int(r["samples"]))
    return list(out.values())


@dataclass
class Roofline:
    """Kernels on a roofline: ceilings in FLOP/s and bytes/s, points as
    arithmetic intensity (FLOP/byte) and achieved FLOP/s; ``note`` explains
    why there is nothing to plot (absent or unreadable file)."""

    path: Path | None = None
    peak_flops: float | None = None
    bandwidth: float | None = None
    names: list[str] = field(default_factory=list)
    intensity: list[float] = field(default_factory=list)
    flops: list[float] = field(default_factory=list)
    note: str | None = None


_PEAK = ("peak_flops_per_s", "peak_flop_per_s", "peak_flops", "flops_per_s")
_BW = ("bandwidth_bytes_per_s", "peak_bandwidth_bytes_per_s", "memory_bandwidth_bytes_per_s",
       "bandwidth")
_AI = ("arithmetic_intensity", "arithmetic_intensity_flop_per_byte", "intensity")
_PERF = ("flops_per_s", "achieved_flops_per_s", "flop_per_s", "performance_flops_per_s")


def _num(d: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for k in keys:
        v = d.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool) and v > 0:
            return float(v)
    return None


def roofline(bundle: Path) -> Roofline:
    """Read ``roofline.json`` (bundle root, ``metrics/`` or ``profiler/``).

    Understood shape: ceilings in ``ceilings`` (or at the top level) as
    ``peak_flops_per_s`` and ``bandwidth_bytes_per_s``; points in ``kernels``
    (or ``points``), each with ``arithmetic_intensity`` (FLOP/byte) and
    ``flops_per_s`` and a ``kernel_name`` (or ``name``). Aliases are in
    ``_PEAK``, ``_BW``, ``_AI``, ``_PERF``."""
    path = next((bundle / p for p in ROOFLINE_PATHS if (bundle / p).is_file()), None)
    if path is None:
        return Roofline(note="no roofline.json in this bundle (it comes from a capture with "
                             "counter collection and a calibration): roofline omitted")
    doc = read_json(path)
    if doc is None:
        return Roofline(path, note=f"{path.name}: not a JSON object: roofline omitted")
    c = doc.get("ceilings")
    ceil: dict[str, Any] = c if isinstance(c, dict) else doc
    r = Roofline(path, _num(ceil, _PEAK), _num(ceil, _BW))
    pts = doc.get("kernels", doc.get("points", []))
    for p in pts if isinstance(pts, list) else []:
        if isinstance(p, dict) and (ai := _num(p, _AI)) and (perf := _num(p, _PERF)):
            r.names.append(str(p.get("kernel_name", p.get("name", "?"))))
            r.intensity.append(ai)
            r.flops.append(perf)
    if not r.intensity:
        r.note = (f"{path.name}: no kernel with arithmetic_intensity and flops_per_s "
                  f"(keys: {', '.join(sorted(doc))[:200]}): roofline omitted")
    return r
