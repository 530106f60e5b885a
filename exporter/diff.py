"""Regression verdict between two session bundles (``aaco-exporter diff``).

:func:`diff_sessions` compares the per-iteration latencies of a *session*
bundle against a *baseline* bundle (``metrics/inference_iters.parquet``,
``duration_ns``) and explains a slowdown with evidence deltas (KAR, LTS,
SII, active ratio from ``metrics/derived_metrics.json``; per-family kernel
time per iteration from ``profiler/kernels.parquet``).

Statistics: ``latency_delta_pct`` is the change of the median latency;
significance is a one-sided Mann-Whitney U test (session slower,
``scipy.stats.mannwhitneyu``). Its companion interval is reported as
``ci95_delta_pct``: the Hodges-Lehmann shift (median of all pairwise
differences session - baseline) with its distribution-free (Moses) 95% CI,
in percent of the baseline median. Unlike a bootstrap CI of the median it
stays stable when latencies are bimodal, as they are under CPU contention
(some runs preempted, some not), where the median jumps between the modes.
A regression needs all of: median delta above ``threshold_pct``, U-test
p < :data:`thresholds.DIFF_ALPHA`, CI lower bound > 0. Confidence is
``1 - p`` for a regression; otherwise the share of 1000 bootstrap resamples
(seed 0) whose median delta stays at or below the threshold.

Suspected cause: environmental evidence (SII increase) comes first because
it explains the rest (a preempted host thread lengthens kernels and gaps);
then workload evidence ranked by relative change.

Bundles without iterations (a ``replay`` of a GPU trace, most ``capture --
CMD``) are compared kernel by kernel instead (mode ``kernels``,
:mod:`exporter.kernel_diff`).

Writes ``<session>/regress/diff.json`` (everything),
``<session>/regress/verdict.json`` (the verdict, also returned) and
``<session>/regress/baseline_ref.json`` (which baseline, the checksums of
the files compared, the verdict).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from exporter.baselines import Baseline, checksum
from exporter.extras import require
from exporter.kernel_diff import KERNELS, compare_kernels, has_kernels
from stream_analytics import thresholds as T
from stream_analytics.bottleneck import (
    classify,
    device_of_bundle,
    features_from_bundle,
    recommendation,
)

_BOOT = 1000
_ITERS = "metrics/inference_iters.parquet"
DERIVED = "metrics/derived_metrics.json"


def _latencies(bundle: Path) -> np.ndarray:
    p = bundle / "metrics" / "inference_iters.parquet"
    if not p.is_file():
        raise FileNotFoundError(f"{p}: missing (not a session bundle?)")
    d = pq.read_table(p, columns=["duration_ns"]).column("duration_ns").to_numpy()
    if len(d) < 3:
        raise ValueError(f"{p}: need at least 3 iterations, got {len(d)}")
    return np.asarray(d, dtype=np.float64)


def _derived(bundle: Path) -> dict[str, Any]:
    p = bundle / "metrics" / "derived_metrics.json"
    return dict(json.loads(p.read_text())) if p.is_file() else {}


def _family_time_per_iter(bundle: Path, iterations: int) -> dict[str, float]:
    p = bundle / "profiler" / "kernels.parquet"
    if not p.is_file() or iterations <= 0:
        return {}
    t = pq.read_table(p, columns=["kernel_family", "duration_ns"])
    if t.num_rows == 0:
        return {}
    g = t.group_by("kernel_family").aggregate([("duration_ns", "sum")])
    fams = pc.cast(g.column("kernel_family"), "string").to_pylist()
    sums = g.column("duration_ns_sum").to_pylist()
    return {str(f): float(s) / iterations for f, s in zip(fams, sums, strict=True)}


def _pct(a: float, b: float) -> float | None:
    return (b - a) / a * 100.0 if a else None


def _evidence(base: Path, sess: Path, nb: int, ns: int) -> list[dict[str, Any]]:
    db, ds = _derived(base), _derived(sess)
    fb, fs = features_from_bundle(base), features_from_bundle(sess)
    rows: list[dict[str, Any]] = []

    def add(signal: str, a: float | None, b: float | None, cause: str, score: float) -> None:
        rows.append({
            "signal": signal, "baseline": a, "session": b,
            "delta": None if a is None or b is None else b - a,
            "delta_pct": None if a is None or b is None else _pct(a, b),
            "cause": cause, "score": score,
        })  # fmt: skip

    def val(d: dict[str, Any], k: str, fallback: float | None) -> float | None:
        v = d.get(k)
        return float(v) if isinstance(v, int | float) else fallback

    sii_b, sii_s = val(db, "sii", fb.sii), val(ds, "sii", fs.sii)
    if sii_b is not None and sii_s is not None:
        d = sii_s - sii_b
        add(
            "sii",
            sii_b,
            sii_s,
            "cpu-bound",
            100.0 + d / T.SII_DELTA_ABS if d >= T.SII_DELTA_ABS else 0.0,
        )
    for sig, key, fb_v, fs_v, cause in (
        ("launch_tax", "launch_tax", fb.launch_tax, fs.launch_tax, "launch-bound"),
        ("kar", "kar", fb.kar, fs.kar, "launch-bound"),
    ):
        a, b = val(db, key, fb_v), val(ds, key, fs_v)
        if a is not None and b is not None:
            p = _pct(a, b)
            ok = p is not None and p >= T.EVIDENCE_DELTA_PCT
            add(sig, a, b, cause, p / T.EVIDENCE_DELTA_PCT if ok and p is not None else 0.0)
    ab, as_ = (
        val(db, "gpu_active_ratio", fb.active_ratio),
        val(ds, "gpu_active_ratio", fs.active_ratio),
    )
    if ab is not None and as_ is not None:
        drop = ab - as_
        add("active_ratio", ab, as_, "launch-bound",
            drop / T.ACTIVE_DELTA_ABS if drop >= T.ACTIVE_DELTA_ABS else 0.0)  # fmt: skip
    if fb.throttle_residency is not None and fs.throttle_residency is not None:
        d = fs.throttle_residency - fb.throttle_residency
        add("throttle_residency", fb.throttle_residency, fs.throttle_residency, "throttled",
            100.0 + d / T.THROTTLE_RESIDENCY if d >= T.THROTTLE_RESIDENCY else 0.0)  # fmt: skip
    famb, fams = _family_time_per_iter(base, nb), _family_time_per_iter(sess, ns)
    mem = fs.mem_share is not None and fs.mem_share >= T.MEM_SHARE_MEMORY
    for fam in sorted(set(famb) | set(fams)):
        a, b = famb.get(fam, 0.0), fams.get(fam, 0.0)
        p = _pct(a, b)
        ok = p is not None and p >= T.EVIDENCE_DELTA_PCT
        add(f"family_time_ns_per_iter[{fam}]", a, b, "memory-bound" if mem else "compute-bound",
            p / T.EVIDENCE_DELTA_PCT if ok and p is not None else 0.0)  # fmt: skip
    rows.sort(key=lambda r: -float(r["score"]))
    return rows


def _severity(delta_pct: float, threshold_pct: float, regression: bool) -> str:
    if not regression:
        return "none"
    if delta_pct < 2 * threshold_pct:
        return "minor"
    return "major" if delta_pct < 4 * threshold_pct else "critical"


def boot_medians(rng: np.random.Generator, x: np.ndarray, n_boot: int,
                 max_values: int = 1 << 22) -> np.ndarray:
    """Medians of ``n_boot`` resamples (with replacement) of ``x``: the same
    numbers, from the same RNG stream, as ``np.median(rng.choice(x, (n_boot,
    len(x))), axis=1)``, drawn in chunks of at most ``max_values`` values
    (32 MiB of float64) instead of one ``n_boot x len(x)`` matrix."""
    rows = max(1, max_values // max(1, len(x)))
    parts = [np.median(rng.choice(x, (min(rows, n_boot - i), len(x))), axis=1)
             for i in range(0, n_boot, rows)]
    return np.concatenate(parts) if parts else np.zeros(0)


EXACT_MAX_ARRANGEMENTS = 1 << 62
"""Below this many rank arrangements, ``C(n1 + n2, min(n1, n2))``, and up to
:data:`EXACT_MAX_PAIRS` pairs, the Moses interval takes its order statistic
from the exact null distribution of the Mann-Whitney U (:func:`u_counts`,
exact in int64); otherwise from the normal approximation, which is close
there."""

EXACT_MAX_PAIRS = 1_000_000
"""``n1 * n2`` up to which :func:`u_counts` (one int64 per ``U`` value) is built."""


def u_counts(n1: int, n2: int) -> np.ndarray:
    """How many of the ``C(n1 + n2, n1)`` equally likely rank arrangements
    (no shift, no ties) give each Mann-Whitney ``U`` from 0 to ``n1 * n2``:
    the coefficients of the Gaussian binomial ``[n1 + n2 choose m]_q``,
    built as ``prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i)`` with ``m, n`` the
    smaller and larger size. int64; exact while the total stays below
    :data:`EXACT_MAX_ARRANGEMENTS`.

    >>> u_counts(2, 2).tolist()  # C(4, 2) = 6 arrangements
    [1, 1, 2, 1, 1]
    """
    m, n = sorted((n1, n2))
    size = m * n + 1
    c = np.zeros(size, np.int64)
    c[0] = 1
    for i in range(1, m + 1):
        s = n + i
        if s < size:
            c[s:] -= c[:size - s].copy()  # times (1 - q^s)
        pad = -size % i  # divided by (1 - q^i): a running sum of stride i
        c = np.concatenate([c, np.zeros(pad, np.int64)]).reshape(-1, i).cumsum(axis=0)
        c = c.reshape(-1)[:size]
    return c


def shift_ci(session: np.ndarray, baseline: np.ndarray,
             level: float = 0.95) -> tuple[float, float, float]:
    """Hodges-Lehmann shift and its Moses CI: ``(lo, shift, hi)`` in the
    data's unit. The shift is the median of the pairwise differences
    session - baseline; the CI is their ``k``-th smallest and ``k``-th
    largest (0-based), ``k`` the largest count with ``P(U <= k) <= (1 -
    level) / 2`` under no shift, so that it misses with probability ``2 P(U
    <= k)``. ``P`` is the exact Mann-Whitney null distribution
    (:func:`u_counts`) for small samples (:data:`EXACT_MAX_ARRANGEMENTS`,
    :data:`EXACT_MAX_PAIRS`), the normal approximation otherwise: at 4
    against 4 that approximation gave k = 1, a 94.3% interval, where the
    exact k = 0 gives 97.1%. The order statistics are selected without the
    ``n1 x n2`` matrix (:func:`exporter.pairwise.kth_diffs`, O(n log n)
    memory), with results identical to sorting it. Samples must be finite and
    non-empty (``ValueError``).

    Samples too small for ``level`` give ``(-inf, shift, inf)``: even the
    widest Moses interval, the smallest to the largest difference, covers
    only ``1 - 2 / C(n1 + n2, n1)``: 84.6% for 1 against 12 values, 90% for
    3 against 3. Such an interval is not a 95% CI, and an unbounded one never
    excludes 0.

    >>> lo, hl, hi = shift_ci(np.arange(10.0) + 5, np.arange(10.0))
    >>> hl, lo > 0
    (5.0, True)
    >>> shift_ci(np.array([5.0, 6.0, 7.0]), np.array([1.0, 2.0, 3.0]))
    (-inf, 4.0, inf)
    """
    from exporter.pairwise import kth_diffs

    n1, n2 = len(session), len(baseline)
    total = n1 * n2
    mids = [total // 2] if total % 2 else [total // 2 - 1, total // 2]
    m = min(n1, n2)
    arrangements = (math.comb(n1 + n2, m) if m <= 64 and total <= EXACT_MAX_PAIRS
                    else EXACT_MAX_ARRANGEMENTS)
    if arrangements < EXACT_MAX_ARRANGEMENTS:
        cum = np.cumsum(u_counts(n1, n2))
        # the last k with cum[k] / arrangements <= (1 - level) / 2 (-1: none)
        k = int(np.searchsorted(cum, (1 - level) * arrangements / 2 * (1 + 1e-12),
                                side="right")) - 1
    else:
        norm = require("scipy.stats", "analytics", "diff (Mann-Whitney test)").norm
        z = float(norm.ppf(0.5 + level / 2))
        k = max(0, int(np.floor(total / 2 - z * np.sqrt(total * (n1 + n2 + 1) / 12))))
    if k < 0:
        return -math.inf, float(np.mean(kth_diffs(session, baseline, mids))), math.inf
    k = min(k, total - 1)
    lo, hi, *mid = kth_diffs(session, baseline, [k, total - 1 - k, *mids])
    return lo, float(np.mean(np.asarray(mid))), hi


def ci_json(lo: float, hi: float) -> list[float] | None:
    """A CI in % for JSON: ``[lo, hi]`` rounded to 3 decimals, or ``None``
    when it is unbounded (samples too small for its level, :func:`shift_ci`)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return [round(lo, 3), round(hi, 3)]


def _iterations(bundle: Path) -> int:
    p = bundle / "metrics" / "inference_iters.parquet"
    return pq.ParquetFile(p).metadata.num_rows if p.is_file() else 0


def diff_sessions(baseline: Path, session: Path, threshold_pct: float = 5.0,
                  ref: Baseline | None = None) -> dict[str, Any]:
    """Compare two bundles; write ``regress/diff.json``, ``regress/verdict.json``
    and ``regress/baseline_ref.json`` into ``session``.

    Mode ``latency`` when both bundles have at least 3 iterations, else
    ``kernels`` (:mod:`exporter.kernel_diff`) when both have kernel spans.
    Returns the verdict dict: ``mode``, ``regression`` (bool), ``severity``
    (none/minor/major/critical), ``confidence`` [0, 1], ``latency_delta_pct``
    (median, %; ``None`` in kernel mode), ``kernel_time_delta_pct`` (kernel
    mode), ``p_value``, ``ci95_delta_pct``, ``suspected_cause`` (class,
    signal, evidence) and ``recommendation``. ``ref`` is the named baseline
    ``baseline`` came from (its files are checked against its manifest first).
    Raises ``FileNotFoundError`` / ``ValueError`` (naming the file) for a
    bundle with neither iteration latencies nor kernel spans, and
    :class:`exporter.baselines.BaselineError` for a changed stored baseline.
    """
    baseline, session = Path(baseline), Path(session)
    if _iterations(baseline) >= 3 and _iterations(session) >= 3:
        mode, compared = "latency", [_ITERS, DERIVED, KERNELS]
    elif has_kernels(baseline) and has_kernels(session):
        mode, compared = "kernels", [KERNELS, DERIVED]
    else:
        bad = next(b for b in (baseline, session)
                   if _iterations(b) < 3 and not has_kernels(b))
        _latencies(bad)  # raises the latency mode's error, naming the file
        raise FileNotFoundError(f"{bad / KERNELS}: missing or empty, and "
                                f"{bad / _ITERS} has fewer than 3 iterations")
    if ref is not None:
        ref.verify(compared)
    if mode == "latency":
        verdict, diff = _latency_diff(baseline, session, threshold_pct)
    else:
        verdict, diff = _kernel_diff(baseline, session, threshold_pct)
    out = session / "regress"
    out.mkdir(parents=True, exist_ok=True)
    (out / "diff.json").write_text(json.dumps(diff, indent=2, default=float))
    (out / "verdict.json").write_text(json.dumps(verdict, indent=2, default=float))
    write_baseline_ref(out / "baseline_ref.json", baseline, session, ref, compared, verdict)
    return verdict


def write_baseline_ref(path: Path, baseline: Path, session: Path, ref: Baseline | None,
                       compared: list[str], verdict: dict[str, Any]) -> None:
    """``regress/baseline_ref.json``: which baseline (name or path, its
    session id), the sha256 of the files compared on both sides, the verdict."""
    def sid(b: Path) -> str | None:
        try:
            return str(json.loads((b / "session.json").read_text()).get("session_id"))
        except (OSError, ValueError):
            return None

    doc = {
        "baseline": {
            "name": ref.name if ref else None,
            "store": str(ref.root) if ref else None,
            "saved_at": ref.meta.get("saved_at") if ref else None,
            "path": str(baseline),
            "session_id": sid(baseline),
            "compared": checksum(baseline, compared),
        },
        "session": {"path": str(session), "session_id": sid(session),
                    "compared": checksum(session, compared)},
        "mode": verdict["mode"],
        "verdict": verdict,
    }
    path.write_text(json.dumps(doc, indent=2, default=float))


def _latency_diff(baseline: Path, session: Path,
                  threshold_pct: float) -> tuple[dict[str, Any], dict[str, Any]]:
    lb, ls = _latencies(baseline), _latencies(session)
    mannwhitneyu = require("scipy.stats", "analytics", "diff (Mann-Whitney test)").mannwhitneyu

    mb, ms = float(np.median(lb)), float(np.median(ls))
    delta = (ms - mb) / mb * 100.0
    p = float(mannwhitneyu(ls, lb, alternative="greater").pvalue)
    rng = np.random.default_rng(0)
    bb = boot_medians(rng, lb, _BOOT)
    bs = boot_medians(rng, ls, _BOOT)
    boot = (bs - bb) / bb * 100.0
    lo, _, hi = (v / mb * 100.0 for v in shift_ci(ls, lb))
    regression = bool(delta > threshold_pct and p < T.DIFF_ALPHA and lo > 0)
    conf = 1.0 - p if regression else float(np.mean(boot <= threshold_pct))
    evidence = _evidence(baseline, session, len(lb), len(ls))
    top = next((e for e in evidence if e["score"] > 0), None)
    device = device_of_bundle(session)
    sess_class = classify(features_from_bundle(session), device)
    cause_class = top["cause"] if top else (sess_class.label if regression else None)
    verdict: dict[str, Any] = {
        "mode": "latency",
        "regression": regression,
        "severity": _severity(delta, threshold_pct, regression),
        "confidence": round(conf, 4),
        "latency_delta_pct": round(delta, 3),
        "threshold_pct": threshold_pct,
        "p_value": p,
        "ci95_delta_pct": ci_json(lo, hi),
        "suspected_cause": {
            "class": cause_class,
            "signal": top["signal"] if top else None,
            "evidence": [e for e in evidence if e["score"] > 0][:5],
        },
        "recommendation": (recommendation(cause_class, device) if regression and cause_class
                           else None),
    }
    diff = {
        "mode": "latency",
        "baseline": str(baseline),
        "session": str(session),
        "latency_ns": {
            name: {"n": len(x), "mean": float(x.mean()), "p50": float(np.median(x)),
                   "p99": float(np.percentile(x, 99))}
            for name, x in (("baseline", lb), ("session", ls))
        },
        "test": {"name": "mannwhitneyu", "alternative": "greater", "p_value": p,
                 "alpha": T.DIFF_ALPHA, "ci": "Hodges-Lehmann shift, Moses 95%",
                 "bootstrap_resamples": _BOOT},
        "evidence": evidence,
        "bottleneck": {"baseline": classify(features_from_bundle(baseline),
                                                device_of_bundle(baseline)).to_json(),
                       "session": sess_class.to_json()},
        "verdict": verdict,
    }  # fmt: skip
    return verdict, diff


def _kernel_diff(baseline: Path, session: Path,
                 threshold_pct: float) -> tuple[dict[str, Any], dict[str, Any]]:
    k = compare_kernels(baseline, session, threshold_pct)
    regression, delta, top = k["regression"], k["kernel_time_delta_pct"], k["top"]
    device = device_of_bundle(session)
    sess_class = classify(features_from_bundle(session), device)
    slower = [r for r in k["kernels"] if r["slower"]]
    cause_class = sess_class.label if regression else None
    verdict: dict[str, Any] = {
        "mode": "kernels",
        "regression": regression,
        "severity": _severity(delta, threshold_pct, regression),
        "confidence": round(1.0 - top["p_value"], 4) if regression and top else None,
        "latency_delta_pct": None,
        "kernel_time_delta_pct": delta,
        "threshold_pct": threshold_pct,
        "p_value": top["p_value"] if top else None,
        "ci95_delta_pct": top["ci95_delta_pct"] if top else None,
        "suspected_cause": {
            "class": cause_class,
            "signal": f"kernel_median_ns[{top['key']}]" if top else None,
            "evidence": slower[:5],
        },
        "recommendation": recommendation(cause_class, device) if cause_class else None,
    }
    diff = {
        "mode": "kernels",
        "baseline": str(baseline),
        "session": str(session),
        "test": {"name": "mannwhitneyu", "alternative": "greater", "alpha": T.DIFF_ALPHA,
                 "ci": "Hodges-Lehmann shift, Moses 95%", "unit": "kernel duration_ns"},
        **{key: k[key] for key in ("kernel_time_delta_pct", "top_n", "families", "kernels",
                                   "added", "removed")},
        "bottleneck": {"baseline": classify(features_from_bundle(baseline),
                                                device_of_bundle(baseline)).to_json(),
                       "session": sess_class.to_json()},
        "verdict": verdict,
    }
    return verdict, diff


def parse_threshold(threshold: float | str) -> float:
    """``5``, ``5.0``, ``"5"`` or ``"5%"`` -> 5.0; ``ValueError`` if negative/unparsable."""
    v = float(str(threshold).strip().rstrip("%"))
    if v < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold!r}")
    return v


def main_diff(baseline: Path | str, session: Path, threshold: float | str = 5.0,
              store: Path | None = None) -> int:
    """CLI body: ``baseline`` is a bundle path or a baseline name saved in
    ``store`` (:func:`exporter.baselines.resolve`). Print the verdict JSON;
    exit status 1 on regression, 0 if none, 2 when a bundle or baseline is
    unusable (message on stderr)."""
    from exporter.baselines import resolve, store_dir

    try:
        base, ref = resolve(baseline, store_dir(store))
        v = diff_sessions(base, Path(session), parse_threshold(threshold), ref=ref)
    except (FileNotFoundError, ValueError) as e:
        print(f"aaco-exporter diff: {e}", file=sys.stderr)
        return 2
    print(json.dumps(v, indent=2, default=float))
    return 1 if v["regression"] else 0
