"""Prometheus sink: bus messages in, one custom prometheus-client collector out.

:class:`PromState` keeps the latest analytics result per (host, pid, model),
cumulative scheduler counters per (host, pid), and the latest gauge sample
per series; :meth:`PromState.collect` renders them (client_python's custom
collector pattern). Every name is listed in ``docs/metrics.md``.

Label values are bounded: kernel families, never raw kernel names. Series of
keys not updated for ``stale_s`` seconds are dropped.

Once a host publishes ``k8s_attribution`` (the ``k8s`` collector), every
``hw_gpu_*`` series gains :data:`POD_LABELS` for its GPU's current holder
and every pid-keyed series (analytics, ``aaco_sched_*``,
``aaco_watched_process_info``, ``aaco_bottleneck_*``) gains
:data:`WORKLOAD_LABELS` for its process; values are "" when unknown. One
pid or GPU has one holder at a time, so the series count does not grow.

``generate_span`` batches (finished LLM generate calls of instrumented
processes) are folded into a :class:`stream_analytics.llm_metrics.LlmMetrics`
and rendered as the ``aaco_llm_*`` families (labels ``host, model, pid`` plus
the workload labels); its drops (``llm_model_cap``) join :attr:`PromState.drops`.
"""

from __future__ import annotations

import functools
import math
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
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
from exporter.catalogue import prom_name
from exporter.schema import plain, sanitize_token
from stream_analytics.groups import group_reduce
from stream_analytics.llm_metrics import LlmMetrics

_BAD = re.compile(r"[^a-zA-Z0-9_]")


COMM_LEN = 15
"""The kernel's TASK_COMM_LEN - 1: a ``comm`` label value is never longer, so a
hostile bus producer cannot put a long string into a label."""


def comm_label(comm: object) -> str:
    """``comm`` as a bounded label value (at most :data:`COMM_LEN` characters).

    >>> comm_label("python3.11-with-a-long-name")
    'python3.11-with'
    """
    return str(comm or "")[:COMM_LEN]


POD_LABELS = catalogue.POD_LABELS
"""Labels every ``hw_gpu_*`` series gains once a host has ``k8s_attribution``:
the GPU's current holder ("" when no container holds it)."""
WORKLOAD_LABELS = catalogue.WORKLOAD_LABELS
"""Labels the pid-keyed series gain once a host has ``k8s_attribution``."""
_LABEL_MAX = 253  # a Kubernetes object name's limit; label values are cut there


@functools.lru_cache(maxsize=4096)  # called per gauge row; bounded for hostile producers
def label_name(key: str) -> str:
    """Attribute key to label name (``hw.gpu.task`` -> ``hw_gpu_task``)."""
    out = _BAD.sub("_", key)
    return out if not out[:1].isdigit() else "_" + out


_prom_name = functools.lru_cache(maxsize=4096)(prom_name)
""":func:`exporter.catalogue.prom_name`, memoised (called per gauge row)."""


def gauge_family(name: str, labels: list[str]) -> GaugeMetricFamily:
    """A gauge family named and described by the catalogue."""
    return GaugeMetricFamily(name, catalogue.get(name).help, labels=labels)


def counter_family(family: str, labels: list[str]) -> CounterMetricFamily:
    """A counter family (``family`` without ``_total``) described by the catalogue."""
    return CounterMetricFamily(family, catalogue.get(family + "_total").help, labels=labels)


def histogram_family(name: str, labels: list[str]) -> HistogramMetricFamily:
    """A histogram family described by the catalogue."""
    return HistogramMetricFamily(name, catalogue.get(name).help, labels=labels)


@dataclass
class _Sched:
    wait_ns: int = 0
    run_ns: int = 0
    vol: int = 0
    invol: int = 0
    migrations: int = 0
    minflt: int = 0
    majflt: int = 0
    hist: list[int] = field(default_factory=list)
    hist_sum_ns: float = 0.0
    seen: float = 0.0
    comm: str = ""  # the process's comm: its main thread's (tid == pid), else the first seen


_SERIES_COLUMNS = ("metric", "unit", "kind", "gpu_index", "gpu_uuid", "attributes")


def _newest_sample_when_alike(b: pa.RecordBatch, ts: np.ndarray) -> pa.RecordBatch:
    """The rows of ``b``'s newest sample (its last run of equal ``ts_ns``; ``b``
    in time order) when every older sample names the same series in the same
    order and no value is null or NaN, else ``b``. A batch of k samples of one
    poller (``run --publish-interval``) then costs one sample's rows: the older
    rows would only be skipped as older values of the same series."""
    n = len(ts)
    if n < 2:
        return b
    cuts = np.flatnonzero(ts[1:] != ts[:-1]) + 1
    if not len(cuts):
        return b
    width = n - int(cuts[-1])
    starts = np.concatenate(([0], cuts))
    if n % width or not (np.diff(np.append(starts, n)) == width).all():
        return b
    value = b.column("value")
    if value.null_count or np.isnan(value.to_numpy(zero_copy_only=False)).any():
        return b  # every NaN row is counted, and an older value may stand in for it
    ids = b.select(list(_SERIES_COLUMNS))
    newest = ids.slice(n - width, width)
    if not all(ids.slice(int(a), width).equals(newest) for a in starts[:-1]):
        return b
    return b.slice(n - width, width)


class PromState:
    """Thread-safe state fed by the bus; a prometheus-client collector.

    ``self_metrics`` is called at scrape time for exporter health families
    (received/dropped counters, collector up) owned by the daemon.
    """

    def __init__(
        self,
        stale_s: float = 300.0,
        self_metrics: Callable[[], Iterator[Metric]] | None = None,
    ) -> None:
        self.stale_s = stale_s
        self.self_metrics = self_metrics
        self._lock = threading.Lock()
        self.analytics: dict[tuple[str, str, str], tuple[float, dict[str, Any]]] = {}
        self.sched: dict[tuple[str, str], _Sched] = {}
        self.gauges: dict[tuple[str, str, str, tuple[tuple[str, str], ...]],
                          tuple[float, float, str]] = {}
        self.drift: dict[tuple[str, str, str, str], tuple[float, dict[str, Any]]] = {}
        self.bottleneck: dict[tuple[str, str, str], tuple[float, dict[str, Any]]] = {}
        self.processes: dict[str, tuple[float, list[dict[str, Any]]]] = {}  # host -> snapshot
        # host -> (seen, pid -> workload label values, ("index"|"uuid", id) -> pod label values)
        self.k8s: dict[str, tuple[float, dict[str, tuple[str, ...]],
                                  dict[tuple[str, str], tuple[str, ...]]]] = {}
        self.drops: Counter[str] = Counter()
        self.llm = LlmMetrics()
        self._llm_drops_seen: Counter[str] = Counter()

    # -- ingest ----------------------------------------------------------------
    def ingest(self, signal: str, host: str, batch: pa.RecordBatch) -> None:
        now = time.monotonic()
        if signal != "generate_span":  # to_pylist of a dictionary column: ~45x slower
            batch = plain(batch)
        with self._lock:
            if signal == "analytics_result":
                for row in batch.to_pylist():  # one row per key, not per kernel
                    k = (row["host"], str(row["pid"] if row["pid"] is not None else ""),
                         row["model"] or "")
                    self.analytics[k] = (now, row)
                    if k[2] and k[1]:  # the engine replaced the pid's sched-only key
                        self.analytics.pop((k[0], k[1], ""), None)
            elif signal == "sched_sample":
                self._sched(host, batch, now)
            elif signal == "gauge_sample":
                self._gauges(host, batch, now)
            elif signal == "drift_status":
                for row in batch.to_pylist():  # one row per (stream, key, detector)
                    self.drift[(row["host"], row["stream"], row["key"], row["detector"])] = (
                        now, row)
            elif signal == "process_info":  # discovery's whole set for the host
                self.processes[host] = (now, batch.to_pylist())
            elif signal == "k8s_attribution":  # the k8s collector's whole set for the host
                self._k8s(host, batch, now)
            elif signal == "generate_span":  # one row per generate call, steps as lists
                before = sum(self.llm.drops.values())
                self.llm.observe_table(host, batch)
                if sum(self.llm.drops.values()) != before:
                    self.drops.update(self.llm.drops - self._llm_drops_seen)
                    self._llm_drops_seen = Counter(self.llm.drops)
            elif signal == "bottleneck":
                for row in batch.to_pylist():  # one row per analytics key
                    k = (row["host"], row["model"] or "",
                         str(row["pid"] if row["pid"] is not None else ""))
                    self.bottleneck[k] = (now, row)

    def _k8s(self, host: str, b: pa.RecordBatch, now: float) -> None:
        procs: dict[str, tuple[str, ...]] = {}
        gpus: dict[tuple[str, str], tuple[str, ...]] = {}
        for r in b.to_pylist():  # one row per watched process / held GPU
            pod = tuple(str(r[k] or "")[:_LABEL_MAX] for k in POD_LABELS)
            if r["kind"] == "process" and r["pid"] is not None:
                procs[str(r["pid"])] = (*pod, str(r["slurm_job_id"] or "")[:20])
            elif r["kind"] == "gpu":
                if r["gpu_uuid"]:
                    gpus[("uuid", str(r["gpu_uuid"]))] = pod
                if r["gpu_index"] is not None:
                    gpus[("index", str(r["gpu_index"]))] = pod
        self.k8s[sanitize_token(host)] = (now, procs, gpus)

    def _pid_labels(self) -> list[str]:
        """:data:`WORKLOAD_LABELS` once any host has attribution, else []."""
        return list(WORKLOAD_LABELS) if self.k8s else []

    def _pid_values(self, host: str, pid: str) -> list[str]:
        """Values of :meth:`_pid_labels` for ``pid`` of ``host``."""
        if not self.k8s:
            return []
        entry = self.k8s.get(sanitize_token(host))  # analytics rows name the raw host
        got = entry[1].get(pid) if entry else None
        return list(got) if got else [""] * len(WORKLOAD_LABELS)

    def _gpu_values(self, host: str, labels: dict[str, str]) -> tuple[str, ...]:
        """The holder of the GPU a gauge series names (by uuid, then index)."""
        entry = self.k8s.get(sanitize_token(host))
        if entry is not None:
            for key in (("uuid", labels.get("gpu_uuid", "")),
                        ("index", labels.get("gpu_index", ""))):
                if key[1] and key in entry[2]:
                    return entry[2][key]
        return ("",) * len(POD_LABELS)

    def _sched(self, host: str, b: pa.RecordBatch, now: float) -> None:
        t = pa.Table.from_batches([b])
        agg = group_reduce(t, ["pid"], [
            ("runq_wait_ns", "sum"), ("run_ns", "sum"), ("voluntary_switches", "sum"),
            ("involuntary_switches", "sum"), ("migrations", "sum"),
            ("minor_faults", "sum"), ("major_faults", "sum")])
        for r in agg.to_pylist():
            s = self.sched.setdefault((host, str(r["pid"])), _Sched())
            s.wait_ns += r["runq_wait_ns_sum"] or 0
            s.run_ns += r["run_ns_sum"] or 0
            s.vol += r["voluntary_switches_sum"] or 0
            s.invol += r["involuntary_switches_sum"] or 0
            s.migrations += r["migrations_sum"] or 0
            s.minflt += r["minor_faults_sum"] or 0
            s.majflt += r["major_faults_sum"] or 0
            s.seen = now
        if "comm" in t.column_names:
            for pid, tid, comm in zip(*(t.column(c).to_pylist() for c in ("pid", "tid", "comm")),
                                      strict=True):
                s = self.sched[(host, str(pid))]
                if comm and (not s.comm or tid == pid):
                    s.comm = comm_label(comm)
        hist = t.column("runq_hist_log2_ns")
        if hist.null_count < len(hist):
            for pid, h in zip(t.column("pid").to_pylist(), hist.to_pylist(), strict=True):
                if not h:
                    continue
                s = self.sched[(host, str(pid))]
                if len(s.hist) < len(h):
                    s.hist.extend([0] * (len(h) - len(s.hist)))
                for i, c in enumerate(h):
                    s.hist[i] += c
                    s.hist_sum_ns += c * 1.5 * (2**i)  # bucket midpoint estimate

    def _gauges(self, host: str, b: pa.RecordBatch, now: float) -> None:
        """Each series' value is its newest row by ``ts_ns`` (a batch may hold
        several samples, ``run --publish-interval``); ties: the later row."""
        ts = b.column("ts_ns").to_numpy()
        if len(ts) > 1 and (ts[1:] < ts[:-1]).any():  # not in time order: stable sort
            b = b.take(pc.sort_indices(b, [("ts_ns", "ascending")]))
            ts = b.column("ts_ns").to_numpy()
        b = _newest_sample_when_alike(b, ts)
        cols = {n: b.column(n).to_pylist() for n in
                ("metric", "value", "unit", "kind", "gpu_index", "gpu_uuid", "attributes")}
        done: set[tuple[Any, ...]] = set()  # raw series already set from a newer row
        keys: set[tuple[Any, ...]] = set()  # exposition series set in this call
        for i in range(len(cols["metric"]) - 1, -1, -1):  # newest first
            metric, value = cols["metric"][i], cols["value"][i]
            if value is None or (isinstance(value, float) and math.isnan(value)):
                self.drops["gauge_nan"] += 1
                continue
            series = (metric, cols["unit"][i], cols["kind"][i], cols["gpu_index"][i],
                      cols["gpu_uuid"][i], tuple(cols["attributes"][i] or ()))
            if series in done:
                continue
            done.add(series)
            labels = {"host": host}
            if cols["gpu_index"][i] is not None:
                labels["gpu_index"] = str(cols["gpu_index"][i])
            if cols["gpu_uuid"][i]:
                labels["gpu_uuid"] = str(cols["gpu_uuid"][i])
            for k, v in cols["attributes"][i] or []:
                if label_name(k) != "host":  # the message's host wins: hosts never collide
                    labels[label_name(k)] = str(v)
            name = _prom_name(metric, cols["unit"][i], cols["kind"][i])
            key = (name, cols["kind"][i], metric, tuple(sorted(labels.items())))
            if key in keys:  # two raw series, one exposition series: the newest row wins
                continue
            keys.add(key)
            self.gauges[key] = (now, float(value), cols["unit"][i])

    # -- collect ---------------------------------------------------------------
    def describe(self) -> list[Metric]:
        return []  # unchecked collector: names vary with the sources present

    def collect(self) -> Iterator[Metric]:
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            yield from self._collect_analytics()
            yield from self._collect_sched()
            yield from self._collect_gauges()
            yield from self._collect_verdicts()
            yield from self.llm.families(self._pid_labels(), self._pid_values)
        if self.self_metrics is not None:
            yield from self.self_metrics()

    def _expire(self, now: float) -> None:
        for ka in [k for k, (t, _) in self.analytics.items() if now - t > self.stale_s]:
            del self.analytics[ka]
        for ks in [k for k, s in self.sched.items() if now - s.seen > self.stale_s]:
            del self.sched[ks]
        for kg in [k for k, (t, _, _) in self.gauges.items() if now - t > self.stale_s]:
            del self.gauges[kg]
        for kd in [k for k, (t, _) in self.drift.items() if now - t > self.stale_s]:
            del self.drift[kd]
        for kb in [k for k, (t, _) in self.bottleneck.items() if now - t > self.stale_s]:
            del self.bottleneck[kb]
        for kp in [k for k, (t, _) in self.processes.items() if now - t > self.stale_s]:
            del self.processes[kp]
        for kk in [k for k, (t, _, _) in self.k8s.items() if now - t > self.stale_s]:
            del self.k8s[kk]
        self.llm.expire(self.stale_s, now)

    def _collect_analytics(self) -> Iterator[Metric]:
        lab = ["host", "model", "pid", *self._pid_labels()]
        kar = gauge_family("aaco_kernel_amplification_ratio", lab)
        lts = gauge_family("aaco_launch_tax_ratio", lab)
        sii = gauge_family("aaco_scheduler_interference_ratio", [*lab, "comm"])
        act = gauge_family("aaco_gpu_active_ratio", lab)
        att = gauge_family("aaco_attach_iteration_latency_seconds", [*lab, "phase"])
        lat = gauge_family("aaco_iteration_latency_seconds", [*lab, "stat"])
        nodes = gauge_family("aaco_graph_nodes", lab)
        kpi = gauge_family("aaco_kernels_per_iteration", lab)
        src = gauge_family("aaco_kar_source_info", [*lab, "kar_source"])
        its = counter_family("aaco_iterations", lab)
        spans = counter_family("aaco_kernel_spans", [*lab, "family"])
        ktime = counter_family("aaco_kernel_time_seconds", [*lab, "family"])
        for (host, pid, model), (_, r) in self.analytics.items():
            lv = [host, model, pid, *self._pid_values(host, pid)]
            for fam, col in ((kar, "kar"), (lts, "launch_tax"), (act, "gpu_active_ratio")):
                if r.get(col) is not None:
                    fam.add_metric(lv, float(r[col]))
            if r.get("sii") is not None:
                sii.add_metric([*lv, comm_label(r.get("comm"))], float(r["sii"]))
            for phase, col in (("inside", "latency_attached_mean_s"),
                               ("outside", "latency_detached_mean_s")):
                if r.get(col) is not None:
                    att.add_metric([*lv, phase], float(r[col]))
            for stat in ("mean", "p50", "p99"):
                v = r.get(f"latency_{stat}_s")
                if v is not None:
                    lat.add_metric([*lv, stat], float(v))
            if r.get("graph_node_count") is not None:
                nodes.add_metric(lv, float(r["graph_node_count"]))
            if r.get("kernels_per_iteration") is not None:
                kpi.add_metric(lv, float(r["kernels_per_iteration"]))
            if r.get("kar_source"):  # a bounded set (stream_analytics.engine.KAR_SOURCES)
                src.add_metric([*lv, str(r["kar_source"])], 1.0)
            its.add_metric(lv, float(r["iterations_total"]))
            for f, n, ns in zip(r.get("family_names") or [], r.get("family_spans_total") or [],
                                r.get("family_time_ns_total") or [], strict=True):
                spans.add_metric([*lv, f], float(n))
                ktime.add_metric([*lv, f], ns / 1e9)
        yield from (kar, lts, sii, act, lat, att, nodes, kpi, src, its, spans, ktime)

    def _collect_sched(self) -> Iterator[Metric]:
        lab = ["host", "pid", "comm", *self._pid_labels()]
        wait = counter_family("aaco_sched_runqueue_wait_seconds", lab)
        cpu = counter_family("aaco_sched_cpu_seconds", lab)
        cs = counter_family("aaco_sched_context_switches", [*lab, "kind"])
        mig = counter_family("aaco_sched_migrations", lab)
        pf = counter_family("aaco_sched_page_faults", [*lab, "kind"])
        hist = histogram_family("aaco_sched_runqueue_latency_seconds", lab)
        for (host, pid), s in self.sched.items():
            lv = [host, pid, s.comm, *self._pid_values(host, pid)]
            wait.add_metric(lv, s.wait_ns / 1e9)
            cpu.add_metric(lv, s.run_ns / 1e9)
            cs.add_metric([*lv, "voluntary"], s.vol)
            cs.add_metric([*lv, "involuntary"], s.invol)
            mig.add_metric(lv, s.migrations)
            pf.add_metric([*lv, "minor"], s.minflt)
            pf.add_metric([*lv, "major"], s.majflt)
            if s.hist:
                acc, buckets = 0, []
                for i, c in enumerate(s.hist):
                    acc += c
                    buckets.append((repr(2 ** (i + 1) / 1e9), acc))
                buckets.append(("+Inf", acc))
                hist.add_metric(lv, buckets, s.hist_sum_ns / 1e9)
        yield from (wait, cpu, cs, mig, pf, hist)
        info = gauge_family("aaco_watched_process_info",
                            ["host", "pid", "comm", "reason", *self._pid_labels()])
        for host, (_, rows) in sorted(self.processes.items()):
            for r in rows:
                info.add_metric([host, str(r["pid"]), comm_label(r["comm"]),
                                 str(r["reason"])[:32], *self._pid_values(host, str(r["pid"]))],
                                1.0)
        yield info

    def _collect_gauges(self) -> Iterator[Metric]:
        # A family's label names are the union over its series (GPUs differ in
        # which resource attributes they have); a missing label renders as "".
        names: dict[str, set[str]] = {}
        for (name, _, _, labels) in self.gauges:
            names.setdefault(name, set()).update(k for k, _ in labels)
            if self.k8s:  # the GPU's holder, looked up now (it changes, the gauge key not)
                names[name].update(POD_LABELS)
        fams: dict[str, Metric] = {}
        for (name, kind, metric, labels), (_, value, unit) in sorted(self.gauges.items()):
            lab = sorted(names[name])
            fam = fams.get(name)
            if fam is None:
                known = catalogue.BY_OTEL.get(metric)
                doc = known.help if known else f"{metric} ({unit}) from a gauge_sample producer"
                base = name[: -len("_total")] if kind == "counter" else name
                fam = (CounterMetricFamily(base, doc, labels=lab) if kind == "counter"
                       else GaugeMetricFamily(name, doc, labels=lab))
                fams[name] = fam
            d = dict(labels)
            if self.k8s:
                d.update(zip(POD_LABELS, self._gpu_values(d.get("host", ""), d), strict=True))
            fam.add_metric([d.get(k, "") for k in lab], value)  # type: ignore[attr-defined]
        yield from fams.values()


    def _collect_verdicts(self) -> Iterator[Metric]:
        lab = ["host", "model", "stream", "series", "detector"]
        det = gauge_family("aaco_drift_detected", lab)
        ev = counter_family("aaco_drift_events", lab)
        last = gauge_family("aaco_drift_last_change_timestamp_seconds", lab)
        for (host, stream, key, detector), (_, r) in sorted(self.drift.items()):
            model, _, series = key.partition("/")
            if stream.startswith("gpu_"):
                model, series = "", key
            lv = [host, model, stream, series, detector]
            det.add_metric(lv, 1.0 if r["drift_detected"] else 0.0)
            ev.add_metric(lv, float(r["drift_events_total"]))
            if r["last_change_ns"] is not None:
                last.add_metric(lv, r["last_change_ns"] / 1e9)
        yield from (det, ev, last)
        extra = self._pid_labels()
        blab = ["host", "model", "pid", *extra, "class"]
        conf = gauge_family("aaco_bottleneck_confidence", blab)
        info = gauge_family("aaco_bottleneck_info", blab)
        for (host, model, pid), (_, r) in sorted(self.bottleneck.items()):
            # Label values use underscores (launch_bound); the verdict JSON keeps
            # the taxonomy's own spelling (launch-bound).
            pv = self._pid_values(host, pid)
            for c, sc in zip(r["classes"], r["scores"], strict=True):
                conf.add_metric([host, model, pid, *pv, c.replace("-", "_")], float(sc))
            info.add_metric([host, model, pid, *pv, r["label"].replace("-", "_")], 1.0)
        yield from (conf, info)


def counters_family(name: str, label: str, values: Mapping[str, int]) -> Metric:
    """A catalogued counter family (``name`` without ``_total``) with one label
    (used for exporter health)."""
    fam = counter_family(name, [label])
    for k, v in sorted(values.items()):
        fam.add_metric([k], float(v))
    return fam
