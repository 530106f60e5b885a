"""Explicit JSON state of river's drift detectors (never pickle).

``river.drift.PageHinkley`` keeps its state in plain attributes: a running
mean (``_x_mean``, a ``river.stats.Mean`` with ``n`` and ``_mean``) and
four cumulative sums. :func:`page_hinkley_state` writes those numbers and
:func:`load_page_hinkley` sets them on a detector built from the same
hyperparameters, so the loaded detector is the same detector.

``river.drift.ADWIN`` keeps its buckets in a Rust object
(``river._river_rust.drift.AdaptiveWindowing``) that exposes only
width/total/variance getters and bincode ``__getstate__`` bytes. Where the
installed river has the known layout, :mod:`stream_analytics.adwin_buckets`
turns those bytes into named, checked numbers and back (exact, compact).
Otherwise the state is rebuilt by replay: :class:`AdwinReplay` keeps the
detector's inputs since it was (re)created in a bounded ring (``max_replay``
samples) and :func:`rebuild_adwin` feeds them to a fresh detector at load.
ADWIN is deterministic, so the rebuilt detector is identical (same window,
same answers on further data) while fewer than ``max_replay`` samples were
fed since its last reset; beyond that its window holds the last
``max_replay`` samples (an ADWIN window capped at ``max_replay``).

Inputs travel as base64 of little-endian float64 (``"f64le"``), 8 bytes a
sample (~11 base64 characters).
"""

from __future__ import annotations

import base64
import math
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

DEFAULT_MAX_REPLAY = 1024
"""ADWIN inputs kept for replay per detector when the exact bucket codec
(:mod:`stream_analytics.adwin_buckets`) does not fit the installed river
(~11 bytes a sample as base64 in the checkpoint; a slot gets one sample per
analytics flush). Unused (0) when the codec fits."""

PH_SUMS: tuple[str, ...] = ("sum_increase", "sum_decrease", "min_increase", "max_decrease")
"""The Page-Hinkley sums, attribute ``_<name>`` on the river object."""

PH_ATTRS: frozenset[str] = frozenset({
    "_drift_detected", "min_instances", "delta", "threshold", "alpha", "mode", "_x_mean",
    "_test_drift", *(f"_{s}" for s in PH_SUMS)})  # fmt: skip
"""Every attribute of ``river.drift.PageHinkley`` (river 0.26): hyperparameters,
the bound test method and the state above. A test pins this set so that a
river upgrade adding state fails loudly instead of losing it."""


def page_hinkley_state(det: Any) -> dict[str, Any]:
    """``{"x_mean_n", "x_mean", "sum_increase", ..., "drift_detected"}`` of a
    ``river.drift.PageHinkley`` (floats; the two minimum/maximum sums may be
    +-inf before the first sample)."""
    out: dict[str, Any] = {"x_mean_n": float(det._x_mean.n), "x_mean": float(det._x_mean._mean)}
    out.update({s: float(getattr(det, f"_{s}")) for s in PH_SUMS})
    out["drift_detected"] = bool(det._drift_detected)
    return out


def load_page_hinkley(det: Any, s: Mapping[str, Any]) -> None:
    """Set :func:`page_hinkley_state` output ``s`` on ``det`` (built with the same
    hyperparameters). ``ValueError`` on a NaN or a negative count."""
    n, mean = float(s["x_mean_n"]), float(s["x_mean"])
    if not (math.isfinite(n) and n >= 0 and math.isfinite(mean)):
        raise ValueError("page_hinkley: x_mean_n must be finite >= 0 and x_mean finite")
    vals = {k: float(s[k]) for k in PH_SUMS}
    if any(math.isnan(v) for v in vals.values()):
        raise ValueError("page_hinkley: NaN sum")
    det._x_mean.n, det._x_mean._mean = n, mean
    for k, v in vals.items():
        setattr(det, f"_{k}", v)
    det._drift_detected = bool(s["drift_detected"])


class AdwinReplay:
    """A river ``ADWIN`` plus its inputs since creation (at most ``max_replay``).

    ``seen`` counts every input since creation, so ``seen > len(inputs)``
    tells that the ring overflowed (the rebuilt window is then capped).
    """

    def __init__(self, detector: Any, max_replay: int) -> None:
        self.detector = detector
        self.inputs: deque[float] = deque(maxlen=max_replay)
        self.seen = 0

    def update(self, z: float) -> bool:
        """Feed one sample; True when ADWIN detected a change on it."""
        self.inputs.append(float(z))
        self.seen += 1
        self.detector.update(z)
        return bool(self.detector.drift_detected)

    def state(self) -> dict[str, Any]:
        """``{"encoding": "f64le", "inputs": base64, "seen": int}``."""
        raw = np.asarray(self.inputs, dtype="<f8").tobytes()
        return {"encoding": "f64le", "inputs": base64.b64encode(raw).decode("ascii"),
                "seen": self.seen}


def decode_inputs(s: Mapping[str, Any], max_replay: int, clip: float) -> list[float]:
    """The samples of :meth:`AdwinReplay.state` output ``s``.

    ``ValueError`` unless the encoding is ``f64le``, the base64 is valid and
    a whole number of float64s, there are at most ``max_replay`` samples,
    each finite within ``+-clip`` (they are clipped z-scores), and
    ``seen >= len(samples)``.
    """
    if s.get("encoding") != "f64le" or not isinstance(s.get("inputs"), str):
        raise ValueError("adwin: inputs must be base64 f64le")
    raw = base64.b64decode(s["inputs"], validate=True)
    if len(raw) % 8 or len(raw) // 8 > max_replay:
        raise ValueError(f"adwin: {len(raw)} bytes is not <= {max_replay} float64 samples")
    xs = np.frombuffer(raw, dtype="<f8")
    if not bool(np.all(np.isfinite(xs))) or bool(np.any(np.abs(xs) > clip)):
        raise ValueError("adwin: samples must be finite clipped z-scores")
    seen = s.get("seen")
    if not isinstance(seen, int) or isinstance(seen, bool) or seen < len(xs):
        raise ValueError("adwin: seen must be an int >= the number of samples")
    return [float(x) for x in xs]


def rebuild_adwin(detector: Any, inputs: Iterable[float], seen: int,
                  max_replay: int) -> AdwinReplay:
    """A fresh ``detector`` replayed with ``inputs`` (see the module doc)."""
    r = AdwinReplay(detector, max_replay)
    for z in inputs:
        r.update(z)
    r.seen = seen
    return r
