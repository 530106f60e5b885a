"""Kernel-level comparison of two bundles (``diff`` when there are no iterations).

A ``replay`` of a GPU trace or a ``capture -- CMD`` bundle has kernel spans
(``profiler/kernels.parquet``: ``kernel_name``, ``kernel_family``,
``duration_ns``) but usually no iteration latencies. :func:`compare_kernels`
compares the two kernel populations, per kernel family and per kernel name:

* ``count``, ``total_ns`` and ``median_ns`` of each side;
* ``median_delta_pct``: the change of the median duration (%);
* a one-sided Mann-Whitney U test that the session's durations are larger
  (``scipy.stats.mannwhitneyu``), and the Hodges-Lehmann shift with its Moses
  95% CI in percent of the baseline median (:func:`exporter.diff.shift_ci`),
  the same statistics ``diff`` uses on iteration latencies. The U test uses
  every duration up to :data:`U_CAP` per side, beyond that a seeded random
  sample of that many; the CI a seeded random sample of at most
  :data:`CI_CAP` per side (the cost of each grows with its sample).

Output is bounded: every family (a handful), the :data:`TOP_N` kernel names
with the most baseline + session time, and at most :data:`TOP_N` names seen
on one side only (``added`` / ``removed``, with counts).

Headline, ``kernel_time_delta_pct``: the baseline's kernel mix re-priced at
the session's medians, ``sum(n_b * (med_s - med_b)) / sum(n_b * med_b)`` over
the top names present on both sides, in %. It does not depend on how long
each recording ran (more dispatches do not count as a slowdown). A
regression needs the headline above the threshold and at least one top
kernel whose own slowdown is significant (median delta above the threshold,
U-test p < ``DIFF_ALPHA``, CI lower bound > 0).

Reading is columnar: names are dictionary-encoded once and durations grouped
by one stable argsort, no Python object per dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stream_analytics import thresholds as T

TOP_N = 20
CI_CAP = 5_000  # the HL CI uses at most this many durations per side (seeded sample)
U_CAP = 200_000
"""Durations per side the U test takes at most (a seeded random sample of
a larger side): on every duration, the test of a 10M-kernel bundle's
biggest family took about 1.2 GB and most of ``diff``'s 16 s; a random
sample keeps the test exact under the null hypothesis, and 200,000 per
side already detect a shift far below any threshold."""
KERNELS = "profiler/kernels.parquet"
I64 = npt.NDArray[np.int64]


@dataclass
class Groups:
    """Durations (ns) of one bundle grouped by a key: ``keys[i]`` owns
    ``durations[offsets[i]:offsets[i + 1]]``."""

    keys: list[str]
    offsets: I64
    durations: I64

    def get(self, key: str) -> I64 | None:
        try:
            i = self.keys.index(key)
        except ValueError:
            return None
        return self.durations[self.offsets[i]:self.offsets[i + 1]]


def has_kernels(bundle: Path) -> bool:
    """True when ``bundle`` has a non-empty ``profiler/kernels.parquet``."""
    p = Path(bundle) / KERNELS
    return p.is_file() and pq.ParquetFile(p).metadata.num_rows > 0


def _codes(col: pa.ChunkedArray) -> tuple[list[str], npt.NDArray[np.int32]]:
    """Distinct values of a string or dictionary column (nulls as
    ``"(none)"``) and each row's index into them (int32). A dictionary
    column (the bundle's ``kernel_name`` and ``kernel_family``) is read
    through its dictionary: no string per row (a 2M-row bundle's names as
    strings took about 130 MB per side)."""
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    arr = col.unify_dictionaries().combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    values = [str(v) if v is not None else "(none)" for v in arr.dictionary.to_pylist()]
    values.append("(none)")  # the code of a null row
    first: dict[str, int] = {}
    remap = np.array([first.setdefault(v, len(first)) for v in values], dtype=np.int32)
    idx = arr.indices if not arr.null_count else pc.fill_null(arr.indices, len(values) - 1)
    codes = remap[idx.to_numpy(zero_copy_only=False)]
    used = np.bincount(codes, minlength=len(first)) > 0  # values some row has
    keys = [v for v, k in first.items() if used[k]]
    if len(keys) < len(first):  # renumber without the values no row has
        codes = (np.cumsum(used, dtype=np.int32) - 1)[codes]
    return keys, codes


def _group(keys: list[str], codes: npt.NDArray[np.int32], dur: I64) -> Groups:
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes, minlength=len(keys))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return Groups(keys, offsets, dur[order])


def read_groups(bundle: Path) -> tuple[Groups, Groups]:
    """``(by kernel_family, by kernel_name)`` of ``bundle``'s kernels.
    ``FileNotFoundError`` / ``ValueError`` naming the file when absent or empty.
    Memory: the three columns read, then per row its two int32 codes and its
    duration twice (once per grouping; a 10M-kernel bundle: about 400 MB at
    the peak, 160 MB kept)."""
    p = Path(bundle) / KERNELS
    if not p.is_file():
        raise FileNotFoundError(f"{p}: missing (a bundle without kernel spans)")
    t = pq.read_table(p, columns=["kernel_name", "kernel_family", "duration_ns"])
    if t.num_rows == 0:
        raise ValueError(f"{p}: no kernel spans to compare")
    family, name = _codes(t.column("kernel_family")), _codes(t.column("kernel_name"))
    dur = t.column("duration_ns").to_numpy().astype(np.int64, copy=False)
    del t
    return _group(*family, dur), _group(*name, dur)


def _side(x: I64 | None) -> dict[str, Any] | None:
    if x is None or not len(x):
        return None
    return {"count": len(x), "total_ns": int(x.sum()), "median_ns": float(np.median(x))}


def _sample(x: npt.NDArray[np.float64], cap: int,
            rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """``x`` when it has at most ``cap`` values, else ``cap`` of them at
    positions ``rng`` picks (without replacement)."""
    return x if len(x) <= cap else x[rng.choice(len(x), cap, replace=False)]


def compare_one(key: str, b: I64 | None, s: I64 | None, threshold_pct: float) -> dict[str, Any]:
    """One row: both sides' count/total/median and, when both exist, the
    median delta, U-test p and HL shift CI (%); ``slower`` says whether the
    session's durations are significantly and materially larger."""
    from exporter.diff import ci_json, shift_ci
    from exporter.extras import require

    mannwhitneyu = require("scipy.stats", "analytics", "diff (Mann-Whitney test)").mannwhitneyu

    row: dict[str, Any] = {"key": key, "baseline": _side(b), "session": _side(s),
                           "median_delta_pct": None, "p_value": None,
                           "ci95_delta_pct": None, "slower": False}
    if b is None or s is None or not len(b) or not len(s):
        return row
    mb, ms = float(np.median(b)), float(np.median(s))
    bf, sf = b.astype(np.float64), s.astype(np.float64)

    # the U test: a fresh generator per side, so two sides of equal length are
    # sampled at the same positions (a bundle against itself still gives p = 0.5);
    # the CI: one generator for both sides, drawn session first (as it always was)
    p = float(mannwhitneyu(_sample(sf, U_CAP, np.random.default_rng(1)),
                           _sample(bf, U_CAP, np.random.default_rng(1)),
                           alternative="greater").pvalue)
    rng = np.random.default_rng(0)
    lo, _, hi = shift_ci(_sample(sf, CI_CAP, rng), _sample(bf, CI_CAP, rng))
    delta = (ms - mb) / mb * 100.0 if mb else 0.0
    ci = [lo / mb * 100.0, hi / mb * 100.0] if mb else [0.0, 0.0]
    row.update(median_delta_pct=round(delta, 3), p_value=p,
               ci95_delta_pct=ci_json(ci[0], ci[1]),
               slower=bool(delta > threshold_pct and p < T.DIFF_ALPHA and ci[0] > 0))
    return row


def _top(gb: Groups, gs: Groups) -> list[str]:
    tot: dict[str, int] = {}
    for g in (gb, gs):
        for i, k in enumerate(g.keys):
            tot[k] = tot.get(k, 0) + int(g.durations[g.offsets[i]:g.offsets[i + 1]].sum())
    both = set(gb.keys) & set(gs.keys)
    return sorted(both, key=lambda k: (-tot[k], k))[:TOP_N]


def compare_kernels(baseline: Path, session: Path, threshold_pct: float) -> dict[str, Any]:
    """Kernel-level comparison (see the module doc). Returns ``{"families":
    [...], "kernels": [...], "added": [...], "removed": [...],
    "kernel_time_delta_pct": float, "regression": bool, "top": row | None}``
    where ``top`` is the significantly slower kernel adding most time (if
    none is significantly slower, the kernel adding most time)."""
    fb, nb = read_groups(baseline)
    fs, ns = read_groups(session)
    fams = [compare_one(k, fb.get(k), fs.get(k), threshold_pct)
            for k in sorted(set(fb.keys) | set(fs.keys))]
    top = _top(nb, ns)
    kern = [compare_one(k, nb.get(k), ns.get(k), threshold_pct) for k in top]
    num = den = 0.0
    for r in kern:
        n, mb, ms = r["baseline"]["count"], r["baseline"]["median_ns"], r["session"]["median_ns"]
        num += n * (ms - mb)
        den += n * mb
    delta = num / den * 100.0 if den else 0.0

    def only(a: Groups, b: Groups) -> list[dict[str, Any]]:
        ks = [k for k in a.keys if k not in set(b.keys)]
        rows = [{"key": k, **(_side(a.get(k)) or {})} for k in ks]
        return sorted(rows, key=lambda r: (-int(r.get("total_ns", 0)), r["key"]))[:TOP_N]

    def added_ns(r: dict[str, Any]) -> float:
        return float(r["baseline"]["count"] * (r["session"]["median_ns"]
                                               - r["baseline"]["median_ns"]))

    slower = [r for r in kern if r["slower"]]
    worst = max(slower or kern, key=added_ns, default=None)
    return {
        "families": fams, "kernels": kern, "added": only(ns, nb), "removed": only(nb, ns),
        "kernel_time_delta_pct": round(delta, 3), "top_n": TOP_N,
        "regression": bool(delta > threshold_pct and slower), "top": worst,
    }
