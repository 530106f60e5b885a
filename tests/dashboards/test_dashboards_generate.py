"""Tests of the Grafana dashboard generator (dashboards/generate.py) and its committed output."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.support import load_path

REPO = Path(__file__).resolve().parents[2]
GRAFANA_DIR = REPO / "dashboards" / "grafana"


def _load_generator() -> ModuleType:
    return load_path("aaco_dashboards_generate", REPO / "dashboards" / "generate.py")


gen = _load_generator()


def _committed() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(GRAFANA_DIR.glob("*.json"))}


def _leaf_panels(d: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in d["panels"]:
        if p["type"] == "row":
            out.extend(p.get("panels", []))
        else:
            out.append(p)
    return out


def test_committed_json_matches_regenerated_output(tmp_path: Path) -> None:
    """Regenerating into a temp dir gives byte-identical JSON to dashboards/grafana/*.json."""
    written = gen.write_all(tmp_path)
    assert {p.name for p in written} == set(_committed())
    for path in written:
        committed = (GRAFANA_DIR / path.name).read_text()
        assert path.read_text() == committed, (
            f"{path.name} is stale: run `python -m dashboards.generate`"
        )


def test_cli_writes_to_out_dir(tmp_path: Path) -> None:
    """`python dashboards/generate.py --out DIR` writes one JSON per dashboard uid."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "dashboards" / "generate.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert {p.stem for p in tmp_path.glob("*.json")} == set(gen.DASHBOARD_UIDS)


def test_dashboards_load_back_through_the_sdk() -> None:
    """Each committed JSON parses into the SDK's Dashboard model with its uid, title and panels."""
    from grafana_foundation_sdk.models.dashboard import Dashboard

    for name, raw in _committed().items():
        model = Dashboard.from_json(raw)
        assert model.uid == name.removesuffix(".json")
        assert model.title
        assert model.panels


def test_every_panel_has_datasource_and_prometheus_query() -> None:
    """Every non-row panel uses the $datasource Prometheus ref and has >=1 target with an expr."""
    for name, d in _committed().items():
        panels = _leaf_panels(d)
        assert panels, name
        for p in panels:
            where = f"{name}: {p.get('title')}"
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
            assert p.get("title") and p.get("gridPos"), where
            targets = p.get("targets") or []
            assert targets, f"{where} has no query"
            ref_ids = [t["refId"] for t in targets]
            assert len(ref_ids) == len(set(ref_ids)), where
            for t in targets:
                assert t["expr"].strip(), where
                assert t["datasource"]["uid"] == "${datasource}", where


def test_panel_ids_are_unique_and_layout_fits_grid() -> None:
    """Panel ids are unique within each dashboard and every panel fits the 24-column grid."""
    for name, d in _committed().items():
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids)), name
        for p in d["panels"]:
            pos = p["gridPos"]
            assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, (name, p["title"])


def test_template_variables_present() -> None:
    """Dashboards define datasource, host, model and gpu variables where they filter by them,
    and the workload and GPU dashboards the Kubernetes namespace and pod variables."""
    variables = {
        name: {v["name"] for v in d["templating"]["list"]} for name, d in _committed().items()
    }
    assert all("datasource" in v for v in variables.values())
    assert {"host", "model", "namespace", "pod"} <= variables["aaco-model.json"]
    assert {"host", "gpu", "namespace", "pod"} <= variables["aaco-gpu.json"]
    assert "host" in variables["aaco-fleet.json"]
    for name, d in _committed().items():
        defined = {v["name"] for v in d["templating"]["list"]}
        for p in _leaf_panels(d):
            for t in p["targets"]:
                used = set(re.findall(r"\$(\w+)", t["expr"])) - {"__rate_interval"}
                assert used <= defined, (name, p["title"], used - defined)


def test_all_queries_cover_every_target_and_absent_sources_are_known() -> None:
    """all_queries() equals the committed targets; NEEDS_ABSENT_SOURCE entries have reasons."""
    committed = sorted(
        t["expr"] for d in _committed().values() for p in _leaf_panels(d) for t in p["targets"]
    )
    listed = [expr for _, expr in gen.all_queries()]
    assert sorted(listed) == committed
    for expr, reason in gen.NEEDS_ABSENT_SOURCE:
        assert expr in listed and reason
    gpu_exprs = [e for e in listed if "hw_gpu_" in e]
    absent = {e for e, _ in gen.NEEDS_ABSENT_SOURCE}
    assert gpu_exprs and all(e in absent for e in gpu_exprs)


def test_render_query_leaves_no_template_variables() -> None:
    """render_query substitutes every variable used by the panels and variable queries."""
    for _, expr in gen.all_queries() + gen.variable_queries():
        assert "$" not in gen.render_query(expr), expr


@pytest.mark.apt
def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool accepts every rendered panel and variable query (as recording-rule expressions)."""
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool not found; install Debian's `prometheus` package")
    queries = gen.all_queries() + gen.variable_queries()
    rules = [
        {"record": f"aaco_dashboard_check:q{i}", "expr": gen.render_query(expr)}
        for i, (_, expr) in enumerate(queries)
    ]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "q", "rules": rules}]}))
    proc = subprocess.run(
        [exe, "check", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_provisioning_files_point_at_prometheus_and_dashboard_dir() -> None:
    """Grafana provisioning: a default Prometheus datasource and a file provider for the JSON."""
    ds = yaml.safe_load((GRAFANA_DIR / "provisioning/datasources/prometheus.yaml").read_text())
    assert ds["apiVersion"] == 1
    (prom,) = ds["datasources"]
    assert prom["type"] == "prometheus" and prom["isDefault"] is True and prom["url"]
    dash = yaml.safe_load((GRAFANA_DIR / "provisioning/dashboards/aaco.yaml").read_text())
    assert dash["apiVersion"] == 1
    (provider,) = dash["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")
