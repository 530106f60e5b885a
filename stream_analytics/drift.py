"""Drift detection per metric stream, river style.

Four detectors share one interface: ``update(x)``, ``drift_detected``,
``to_dict()`` / ``from_dict()``; hyperparameters are stored verbatim as
attributes. Each first spends ``grace_period`` samples estimating a robust
baseline (median, sigma = 1.4826 x MAD, floored at ``min_rel_scale`` x
|median|, see :data:`stream_analytics.thresholds.DRIFT_MIN_REL_SCALE`), then
tests standardised samples
``z = (x - median) / sigma`` clipped to ``+-clip`` (one outlier cannot fire
a chart). After a detection the detector re-learns its baseline.

* :class:`EWMAChart` - EWMA control chart (Roberts 1959; limits of Lucas &
  Saccucci 1990, time-varying).
* :class:`CUSUM` - tabular two-sided CUSUM (Page 1954; Montgomery,
  *Introduction to Statistical Quality Control*, 6.2), reference ``k``,
  decision interval ``h``, both in sigmas.
* :class:`PageHinkley` / :class:`ADWIN` - river's ``river.drift`` detectors
  fed with the same standardised samples; their state is checkpointed as
  explicit JSON (:mod:`stream_analytics.river_state`), never pickled.

:class:`DriftMonitor` keeps one detector set per ``(stream, key)`` for the
bounded streams of :data:`STREAMS` and counts drift events with the time of
the last change point.

>>> import random
>>> rng = random.Random(7)
>>> det = CUSUM(k=0.5, h=8.0, grace_period=50)
>>> xs = [rng.gauss(10, 1) for _ in range(300)] + [rng.gauss(12, 1) for _ in range(100)]
>>> hits = [i for i, x in enumerate(xs) if det.update(x) or det.drift_detected]
>>> 300 <= hits[0] < 330
True
"""

from __future__ import annotations

import json
import logging
import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, Self

import pyarrow as pa
import pyarrow.compute as pc

from exporter.extras import MissingExtra
from exporter.schema import plain
from stream_analytics import adwin_buckets, river_import
from stream_analytics import thresholds as T
from stream_analytics.river_state import (
    DEFAULT_MAX_REPLAY,
    AdwinReplay,
    decode_inputs,
    load_page_hinkley,
    page_hinkley_state,
    rebuild_adwin,
)

log = logging.getLogger("aaco.drift")
_MISSING_SAID: set[str] = set()  # detectors already reported as off (missing extra)

PICKLE_REFUSED = "pickled river detector state (checkpoint before v3) refused, not decoded"
"""Error text for a v1/v2 Page-Hinkley/ADWIN state, which was a base64 pickle."""

STREAMS: frozenset[str] = frozenset(
    {"latency", "kar", "lts", "sii", "family_duration", "gpu_power", "gpu_clock"}
)
"""Allowed stream names. Keys (within a host): model (latency, kar, lts,
sii), ``model/family`` (family_duration, a bounded kernel family) or
``gpu_index/sensor`` and ``gpu_index/clock`` (gpu_power, gpu_clock); never
a raw kernel name."""

GAUGE_STREAMS: Mapping[str, tuple[str, str]] = {
    "hw.gpu.power": ("gpu_power", "sensor"),
    "hw.gpu.clock": ("gpu_clock", "clock"),
}
"""GAUGE_SAMPLE metric -> (drift stream, attribute that splits its series).
Names as the ``gpu`` collector emits them (``collectors/gpu/rows.py``)."""


class Detector(Protocol):
    """What :class:`DriftMonitor` needs from a detector."""

    @property
    def drift_detected(self) -> bool: ...

    def update(self, x: float) -> None: ...

    def to_dict(self) -> dict[str, Any]: ...


class _RobustStandardizer:
    """Grace-period median/MAD baseline, then clipped z-scores."""

    def __init__(self, grace_period: int, clip: float, min_rel_scale: float) -> None:
        self.grace_period = grace_period
        self.clip = clip
        self.min_rel_scale = min_rel_scale
        self._buf: list[float] = []
        self.center: float | None = None
        self.scale: float | None = None

    def push(self, x: float) -> float | None:
        """Standardised ``x`` or ``None`` while still in the grace period."""
        if self.center is None or self.scale is None:
            self._buf.append(float(x))
            if len(self._buf) >= self.grace_period:
                # statistics.median, not np.median: the same values for the few
                # finite samples here, and np.median's NaN check imports numpy.ma
                # (55 ms of CPU and 3 MB in a daemon that has no other use for it)
                med = statistics.median(self._buf)
                mad = 1.4826 * statistics.median([abs(v - med) for v in self._buf])
                # floor: min_rel_scale of the level (T.DRIFT_MIN_REL_SCALE), and 1e-12
                # so constant streams at 0 stay finite
                self.center = med
                self.scale = max(mad, abs(med) * self.min_rel_scale, 1e-12)
                self._buf = []
            return None
        z = (float(x) - self.center) / self.scale
        return max(-self.clip, min(self.clip, z))

    def state(self) -> dict[str, Any]:
        return {"buf": list(self._buf), "center": self.center, "scale": self.scale}

    def load(self, s: Mapping[str, Any]) -> None:
        self._buf = [float(v) for v in s["buf"]]
        self.center, self.scale = s["center"], s["scale"]


class _Standardized:
    """What every detector here shares: the grace-period baseline, the
    drift flag (cleared, and the baseline re-learnt, on the next sample), the
    detection count and their checkpoint. A subclass sets its own statistics
    in :meth:`_reset_stat`, tests one z-score in :meth:`_hit` and names its
    hyperparameters and state in ``_own_params`` / ``_own_state`` / ``_load_own``.
    """

    kind = "base"

    def __init__(self, grace_period: int, clip: float, min_rel_scale: float) -> None:
        self.grace_period = grace_period
        self.clip = clip
        self.min_rel_scale = min_rel_scale
        self.n_detections = 0
        self._reset()

    def _reset(self) -> None:
        self._std = _RobustStandardizer(self.grace_period, self.clip, self.min_rel_scale)
        self._drift = False
        self._reset_stat()

    def _reset_stat(self) -> None:
        raise NotImplementedError

    def _hit(self, z: float) -> bool:
        raise NotImplementedError

    def _own_params(self) -> dict[str, Any]:
        raise NotImplementedError

    def _own_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def _load_own(self, s: Mapping[str, Any]) -> None:
        raise NotImplementedError

    @property
    def drift_detected(self) -> bool:
        """True right after the sample on which the detector fired."""
        return self._drift

    def update(self, x: float) -> None:
        """Add one sample (any unit; the detectors are scale-free)."""
        if self._drift:
            self._reset()
        z = self._std.push(x)
        if z is not None and self._hit(z):
            self._drift = True
            self.n_detections += 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-able state, including hyperparameters."""
        return {
            "kind": self.kind,
            "params": {**self._own_params(), "grace_period": self.grace_period,
                       "clip": self.clip, "min_rel_scale": self.min_rel_scale},
            "state": {**self._own_state(), "std": self._std.state(), "drift": self._drift,
                      "n_detections": self.n_detections},
        }  # fmt: skip

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Self:
        """Inverse of :meth:`to_dict`."""
        o = cls(**d["params"])
        o._load(d["state"])
        return o

    def _load(self, s: Mapping[str, Any]) -> None:
        self._std.load(s["std"])
        self._drift = bool(s["drift"])
        self.n_detections = int(s["n_detections"])
        self._load_own(s)


def _sided(up: bool, down: bool, mode: str) -> bool:
    """The side(s) of a chart that count: ``both``, ``up`` or ``down``."""
    return (up or down) if mode == "both" else (up if mode == "up" else down)


class EWMAChart(_Standardized):
    """EWMA control chart on robustly standardised samples.

    ``Z_t = (1 - lambda_) Z_{t-1} + lambda_ z_t``; drift when
    ``|Z_t| > L sqrt(lambda_ / (2 - lambda_) (1 - (1 - lambda_)^(2t)))``
    (``mode="up"``/``"down"``: one side only). Units: ``L`` in sigmas.

    >>> det = EWMAChart(lambda_=0.2, L=3.0, grace_period=20)
    >>> for x in [1.0, 1.1, 0.9, 1.05, 0.95] * 4 + [1.0] * 10:
    ...     det.update(x)
    >>> det.drift_detected
    False
    >>> for x in [3.0] * 5:
    ...     det.update(x)
    >>> det.n_detections
    1
    """

    kind = "ewma"

    def __init__(
        self,
        lambda_: float = 0.5,
        L: float = 5.0,
        grace_period: int = T.DRIFT_GRACE_PERIOD,
        clip: float = T.DRIFT_CLIP_SIGMA,
        mode: str = "both",
        min_rel_scale: float = T.DRIFT_MIN_REL_SCALE,
    ) -> None:
        if not 0 < lambda_ <= 1 or L <= 0 or grace_period < 2 or mode not in ("both", "up", "down"):
            raise ValueError("EWMAChart: need 0<lambda_<=1, L>0, grace_period>=2, valid mode")
        self.lambda_ = lambda_
        self.L = L
        self.mode = mode
        super().__init__(grace_period, clip, min_rel_scale)

    def _reset_stat(self) -> None:
        self.statistic = 0.0
        self._t = 0

    def _hit(self, z: float) -> bool:
        lam = self.lambda_
        self._t += 1
        self.statistic = (1 - lam) * self.statistic + lam * z
        limit = self.L * math.sqrt(lam / (2 - lam) * (1 - (1 - lam) ** (2 * self._t)))
        return _sided(self.statistic > limit, self.statistic < -limit, self.mode)

    def _own_params(self) -> dict[str, Any]:
        return {"lambda_": self.lambda_, "L": self.L, "mode": self.mode}

    def _own_state(self) -> dict[str, Any]:
        return {"statistic": self.statistic, "t": self._t}

    def _load_own(self, s: Mapping[str, Any]) -> None:
        self.statistic, self._t = float(s["statistic"]), int(s["t"])


class CUSUM(_Standardized):
    """Tabular two-sided CUSUM on robustly standardised samples.

    ``S+ = max(0, S+ + z - k)``, ``S- = max(0, S- - z - k)``; drift when
    either exceeds ``h``. ``k`` is half the shift (in sigmas) to detect fastest.

    >>> det = CUSUM(k=0.5, h=4.0, grace_period=10)
    >>> for x in [5.0, 5.2, 4.8, 5.1, 4.9] * 2 + [5.0] * 20:
    ...     det.update(x)
    >>> det.drift_detected
    False
    >>> for x in [6.0] * 5:
    ...     det.update(x)
    >>> det.n_detections
    1
    """

    kind = "cusum"

    def __init__(
        self,
        k: float = 1.0,
        h: float = 10.0,
        grace_period: int = T.DRIFT_GRACE_PERIOD,
        clip: float = T.DRIFT_CLIP_SIGMA,
        mode: str = "both",
        min_rel_scale: float = T.DRIFT_MIN_REL_SCALE,
    ) -> None:
        if k < 0 or h <= 0 or grace_period < 2 or mode not in ("both", "up", "down"):
            raise ValueError("CUSUM: need k>=0, h>0, grace_period>=2, valid mode")
        self.k = k
        self.h = h
        self.mode = mode
        super().__init__(grace_period, clip, min_rel_scale)

    def _reset_stat(self) -> None:
        self.s_hi = 0.0
        self.s_lo = 0.0

    def _hit(self, z: float) -> bool:
        self.s_hi = max(0.0, self.s_hi + z - self.k)
        self.s_lo = max(0.0, self.s_lo - z - self.k)
        return _sided(self.s_hi > self.h, self.s_lo > self.h, self.mode)

    def _own_params(self) -> dict[str, Any]:
        return {"k": self.k, "h": self.h, "mode": self.mode}

    def _own_state(self) -> dict[str, Any]:
        return {"s_hi": self.s_hi, "s_lo": self.s_lo}

    def _load_own(self, s: Mapping[str, Any]) -> None:
        self.s_hi, self.s_lo = float(s["s_hi"]), float(s["s_lo"])


class _RiverWrapped(_Standardized):
    """A ``river.drift`` detector fed with robust z-scores; a subclass names
    its state as JSON (``_own_state`` / ``_load_own``)."""

    kind = "river"

    def __init__(self, grace_period: int, clip: float, min_rel_scale: float,
                 **params: Any) -> None:  # fmt: skip
        self.params = dict(params)
        super().__init__(grace_period, clip, min_rel_scale)

    def _make(self) -> Any:
        raise NotImplementedError

    def _reset_stat(self) -> None:
        self.detector = self._make()

    def _hit(self, z: float) -> bool:
        self.detector.update(z)
        return bool(self.detector.drift_detected)

    def _own_params(self) -> dict[str, Any]:
        return dict(self.params)


class PageHinkley(_RiverWrapped):
    """``river.drift.PageHinkley`` on robust z-scores (threshold in sigmas).

    >>> det = PageHinkley(grace_period=20, threshold=10.0)
    >>> for x in [1.0, 1.1, 0.9, 1.0] * 30 + [2.0] * 30:
    ...     det.update(x)
    >>> det.n_detections >= 1
    True
    """

    kind = "page_hinkley"

    def __init__(
        self,
        grace_period: int = T.DRIFT_GRACE_PERIOD,
        clip: float = T.DRIFT_CLIP_SIGMA,
        min_instances: int = 30,
        delta: float = 0.5,
        threshold: float = 25.0,
        alpha: float = 0.9999,
        mode: str = "both",
        min_rel_scale: float = T.DRIFT_MIN_REL_SCALE,
    ) -> None:
        if (min_instances < 1 or delta < 0 or threshold <= 0 or not 0 < alpha <= 1
                or mode not in ("both", "up", "down")):
            raise ValueError("PageHinkley: need min_instances>=1, delta>=0, threshold>0, "
                             "0<alpha<=1, valid mode")
        self.min_instances = min_instances
        self.delta = delta
        self.threshold = threshold
        self.alpha = alpha
        self.mode = mode
        super().__init__(grace_period, clip, min_rel_scale, min_instances=min_instances,
                         delta=delta, threshold=threshold, alpha=alpha, mode=mode)  # fmt: skip

    def _make(self) -> Any:
        return river_import.detector_class("PageHinkley")(**self.params)

    def _own_state(self) -> dict[str, Any]:
        return {"page_hinkley": page_hinkley_state(self.detector)}

    def _load_own(self, s: Mapping[str, Any]) -> None:
        if "river" in s:
            raise ValueError(PICKLE_REFUSED)
        load_page_hinkley(self.detector, s["page_hinkley"])


class ADWIN(_RiverWrapped):
    """``river.drift.ADWIN`` on robust z-scores.

    Checkpointed exactly as its bucket summaries
    (:mod:`stream_analytics.adwin_buckets`, a few dozen numbers) when the
    installed river has the known helper layout; otherwise by replay
    (:mod:`stream_analytics.river_state`): the last ``max_replay`` inputs
    since the detector's last reset are kept and fed to a fresh ADWIN at load
    (exact while fewer were fed; otherwise the window is capped at
    ``max_replay`` samples).

    >>> det = ADWIN(grace_period=20, delta=0.002)
    >>> for x in [1.0, 1.1, 0.9, 1.0] * 50 + [2.0] * 100:
    ...     det.update(x)
    >>> det.n_detections >= 1
    True
    """

    kind = "adwin"

    def __init__(
        self,
        grace_period: int = T.DRIFT_GRACE_PERIOD,
        clip: float = T.DRIFT_CLIP_SIGMA,
        delta: float = 1e-5,
        clock: int = 32,
        max_buckets: int = 5,
        min_window_length: int = 5,
        min_rel_scale: float = T.DRIFT_MIN_REL_SCALE,
        max_replay: int = DEFAULT_MAX_REPLAY,
    ) -> None:
        if not (0 < delta < 1 and 1 <= clock <= 2**31 - 1 and 1 <= max_buckets <= 64
                and 1 <= min_window_length <= 2**31 - 1 and max_replay >= 1):
            # river's Rust helper panics (not an Exception) on clock 0 and
            # allocates max_buckets slots: bounded here, for checkpoints too
            raise ValueError("ADWIN: need 0<delta<1, clock>=1, 1<=max_buckets<=64, "
                             "min_window_length>=1, max_replay>=1")
        self.max_replay = max_replay
        self.delta = delta
        self.clock = clock
        self.max_buckets = max_buckets
        self.min_window_length = min_window_length
        super().__init__(grace_period, clip, min_rel_scale, delta=delta, clock=clock,
                         max_buckets=max_buckets, min_window_length=min_window_length)  # fmt: skip

    def _make(self) -> Any:
        cls = river_import.detector_class("ADWIN")
        return cls(grace_period=10, **self.params)

    def _helper_params(self) -> dict[str, Any]:
        """The Rust helper's constructor arguments (river's grace period 10)."""
        return {**{k: self.params[k] for k in ("delta", "clock", "max_buckets",
                                               "min_window_length")}, "grace_period": 10}

    def _reset_stat(self) -> None:
        ring = 0 if adwin_buckets.supported() else self.max_replay  # replay only as fallback
        self.replay = AdwinReplay(self._make(), ring)
        self.detector = self.replay.detector

    def _hit(self, z: float) -> bool:
        return self.replay.update(z)

    def _own_params(self) -> dict[str, Any]:
        return {**self.params, "max_replay": self.max_replay}

    def _own_state(self) -> dict[str, Any]:
        if adwin_buckets.supported():
            return {"adwin": adwin_buckets.to_json(self.detector._helper.__getstate__())}
        return {"adwin": self.replay.state()}

    def _load_own(self, s: Mapping[str, Any]) -> None:
        if "river" in s:
            raise ValueError(PICKLE_REFUSED)
        a = s["adwin"]
        if a.get("encoding") == "buckets":
            if not adwin_buckets.supported():
                raise ValueError("adwin: bucket state, but this river's ADWIN layout differs")
            raw = adwin_buckets.from_json(a, self._helper_params())
            self._reset_stat()
            self.detector._helper.__setstate__(raw)
            return
        xs = decode_inputs(a, self.max_replay, self.clip)
        self.replay = rebuild_adwin(self._make(), xs, int(a["seen"]), self.max_replay)
        self.detector = self.replay.detector


DETECTOR_TYPES: Mapping[str, Callable[..., Any]] = {
    "ewma": EWMAChart,
    "cusum": CUSUM,
    "page_hinkley": PageHinkley,
    "adwin": ADWIN,
}
"""``kind`` -> class (each has ``from_dict``)."""


def detector_from_dict(d: Mapping[str, Any]) -> Detector:
    """Rebuild any detector from its :meth:`to_dict` output. ``KeyError`` on unknown kind."""
    cls: Any = DETECTOR_TYPES[d["kind"]]
    det: Detector = cls.from_dict(d)
    return det


DEFAULT_DETECTORS: Mapping[str, Mapping[str, Any]] = {
    "ewma": {"kind": "ewma", "params": {}},
    "cusum": {"kind": "cusum", "params": {}},
    "page_hinkley": {"kind": "page_hinkley", "params": {}},
    "adwin": {"kind": "adwin", "params": {}},
}
"""Detector set per stream: name -> ``{"kind", "params"}`` (defaults of each class).

Defaults tuned on the product's sample stream (one non-overlapping 1 s flush
mean per analytics result) of real magika latencies recorded on the CI
machine, reported on a held-out recording (``benchmarks/eval_drift.py
windows``, ``docs/drift-and-bottlenecks.md``): ``EWMAChart(lambda_=0.5,
L=5)`` and ``CUSUM(k=1, h=10)`` keep <= 1 false alarm per 100,000 samples on
the i.i.d. and stationary-block bootstraps of the held-out series and detect a
+5% step with a median delay of 4-5 samples, but only in ~40-45% of the step
positions within 30 samples: on this shared VM a 5% step is ~0.9 robust sigma
of the per-second mean, and the host's own speed shifts by as much
(``benchmarks/eval_drift_limits.py natural``). On real AMD GPU kernel
durations (rocprof v1 traces, ``eval_drift_limits.py gpu``) the same defaults
catch every +5% step within 1 (EWMA) or 3 (CUSUM) samples with no false alarm
in 1,000,000 bootstrapped samples. ``PageHinkley`` and ``ADWIN`` keep their
previous hyperparameters: no grid point met the false-alarm goal on latency
(PH), and ADWIN's cut check every 32 samples cannot answer within 30.
"""


@dataclass
class DriftEvent:
    """One detection: which detector on which stream of which host, at ``ts_ns``,
    on value ``value``."""

    stream: str
    key: str
    detector: str
    ts_ns: int
    value: float
    host: str = ""


@dataclass
class _Slot:
    detectors: dict[str, Detector]
    drift_count: dict[str, int]
    last_change_ns: dict[str, int | None]
    n: int = 0


class DriftMonitor:
    """One detector set per ``(host, stream, key)``; JSON-serialisable.

    Streams of different hosts never mix (a consumer serves many hosts).
    ``max_keys_per_stream`` bounds memory and label cardinality per host and
    stream; updates for further keys are counted in :attr:`dropped` and ignored.

    >>> m = DriftMonitor(detectors={"c": {"kind": "cusum", "params": {"grace_period": 10}}})
    >>> evs = [m.update("latency", "resnet", 1.0 + 0.01 * (i % 3), ts_ns=i) for i in range(40)]
    >>> evs = [e for i in range(40, 60) for e in m.update("latency", "resnet", 2.0, ts_ns=i)]
    >>> [(e.detector, e.ts_ns) for e in evs][:1]
    [('c', 43)]
    >>> m2 = DriftMonitor.from_bytes(m.to_bytes())
    >>> m2.status()[0]["drift_count"] == m.status()[0]["drift_count"] >= 1
    True
    """

    def __init__(
        self,
        detectors: Mapping[str, Mapping[str, Any]] | None = None,
        max_keys_per_stream: int = 256,
    ) -> None:
        self.detectors = {k: dict(v) for k, v in (detectors or DEFAULT_DETECTORS).items()}
        self.max_keys_per_stream = max_keys_per_stream
        self.dropped = 0
        self._slots: dict[tuple[str, str, str], _Slot] = {}  # (host, stream, key)
        self._family_prev: dict[tuple[str, str, str], tuple[int, int]] = {}  # host, model, fam
        self._latency_prev: dict[tuple[str, str], tuple[int, int]] = {}  # host, model
        self._latency_last_end: dict[tuple[str, str], int] = {}

    def _new_slot(self, stream: str) -> _Slot:
        """Fresh detectors for one series; a detector whose extra is missing
        (river: ``page_hinkley``, ``adwin``) is left out, said once per process."""
        over = T.DRIFT_STREAM_PARAMS.get(stream, {})
        dets: dict[str, Detector] = {}
        for name, spec in self.detectors.items():
            try:
                dets[name] = detector_from_dict({"kind": spec["kind"], **_fresh(
                    {**spec, "params": {**over, **spec.get("params", {})}})})  # fmt: skip
            except MissingExtra as e:
                if name not in _MISSING_SAID:
                    _MISSING_SAID.add(name)
                    log.warning("drift detector %s is off: %s", name, e)
        return _Slot(dets, dict.fromkeys(dets, 0), dict.fromkeys(dets))

    def update(self, stream: str, key: str, x: float, ts_ns: int, host: str = ""
               ) -> list[DriftEvent]:  # fmt: skip
        """Feed one value of ``stream`` for ``key`` of ``host``; returns the
        detections it caused.

        Raises ``ValueError`` for a stream outside :data:`STREAMS`. Non-finite
        values are ignored.
        """
        if stream not in STREAMS:
            raise ValueError(f"unknown drift stream {stream!r}; allowed: {sorted(STREAMS)}")
        if not math.isfinite(x):
            return []
        sk = (host, stream, key)
        slot = self._slots.get(sk)
        if slot is None:
            if (sum(1 for h, s, _ in self._slots if h == host and s == stream)
                    >= self.max_keys_per_stream):  # fmt: skip
                self.dropped += 1
                return []
            slot = self._slots[sk] = self._new_slot(stream)
        slot.n += 1
        out: list[DriftEvent] = []
        for name, det in slot.detectors.items():
            det.update(x)
            if det.drift_detected:
                slot.drift_count[name] += 1
                slot.last_change_ns[name] = ts_ns
                out.append(DriftEvent(stream, key, name, ts_ns, x, host))
        return out

    def update_result(self, row: Mapping[str, Any]) -> list[DriftEvent]:
        """Feed one ANALYTICS_RESULT row (dict): latency, KAR, LTS, SII, families.

        Streams belong to the row's ``host``; the key is its ``model``
        (``""`` if null, as the Prometheus sink labels it). Per-family mean
        kernel duration is derived from the deltas of the cumulative
        ``family_time_ns_total`` / ``family_spans_total`` lists.

        Latency sample: the mean duration (s) of the iterations that arrived
        since the previous result of this model, i.e. the delta of the
        cumulative ``iteration_ns_total`` over the delta of
        ``iterations_total`` (non-overlapping, one sample per flush; nothing
        is fed while no iteration arrived). Rows without
        ``iteration_ns_total`` fall back to the rolling window's
        ``latency_mean_s``, fed only when the window no longer overlaps the
        last one fed (``window_start_ns >= `` its ``window_end_ns``): the
        rolling means of a 30 s window published every second are ~30x
        overlapping, and a detector tuned on independent samples would raise
        false alarms on them (see ``docs/drift-and-bottlenecks.md``).

        >>> m = DriftMonitor(detectors={"c": {"kind": "cusum", "params": {"grace_period": 5}}})
        >>> for i in range(1, 4):
        ...     _ = m.update_result({"ts_ns": i, "model": "m", "iterations_total": 10 * i,
        ...                          "iteration_ns_total": 20_000_000 * i})
        >>> m.status()[0]["samples"]  # the first row only sets the reference
        2
        """
        ts = int(row.get("ts_ns") or 0)
        host = str(row.get("host") or "")
        model = str(row.get("model") or "")
        out: list[DriftEvent] = []
        lat = self._latency_sample(host, model, row)
        if lat is not None:
            out += self.update("latency", model, lat, ts, host)
        for stream, col in (("kar", "kar"), ("lts", "launch_tax"), ("sii", "sii")):
            v = row.get(col)
            if v is not None:
                out += self.update(stream, model, float(v), ts, host)
        names = row.get("family_names") or []
        spans = row.get("family_spans_total") or []
        times = row.get("family_time_ns_total") or []
        for fam, n, t in zip(names, spans, times, strict=False):
            prev = self._family_prev.get((host, model, fam))
            self._family_prev[(host, model, fam)] = (int(n), int(t))
            if prev is not None and n > prev[0]:
                mean_ns = (t - prev[1]) / (n - prev[0])
                out += self.update("family_duration", f"{model}/{fam}", mean_ns, ts, host)
        return out

    def _latency_sample(self, host: str, model: str, row: Mapping[str, Any]) -> float | None:
        """The latency value (s) to feed for this row, or ``None`` (see update_result)."""
        n_tot, ns_tot = row.get("iterations_total"), row.get("iteration_ns_total")
        if n_tot is not None and ns_tot is not None:
            prev = self._latency_prev.get((host, model))
            self._latency_prev[(host, model)] = (int(n_tot), int(ns_tot))
            if prev is None or int(n_tot) <= prev[0]:
                return None
            return (int(ns_tot) - prev[1]) / (int(n_tot) - prev[0]) / 1e9
        v = row.get("latency_mean_s")
        if v is None:
            return None
        w0, w1 = row.get("window_start_ns"), row.get("window_end_ns")
        if w0 is not None and w1 is not None:
            last = self._latency_last_end.get((host, model))
            if last is not None and int(w0) < last:
                return None
            self._latency_last_end[(host, model)] = int(w1)
        return float(v)

    def update_gauges(self, table: pa.Table | pa.RecordBatch, host: str = "") -> list[DriftEvent]:
        """Feed GAUGE_SAMPLE rows of ``host`` (:data:`GAUGE_STREAMS` picks them).

        ``hw.gpu.power`` (W) -> stream ``gpu_power``, key ``<gpu_index>/<sensor>``;
        ``hw.gpu.clock`` (Hz) -> ``gpu_clock``, key ``<gpu_index>/<clock>``
        (``sclk``, ``mclk``, ...): one series per sensor or clock domain, so
        readings of different sensors never alternate in one detector. Rows
        of other metrics are skipped without a Python object each.

        >>> import pyarrow as pa
        >>> t = pa.table({"ts_ns": [1, 1, 1], "metric": ["hw.gpu.power", "hw.gpu.clock",
        ...               "hw.gpu.temperature"], "value": [300.0, 2.1e9, 60.0],
        ...               "gpu_index": [0, 0, 0], "attributes": [[("sensor", "average")],
        ...               [("clock", "sclk")], [("sensor", "edge")]]},
        ...              schema=pa.schema([("ts_ns", pa.int64()), ("metric", pa.string()),
        ...              ("value", pa.float64()), ("gpu_index", pa.int64()),
        ...              ("attributes", pa.map_(pa.string(), pa.string()))]))
        >>> m = DriftMonitor()
        >>> _ = m.update_gauges(t, host="node1")
        >>> sorted({(r["host"], r["stream"], r["key"]) for r in m.status()})
        [('node1', 'gpu_clock', '0/sclk'), ('node1', 'gpu_power', '0/average')]
        """
        t = table if isinstance(table, pa.Table) else pa.Table.from_batches([table])
        t = t.filter(pc.is_in(t.column("metric").cast(pa.string()),
                              pa.array(list(GAUGE_STREAMS))))  # fmt: skip
        if not t.num_rows:
            return []
        d = plain(t.select(["ts_ns", "metric", "value", "gpu_index", "attributes"])).to_pydict()
        out: list[DriftEvent] = []
        for ts, metric, val, gpu, attrs in zip(d["ts_ns"], d["metric"], d["value"],
                                               d["gpu_index"], d["attributes"],
                                               strict=True):  # fmt: skip
            stream, attr = GAUGE_STREAMS[metric]
            sub = dict(attrs or []).get(attr, "")
            key = f"{'' if gpu is None else gpu}/{sub}"
            out += self.update(stream, key, float(val), int(ts), host)
        return out

    def status(self, hosts: set[str] | None = None) -> list[dict[str, Any]]:
        """One row per (host, stream, key, detector) of ``hosts`` (all if ``None``):
        drift_detected, drift_count, last_change_ns (ns or None), samples."""
        rows = []
        for (host, stream, key), slot in sorted(self._slots.items()):
            if hosts is not None and host not in hosts:
                continue
            for name, det in slot.detectors.items():
                rows.append({
                    "host": host, "stream": stream, "key": key, "detector": name,
                    "drift_detected": det.drift_detected,
                    "drift_count": slot.drift_count[name],
                    "last_change_ns": slot.last_change_ns[name], "samples": slot.n,
                })  # fmt: skip
        return rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-able checkpoint of everything (``json.dumps`` ready)."""
        return {
            "version": 3,
            "detectors": self.detectors,
            "max_keys_per_stream": self.max_keys_per_stream,
            "dropped": self.dropped,
            "slots": [
                {"host": h, "stream": s, "key": k, "n": slot.n,
                 "drift_count": slot.drift_count, "last_change_ns": slot.last_change_ns,
                 "detectors": {n: d.to_dict() for n, d in slot.detectors.items()}}
                for (h, s, k), slot in self._slots.items()
            ],
            "family_prev": [[h, m, f, n, t] for (h, m, f), (n, t) in self._family_prev.items()],
            "latency_prev": [[h, m, n, t] for (h, m), (n, t) in self._latency_prev.items()],
            "latency_last_end": [[h, m, e] for (h, m), e in self._latency_last_end.items()],
        }  # fmt: skip

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DriftMonitor:
        """Inverse of :meth:`to_dict`. ``KeyError``/``ValueError`` on a bad checkpoint.

        Version 1 checkpoints (before streams were kept per host) load with
        host ``""``. Versions 1 and 2 stored Page-Hinkley/ADWIN state as a
        pickle: such a state is refused (``ValueError``) without being
        decoded; v1/v2 checkpoints without one load.
        """
        v = d.get("version")
        if v not in (1, 2, 3):
            raise ValueError(f"unsupported DriftMonitor checkpoint version {v!r}")
        m = cls(d["detectors"], int(d["max_keys_per_stream"]))
        m.dropped = int(d["dropped"])
        for s in d["slots"]:
            dets = {n: detector_from_dict(x) for n, x in s["detectors"].items()}
            m._slots[(str(s.get("host", "")), s["stream"], s["key"])] = _Slot(
                dets, dict(s["drift_count"]), dict(s["last_change_ns"]), int(s["n"])
            )
        v1 = v == 1
        for e in d["family_prev"]:
            h, mod, fam, n, t = ["", *e] if v1 else e
            m._family_prev[(h, mod, fam)] = (int(n), int(t))
        for e in d.get("latency_prev", []):  # absent in the oldest checkpoints
            h, mod, n, t = ["", *e] if v1 else e
            m._latency_prev[(h, mod)] = (int(n), int(t))
        last = d.get("latency_last_end", {})
        rows = [["", k, e] for k, e in last.items()] if isinstance(last, dict) else last
        m._latency_last_end = {(str(h), str(mod)): int(e) for h, mod, e in rows}
        return m

    def to_bytes(self) -> bytes:
        """UTF-8 JSON of :meth:`to_dict` (a JetStream KV value)."""
        return json.dumps(self.to_dict(), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, b: bytes) -> DriftMonitor:
        """Inverse of :meth:`to_bytes`."""
        return cls.from_dict(json.loads(b))


def _fresh(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A from_dict payload that builds a fresh detector from ``spec['params']``."""
    cls: Any = DETECTOR_TYPES[spec["kind"]]
    fresh: dict[str, Any] = cls(**spec.get("params", {})).to_dict()
    return {"params": fresh["params"], "state": fresh["state"]}
