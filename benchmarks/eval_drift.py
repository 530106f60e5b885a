"""Drift-detector evaluation on real latency series recorded on this machine.

Two evaluations (``python benchmarks/eval_drift.py {windows,per-iteration}``):

``windows`` - the product's stream (tunes the defaults). The daemon feeds
the detectors one sample per ANALYTICS_RESULT, i.e. per flush (about 1 s).
``record`` runs magika's real ``standard_v3_3/model.onnx`` (onnxruntime CPU,
1 thread) back to back and saves every iteration's end time and duration;
:func:`flush_bins` cuts that into 1 s flushes and :func:`feed` forms what the
detector sees: the non-overlapping mean of the iterations since the previous
result (``"flush"``, what :meth:`DriftMonitor.update_result` feeds when the row
carries ``iteration_ns_total``) or the engine's 30 s rolling mean
(``"rolling"``, the legacy ``latency_mean_s``). Step: +5% on every iteration
after a change point, at every position of the real recording
(:func:`window_step_trials`). In control: the flush series resampled to long
series by the stationary bootstrap (Politis & Romano 1994, mean block 10
flushes; keeps the short-range autocorrelation), by the i.i.d. bootstrap (no
autocorrelation) and by the stationary bootstrap of the series de-trended by a
61-sample running median. Hyperparameters are chosen on one recording
(``tune``) and reported on another (``held``).

``per-iteration`` - legacy: per-iteration latencies fed to the detectors
directly (each iteration one sample), see ``docs/drift-and-bottlenecks.md``.

* Step: ``trials`` times, a random contiguous slice of the real series
  (``grace + pre`` in-control samples, then ``post`` samples multiplied by
  1.05, i.e. a +5% step) is fed to a fresh detector; delay = index of the
  first detection at or after the step minus the step index (miss if none in
  ``post``). ``windowed=w`` feeds medians of ``w`` consecutive iterations
  instead; delays are then in windows.
* In control: the real series resampled to ``n_ic`` samples, (i) i.i.d.
  bootstrap and (ii) moving-block bootstrap with blocks of 100 samples;
  false alarms per 100,000 samples.

Usage::

    python benchmarks/eval_drift.py record --seconds 260 tune.npz
    python benchmarks/eval_drift.py record --seconds 260 held.npz
    python benchmarks/eval_drift.py windows tune.npz held.npz
    python benchmarks/eval_drift.py per-iteration --iterations 20000
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

from stream_analytics.drift import (  # noqa: E402
    ADWIN,
    CUSUM,
    DETECTOR_TYPES,
    EWMAChart,
    PageHinkley,
)

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
    return np.asarray(np.median(x[:n].reshape(-1, w), axis=1))


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




# ------------------------------------------------- the product's stream (1 s windows)
WINDOW_GRACE = 60
"""Grace period (samples = flushes) used for every detector in the window evaluation."""

GRID: dict[str, list[dict[str, Any]]] = {
    "ewma": [{"lambda_": lam, "L": L} for lam in (0.1, 0.2, 0.3, 0.5)
             for L in (3.0, 3.5, 4.0, 4.5, 5.0)],
    "cusum": [{"k": k, "h": h} for k in (0.25, 0.5, 1.0) for h in (4.0, 5.0, 6.0, 8.0, 10.0, 12.0)],
    "page_hinkley": [{"delta": d, "threshold": t, "min_instances": 10}
                     for d in (0.5, 1.0) for t in (8.0, 12.0, 16.0, 25.0)],
    "adwin": [{"delta": d, "clock": c} for d in (1e-3, 1e-5, 1e-7) for c in (1, 4)],
}  # fmt: skip
"""Hyperparameter grid searched on the tuning recording (plus ``grace_period``)."""


def record_timed(seconds: float, out: Path, model: Path = MAGIKA) -> Path:
    """Run ``model`` back to back for ``seconds``; save per-iteration end/duration (ns).

    onnxruntime CPU EP, one intra-op and one inter-op thread, input ``bytes``
    int32 ``[1, 2048]`` (uniform 0..255, fixed seed), 50 warm-up runs; wall
    time of ``session.run`` by ``time.perf_counter_ns``. Writes ``out`` (.npz).
    """
    import time

    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).integers(0, 256, (1, 2048)).astype(np.int32)
    for _ in range(50):
        sess.run(None, {"bytes": x})
    ends: list[int] = []
    durs: list[int] = []
    pc = time.perf_counter_ns
    t_end = pc() + int(seconds * 1e9)
    while True:
        t0 = pc()
        sess.run(None, {"bytes": x})
        t1 = pc()
        ends.append(t1)
        durs.append(t1 - t0)
        if t1 >= t_end:
            break
    np.savez(out, end_ns=np.asarray(ends, np.int64), dur_ns=np.asarray(durs, np.int64))
    return out


def flush_bins(end_ns: np.ndarray, dur_ns: np.ndarray, flush_s: float = 1.0
               ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Per-flush ``(sum of durations, count)`` of the iterations that ended in each flush."""
    b = ((end_ns - end_ns[0]) // int(flush_s * 1e9)).astype(np.int64)
    nb = int(b[-1])  # drop the last, partial bin
    keep = b < nb
    sums = np.bincount(b[keep], weights=dur_ns[keep].astype(np.float64), minlength=nb)
    cnts = np.bincount(b[keep], minlength=nb).astype(np.float64)
    return sums, cnts


def feed(sums: np.ndarray, cnts: np.ndarray, how: str, window: int = 30) -> np.ndarray:
    """What the detector sees per flush: ``"flush"`` = mean of the iterations since the
    previous result (non-overlapping); ``"rolling"`` = mean of the last ``window``
    flushes (the engine's 30 s ``latency_mean_s``, heavily overlapping)."""
    if how == "flush":
        ok = cnts > 0
        return np.asarray(sums[ok] / cnts[ok])
    cs, cc = np.cumsum(sums), np.cumsum(cnts)
    cs = np.concatenate([[0.0], cs])
    cc = np.concatenate([[0.0], cc])
    lo = np.maximum(np.arange(1, len(sums) + 1) - window, 0)
    hi = np.arange(1, len(sums) + 1)
    n = cc[hi] - cc[lo]
    return np.asarray((cs[hi] - cs[lo])[n > 0] / n[n > 0])


def make_detector(kind: str, params: dict[str, Any]) -> Any:
    """A fresh detector of ``kind`` with ``params``."""
    return DETECTOR_TYPES[kind](**params)


def window_step_trials(
    sums: np.ndarray, cnts: np.ndarray, kind: str, params: dict[str, Any], how: str = "flush",
    pre: int = 20, post: int = 60, step: float = 0.05, stride: int = 1,
) -> dict[str, Any]:  # fmt: skip
    """+``step`` at every ``stride``-th position of the real recording.

    Each trial is a contiguous slice (``grace + pre + post`` flushes); the
    iterations of the last ``post`` flushes are multiplied by ``1 + step``
    (a flush mean scales the same way; the rolling feed mixes old and new
    iterations as the engine's window would). Delay = index of the first
    detection at or after the change minus the change index, in samples
    (= flushes, about seconds); a trial with no detection in ``post`` is a miss.
    """
    grace = int(params.get("grace_period", WINDOW_GRACE))
    lead = 30 if how == "rolling" else 0  # rolling: the window must be full of pre-change data
    n = lead + grace + pre + post
    delays: list[int] = []
    early = trials = 0
    for o in range(0, len(sums) - n + 1, stride):
        s, c = sums[o : o + n].copy(), cnts[o : o + n]
        cp = lead + grace + pre
        s[cp:] *= 1 + step
        x = feed(s, c, how)[lead:] if how == "rolling" else feed(s, c, how)
        cpx = grace + pre
        det = make_detector(kind, {"grace_period": grace, **params})
        trials += 1
        for i, v in enumerate(x):
            det.update(float(v))
            if det.drift_detected:
                if i < cpx:
                    early += 1
                    break
                delays.append(i - cpx)
                break
    d = np.asarray(delays)
    return {
        "trials": trials,
        "detected": len(d),
        "median_delay": float(np.median(d)) if len(d) else None,
        "p90_delay": float(np.percentile(d, 90)) if len(d) else None,
        "max_delay": int(d.max()) if len(d) else None,
        "within_30": int(np.sum(d <= 30)),
        "alarm_before_step": early,
    }


def stationary_bootstrap(x: np.ndarray, n: int, mean_block: float, seed: int) -> np.ndarray:
    """Politis & Romano (1994) stationary bootstrap of ``x`` to ``n`` samples.

    Blocks start at uniform positions, have geometric lengths of mean
    ``mean_block`` and wrap circularly; ``mean_block <= 1`` is the i.i.d.
    bootstrap.
    """
    rng = np.random.default_rng(seed)
    if mean_block <= 1:
        return np.asarray(x[rng.integers(0, len(x), n)])
    idx = np.empty(n, dtype=np.int64)
    new = rng.random(n) < 1.0 / mean_block
    new[0] = True
    starts = rng.integers(0, len(x), n)
    pos = 0
    for i in range(n):
        pos = int(starts[i]) if new[i] else (pos + 1) % len(x)
        idx[i] = pos
    return np.asarray(x[idx])


def detrend(x: np.ndarray, span: int = 61) -> np.ndarray:
    """``x`` minus its running median over ``span`` samples, plus the overall median."""
    h = span // 2
    pad = np.pad(x, h, mode="edge")
    run = np.array([np.median(pad[i : i + span]) for i in range(len(x))])
    return np.asarray(x - run + np.median(x))


def window_false_alarms(x: np.ndarray, kind: str, params: dict[str, Any]) -> float:
    """Detections per 100,000 samples of the in-control series ``x``."""
    det = make_detector(kind, {"grace_period": WINDOW_GRACE, **params})
    hits = 0
    for v in x.tolist():
        det.update(v)
        hits += det.drift_detected
    return hits * 100_000 / len(x)


def series_stats(x: np.ndarray) -> dict[str, float]:
    """Median, robust CV, lag-1 autocorrelation, and the step in robust sigmas."""
    med = float(np.median(x))
    rsd = 1.4826 * float(np.median(np.abs(x - med)))
    return {"n": len(x), "median_ms": med / 1e6, "robust_cv": rsd / med,
            "lag1_autocorr": float(np.corrcoef(x[1:], x[:-1])[0, 1]),
            "step_5pct_in_sigma": 0.05 * med / rsd}  # fmt: skip


def evaluate_windows(
    tune: Path, held: Path, n_ic: int = 200_000, n_ic_final: int = 1_000_000,
    mean_block: float = 10.0, fa_goal: float = 1.0, kinds: Sequence[str] = tuple(GRID),
    graces: Sequence[int] = (WINDOW_GRACE,),
) -> dict[str, Any]:  # fmt: skip
    """Tune every detector on recording ``tune``, report the choice on ``held``.

    Choice: among the grid points (x ``graces``) with at most ``fa_goal`` false
    alarms per 100,000 on both the i.i.d. and the stationary bootstrap of the
    tuning series and alarms before the step in at most 5% of the real step
    trials, the one detecting the largest share of steps within 30 samples
    (then the shortest median delay); if none qualifies, the fewest alarms.
    """
    out: dict[str, Any] = {"series": {}, "grid": [], "chosen": {}, "held_out": [], "rolling": []}
    rec = {}
    for name, p in (("tune", tune), ("held", held)):
        z = np.load(p)
        sums, cnts = flush_bins(z["end_ns"], z["dur_ns"])
        fl = feed(sums, cnts, "flush")
        rec[name] = (sums, cnts, fl)
        per_it = z["dur_ns"].astype(np.float64)
        out["series"][name] = {"file": str(p), "iterations": len(per_it),
                               "per_iteration": series_stats(per_it),
                               "flush_1s": {**series_stats(fl),
                                            "mean_iterations": float(cnts.mean())},
                               "rolling_30s": series_stats(feed(sums, cnts, "rolling")[30:])}
    sums, cnts, fl = rec["tune"]
    ic_iid = stationary_bootstrap(fl, n_ic, 1, seed=11)
    ic_sbb = stationary_bootstrap(fl, n_ic, mean_block, seed=12)
    for kind in kinds:
        grid = [{**p, "grace_period": g} for g in graces for p in GRID[kind]]
        best: tuple[Any, ...] | None = None
        for params in grid:
            st = window_step_trials(sums, cnts, kind, params)
            fa_iid = window_false_alarms(ic_iid, kind, params)
            fa_sbb = window_false_alarms(ic_sbb, kind, params)
            row = {"detector": kind, "params": params, "step": st,
                   "fa_per_100k_iid": fa_iid, "fa_per_100k_sbb": fa_sbb}
            out["grid"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            # meet the false-alarm goal on both resamplings, then detect most steps
            # within 30; if no point meets it, take the one with the fewest alarms
            ok = max(fa_iid, fa_sbb) <= fa_goal
            # ... and at most 5% of the trials alarm on the real pre-step samples
            ok = ok and st["alarm_before_step"] <= 0.05 * st["trials"]
            frac = st["within_30"] / max(1, st["trials"])
            score = ((ok, frac, -(st["median_delay"] or 1e9)) if ok
                     else (ok, -max(fa_iid, fa_sbb), frac, 0.0))
            if best is None or score > best[0]:
                best = (score, params)
        assert best is not None
        out["chosen"][kind] = best[1]
    hs, hc, hfl = rec["held"]
    ic = {
        "iid": stationary_bootstrap(hfl, n_ic_final, 1, seed=21),
        f"sbb{mean_block:g}": stationary_bootstrap(hfl, n_ic_final, mean_block, seed=22),
        f"sbb{mean_block:g}_detrended": stationary_bootstrap(detrend(hfl), n_ic_final,
                                                             mean_block, seed=23),
    }  # fmt: skip
    for kind, params in [*out["chosen"].items(), *((k, {"previous_defaults": True})
                                                   for k in kinds)]:
        if params.get("previous_defaults"):  # the class defaults before this evaluation
            params = {"ewma": {"lambda_": 0.05, "L": 5.0}, "cusum": {"k": 0.5, "h": 12.0},
                      "page_hinkley": {"delta": 0.5, "threshold": 25.0},
                      "adwin": {"delta": 1e-5, "clock": 32}}[kind]
            kind_label = f"{kind} (previous defaults)"
        else:
            kind_label = kind
        r = {"detector": kind_label, "params": params,
             "step": window_step_trials(hs, hc, kind, params),
             **{f"fa_per_100k_{k}": window_false_alarms(v, kind, params) for k, v in ic.items()}}
        out["held_out"].append(r)
        print(json.dumps(r), file=sys.stderr, flush=True)
        rr = {"detector": kind, "params": params,
              "step": window_step_trials(hs, hc, kind, params, how="rolling"),
              "fa_per_100k_sbb": window_false_alarms(
                  stationary_bootstrap(feed(hs, hc, "rolling")[30:], n_ic, mean_block, seed=24),
                  kind, params)}  # fmt: skip
        out["rolling"].append(rr)
    return out


def save_testdata(npz: Path, out: Path) -> None:
    """Per-flush (1 s) window samples of a recording as CSV for the unit tests."""
    z = np.load(npz)
    sums, cnts = flush_bins(z["end_ns"], z["dur_ns"])
    with out.open("w") as f:
        f.write("flush,iterations,latency_sum_ns,latency_mean_ns\n")
        for i, (s, c) in enumerate(zip(sums, cnts, strict=True)):
            f.write(f"{i},{int(c)},{int(s)},{s / c:.1f}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="record magika per-iteration latencies (.npz)")
    r.add_argument("--seconds", type=float, default=260.0)
    r.add_argument("out", type=Path)
    w = sub.add_parser("windows", help="tune on one recording, report on another")
    w.add_argument("tune", type=Path)
    w.add_argument("held", type=Path)
    w.add_argument("--n-ic", type=int, default=200_000)
    w.add_argument("--n-ic-final", type=int, default=1_000_000)
    w.add_argument("--mean-block", type=float, default=10.0)
    w.add_argument("--kinds", default=",".join(GRID), help="comma-separated detector kinds")
    w.add_argument("--graces", default=str(WINDOW_GRACE), help="comma-separated grace periods")
    t = sub.add_parser("testdata", help="write a recording's 1 s window series as CSV")
    t.add_argument("npz", type=Path)
    t.add_argument("out", type=Path)
    p = sub.add_parser("per-iteration", help="legacy: per-iteration latencies fed directly")
    p.add_argument("--iterations", type=int, default=20_000)
    p.add_argument("--magika-iterations", type=int, default=6_000)
    p.add_argument("--n-ic", type=int, default=200_000)
    p.add_argument("--trials", type=int, default=100)
    a = ap.parse_args()
    if a.cmd == "record":
        print(record_timed(a.seconds, a.out))
    elif a.cmd == "windows":
        print(json.dumps(evaluate_windows(a.tune, a.held, a.n_ic, a.n_ic_final, a.mean_block,
                                                          kinds=a.kinds.split(","),
                                                          graces=[int(g) for g in
                                                                  a.graces.split(",")]),
                         indent=1))  # fmt: skip
    elif a.cmd == "testdata":
        save_testdata(a.npz, a.out)
    else:
        print(json.dumps(evaluate(a.iterations, a.magika_iterations, a.n_ic, a.trials), indent=2))


if __name__ == "__main__":
    main()
