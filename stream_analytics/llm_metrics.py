"""Online LLM generate-loop metrics: a prometheus-client collector of ``aaco_llm_*``.

Input: finished generate calls as a table with the columns of the bus's
``generate_span`` event (:data:`exporter.schema.GENERATE_SPAN`: ``model``,
``pid``, ``start_ns``, ``end_ns``, ``step_ns`` and ``step_tokens`` lists,
``error``; one row per call), or :class:`exporter.instrument.llm.GenerateRecord`
objects (:func:`records_table` turns them into one). Folding is columnar:
one pass over the flattened step lists per batch, a Python loop only over the
batch's distinct (model, pid) keys.

Per key (host, model, pid) it keeps the TTFT and inter-token latency
histograms (seconds, buckets :data:`TTFT_BUCKETS_S` / :data:`ITL_BUCKETS_S`),
the output token count and the tokens/s of the latest call (definitions:
docs/llm.md). Calls whose block raised (``error`` set) count their tokens
but give no latency or throughput sample. :meth:`LlmMetrics.snapshot` copies
every key (:class:`LlmSeries`, non-cumulative bucket counts, min/max) for the
OTLP outputs (:mod:`exporter.sinks.otlp_llm`).

Label bounds: the ``model`` label value comes from the instrumented program;
it is cut to :data:`MODEL_LABEL_MAX` characters, and a pid may hold at most
``max_models_per_pid`` (:data:`MAX_MODELS_PER_PID`) models: calls of a
further model are not folded and are counted in :attr:`LlmMetrics.drops`
under ``llm_model_cap`` (units: generate calls). Keys not updated for
``stale_s`` seconds are forgotten by :meth:`LlmMetrics.expire`, which frees
the pid's model slots.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from exporter import catalogue
from exporter.instrument.llm import GenerateRecord

TTFT_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                  10.0, 30.0)
ITL_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                 0.25, 0.5, 1.0)
MAX_MODELS_PER_PID = 8
"""Distinct ``model`` label values one (host, pid) may hold at a time."""
MODEL_LABEL_MAX = 128
"""Longest ``model`` label value (characters); longer names are cut."""
DROP_MODEL_CAP = "llm_model_cap"


def records_table(recs: Sequence[GenerateRecord]) -> pa.Table:
    """The ``generate_span`` columns :meth:`LlmMetrics.observe_table` reads, one
    row per record (in order)."""
    return pa.table({
        "model": pa.array([r.model for r in recs], pa.string()),
        "pid": pa.array([r.pid for r in recs], pa.int64()),
        "start_ns": pa.array([r.start_ns for r in recs], pa.int64()),
        "end_ns": pa.array([r.end_ns for r in recs], pa.int64()),
        "step_ns": pa.array([r.step_ns for r in recs], pa.list_(pa.int64())),
        "step_tokens": pa.array([r.step_tokens for r in recs], pa.list_(pa.int64())),
        "error": pa.array([r.error for r in recs], pa.string()),
    })


@dataclass(frozen=True)
class HistSnapshot:
    """One histogram series at a point in time (seconds).

    ``counts``: observations per bucket, not cumulative, ``len(bounds) + 1``
    long (bucket *i* holds ``bounds[i-1] < v <= bounds[i]``, the last one
    ``v > bounds[-1]``: Prometheus ``le`` and OTLP explicit-bucket semantics
    alike); ``total``: their sum; ``lo``/``hi``: min and max (None while empty).
    """

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: float
    lo: float | None
    hi: float | None

    @property
    def count(self) -> int:
        """Observations in all buckets."""
        return sum(self.counts)


@dataclass(frozen=True)
class LlmSeries:
    """One (host, model, pid) key of :class:`LlmMetrics` (:meth:`LlmMetrics.snapshot`).

    ``start_ns``: wall-clock time the series began (Unix ns; the start of its
    cumulative counts); ``tokens``: output tokens; ``tps``: tokens/s of the
    latest timed call (None before one)."""

    host: str
    model: str
    pid: str
    start_ns: int
    ttft: HistSnapshot
    itl: HistSnapshot
    tokens: int
    tps: float | None


@dataclass
class _Hist:
    bounds: tuple[float, ...]
    counts: np.ndarray[Any, Any] = field(default_factory=lambda: np.zeros(0, np.int64))
    total: float = 0.0
    lo: float = float("inf")
    hi: float = float("-inf")

    def add(self, values: np.ndarray[Any, Any]) -> None:
        if not len(self.counts):
            self.counts = np.zeros(len(self.bounds) + 1, np.int64)
        idx = np.searchsorted(np.asarray(self.bounds), values, side="left")
        self.counts += np.bincount(idx, minlength=len(self.bounds) + 1)
        self.total += float(values.sum())
        self.lo = min(self.lo, float(values.min()))
        self.hi = max(self.hi, float(values.max()))

    def snapshot(self) -> HistSnapshot:
        counts = (tuple(int(c) for c in self.counts) if len(self.counts)
                  else (0,) * (len(self.bounds) + 1))
        empty = not any(counts)
        return HistSnapshot(self.bounds, counts, self.total,
                            None if empty else self.lo, None if empty else self.hi)

    def buckets(self) -> list[tuple[str, float]]:
        cum = np.cumsum(self.counts) if len(self.counts) else np.zeros(len(self.bounds) + 1)
        return [*((repr(b), float(c)) for b, c in zip(self.bounds, cum[:-1], strict=True)),
                ("+Inf", float(cum[-1]))]


@dataclass
class _Key:
    ttft: _Hist = field(default_factory=lambda: _Hist(TTFT_BUCKETS_S))
    itl: _Hist = field(default_factory=lambda: _Hist(ITL_BUCKETS_S))
    tokens: int = 0
    tps: float | None = None
    seen: float = 0.0
    start_ns: int = field(default_factory=time.time_ns)


def _flat(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """A list column's values (int64) and offsets rebased to 0."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    off = arr.offsets.to_numpy().astype(np.int64)
    vals = arr.values.slice(int(off[0]), int(off[-1] - off[0]))
    return (vals.to_numpy(zero_copy_only=False).astype(np.int64), off - off[0])


class LlmMetrics:
    """Online TTFT / ITL / token metrics per (host, model, pid); a
    prometheus-client collector (``registry.register(LlmMetrics())``).

    ``host``: the label of spans folded with :meth:`observe` (default the
    hostname). ``drops`` counts generate calls not folded, by reason.
    """

    def __init__(self, host: str | None = None,
                 max_models_per_pid: int = MAX_MODELS_PER_PID) -> None:
        self.host = host or socket.gethostname()
        self.max_models_per_pid = max_models_per_pid
        self._lock = threading.Lock()
        self.keys: dict[tuple[str, str, str], _Key] = {}  # (host, model, pid)
        self.drops: Counter[str] = Counter()

    def observe(self, recs: Iterable[GenerateRecord]) -> int:
        """Fold in-process spans in (labelled ``self.host``); returns how many
        were folded."""
        return self.observe_table(self.host, records_table(list(recs)))

    def observe_table(self, host: str, t: pa.Table | pa.RecordBatch) -> int:
        """Fold one table of generate calls (``generate_span`` columns, rows
        valid as :func:`exporter.schema.decode` checks them) from ``host``.

        Returns the calls folded; calls over the model cap are counted in
        :attr:`drops` instead.
        """
        n = t.num_rows
        if n == 0:
            return 0
        model = pc.utf8_slice_codeunits(t.column("model").cast(pa.string()), 0,
                                        MODEL_LABEL_MAX).to_pylist()
        pid = t.column("pid").to_numpy()
        start = t.column("start_ns").to_numpy().astype(np.int64)
        end = t.column("end_ns").to_numpy().astype(np.int64)
        ok = t.column("error").is_null().to_numpy(zero_copy_only=False)
        steps, off = _flat(t.column("step_ns"))
        toks, _ = _flat(t.column("step_tokens"))
        cnt = np.diff(off)
        tok_cs = np.r_[0, np.cumsum(toks)]
        row_tokens = tok_cs[off[1:]] - tok_cs[off[:-1]]
        row_of_step = np.repeat(np.arange(n), cnt)
        has = cnt > 0
        first = np.zeros(n, np.int64)
        first[has] = steps[off[:-1][has]]
        ttft = (first - start) / 1e9
        gap_ok = np.r_[False, row_of_step[1:] == row_of_step[:-1]][:len(steps)]
        itl = np.diff(np.r_[0, steps])[gap_ok] / 1e9  # step i minus step i-1 of the same call
        itl_row = row_of_step[gap_ok]
        dur = (end - start) / 1e9
        codes: dict[tuple[str, int], list[int]] = {}
        for i, key in enumerate(zip(model, pid.tolist(), strict=True)):
            codes.setdefault(key, []).append(i)
        now = time.monotonic()
        folded = 0
        with self._lock:
            for (m, p), rows_l in codes.items():
                k = self._key(host, m, str(p), len(rows_l))
                if k is None:
                    continue
                rows = np.asarray(rows_l)
                folded += len(rows)
                k.seen = now
                k.tokens += int(row_tokens[rows].sum())
                good = rows[ok[rows] & has[rows]]
                if len(good):
                    k.ttft.add(ttft[good])
                    sel = np.isin(itl_row, good)
                    if sel.any():
                        k.itl.add(itl[sel])
                    timed = good[dur[good] > 0]
                    if len(timed):
                        last = timed[-1]
                        k.tps = float(row_tokens[last]) / float(dur[last])
        return folded

    def _key(self, host: str, model: str, pid: str, calls: int) -> _Key | None:
        """The key's state, created while the pid is under its model cap."""
        k = self.keys.get((host, model, pid))
        if k is not None:
            return k
        held = sum(1 for (h, _, p) in self.keys if h == host and p == pid)
        if held >= self.max_models_per_pid:
            self.drops[DROP_MODEL_CAP] += calls
            return None
        k = self.keys[(host, model, pid)] = _Key()
        return k

    def expire(self, stale_s: float, now: float | None = None) -> None:
        """Forget keys not updated for ``stale_s`` seconds (monotonic clock)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            for key in [key for key, k in self.keys.items() if now - k.seen > stale_s]:
                del self.keys[key]

    def snapshot(self, host: str | None = None) -> list[LlmSeries]:
        """A copy of every key (of ``host`` only, when given), sorted by key.

        Bounded: at most ``max_models_per_pid`` keys per (host, pid)."""
        with self._lock:
            return [LlmSeries(h, m, p, k.start_ns, k.ttft.snapshot(), k.itl.snapshot(),
                              k.tokens, k.tps)
                    for (h, m, p), k in sorted(self.keys.items()) if host in (None, h)]

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield from self.families()

    def families(self, extra: Sequence[str] = (),
                 values: Callable[[str, str], list[str]] | None = None) -> Iterator[Metric]:
        """The ``aaco_llm_*`` families, labels ``host, model, pid`` plus ``extra``
        whose values ``values(host, pid)`` gives (the k8s/Slurm workload labels
        of :class:`exporter.sinks.prometheus.PromState`)."""
        def doc(otel: str) -> tuple[str, str]:
            m = catalogue.BY_OTEL[otel]
            return m.family, m.help

        lab = ["host", "model", "pid", *extra]
        ttft = HistogramMetricFamily(*doc("aaco.llm.time_to_first_token"), labels=lab)
        itl = HistogramMetricFamily(*doc("aaco.llm.inter_token_latency"), labels=lab)
        tok = CounterMetricFamily(*doc("aaco.llm.output_tokens"), labels=lab)
        tps = GaugeMetricFamily(*doc("aaco.llm.tokens_per_second"), labels=lab)
        with self._lock:
            for (host, model, pid), k in sorted(self.keys.items()):
                lv = [host, model, pid, *(values(host, pid) if values else [])]
                ttft.add_metric(lv, k.ttft.buckets(), k.ttft.total)
                itl.add_metric(lv, k.itl.buckets(), k.itl.total)
                tok.add_metric(lv, k.tokens)
                if k.tps is not None:
                    tps.add_metric(lv, k.tps)
        yield from (ttft, itl, tok, tps)
