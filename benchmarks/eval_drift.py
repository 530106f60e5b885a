"""Drift-detector evaluation on real latency series recorded on this machine.

Series: per-iteration wall latency of ``session.run`` (onnxruntime CPU, one
intra-op thread) of (a) ``synthetic_chain_model.onnx`` (300 tiny Add/Mul) and
(b) magika's real ``standard_v3_3/model.onnx``; recorded by
:func:`eval_bottleneck.record` without the profiler.

* Step: ``trials`` times, a random contiguous slice of the real series
  (``grace + pre`` in-control samples, then ``post`` samples multiplied by
  1.05, i.e. a +5% step) is fed to a fresh detector; delay = index of the
  first detection at or after the step minus the step index (miss if none in
  ``post``). ``windowed=w`` feeds medians of ``w`` consecutive iterations
  instead (what an ANALYTICS_RESULT window's p50 gives); delays are then in
  windows.
* In control: the real series resampled to ``n_ic`` samples, (i) i.i.d.
  bootstrap (draws with replacement, no autocorrelation) and (ii) moving-block
  bootstrap with blocks of 100 consecutive samples (keeps the short-range
  autocorrelation of the recording); false alarms per 100,000 samples.

Usage: ``python benchmarks/eval_drift.py [--iterations 20000]`` prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import eval_bottleneck as eb  # noqa: E402

from stream_analytics.drift import ADWIN, CUSUM, EWMAChart, PageHinkley  # noqa: E402

MAGIKA = ROOT / ".venv/lib/python3.11/site-packages/magika/models/standard_v3_3/model.onnx"

DETECTORS: dict[str, Callable[[], Any]] = {
    "ewma": EWMAChart,
    "cusum": CUSUM,
    "page_hinkley": PageHinkley,
    "adwin": ADWIN,
}
"""Detectors with their default hyperparameters (see stream_analytics.drift)."""


def record_series(model: str, iterations: int, workdir: Path) -> np.ndarray:
    """Real per-iteration latencies (ns) of ``model`` ('chain' or 'magika')."""
    if model == "chain":
        path = eb.build_chain_model(workdir / "synthetic_chain_model.onnx")
    elif model == "magika":
        path = MAGIKA
    else:
        raise ValueError(model)
    return eb.record(path, iterations, profile=False, warmup=20).latencies_ns.astype(np.float64)


def _windowed(x: np.ndarray, w: int) -> np.ndarray:
    if w <= 1:
        return x
    n = len(x) // w * w
    return np.median(x[:n].reshape(-1, w), axis=1)


def step_delays(
    series: np.ndarray,
    make: Callable[[], Any],
    trials: int = 100,
    pre: int = 100,
    post: int = 200,
    step: float = 0.05,
    grace: int = 200,
    seed: int = 0,
) -> dict[str, Any]:
    """Detection delays (samples) of a +``step`` relative step in real data."""
    rng = np.random.default_rng(seed)
    n = grace + pre + post
    if len(series) < n:
        raise ValueError(f"series of {len(series)} < {n} samples")
    delays: list[int] = []
    early = 0
    for _ in range(trials):
        o = int(rng.integers(0, len(series) - n + 1))
        x = series[o : o + n].copy()
        x[grace + pre :] *= 1 + step
        det = make()
        hit = None
        for i, v in enumerate(x):
            det.update(float(v))
            if det.drift_detected:
                if i < grace + pre:
                    early += 1
                elif hit is None:
                    hit = i - (grace + pre)
                    break
        if hit is not None:
            delays.append(hit)
    d = np.asarray(delays)
    return {
        "trials": trials,
        "detected": len(delays),
        "median_delay": float(np.median(d)) if len(d) else None,
        "p90_delay": float(np.percentile(d, 90)) if len(d) else None,
        "within_30": int(np.sum(d <= 30)) if len(d) else 0,
        "false_alarms_before_step": early,
    }


def bootstrap(series: np.ndarray, n: int, block: int, seed: int = 1) -> np.ndarray:
    """Resample ``series`` to ``n`` samples: i.i.d. (``block=1``) or moving blocks."""
    rng = np.random.default_rng(seed)
    if block <= 1:
        return series[rng.integers(0, len(series), n)]
    starts = rng.integers(0, len(series) - block + 1, n // block + 1)
    return np.concatenate([series[s : s + block] for s in starts])[:n]


def false_alarms_per_100k(x: np.ndarray, make: Callable[[], Any]) -> float:
    """Detections per 100,000 samples of an in-control series."""
    det = make()
    hits = 0
    for v in x:
        det.update(float(v))
        hits += det.drift_detected
    return hits * 100_000 / len(x)


def evaluate(
    iterations: int = 20_000,
    magika_iterations: int = 600,
    n_ic: int = 200_000,
    trials: int = 100,
    detectors: Sequence[str] = tuple(DETECTORS),
    windows: Sequence[int] = (1, 10),
) -> dict[str, Any]:
    """Record real series and evaluate every detector; JSON-able result."""
    out: dict[str, Any] = {"series": {}, "results": []}
    with tempfile.TemporaryDirectory() as td:
        series = {
            "chain": record_series("chain", iterations, Path(td)),
            "magika": record_series("magika", magika_iterations, Path(td)),
        }
    for name, s in series.items():
        med = float(np.median(s))
        out["series"][name] = {
            "n": len(s),
            "median_ms": med / 1e6,
            "robust_cv": 1.4826 * float(np.median(np.abs(s - med))) / med,
            "lag1_autocorr": float(np.corrcoef(s[1:], s[:-1])[0, 1]),
        }
    for name, s in series.items():
        for w in windows:
            sw = _windowed(s, w)
            if len(sw) < 500:
                continue
            for det in detectors:
                make = DETECTORS[det]
                r: dict[str, Any] = {"series": name, "window": w, "detector": det}
                r["step"] = step_delays(sw, make, trials=trials)
                r["fa_per_100k_iid"] = false_alarms_per_100k(bootstrap(sw, n_ic, 1), make)
                r["fa_per_100k_block100"] = false_alarms_per_100k(bootstrap(sw, n_ic, 100), make)
                out["results"].append(r)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=20_000)
    ap.add_argument("--magika-iterations", type=int, default=6_000)
    ap.add_argument("--n-ic", type=int, default=200_000)
    ap.add_argument("--trials", type=int, default=100)
    a = ap.parse_args()
    print(json.dumps(evaluate(a.iterations, a.magika_iterations, a.n_ic, a.trials), indent=2))


if __name__ == "__main__":
    main()
