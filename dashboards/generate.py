"""Generate the aaco-exporter Grafana dashboards with grafana-foundation-sdk 11.x.

Run from the repository root::

    python -m dashboards.generate                 # writes dashboards/grafana/*.json
    python dashboards/generate.py --out /tmp/dash  # anywhere else

The dashboards are described as plain data (:class:`PanelSpec`) first and only
then turned into SDK builders, so that every PromQL expression is available to
tests without Grafana: :func:`all_queries` lists ``(dashboard/panel, expr)``
pairs and :data:`NEEDS_ABSENT_SOURCE` names the queries that need a source a
CPU-only machine lacks (GPU gauges, eBPF histograms, a pending alert), each with
its reason.  :func:`render_query`
substitutes the template variables so an expression can be sent to a real
Prometheus.

>>> render_query('rate(aaco_iterations_total{host=~"$host"}[$__rate_interval])')
'rate(aaco_iterations_total{host=~".*"}[1m])'
>>> sorted(DASHBOARD_UIDS)
['aaco-exporter', 'aaco-fleet', 'aaco-gpu', 'aaco-model']
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from grafana_foundation_sdk.builders import (
    common as common_b,
)
from grafana_foundation_sdk.builders import (
    dashboard as dashboard_b,
)
from grafana_foundation_sdk.builders import (
    gauge,
    heatmap,
    prometheus,
    stat,
    statetimeline,
    table,
    timeseries,
)
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_m
from grafana_foundation_sdk.models import dashboard as dashboard_m
from grafana_foundation_sdk.models import prometheus as prometheus_m

PanelKind = Literal["timeseries", "stat", "gauge", "table", "statetimeline", "heatmap"]

#: Where ``python -m dashboards.generate`` writes by default.
DEFAULT_OUT = Path(__file__).resolve().parent / "grafana"

#: Datasource reference used by every panel and query variable.
DATASOURCE = dashboard_m.DataSourceRef(type_val="prometheus", uid="${datasource}")

#: Reasons a query returns nothing on a CPU-only machine without eBPF.
#:
#: tests/deploy/test_prometheus_e2e.py supplies a GPU source with a test double of
#: ``rocm-smi`` that replays real recorded ``rocm-smi --json`` output, so it
#: requires data from every ``GPU_REASON`` query; ``GPU_ECC_REASON`` and
#: ``GPU_RESIDENCY_REASON`` queries need readings that ``rocm-smi`` does not give
#: and that no real recording in collectors/gpu/testdata holds.
GPU_REASON = "GPU gauges need an AMD (amdsmi/amd-smi/rocm-smi/sysfs) or NVIDIA (NVML) source"
GPU_ECC_REASON = (
    "ECC error counters come from amdsmi, amd-smi metric or sysfs ras (not from rocm-smi as the "
    "gpu collector calls it); no real recorded output with ECC counts is in "
    "collectors/gpu/testdata, so the end-to-end test cannot supply them"
)
GPU_RESIDENCY_REASON = (
    "throttle residency needs the MI300-class violation accumulators of amdsmi or amd-smi metric "
    "(not rocm-smi); collectors/gpu/testdata has only a synthetic amd-smi metric document, so the "
    "end-to-end test cannot supply them"
)
EBPF_REASON = "the runqueue latency histogram is produced by the eBPF scheduler source only"
ALERT_REASON = "ALERTS has series only while an aaco alert is pending or firing"

#: Default values used by :func:`render_query` for the dashboard variables.
DEFAULT_VARIABLES: dict[str, str] = {
    "host": ".*",
    "model": ".*",
    "gpu": ".*",
    "namespace": ".*",
    "pod": ".*",
    "instance": ".*",
    "__rate_interval": "1m",
    "__interval": "1m",
    "__range": "1h",
}


@dataclass(frozen=True)
class Query:
    """One PromQL target of a panel."""

    expr: str
    legend: str = ""
    instant: bool = False
    needs: str | None = None
    """Why the query is empty on a CPU-only machine, if it is (see NEEDS_ABSENT_SOURCE)."""


@dataclass(frozen=True)
class PanelSpec:
    """A panel, as data: kind, title, help text, queries and display hints."""

    kind: PanelKind
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = ""
    span: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None
    stacked: bool = False


@dataclass(frozen=True)
class RowSpec:
    """A dashboard row and the panels under it."""

    title: str
    panels: tuple[PanelSpec, ...]


@dataclass(frozen=True)
class DashboardSpec:
    """A dashboard, as data."""

    uid: str
    title: str
    description: str
    variables: tuple[str, ...]
    rows: tuple[RowSpec, ...]
    tags: tuple[str, ...] = field(default=("aaco",))


def _q(expr: str, legend: str = "", *, needs: str | None = None) -> Query:
    return Query(expr=expr, legend=legend, needs=needs)


def _model_quantiles(histogram: str) -> tuple[Query, ...]:
    """p50 and p99 of ``histogram`` per ``model`` (host/pod filtered), one query each."""
    return tuple(
        _q(f"histogram_quantile({q}, sum by (le, model) (rate({histogram}_bucket{{{HL}}}[{RI}])))",
           f"{{{{model}}}} p{int(q * 100)}")
        for q in (0.5, 0.99)
    )


def _gpu(expr: str, legend: str = "", *, needs: str = GPU_REASON) -> Query:
    return Query(expr=expr, legend=legend, needs=needs)


K8S = 'namespace=~"$namespace", pod=~"$pod"'
"""Kubernetes filter: the ``k8s`` collector's ``namespace``/``pod`` labels
(All is ``.*``, which also matches series without them)."""
HM = f'host=~"$host", model=~"$model", {K8S}'
HG = f'host=~"$host", gpu_index=~"$gpu", {K8S}'
HL = f'host=~"$host", {K8S}'
"""LLM panels: generate_span's model names differ from the ONNX sessions' ($model)."""
RI = "$__rate_interval"

# --------------------------------------------------------------------------- fleet
FLEET = DashboardSpec(
    uid="aaco-fleet",
    title="AACO / Fleet overview",
    description="All hosts running aaco-exporter: health, throughput, latency, GPU use.",
    variables=("datasource", "host"),
    rows=(
        RowSpec(
            "Fleet",
            (
                PanelSpec(
                    "stat",
                    "Exporters up",
                    "Scrape targets of job aaco-exporter that answered the last scrape.",
                    (_q('sum(up{job="aaco-exporter"})'),),
                    span=4,
                    height=4,
                ),
                PanelSpec(
                    "stat",
                    "Collectors down",
                    "Collectors with a data source whose aaco_collector_up is 0.",
                    (_q('count(aaco_collector_up{source!="none"} == 0) or vector(0)'),),
                    span=4,
                    height=4,
                ),
                PanelSpec(
                    "stat",
                    "Models running",
                    "Distinct models that reported iterations in the last 5 minutes.",
                    (
                        _q(
                            "count(count by (model) "
                            '(rate(aaco_iterations_total{host=~"$host"}[5m]) > 0)) or vector(0)'
                        ),
                    ),
                    span=4,
                    height=4,
                ),
                PanelSpec(
                    "stat",
                    "Iterations / s",
                    "Inference iterations per second over all selected hosts.",
                    (_q(f'sum(rate(aaco_iterations_total{{host=~"$host"}}[{RI}]))'),),
                    unit="ops",
                    span=4,
                    height=4,
                ),
                PanelSpec(
                    "stat",
                    "GPUs reporting",
                    "GPUs with a power gauge (AMD or NVIDIA source present).",
                    (_gpu('count(hw_gpu_power_watts{host=~"$host"})'),),
                    span=4,
                    height=4,
                ),
                PanelSpec(
                    "stat",
                    "Firing aaco alerts",
                    "Alerts from deploy/prometheus/rules currently firing.",
                    (
                        _q(
                            'count(ALERTS{alertname=~"Aaco.*", alertstate="firing"}) or vector(0)',
                        ),
                    ),
                    span=4,
                    height=4,
                ),
            ),
        ),
        RowSpec(
            "Workloads",
            (
                PanelSpec(
                    "timeseries",
                    "Iterations / s by host and model",
                    "rate(aaco_iterations_total) summed per host and model.",
                    (
                        _q(
                            f"sum by (host, model) "
                            f'(rate(aaco_iterations_total{{host=~"$host"}}[{RI}]))',
                            "{{host}} {{model}}",
                        ),
                    ),
                    unit="ops",
                ),
                PanelSpec(
                    "timeseries",
                    "p99 iteration latency",
                    "Worst p99 over the processes of each host and model (recording rule).",
                    (
                        _q(
                            'host_model:aaco_iteration_latency_p99_seconds:max{host=~"$host"}',
                            "{{host}} {{model}}",
                        ),
                    ),
                    unit="s",
                ),
                PanelSpec(
                    "timeseries",
                    "Scheduler interference (SII)",
                    "Share of inference-thread time lost to the CPU scheduler; alert above 0.2.",
                    (
                        _q(
                            'host_model:aaco_scheduler_interference_ratio:max{host=~"$host"}',
                            "{{host}} {{model}}",
                        ),
                    ),
                    unit="percentunit",
                    min=0,
                    max=1,
                ),
                PanelSpec(
                    "table",
                    "Current bottleneck per model",
                    "aaco_bottleneck_info == 1 with the classifier's confidence.",
                    (
                        Query(
                            "max by (host, model, class) "
                            '(aaco_bottleneck_confidence{host=~"$host"}) '
                            'and on (host, model, class) (aaco_bottleneck_info{host=~"$host"} == '
                            "1)",
                            instant=True,
                        ),
                    ),
                    unit="percentunit",
                ),
            ),
        ),
        RowSpec(
            "GPUs",
            (
                PanelSpec(
                    "timeseries",
                    "GPU utilization by host",
                    "Mean general-purpose utilization of the GPUs of each host.",
                    (
                        _gpu(
                            'avg by (host) (hw_gpu_utilization_ratio{host=~"$host", '
                            'hw_gpu_task="general"})',
                            "{{host}}",
                        ),
                    ),
                    unit="percentunit",
                    min=0,
                    max=1,
                ),
                PanelSpec(
                    "timeseries",
                    "GPU power by host",
                    "Board power summed per host.",
                    (_gpu('sum by (host) (hw_gpu_power_watts{host=~"$host"})', "{{host}}"),),
                    unit="watt",
                ),
            ),
        ),
    ),
)

# --------------------------------------------------------------------------- per GPU
GPU = DashboardSpec(
    uid="aaco-gpu",
    title="AACO / GPU",
    description="Per-GPU gauges: utilization, memory, power, temperature, clocks, throttling.",
    variables=("datasource", "host", "namespace", "pod", "gpu"),
    rows=(
        RowSpec(
            "Utilization and memory",
            (
                PanelSpec(
                    "timeseries",
                    "Utilization by engine",
                    "hw_gpu_utilization_ratio per task (general, memory, media).",
                    (
                        _gpu(
                            f"hw_gpu_utilization_ratio{{{HG}}}", "GPU {{gpu_index}} {{hw_gpu_task}}"
                        ),
                    ),
                    unit="percentunit",
                    min=0,
                    max=1,
                ),
                PanelSpec(
                    "gauge",
                    "VRAM used",
                    "hw_gpu_memory_usage_bytes / hw_gpu_memory_limit_bytes.",
                    (
                        _gpu(
                            f"hw_gpu_memory_usage_bytes{{{HG}}} / on (host, gpu_index, gpu_uuid) "
                            f"hw_gpu_memory_limit_bytes{{{HG}}}",
                            "GPU {{gpu_index}}",
                        ),
                    ),
                    unit="percentunit",
                    min=0,
                    max=1,
                ),
                PanelSpec(
                    "timeseries",
                    "VRAM used (bytes)",
                    "Device memory in use and its limit.",
                    (
                        _gpu(f"hw_gpu_memory_usage_bytes{{{HG}}}", "GPU {{gpu_index}} used"),
                        _gpu(f"hw_gpu_memory_limit_bytes{{{HG}}}", "GPU {{gpu_index}} limit"),
                    ),
                    unit="bytes",
                ),
                PanelSpec(
                    "timeseries",
                    "GPU active ratio seen by the workloads",
                    "aaco_gpu_active_ratio: share of wall time with a kernel in flight (from "
                    "spans).",
                    (_q('aaco_gpu_active_ratio{host=~"$host"}', "{{model}} pid {{pid}}"),),
                    unit="percentunit",
                    min=0,
                    max=1,
                ),
            ),
        ),
        RowSpec(
            "Power and thermals",
            (
                PanelSpec(
                    "timeseries",
                    "Power",
                    "Board power draw and the power cap.",
                    (
                        _gpu(f"hw_gpu_power_watts{{{HG}}}", "GPU {{gpu_index}} {{sensor}}"),
                        _gpu(f"hw_gpu_power_limit_watts{{{HG}}}", "GPU {{gpu_index}} cap"),
                    ),
                    unit="watt",
                ),
                PanelSpec(
                    "timeseries",
                    "Energy rate",
                    "rate(hw_gpu_energy_joules_total): average power from the energy counter.",
                    (_gpu(f"rate(hw_gpu_energy_joules_total{{{HG}}}[{RI}])", "GPU {{gpu_index}}"),),
                    unit="watt",
                ),
                PanelSpec(
                    "timeseries",
                    "Temperature",
                    "Edge, junction (hotspot) and HBM temperatures.",
                    (_gpu(f"hw_gpu_temperature_celsius{{{HG}}}", "GPU {{gpu_index}} {{sensor}}"),),
                    unit="celsius",
                ),
                PanelSpec(
                    "timeseries",
                    "Clocks",
                    "Shader (sclk), memory (mclk), fabric (fclk) and SoC clocks.",
                    (_gpu(f"hw_gpu_clock_hertz{{{HG}}}", "GPU {{gpu_index}} {{clock}}"),),
                    unit="hertz",
                ),
            ),
        ),
        RowSpec(
            "Throttling",
            (
                PanelSpec(
                    "statetimeline",
                    "Throttled",
                    "hw_gpu_throttled_ratio per reason (1 = throttling; reason any = some "
                    "limiter).",
                    (_gpu(f"hw_gpu_throttled_ratio{{{HG}}}", "GPU {{gpu_index}} {{reason}}"),),
                    span=24,
                    height=6,
                ),
                PanelSpec(
                    "timeseries",
                    "Throttle residency",
                    "hw_gpu_throttle_ratio: share of the interval each MI300 limiter was active.",
                    (
                        _gpu(
                            f"hw_gpu_throttle_ratio{{{HG}}}",
                            "GPU {{gpu_index}} {{reason}}",
                            needs=GPU_RESIDENCY_REASON,
                        ),
                    ),
                    unit="percentunit",
                    min=0,
                    max=1,
                    span=24,
                ),
                PanelSpec(
                    "timeseries",
                    "ECC errors / s",
                    "rate(hw_gpu_ecc_errors_total) by type (correctable, uncorrectable, deferred).",
                    (
                        _gpu(
                            f"rate(hw_gpu_ecc_errors_total{{{HG}}}[{RI}])",
                            "GPU {{gpu_index}} {{type}}",
                            needs=GPU_ECC_REASON,
                        ),
                    ),
                    unit="ops",
                ),
                PanelSpec(
                    "timeseries",
                    "PCIe replays / s",
                    "rate(hw_gpu_pcie_replays_total): link-level retransmissions.",
                    (_gpu(f"rate(hw_gpu_pcie_replays_total{{{HG}}}[{RI}])", "GPU {{gpu_index}}"),),
                    unit="ops",
                ),
            ),
        ),
    ),
)

# --------------------------------------------------------------------------- per model
PID_MODELS = f"group by (host, pid, model) (aaco_graph_nodes{{{HM}}})"
"""1 per (host, pid, model) with an ONNX session in that process, filtered by
``$host``, ``$model``, ``$namespace`` and ``$pod``.  A pid may have several
models (an encoder and a decoder session in one process), so this is unique per
(host, pid, model), not per (host, pid)."""

#: The ``kind`` values of the sched counters that have one (exporter/sinks/prometheus.py).
SCHED_KINDS = {
    "aaco_sched_context_switches_total": ("voluntary", "involuntary"),
    "aaco_sched_page_faults_total": ("minor", "major"),
}


def sched_by_model(counter: str, kind: str | None = None) -> str:
    """PromQL: per-second rate of the pid-keyed sched ``counter`` (one ``kind`` of it,
    if given) joined to the models of its pid: one series per (host, pid, model),
    labels ``host``, ``pid``, ``model`` (and ``kind``), value the process's rate
    (the same for each of its models: its threads' scheduling applies to each).

    The side with several series per (host, pid), :data:`PID_MODELS`, is the
    many side (left); the counter is summed to one series per (host, pid) (per
    kind) on the one side, so the match never finds duplicates whatever the
    number of models per pid (the former ``counter * on (host, pid)
    group_left (model) <models>`` failed with "many-to-many matching not
    allowed" when a pid had two models).

    >>> sched_by_model("aaco_sched_migrations_total").startswith(PID_MODELS)
    True
    """
    if kind is not None and kind not in SCHED_KINDS.get(counter, ()):
        raise ValueError(f"{counter} has no kind {kind!r}")
    matchers = 'host=~"$host"' + (f', kind="{kind}"' if kind else "")
    by = "host, pid, kind" if kind else "host, pid"
    pulled = " (kind)" if kind else ""
    return (
        f"{PID_MODELS} * on (host, pid) group_left{pulled} "
        f"sum by ({by}) (rate({counter}{{{matchers}}}[{RI}]))"
    )


MODEL = DashboardSpec(
    uid="aaco-model",
    title="AACO / Inference workload",
    description="Per-model analytics: KAR, LTS, SII, latency, GPU activity, drift, bottleneck.",
    variables=("datasource", "host", "namespace", "pod", "model"),
    rows=(
        RowSpec(
            "Summary",
            (
                PanelSpec(
                    "stat",
                    "KAR",
                    "Kernel amplification ratio: kernel spans per iteration / non-Constant graph "
                    "nodes.",
                    (_q(f"avg(aaco_kernel_amplification_ratio{{{HM}}})"),),
                    span=4,
                    height=4,
                ),
                PanelSpec(
                    "stat",
                    "Launch tax (LTS)",
                    "Share of iteration time spent launching rather than running kernels.",
                    (_q(f"avg(aaco_launch_tax_ratio{{{HM}}})"),),
                    unit="percentunit",
                    span=4,
                    height=4,
                ),
                PanelSpec(
                    "stat",
                    "SII",
                    "Scheduler interference index (0-1).",
                    (_q(f"max(aaco_scheduler_interference_ratio{{{HM}}})"),),
                    unit="percentunit",
                    span=4,
                    height=4,
                ),
                PanelSpec(
                    "stat",
                    "GPU active",
                    "Share of wall time with a kernel in flight.",
                    (_q(f"avg(aaco_gpu_active_ratio{{{HM}}})"),),
                    unit="percentunit",
                    span=4,
                    height=4,
                ),
                PanelSpec(
                    "stat",
                    "p99 latency",
                    "Rolling-window p99 iteration latency.",
                    (_q(f'max(aaco_iteration_latency_seconds{{{HM}, stat="p99"}})'),),
                    unit="s",
                    span=4,
                    height=4,
                ),
                PanelSpec(
                    "stat",
                    "Graph nodes",
                    "Non-Constant nodes of the ONNX graph.",
                    (_q(f"max(aaco_graph_nodes{{{HM}}})"),),
                    span=4,
                    height=4,
                ),
            ),
        ),
        RowSpec(
            "Efficiency",
            (
                PanelSpec(
                    "timeseries",
                    "Kernel amplification ratio (KAR)",
                    "Not bounded by 1: >1 means several kernels per graph node.",
                    (_q(f"aaco_kernel_amplification_ratio{{{HM}}}", "{{model}} pid {{pid}}"),),
                ),
                PanelSpec(
                    "timeseries",
                    "Launch tax (LTS)",
                    "aaco_launch_tax_ratio per process.",
                    (_q(f"aaco_launch_tax_ratio{{{HM}}}", "{{model}} pid {{pid}}"),),
                    unit="percentunit",
                ),
                PanelSpec(
                    "timeseries",
                    "Scheduler interference (SII)",
                    "aaco_scheduler_interference_ratio per process; alert threshold 0.2.",
                    (_q(f"aaco_scheduler_interference_ratio{{{HM}}}", "{{model}} pid {{pid}}"),),
                    unit="percentunit",
                    min=0,
                    max=1,
                ),
                PanelSpec(
                    "timeseries",
                    "GPU active ratio",
                    "aaco_gpu_active_ratio per process.",
                    (_q(f"aaco_gpu_active_ratio{{{HM}}}", "{{model}} pid {{pid}}"),),
                    unit="percentunit",
                    min=0,
                    max=1,
                ),
            ),
        ),
        RowSpec(
            "Latency and throughput",
            (
                PanelSpec(
                    "timeseries",
                    "Iteration latency",
                    "Mean, p50 and p99 over the exporter's rolling window.",
                    (
                        _q(
                            f"aaco_iteration_latency_seconds{{{HM}}}",
                            "{{model}} pid {{pid}} {{stat}}",
                        ),
                    ),
                    unit="s",
                ),
                PanelSpec(
                    "timeseries",
                    "Iterations / s",
                    "rate(aaco_iterations_total).",
                    (
                        _q(
                            f"sum by (host, model) (rate(aaco_iterations_total{{{HM}}}[{RI}]))",
                            "{{host}} {{model}}",
                        ),
                    ),
                    unit="ops",
                ),
                PanelSpec(
                    "timeseries",
                    "Kernel spans / s by family",
                    "rate(aaco_kernel_spans_total) per kernel family.",
                    (
                        _q(
                            f"sum by (family) (rate(aaco_kernel_spans_total{{{HM}}}[{RI}]))",
                            "{{family}}",
                        ),
                    ),
                    unit="ops",
                    stacked=True,
                ),
                PanelSpec(
                    "timeseries",
                    "Kernel time by family",
                    "Seconds of kernel time per second, per family (stacked).",
                    (
                        _q(
                            f"sum by (family) (rate(aaco_kernel_time_seconds_total{{{HM}}}[{RI}]))",
                            "{{family}}",
                        ),
                    ),
                    unit="s",
                    stacked=True,
                ),
            ),
        ),
        RowSpec(
            "Drift and bottleneck",
            (
                PanelSpec(
                    "statetimeline",
                    "Bottleneck class",
                    "aaco_bottleneck_info == 1: the class the classifier currently reports.",
                    (_q(f"aaco_bottleneck_info{{{HM}}} == 1", "{{model}} {{class}}"),),
                ),
                PanelSpec(
                    "timeseries",
                    "Bottleneck confidence",
                    "aaco_bottleneck_confidence per class.",
                    (_q(f"aaco_bottleneck_confidence{{{HM}}}", "{{model}} {{class}}"),),
                    unit="percentunit",
                    min=0,
                    max=1,
                ),
                PanelSpec(
                    "timeseries",
                    "Drift events",
                    "increase(aaco_drift_events_total) per stream and detector.",
                    (
                        _q(
                            f"sum by (model, stream, detector) "
                            f"(increase(aaco_drift_events_total{{{HM}}}[{RI}]))",
                            "{{model}} {{stream}} {{detector}}",
                        ),
                    ),
                    stacked=True,
                ),
                PanelSpec(
                    "statetimeline",
                    "Drift detected",
                    "aaco_drift_detected per stream and detector (1 = drift).",
                    (_q(f"aaco_drift_detected{{{HM}}}", "{{model}} {{stream}} {{detector}}"),),
                ),
            ),
        ),
        RowSpec(
            "CPU scheduler",
            (
                PanelSpec(
                    "timeseries",
                    "Runqueue wait",
                    "Seconds per second the threads of the model's process waited on a runqueue "
                    "(a process running several models shows its figure once per model).",
                    (
                        _q(
                            sched_by_model("aaco_sched_runqueue_wait_seconds_total"),
                            "{{model}} pid {{pid}}",
                        ),
                    ),
                    unit="s",
                ),
                PanelSpec(
                    "timeseries",
                    "Context switches / s",
                    "Voluntary and involuntary context switches of the model's threads.",
                    (
                        *(
                            _q(
                                sched_by_model("aaco_sched_context_switches_total", kind),
                                "{{model}} pid {{pid}} {{kind}}",
                            )
                            for kind in SCHED_KINDS["aaco_sched_context_switches_total"]
                        ),
                    ),
                    unit="ops",
                ),
                PanelSpec(
                    "timeseries",
                    "Migrations and page faults / s",
                    "CPU migrations and minor/major page faults of the model's threads.",
                    (
                        _q(
                            sched_by_model("aaco_sched_migrations_total"),
                            "{{model}} pid {{pid}} migrations",
                        ),
                        *(
                            _q(
                                sched_by_model("aaco_sched_page_faults_total", kind),
                                "{{model}} pid {{pid}} {{kind}} faults",
                            )
                            for kind in SCHED_KINDS["aaco_sched_page_faults_total"]
                        ),
                    ),
                    unit="ops",
                ),
                PanelSpec(
                    "heatmap",
                    "Runqueue latency (eBPF)",
                    "Histogram of per-wakeup runqueue latency (eBPF source only).",
                    (
                        _q(
                            f"sum by (le) "
                            f'(rate(aaco_sched_runqueue_latency_seconds_bucket{{host=~"$host"}}[{RI}]))',
                            "{{le}}",
                            needs=EBPF_REASON,
                        ),
                    ),
                    unit="s",
                ),
            ),
        ),
        RowSpec(
            "LLM generate loops",
            (
                PanelSpec(
                    "timeseries",
                    "Time to first token",
                    "p50 and p99 of aaco_llm_time_to_first_token_seconds per generate_span "
                    "model (docs/llm.md); the model label is the program's, not the ONNX file's.",
                    _model_quantiles("aaco_llm_time_to_first_token_seconds"),
                    unit="s",
                    span=8,
                ),
                PanelSpec(
                    "timeseries",
                    "Inter-token latency",
                    "p50 and p99 of aaco_llm_inter_token_latency_seconds (per sequence).",
                    _model_quantiles("aaco_llm_inter_token_latency_seconds"),
                    unit="s",
                    span=8,
                ),
                PanelSpec(
                    "timeseries",
                    "Output tokens / s",
                    "rate(aaco_llm_output_tokens_total): tokens generate calls emitted, every "
                    "sequence of a batch.",
                    (
                        _q(
                            f"sum by (model) (rate(aaco_llm_output_tokens_total{{{HL}}}[{RI}]))",
                            "{{model}}",
                        ),
                    ),
                    span=8,
                ),
            ),
        ),
    ),
)

# --------------------------------------------------------------------------- exporter health
EXP = 'job="aaco-exporter", instance=~"$instance"'

HEALTH = DashboardSpec(
    uid="aaco-exporter",
    title="AACO / Exporter health",
    description="The exporter itself: scrape status, event flow, drops, collectors, resources.",
    variables=("datasource", "instance"),
    rows=(
        RowSpec(
            "Status",
            (
                PanelSpec(
                    "stat",
                    "Up",
                    "Prometheus' `up` for the exporter targets.",
                    (_q(f"up{{{EXP}}}", "{{instance}}"),),
                    span=6,
                    height=4,
                ),
                PanelSpec(
                    "table",
                    "Build",
                    "aaco_exporter_build_info per instance.",
                    (Query(f"aaco_exporter_build_info{{{EXP}}}", instant=True),),
                    span=18,
                    height=4,
                ),
                PanelSpec(
                    "statetimeline",
                    "Collectors up",
                    "aaco_collector_up per collector and source (source none = not available "
                    "here).",
                    (_q(f"aaco_collector_up{{{EXP}}}", "{{instance}} {{collector}} ({{source}})"),),
                    span=24,
                    height=6,
                ),
            ),
        ),
        RowSpec(
            "Events",
            (
                PanelSpec(
                    "timeseries",
                    "Events received / s",
                    "rate(aaco_exporter_events_received_total) per signal.",
                    (
                        _q(
                            f"sum by (instance, signal) "
                            f"(rate(aaco_exporter_events_received_total{{{EXP}}}[{RI}]))",
                            "{{instance}} {{signal}}",
                        ),
                    ),
                    unit="ops",
                    stacked=True,
                ),
                PanelSpec(
                    "timeseries",
                    "Events dropped / s",
                    "rate(aaco_exporter_events_dropped_total) per reason; any sustained value "
                    "alerts.",
                    (
                        _q(
                            f"sum by (instance, reason) "
                            f"(rate(aaco_exporter_events_dropped_total{{{EXP}}}[{RI}]))",
                            "{{instance}} {{reason}}",
                        ),
                    ),
                    unit="ops",
                ),
                PanelSpec(
                    "timeseries",
                    "Collect duration p99",
                    "histogram_quantile(0.99) of aaco_collector_collect_duration_seconds per "
                    "collector.",
                    (
                        _q(
                            "histogram_quantile(0.99, sum by (instance, collector, le) "
                            f""
                            f"(rate(aaco_collector_collect_duration_seconds_bucket{{{EXP}}}[{RI}])))",
                            "{{instance}} {{collector}}",
                        ),
                    ),
                    unit="s",
                ),
                PanelSpec(
                    "timeseries",
                    "Collect rate",
                    "Collections per second per collector.",
                    (
                        _q(
                            f"sum by (instance, collector) "
                            f"(rate(aaco_collector_collect_duration_seconds_count{{{EXP}}}[{RI}]))",
                            "{{instance}} {{collector}}",
                        ),
                    ),
                    unit="ops",
                ),
            ),
        ),
        RowSpec(
            "Process",
            (
                PanelSpec(
                    "timeseries",
                    "CPU",
                    "CPU seconds per second used by the exporter process.",
                    (_q(f"rate(process_cpu_seconds_total{{{EXP}}}[{RI}])", "{{instance}}"),),
                    unit="percentunit",
                    span=8,
                ),
                PanelSpec(
                    "timeseries",
                    "Resident memory",
                    "process_resident_memory_bytes.",
                    (_q(f"process_resident_memory_bytes{{{EXP}}}", "{{instance}}"),),
                    unit="bytes",
                    span=8,
                ),
                PanelSpec(
                    "timeseries",
                    "Open file descriptors",
                    "process_open_fds.",
                    (_q(f"process_open_fds{{{EXP}}}", "{{instance}}"),),
                    span=8,
                ),
                PanelSpec(
                    "table",
                    "Alerts",
                    "aaco alerts pending or firing.",
                    (Query('ALERTS{alertname=~"Aaco.*"}', instant=True, needs=ALERT_REASON),),
                    span=24,
                ),
            ),
        ),
    ),
)

DASHBOARDS: tuple[DashboardSpec, ...] = (FLEET, GPU, MODEL, HEALTH)
DASHBOARD_UIDS = frozenset(d.uid for d in DASHBOARDS)


# --------------------------------------------------------------------------- machine-readable views
def all_queries() -> list[tuple[str, str]]:
    """Every panel query as ``("<dashboard uid>/<panel title>", expr)``, in dashboard order.

    Template variables are left in; pass each expr through :func:`render_query`
    before sending it to Prometheus.

    >>> kar = ('avg(aaco_kernel_amplification_ratio{host=~"$host", model=~"$model", '
    ...        'namespace=~"$namespace", pod=~"$pod"})')
    >>> ("aaco-model/KAR", kar) in all_queries()
    True
    """
    return [
        (f"{d.uid}/{p.title}", q.expr)
        for d in DASHBOARDS
        for r in d.rows
        for p in r.panels
        for q in p.queries
    ]


def variable_queries() -> list[tuple[str, str]]:
    """Each query variable as ``("<dashboard uid>/$<name>", PromQL)``.

    Grafana evaluates ``label_values(...)``; the PromQL returned here selects the
    same label values, so it can be checked against a real Prometheus.
    """
    return [
        (f"{d.uid}/${v}", VARIABLE_QUERIES[v][1])
        for d in DASHBOARDS
        for v in d.variables
        if v in VARIABLE_QUERIES
    ]


def _needs_absent_source() -> list[tuple[str, str]]:
    return [
        (q.expr, q.needs)
        for d in DASHBOARDS
        for r in d.rows
        for p in r.panels
        for q in p.queries
        if q.needs is not None
    ]


#: ``(expr, reason)`` for each panel query that returns no series on a CPU-only
#: machine without eBPF (or while no alert is pending or firing).  The ``$gpu``
#: variable query (see :func:`variable_queries`) is empty on such a machine for
#: the same reason.  Every other query in :func:`all_queries` is expected to
#: return data from a running exporter that has seen at least one inference
#: workload.  The end-to-end test proves the ``GPU_REASON``, ``EBPF_REASON`` and
#: ``ALERT_REASON`` entries too, once it has supplied those sources.
NEEDS_ABSENT_SOURCE: list[tuple[str, str]] = _needs_absent_source()


def render_query(expr: str, variables: dict[str, str] | None = None) -> str:
    """Substitute Grafana template variables (``$host``, ``${gpu}``, ``$__rate_interval``).

    >>> render_query('up{instance=~"${instance}"}', {"instance": "h:9464"})
    'up{instance=~"h:9464"}'
    """
    values = {**DEFAULT_VARIABLES, **(variables or {})}

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return values.get(name, m.group(0))

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", sub, expr)


# --------------------------------------------------------------------------- SDK building
#: Query variables: name -> (Grafana templating query, equivalent plain PromQL).
VARIABLE_QUERIES: dict[str, tuple[str, str]] = {
    "host": ("label_values(host)", 'group by (host) ({__name__=~"aaco_.+", host!=""})'),
    "model": (
        'label_values(aaco_iterations_total{host=~"$host"}, model)',
        'group by (model) (aaco_iterations_total{host=~"$host"})',
    ),
    "gpu": (
        'label_values(hw_gpu_power_watts{host=~"$host"}, gpu_index)',
        'group by (gpu_index) (hw_gpu_power_watts{host=~"$host"})',
    ),
    "namespace": (
        'label_values({__name__=~"hw_gpu_.+|aaco_.+", host=~"$host"}, namespace)',
        'group by (namespace) ({__name__=~"hw_gpu_.+|aaco_.+", host=~"$host", namespace!=""})',
    ),
    "pod": (
        'label_values({__name__=~"hw_gpu_.+|aaco_.+", host=~"$host", '
        'namespace=~"$namespace"}, pod)',
        'group by (pod) ({__name__=~"hw_gpu_.+|aaco_.+", host=~"$host", '
        'namespace=~"$namespace", pod!=""})',
    ),
    "instance": (
        'label_values(up{job="aaco-exporter"}, instance)',
        'group by (instance) (up{job="aaco-exporter"})',
    ),
}


def _variable(name: str) -> cogbuilder.Builder[dashboard_m.VariableModel]:
    if name == "datasource":
        return dashboard_b.DatasourceVariable("datasource").label("Data source").type("prometheus")
    all_opt = dashboard_m.VariableOption(selected=True, text="All", value="$__all")
    return (
        dashboard_b.QueryVariable(name)
        .label(name.capitalize() if name != "gpu" else "GPU")
        .datasource(DATASOURCE)
        .query(VARIABLE_QUERIES[name][0])
        .refresh(dashboard_m.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dashboard_m.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(all_opt)
    )


def _target(q: Query, ref_id: str, kind: PanelKind) -> prometheus.Dataquery:
    t = (
        prometheus.Dataquery()
        .expr(q.expr)
        .ref_id(ref_id)
        .datasource(DATASOURCE)
        .editor_mode(prometheus_m.QueryEditorMode.CODE)
    )
    if q.legend:
        t = t.legend_format(q.legend)
    if q.instant or kind == "table":
        t = t.instant().format(prometheus_m.PromQueryFormat.TABLE)
    elif kind == "heatmap":
        t = t.format(prometheus_m.PromQueryFormat.HEATMAP)
    return t


PanelBuilder = (
    timeseries.Panel | stat.Panel | gauge.Panel | table.Panel | statetimeline.Panel | heatmap.Panel
)


def _panel(spec: PanelSpec) -> PanelBuilder:
    p: PanelBuilder
    if spec.kind == "timeseries":
        ts = timeseries.Panel().legend(
            common_b.VizLegendOptions()
            .display_mode(common_m.LegendDisplayMode.LIST)
            .placement(common_m.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        if spec.stacked:
            ts = ts.stacking(
                common_b.StackingConfig().mode(common_m.StackingMode.NORMAL)
            ).fill_opacity(30)
        p = ts
    elif spec.kind == "stat":
        p = stat.Panel().reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]))
    elif spec.kind == "gauge":
        p = gauge.Panel().reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]))
    elif spec.kind == "table":
        p = table.Panel()
    elif spec.kind == "statetimeline":
        p = statetimeline.Panel()
    else:
        p = heatmap.Panel()
    p = p.title(spec.title).description(spec.description).datasource(DATASOURCE)
    p = p.span(spec.span).height(spec.height)
    if spec.unit:
        p = p.unit(spec.unit)
    if spec.min is not None:
        p = p.min(spec.min)
    if spec.max is not None:
        p = p.max(spec.max)
    for i, q in enumerate(spec.queries):
        p = p.with_target(_target(q, chr(ord("A") + i), spec.kind))
    return p


def build_dashboard(spec: DashboardSpec) -> dashboard_m.Dashboard:
    """Turn a :class:`DashboardSpec` into an SDK dashboard model."""
    b = (
        dashboard_b.Dashboard(spec.title)
        .uid(spec.uid)
        .description(spec.description)
        .tags(list(spec.tags))
        .editable()
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
        .tooltip(dashboard_m.DashboardCursorSync.CROSSHAIR)
        .link(
            dashboard_b.DashboardLink("AACO dashboards")
            .type(dashboard_m.DashboardLinkType.DASHBOARDS)
            .tags(["aaco"])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )
    for v in spec.variables:
        b = b.with_variable(_variable(v))
    for row in spec.rows:
        b = b.with_row(dashboard_b.Row(row.title))
        for panel in row.panels:
            b = b.with_panel(_panel(panel))
    model = b.build()
    # Stable panel ids (Grafana needs them unique within a dashboard).
    for i, built in enumerate(model.panels or [], start=1):
        built.id_val = i
    return model


def render(spec: DashboardSpec) -> str:
    """The dashboard as deterministic, pretty-printed JSON text (trailing newline)."""
    return json.dumps(build_dashboard(spec), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def write_all(out: Path) -> list[Path]:
    """Write one ``<uid>.json`` per dashboard into *out*; return the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for spec in DASHBOARDS:
        path = out / f"{spec.uid}.json"
        path.write_text(render(spec), encoding="utf-8")
        paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument(
        "--list-queries", action="store_true", help="print every panel query as JSON and exit"
    )
    args = parser.parse_args(argv)
    if args.list_queries:
        json.dump(
            {
                "queries": all_queries(),
                "variables": variable_queries(),
                "needs_absent_source": NEEDS_ABSENT_SOURCE,
            },
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
        return 0
    for path in write_all(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
