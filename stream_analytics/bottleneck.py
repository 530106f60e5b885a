"""Rule-based bottleneck classifier with ranked evidence.

Input: :class:`Features`, windowed signals with optional fields (a missing
source leaves its fields ``None`` and the rules that need them are skipped).
Output: :class:`Verdict` with one of :data:`CLASSES` (or ``"unknown"``), a
confidence in [0, 1], the evidence ranked by weighted margin, and a
recommendation. Thresholds come from :mod:`stream_analytics.thresholds`.

Decision: each class has weighted rules, one of them *primary*. A class's
score is the weight of its satisfied rules over the weight of its evaluable
rules. Environmental causes (``throttled``, ``cpu-bound``) win first when
their primary rule holds and their score is >= 0.5, because they distort
every other signal (a preempted host thread inflates launch tax, a throttled
GPU lengthens kernels). Otherwise the workload class (``launch-bound``,
``memory-bound``, ``compute-bound``) with the highest score and a satisfied
primary rule wins. Confidence = score x (0.5 + 0.5 x share of the class's
rule weight that could be evaluated).

The roofline rules (``roofline_memory_share``, ``roofline_compute_share``,
from a bundle's ``roofline.json``) are primary for ``memory-bound`` /
``compute-bound`` and weigh 4, more than any activity heuristic; when a
bundle has no roofline they are left out of the evaluable share, so verdicts
without counters are unchanged. When they decide, they lead the evidence.

>>> v = classify(Features(micro_kernel_share=0.95, launch_tax=2.0, active_ratio=0.3))
>>> v.label, round(v.confidence, 3)
('launch-bound', 0.917)
>>> classify(Features(micro_kernel_share=0.95, launch_tax=2.0, sii=0.5)).label
'cpu-bound'
>>> classify(Features()).label
'unknown'
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stream_analytics import thresholds as T
from stream_analytics.groups import group_reduce
from stream_analytics.kernel_stats import busy_union_ns
from stream_analytics.sii import active_totals

CLASSES: tuple[str, ...] = (
    "launch-bound",
    "cpu-bound",
    "memory-bound",
    "compute-bound",
    "throttled",
)
"""Seed taxonomy, in no particular order."""

RECOMMENDATIONS: Mapping[str, str] = {
    "launch-bound": (
        "Kernels are too small to hide launch latency: fuse ops (ORT graph optimisation level "
        "ALL, MIGraphX fusion), capture the graph (HIP graphs), or raise the batch size."
    ),
    "cpu-bound": (
        "Host threads wait on the run queue: pin the inference process to dedicated cores "
        "(taskset/cgroups cpuset), cut co-located load, or lower intra-op thread counts."
    ),
    "memory-bound": (
        "Memory traffic dominates: use lower-precision weights/activations (fp16/bf16/int8), "
        "fuse memory-bound elementwise chains, check tensor layouts."
    ),
    "compute-bound": (
        "The device is saturated with math: use faster precision (fp16/bf16, FP8 on MI300), "
        "tuned GEMM kernels (hipBLASLt tuning), or scale out."
    ),
    "throttled": (
        "Clocks are limited by power or temperature: check cooling and power caps "
        "(amd-smi metric --power --temperature), avoid sustained PPT limits."
    ),
    "unknown": "Not enough signals to classify; enable more sources (profiler, /proc, SMI).",
}
"""Recommendation per class for a process that ran GPU kernels (or whose device
is unknown)."""

CPU_RECOMMENDATIONS: Mapping[str, str] = {
    "launch-bound": (
        "Operators run for microseconds and ORT's per-node overhead between them dominates: "
        "fuse ops (ORT graph optimisation level ALL), raise the batch size, or lower "
        "intra_op_num_threads (waking threads for tiny ops costs more than it saves)."
    ),
    "memory-bound": (
        "Memory traffic dominates: quantise weights to int8 (onnxruntime.quantization), fuse "
        "elementwise chains, keep the process and its memory on one NUMA node (numactl)."
    ),
    "compute-bound": (
        "The cores are saturated with math: quantise to int8 (onnxruntime.quantization), set "
        "intra_op_num_threads to the physical cores, or run the model on the GPU (MIGraphX or "
        "ROCm execution provider, docs/execution-providers.md)."
    ),
}
"""Recommendation per class for a process whose kernels all ran on the CPU (ORT's
CPU execution provider): classes missing here read as in :data:`RECOMMENDATIONS`."""


def recommendation(label: str, device: str | None = None) -> str:
    """The recommendation for class ``label`` (one of :data:`CLASSES` or
    ``"unknown"``) on ``device``: ``"cpu"`` (ANALYTICS_RESULT ``device_type``,
    every kernel on the CPU) picks :data:`CPU_RECOMMENDATIONS`, anything else
    :data:`RECOMMENDATIONS`. Raises ``KeyError`` for an unknown label.

    >>> recommendation("compute-bound", "cpu").startswith("The cores are saturated")
    True
    >>> recommendation("compute-bound") == RECOMMENDATIONS["compute-bound"]
    True
    """
    if device == "cpu" and label in CPU_RECOMMENDATIONS:
        return CPU_RECOMMENDATIONS[label]
    return RECOMMENDATIONS[label]

# GAUGE_SAMPLE metric names as the gpu collector emits them (collectors/gpu/rows.py)
GAUGE_UTILIZATION = "hw.gpu.utilization"  # unit 1, attr hw.gpu.task=general|memory|media
GAUGE_ACTIVITY = "hw.gpu.activity"  # counter, attr hw.gpu.task=general|memory
GAUGE_POWER = "hw.gpu.power"  # W, attr sensor
GAUGE_POWER_LIMIT = "hw.gpu.power.limit"  # W
GAUGE_CLOCK = "hw.gpu.clock"  # Hz, attr clock=sclk|mclk|...
GAUGE_THROTTLED = "hw.gpu.throttled"  # 0/1, attr reason (always one reason="any" row)
GAUGE_THROTTLE_RATIO = "hw.gpu.throttle.ratio"  # residency share per interval, attr reason
"""GAUGE_SAMPLE ``metric`` names read by :func:`gauge_features`."""


@dataclass(frozen=True)
class Features:
    """Windowed signals; ``None`` = source missing. Units in field comments."""

    kernel_rate_hz: float | None = None  # kernel spans per second of wall time
    mean_kernel_ns: float | None = None  # mean kernel duration, ns
    micro_kernel_share: float | None = None  # share of kernels < MICRO_KERNEL_NS, [0, 1]
    active_ratio: float | None = None  # device busy / wall, [0, 1]
    launch_tax: float | None = None  # launch overhead / kernel time, >= 0
    kar: float | None = None  # kernels per graph node per iteration
    sii: float | None = None  # run-queue wait / wall, [0, 1]
    invol_switch_rate_hz: float | None = None  # per active thread per second
    gfx_activity: float | None = None  # [0, 1]
    mem_activity: float | None = None  # [0, 1]
    mem_share: float | None = None  # mem / (mem + gfx), [0, 1]
    throttle_residency: float | None = None  # share of samples throttled, [0, 1]
    power_cap_ratio: float | None = None  # power / power limit
    clock_cv: float | None = None  # std / mean of graphics clock
    roofline_memory_share: float | None = None  # kernel time below the ridge point, [0, 1]
    roofline_compute_share: float | None = None  # kernel time at/above the ridge, [0, 1]

    def to_dict(self) -> dict[str, float | None]:
        """JSON-able dict of all fields (flat floats: no deep copy, unlike ``asdict``)."""
        return {name: getattr(self, name) for name in _FEATURE_NAMES}


_FEATURE_NAMES = tuple(f.name for f in fields(Features))


@dataclass(frozen=True)
class Evidence:
    """One rule outcome: ``value`` compared against ``threshold`` (``op``)."""

    signal: str
    value: float
    threshold: float
    op: str  # ">=" or "<"
    weight: float
    met: bool

    @property
    def margin(self) -> float:
        """Relative distance past the threshold (negative when not met), capped at 10."""
        d = abs(self.threshold) or 1.0
        m = (
            (self.value - self.threshold) / d
            if self.op == ">="
            else (self.threshold - self.value) / d
        )
        return max(-10.0, min(10.0, m))


@dataclass(frozen=True)
class Verdict:
    """Classifier output."""

    label: str
    confidence: float
    evidence: tuple[Evidence, ...]
    recommendation: str
    scores: Mapping[str, float] = field(default_factory=dict)
    features: Features | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON-able dict (``json.dumps`` ready)."""
        return {
            "class": self.label,
            "confidence": round(self.confidence, 4),
            "evidence": [
                {
                    "signal": e.signal,
                    "value": e.value,
                    "threshold": e.threshold,
                    "op": e.op,
                    "weight": e.weight,
                    "met": e.met,
                }
                for e in self.evidence
            ],
            "recommendation": self.recommendation,
            "scores": {k: round(v, 4) for k, v in self.scores.items()},
            "features": self.features.to_dict() if self.features else None,
        }


@dataclass(frozen=True)
class _Rule:
    signal: str
    op: str
    threshold: float
    weight: float
    primary: bool = False
    optional: bool = False  # only counted in the evaluable share when its signal exists


RULES: Mapping[str, tuple[_Rule, ...]] = {
    "throttled": (
        _Rule("throttle_residency", ">=", T.THROTTLE_RESIDENCY, 3.0, primary=True),
        _Rule("power_cap_ratio", ">=", T.POWER_CAP_RATIO, 1.0),
        _Rule("clock_cv", ">=", T.CLOCK_CV, 1.0),
    ),
    "cpu-bound": (
        _Rule("sii", ">=", T.SII_CPU, 3.0, primary=True),
        _Rule("invol_switch_rate_hz", ">=", T.INVOL_SWITCH_RATE_HZ, 1.0),
    ),
    "launch-bound": (
        _Rule("micro_kernel_share", ">=", T.MICRO_SHARE_LAUNCH, 2.0, primary=True),
        _Rule("launch_tax", ">=", T.LTS_LAUNCH, 2.0, primary=True),
        _Rule("active_ratio", "<", T.ACTIVE_RATIO_LOW, 1.0),
        _Rule("kernel_rate_hz", ">=", T.KERNEL_RATE_LAUNCH_HZ, 1.0),
    ),
    "memory-bound": (
        _Rule("roofline_memory_share", ">=", T.ROOFLINE_SHARE, 4.0, primary=True,
              optional=True),
        _Rule("mem_share", ">=", T.MEM_SHARE_MEMORY, 3.0, primary=True),
        _Rule("active_ratio", ">=", T.ACTIVE_RATIO_HIGH, 1.0),
    ),
    "compute-bound": (
        _Rule("roofline_compute_share", ">=", T.ROOFLINE_SHARE, 4.0, primary=True,
              optional=True),
        _Rule("active_ratio", ">=", T.ACTIVE_RATIO_HIGH, 2.0, primary=True),
        _Rule("gfx_activity", ">=", T.GFX_BUSY_HIGH, 2.0, primary=True),
        _Rule("mean_kernel_ns", ">=", T.MEAN_KERNEL_LONG_NS, 1.0),
        _Rule("launch_tax", "<", T.LTS_COMPUTE_MAX, 1.0),
        _Rule("mem_share", "<", T.MEM_SHARE_MEMORY, 1.0),
    ),
}
"""Class -> weighted rules. Thresholds and their sources: :mod:`thresholds`."""

_GATES = ("throttled", "cpu-bound")
_WORKLOAD = ("launch-bound", "memory-bound", "compute-bound")


def _evaluate(label: str, f: Features) -> tuple[float, float, bool, list[Evidence]]:
    """(score, evaluable weight share, primary met, evidence) of one class."""
    ev: list[Evidence] = []
    total = sum(r.weight for r in RULES[label]
                if not r.optional or getattr(f, r.signal) is not None)
    avail = met_w = 0.0
    primary = False
    for r in RULES[label]:
        v = getattr(f, r.signal)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        ok = v >= r.threshold if r.op == ">=" else v < r.threshold
        ev.append(Evidence(r.signal, float(v), r.threshold, r.op, r.weight, ok))
        avail += r.weight
        if ok:
            met_w += r.weight
            primary = primary or r.primary
    score = met_w / avail if avail else 0.0
    return score, avail / total, primary, ev


def classify(features: Features, device: str | None = None) -> Verdict:
    """Classify one window; never raises on missing signals (-> ``unknown``).
    ``device`` (``"cpu"``, ``"gpu"`` or ``None``) picks the recommendation
    (:func:`recommendation`), not the class."""
    res = {c: _evaluate(c, features) for c in CLASSES}
    scores = {c: r[0] * (0.5 + 0.5 * r[1]) for c, r in res.items()}
    pick: str | None = None
    gates = [c for c in _GATES if res[c][2] and res[c][0] >= 0.5]
    if gates:
        pick = max(gates, key=lambda c: scores[c])
    else:
        work = [c for c in _WORKLOAD if res[c][2]]
        if work:
            pick = max(work, key=lambda c: scores[c])
    if pick is None:
        return Verdict("unknown", 0.0, (), recommendation("unknown", device), scores, features)
    ev = sorted(res[pick][3], key=lambda e: (not e.met, -e.weight * abs(e.margin)))
    return Verdict(pick, scores[pick], tuple(ev), recommendation(pick, device), scores,
                   features)


# ------------------------------------------------------------------ feature extraction


def kernel_features(kernels: pa.Table) -> dict[str, float]:
    """Rate, mean duration, micro share and active ratio of KERNEL_SPAN rows."""
    if kernels.num_rows == 0:
        return {}
    s = kernels.column("start_ns").to_numpy().astype(np.int64, copy=False)
    e = kernels.column("end_ns").to_numpy().astype(np.int64, copy=False)
    d = kernels.column("duration_ns").to_numpy().astype(np.int64, copy=False)
    wall = int(e.max() - s.min())
    out = {
        "mean_kernel_ns": float(d.mean()),
        "micro_kernel_share": float(np.mean(d < T.MICRO_KERNEL_NS)),
    }
    if wall > 0:
        out["kernel_rate_hz"] = kernels.num_rows / (wall / 1e9)
        out["active_ratio"] = busy_union_ns(s, e) / wall
    return out


def sched_features(sched: pa.Table) -> dict[str, float]:
    """SII and involuntary switch rate per active thread from SCHED_SAMPLE rows."""
    if sched.num_rows == 0:
        return {}
    wait, wall = active_totals(sched)
    if not wall:
        return {}
    run = sched.column("run_ns").to_numpy()
    rq = sched.column("runq_wait_ns").to_numpy()
    active = (run + rq) > 0
    inv = sched.column("involuntary_switches").to_numpy()[active]
    return {"sii": wait / wall, "invol_switch_rate_hz": float(inv.sum()) / (wall / 1e9)}


def _per_gpu_window(t: pa.Table) -> list[np.ndarray]:
    """Value arrays of ``t`` split by ``gpu_index``, each in time order."""
    t = t.sort_by([("gpu_index", "ascending"), ("ts_ns", "ascending")])
    gpu = t.column("gpu_index").to_numpy(zero_copy_only=False)
    val = t.column("value").to_numpy().astype(np.float64)
    return [val[gpu == g] for g in dict.fromkeys(gpu.tolist())]


_PARTS: dict[str, tuple[str, str | None, str | None]] = {
    "gfx": (GAUGE_UTILIZATION, "hw.gpu.task", "general"),
    "mem": (GAUGE_UTILIZATION, "hw.gpu.task", "memory"),
    "act_general": (GAUGE_ACTIVITY, "hw.gpu.task", "general"),
    "act_memory": (GAUGE_ACTIVITY, "hw.gpu.task", "memory"),
    "throttle_ratio": (GAUGE_THROTTLE_RATIO, None, None),
    "throttled": (GAUGE_THROTTLED, "reason", "any"),
    "power": (GAUGE_POWER, None, None),
    "power_limit": (GAUGE_POWER_LIMIT, None, None),
    "sclk": (GAUGE_CLOCK, "clock", "sclk"),
}
"""The gauge rows :func:`gauge_features` reads: part -> (metric, attribute
key, attribute value), ``None``: every row of the metric."""


def gauge_parts(gauges: pa.Table) -> dict[str, pa.Table]:
    """The rows of ``gauges`` (GAUGE_SAMPLE) that :func:`gauge_features`
    reads, per part of :data:`_PARTS`: tables of ``ts_ns``, ``value``,
    ``gpu_index`` in row order. Taken once per batch, so a window of batches
    is summarised by concatenating small tables (:func:`features_from_parts`)
    instead of filtering the whole window at every flush."""
    return gauge_parts_split(gauges, [0, gauges.num_rows])[0]


class PartPicks:
    """The rows :func:`gauge_parts_split` picked from recent tables, reused for
    a table whose ``metric`` and ``attributes`` columns equal one of theirs (a
    poller's batches name the same series in the same order, poll after
    poll): two column comparisons instead of a filter per part. Kept per
    table length, as a publish interval's batch holds one sample more or less
    from one publish to the next; at most :attr:`MAX_KEPT` lengths. One per
    stream of batches (a host's gauges); not thread-safe."""

    MAX_KEPT = 8

    def __init__(self) -> None:
        # num_rows -> (metric, attributes, the picks: part -> row indices)
        self._kept: dict[int, tuple[pa.ChunkedArray, pa.ChunkedArray,
                                    dict[str, tuple[pa.Array, np.ndarray]]]] = {}
        self.reused = 0
        """Tables whose picks were reused."""

    def get(self, metric: pa.ChunkedArray, attributes: pa.ChunkedArray
            ) -> dict[str, tuple[pa.Array, np.ndarray]] | None:  # fmt: skip
        """The picks of a table with these columns, or None."""
        got = self._kept.get(len(metric))
        if got is None or not (metric.equals(got[0]) and attributes.equals(got[1])):
            return None
        self.reused += 1
        return got[2]

    def put(self, metric: pa.ChunkedArray, attributes: pa.ChunkedArray,
            rows: dict[str, tuple[pa.Array, np.ndarray]]) -> None:
        """Keep the picks of a table with these columns (its length's last)."""
        if len(self._kept) >= self.MAX_KEPT and len(metric) not in self._kept:
            self._kept.clear()
        self._kept[len(metric)] = (metric, attributes, rows)


def gauge_parts_split(gauges: pa.Table, bounds: Sequence[int],
                      picks: PartPicks | None = None) -> list[dict[str, pa.Table]]:
    """:func:`gauge_parts` of each slice ``gauges[bounds[i]:bounds[i + 1]]``
    (``bounds`` ascending, from 0 to ``num_rows``), with the rows picked once
    for the whole table: the same tables as one call per slice, for the
    price of one. ``picks`` (optional) remembers the picks across calls
    (:class:`PartPicks`); the tables are the same with it or without."""
    # Rows are picked by index from the plain columns; the attribute map is
    # looked up only on the rows of one metric (filtering a many-chunk table
    # with its map column costs ~100x more on a window of 30 batches).
    base = gauges.select(["ts_ns", "value", "gpu_index"]).combine_chunks()
    metric = gauges.column("metric")
    attrs = gauges.column("attributes")
    edges = np.asarray(bounds, dtype=np.int64)

    def pick(names: pa.ChunkedArray, name: str, key: str | None, want: str | None
             ) -> tuple[pa.Array, np.ndarray]:  # fmt: skip
        idx = pc.indices_nonzero(pc.equal(names, name))
        if key is not None and len(idx):
            found = pc.map_lookup(attrs.take(idx), pa.scalar(key), "first")
            idx = idx.filter(pc.fill_null(pc.equal(found, want), False))
        return idx, idx.to_numpy(zero_copy_only=False)

    rows = picks.get(metric, attrs) if picks is not None else None
    if rows is None:
        names = metric.cast(pa.string())
        rows = {part: pick(names, *spec) for part, spec in _PARTS.items()}
        if picks is not None:
            picks.put(metric, attrs, rows)

    def cut(idx: pa.Array, at_rows: np.ndarray) -> list[pa.Table]:
        sub = base.take(idx)
        if len(edges) == 2:
            return [sub]
        at = np.searchsorted(at_rows, edges)
        return [sub.slice(int(a), int(b - a)) for a, b in itertools.pairwise(at)]

    cols = {part: cut(*rows[part]) for part in _PARTS}
    return [{part: cols[part][i] for part in _PARTS} for i in range(len(edges) - 1)]


def gauge_features(gauges: pa.Table) -> dict[str, float]:
    """GPU activity, throttle residency, power and clock signals of a window of
    GAUGE_SAMPLE rows (all GPUs of a host; metric names of ``collectors/gpu``).

    * ``gfx_activity`` / ``mem_activity``: mean ``hw.gpu.utilization`` with
      ``hw.gpu.task`` ``general`` / ``memory`` (rocm-smi ``GPU use (%)`` /
      ``GPU Memory Read/Write Activity (%)``, amd-smi ``gfx_activity`` /
      ``umc_activity``), [0, 1].
    * ``mem_share``: ``mem / (gfx + mem)`` of those means; when both are 0 (an
      idle snapshot), from the ``hw.gpu.activity`` counters (rocm-smi
      ``GFX Activity`` / ``Memory Activity``): their increase over the window
      per GPU, or, with one sample, their values (accumulated since the driver
      loaded).
    * ``throttle_residency``: mean over samples of the largest
      ``hw.gpu.throttle.ratio`` (MI300 violation residency) where present,
      else the mean of ``hw.gpu.throttled{reason="any"}``, [0, 1].
    * ``power_cap_ratio``: mean ``hw.gpu.power`` / largest ``hw.gpu.power.limit``.
    * ``clock_cv``: std / mean of ``hw.gpu.clock{clock="sclk"}`` per GPU over
      the window (>= 2 samples), averaged over GPUs.
    """
    if gauges.num_rows == 0:
        return {}
    return features_from_parts([gauge_parts(gauges)])


def features_from_parts(window: Sequence[Mapping[str, pa.Table]]) -> dict[str, float]:
    """:func:`gauge_features` of the concatenation of the batches whose
    :func:`gauge_parts` are ``window`` (oldest first): the same rows in the
    same order, so the same values."""
    if not window:
        return {}
    part = {k: pa.concat_tables([w[k] for w in window]).combine_chunks() for k in _PARTS}

    def mean(sub: pa.Table) -> float | None:
        return float(pc.mean(sub.column("value")).as_py()) if sub.num_rows else None

    out: dict[str, float] = {}
    gfx = mean(part["gfx"])
    mem = mean(part["mem"])
    if gfx is not None:
        out["gfx_activity"] = gfx
    if mem is not None:
        out["mem_activity"] = mem
    if gfx is not None and mem is not None and gfx + mem > 0:
        out["mem_share"] = mem / (gfx + mem)
    else:
        acc = []
        for task in ("general", "memory"):
            per = _per_gpu_window(part[f"act_{task}"])
            acc.append(sum(float(v[-1] - v[0]) if len(v) >= 2 else float(v[-1]) for v in per))
        if acc[0] + acc[1] > 0:
            out["mem_share"] = acc[1] / (acc[0] + acc[1])
    ratio = part["throttle_ratio"]
    if ratio.num_rows:
        worst = group_reduce(ratio, ["ts_ns", "gpu_index"], [("value", "max")])
        out["throttle_residency"] = float(pc.mean(worst.column("value_max")).as_py())
    else:
        thr = mean(part["throttled"])
        if thr is not None:
            out["throttle_residency"] = thr
    pw, lim = mean(part["power"]), part["power_limit"]
    if pw is not None and lim.num_rows and pc.max(lim.column("value")).as_py() > 0:
        out["power_cap_ratio"] = pw / float(pc.max(lim.column("value")).as_py())
    cvs = [float(v.std() / v.mean()) for v in _per_gpu_window(part["sclk"])
           if len(v) >= 2 and v.mean() > 0]  # fmt: skip
    if cvs:
        out["clock_cv"] = float(np.mean(cvs))
    return out


_RESULT_KEYS: Mapping[str, str] = {
    "kar": "kar",
    "launch_tax": "launch_tax",
    "sii": "sii",
    "gpu_active_ratio": "active_ratio",
}


def features_from_window(
    kernels: pa.Table | None = None,
    sched: pa.Table | None = None,
    gauges: pa.Table | None = None,
    result: Mapping[str, Any] | None = None,
    roofline: Mapping[str, Any] | None = None,
) -> Features:
    """Features of one window.

    ``roofline`` is a ``roofline.json`` dict (exporter/roofline.py): its
    ``summary`` memory/compute-bound shares become ``roofline_memory_share`` /
    ``roofline_compute_share`` when kernels were placed.
    ``kernels`` (KERNEL_SPAN), ``sched`` (SCHED_SAMPLE) and ``gauges``
    (GAUGE_SAMPLE) are the window's rows; ``result`` is an ANALYTICS_RESULT
    row (or ``derived_metrics.json``) whose ``kar``, ``launch_tax``, ``sii``
    and ``gpu_active_ratio`` take precedence over values recomputed here.
    Any argument may be ``None``.
    """
    vals: dict[str, float] = {}
    if kernels is not None:
        vals.update(kernel_features(kernels))
    if sched is not None:
        vals.update(sched_features(sched))
    if gauges is not None:
        vals.update(gauge_features(gauges))
    for k, name in _RESULT_KEYS.items():
        v = (result or {}).get(k)
        if isinstance(v, int | float) and not math.isnan(float(v)):
            vals[name] = float(v)
    summary = (roofline or {}).get("summary") or {}
    if summary.get("placed_families"):
        for key in ("memory_bound_share", "compute_bound_share"):
            v = summary.get(key)
            if isinstance(v, int | float):
                vals[f"roofline_{key.split('_')[0]}_share"] = float(v)
    names = {f.name for f in fields(Features)}
    return Features(**{k: v for k, v in vals.items() if k in names})


KERNEL_FEATURE_COLUMNS = ("start_ns", "end_ns", "duration_ns")
"""The KERNEL_SPAN columns :func:`kernel_features` reads: all that
:func:`features_from_bundle` loads of ``profiler/kernels.parquet``."""


def _read(path: Path, columns: Sequence[str] | None = None) -> pa.Table | None:
    import pyarrow.parquet as pq  # bundles only: not in the daemon (~13 MB of RSS)

    return pq.read_table(path, columns=None if columns is None else list(columns)) \
        if path.is_file() else None


def device_of_bundle(path: Path) -> str | None:
    """``"gpu"`` when the bundle's ``profiler/kernels.parquet`` has a kernel of
    ``device_type`` ``"gpu"``, ``"cpu"`` when it has kernels and none is (a
    null ``device_type`` is a CPU kernel, as in the trace), ``None`` without
    kernels: the ``device`` of :func:`classify` for a whole session."""
    import pyarrow.parquet as pq

    f = Path(path) / "profiler" / "kernels.parquet"
    if not f.is_file():
        return None
    if "device_type" not in pq.read_schema(f).names:
        return "cpu" if pq.read_metadata(f).num_rows else None
    col = pq.read_table(f, columns=["device_type"]).column("device_type")
    if len(col) == 0:
        return None
    return "gpu" if pc.any(pc.equal(col.cast(pa.string()), "gpu")).as_py() else "cpu"


def features_from_bundle(path: Path) -> Features:
    """Features of a whole session bundle directory.

    Reads ``profiler/kernels.parquet`` (its :data:`KERNEL_FEATURE_COLUMNS`
    only: the whole table of a 2M-kernel bundle took about 260 MB),
    ``telemetry/system_events.parquet``, ``telemetry/gauges.parquet``,
    ``metrics/derived_metrics.json`` and ``roofline.json``; each may be
    absent. Raises ``FileNotFoundError`` if ``path`` is not a directory.
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"not a session bundle directory: {path}")
    dm = path / "metrics" / "derived_metrics.json"
    derived = json.loads(dm.read_text()) if dm.is_file() else None
    rl = path / "roofline.json"
    return features_from_window(
        _read(path / "profiler" / "kernels.parquet", KERNEL_FEATURE_COLUMNS),
        _read(path / "telemetry" / "system_events.parquet"),
        _read(path / "telemetry" / "gauges.parquet"),
        derived,
        json.loads(rl.read_text()) if rl.is_file() else None,
    )


