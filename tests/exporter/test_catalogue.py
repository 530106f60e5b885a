"""The metric catalogue drives every output's names (exporter/catalogue.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import yaml
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from collectors.gpu import rows as R
from collectors.gpu.rocm_smi import parse_rocm_smi
from exporter import catalogue, schema
from exporter.sinks.otlp_proto import metrics_request
from exporter.sinks.perfetto_trace import ANALYTICS_COUNTERS
from exporter.sinks.prometheus import PromState
from tests.support import load_path, uncatalogued

REPO = Path(__file__).resolve().parents[2]
SMI = REPO / "collectors" / "gpu" / "testdata" / "smi"
_PROM_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def test_docs_metrics_md_table_is_the_generated_catalogue() -> None:
    """docs/metrics.md embeds exactly what the catalogue renders (CI fails on drift)."""
    assert catalogue.main(["--check", str(REPO / "docs" / "metrics.md")]) == 0


def test_check_fails_and_write_repairs_a_drifted_doc(tmp_path: Path) -> None:
    """A hand-edited table is reported as drift; --write restores the generated one."""
    doc = tmp_path / "metrics.md"
    text = (REPO / "docs" / "metrics.md").read_text()
    head, table = text.split(catalogue.BEGIN, 1)  # edit the generated table, not the prose
    doc.write_text(head + catalogue.BEGIN
                   + table.replace("`aaco_launch_tax_ratio`", "`aaco_lts`", 1))
    assert doc.read_text() != text
    assert catalogue.main(["--check", str(doc)]) == 1
    assert catalogue.main(["--write", str(doc)]) == 0
    assert doc.read_text() == text


def test_prometheus_names_follow_the_otel_translation_unless_a_mapping_is_recorded() -> None:
    """Each name is valid and unique; only entries with ``prom`` deviate from prom_name()."""
    names = [m.prom_name for m in catalogue.CATALOGUE]
    assert len(names) == len(set(names))
    assert len({m.otel for m in catalogue.CATALOGUE}) == len(catalogue.CATALOGUE)
    for m in catalogue.CATALOGUE:
        assert _PROM_RE.match(m.prom_name), m
        derived = catalogue.prom_name(m.otel, m.unit, m.kind)
        assert (m.prom_name == derived) == (not m.prom or m.prom == derived), m
        assert m.kind != "counter" or m.prom_name.endswith("_total"), m
        assert m.unit != "s" or m.prom_name.endswith(("_seconds", "_seconds_total")), m


def test_otlp_columns_exist_in_the_analytics_result_schema() -> None:
    """Every column the catalogue exports over OTLP is an ANALYTICS_RESULT field."""
    fields = set(schema.ANALYTICS_RESULT.names)
    for m, c in catalogue.ANALYTICS_POINTS:
        assert c.name in fields, (m.otel, c.name)
    assert {c for c, _ in ANALYTICS_COUNTERS} <= fields


def _analytics() -> pa.Table:
    row = {f.name: None for f in schema.ANALYTICS_RESULT}
    row.update(ts_ns=1, host="h", model="m", pid=7, iterations=4, kernel_count=8,
               graph_node_count=2, kar=1.0, launch_tax=0.5, sii=0.25, gpu_active_ratio=0.9,
               latency_mean_s=0.002, latency_p50_s=0.002, latency_p99_s=0.003,
               kernel_spans_total=8, iterations_total=4, kernels_per_iteration=2.0,
               latency_attached_mean_s=0.004, latency_detached_mean_s=0.002,
               family_names=["gemm"], family_spans_total=[8], family_time_ns_total=[1000],
               kar_source="ort_profiler", comm="python3")
    return pa.Table.from_pylist([row], schema=schema.ANALYTICS_RESULT)


def test_otlp_metric_names_units_and_kinds_come_from_the_catalogue() -> None:
    """The OTLP request names each analytics metric as the catalogue does; KAR maps to
    the same Prometheus name /metrics serves."""
    req = ExportMetricsServiceRequest.FromString(
        metrics_request(_analytics(), None, "h").SerializeToString())
    got = {m.name: m for m in req.resource_metrics[0].scope_metrics[0].metrics}
    expect = {m.otel for m, _ in catalogue.ANALYTICS_POINTS}
    assert set(got) == expect
    for name, m in got.items():
        d = catalogue.BY_OTEL[name]
        assert m.unit == d.unit and m.HasField("sum") == (d.kind == "counter")
    lat = got["aaco.iteration.latency"].gauge.data_points
    assert sorted(kv.value.string_value for p in lat for kv in p.attributes
                  if kv.key == "stat") == ["mean", "p50", "p99"]
    assert catalogue.BY_OTEL["aaco.kernel_amplification"].prom_name == \
        "aaco_kernel_amplification_ratio"


def test_prometheus_state_exposes_only_catalogued_families_with_catalogue_help() -> None:
    """Every family PromState renders from an analytics row is listed, with its help."""
    st = PromState()
    st.ingest("analytics_result", "h", _analytics().to_batches()[0])
    fams = list(st.collect())
    seen = {}
    for f in fams:
        for s in f.samples:
            seen.setdefault(s.name, []).append((dict(s.labels), s.value))
        m = catalogue.BY_PROM.get(f.name) or catalogue.BY_PROM[f.name + "_total"]
        assert f.documentation == m.help
    assert not uncatalogued(seen)
    assert "aaco_kernel_amplification_ratio" in seen and "aaco_kernel_time_seconds_total" in seen


def test_uncatalogued_names_an_unlisted_series_and_an_unlisted_label() -> None:
    """The scrape check used by the end-to-end tests can fail."""
    assert uncatalogued({"aaco_made_up_total": [({}, 1.0)]}) == ["aaco_made_up_total"]
    assert uncatalogued({"aaco_graph_nodes": [({"host": "h", "kernel": "k"}, 1.0)]}) == [
        "aaco_graph_nodes['kernel']"]
    assert uncatalogued({"aaco_sched_runqueue_latency_seconds_bucket": [({"le": "1"}, 1.0)],
                         "process_cpu_seconds_total": [({}, 1.0)]}) == []


def test_gpu_rows_from_real_rocm_smi_output_are_catalogued_with_their_unit_and_kind() -> None:
    """Every metric the GPU parsers produce from the recorded rocm-smi files is listed
    with the unit and kind the rows carry."""
    seen: set[tuple[str, str, str]] = set()
    for f in sorted(SMI.rglob("*rocm_smi*.json")) + sorted((SMI / "telegraf").glob("*.json")):
        res = parse_rocm_smi(f.read_text(), where=str(f))
        seen |= {(r.metric, r.unit, r.kind) for r in res.rows}
    assert len(seen) >= 8
    for metric, unit, kind in seen:
        m = catalogue.BY_OTEL[metric]
        assert (m.unit, m.kind) == (unit, kind), metric
    consts = {v for k, v in vars(R).items() if k.isupper() and isinstance(v, str)
              and v.startswith("hw.gpu.")}
    assert consts <= set(catalogue.BY_OTEL)


def _metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\b((?:aaco|hw_gpu)_[a-z0-9_]+)\b", expr))


def test_every_dashboard_and_alert_query_uses_catalogued_names() -> None:
    """Dashboard panels, variables, alert and recording rules name only catalogued
    metrics (or recording rules defined alongside them)."""
    gen = load_path("aaco_dashboards_generate_cat", REPO / "dashboards" / "generate.py")
    exprs = [e for _, e in gen.all_queries() + gen.variable_queries()]
    recorded: set[str] = set()
    for rules in (REPO / "deploy" / "prometheus" / "rules").glob("*.yml"):
        for g in yaml.safe_load(rules.read_text())["groups"]:
            for r in g["rules"]:
                exprs.append(r["expr"])
                if "record" in r:
                    recorded.add(r["record"].replace(":", "_"))
    known = set(catalogue.BY_PROM) | {
        m.prom_name + s for m in catalogue.CATALOGUE if m.kind == "histogram"
        for s in ("_bucket", "_sum", "_count")}
    labels = {lab for m in catalogue.CATALOGUE for lab in (*m.labels, *m.optional_labels)}
    used = set().union(*(_metric_names(e.replace(":", "_")) for e in exprs)) - labels
    assert used, "no query found"
    assert used - known - recorded == set()
