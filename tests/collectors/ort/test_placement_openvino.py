"""PFI on a real provider fallback (collectors/ort/placement.py,
exporter/attribution_bundle.py): magika, optimized offline by ORT at
ORT_ENABLE_ALL, run under onnxruntime-openvino with providers
[OpenVINOExecutionProvider, CPUExecutionProvider] in ``.venv-ov`` (``make
setup`` creates it with the project's ``openvino`` extra; that wheel cannot
share the project venv). OpenVINO compiles what it supports; the CPU EP's
own NCHWc nodes fall back to CPUExecutionProvider."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

from collectors.ort import load_graph
from collectors.ort.placement import assignment_from_profile, placement_summary
from tests.collectors.ort.ort_independent import reference_pfi

REPO = Path(__file__).resolve().parents[3]
OV_VENV = Path(os.environ.get("OV_VENV", REPO / ".venv-ov"))
RECORDER = REPO / "scripts/record_openvino_profile.py"
OV = "OpenVINOExecutionProvider"
CPU = "CPUExecutionProvider"

pytestmark = [pytest.mark.slow, pytest.mark.openvino]


@pytest.fixture(scope="module")
def ov_bin() -> Path:
    """``.venv-ov/bin``; a failure, never a skip, when it is missing."""
    b = OV_VENV / "bin"
    if not (b / "python").is_file() or not (b / "aaco-exporter").is_file():
        pytest.fail(f"{b}/python or aaco-exporter missing: `make setup` creates {OV_VENV}")
    return b


@pytest.fixture(scope="module")
def recorded(ov_bin: Path, magika_model: Path,
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """scripts/record_openvino_profile.py run in .venv-ov on magika: the
    ORT_ENABLE_ALL model it saved and the OpenVINO + CPU profile."""
    out = tmp_path_factory.mktemp("ov")
    r = subprocess.run([str(ov_bin / "python"), str(RECORDER), str(magika_model), str(out),
                        "--runs", "2"], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    rec: dict[str, Any] = json.loads(r.stdout.splitlines()[-1])
    return rec


def _runnable(model: Path) -> set[str]:
    graph = load_graph(model)
    return set(graph.nodes.filter(pc.not_equal(graph.nodes["op_type"], "Constant"))["name"]
               .to_pylist())


def test_openvino_leaves_nodes_to_the_cpu_and_pfi_matches_the_profile_events(
        recorded: dict[str, Any]) -> None:
    """OpenVINOExecutionProvider is available and used; the node -> EP map
    covers every graph node; some nodes are on CPUExecutionProvider and the
    others on OpenVINO; partitions (> 1) and PFI equal the reference computed
    from the raw profile events and the ONNX graph without the collector's code."""
    assert recorded["providers"] == [OV, CPU] and OV in recorded["available_providers"]
    assert recorded["onnxruntime_openvino"].startswith("1.24")
    profile, model = Path(recorded["profile"]), Path(recorded["model"])
    assign, seq = assignment_from_profile(profile)
    s = placement_summary(assign, seq, load_graph(model))
    ref = reference_pfi(profile, model)
    names = _runnable(model)
    assert set(s["assignment"]) == names and s["nodes"] == len(names) == ref["nodes"]
    assert s["nodes_not_in_graph"] == []
    per = s["nodes_per_provider"]
    assert set(per) == {OV, CPU} and per[CPU] >= 1 and per[OV] >= 1
    assert sorted(n for n, p in s["assignment"].items() if p == CPU) == ref["cpu"]
    assert sorted(s["compiled_subgraphs"]) == ref["fused"] != []
    assert set(s["compiled_subgraphs"].values()) == {OV}
    assert s["nodes_in_compiled_subgraphs"] == per[OV]
    assert s["partitions"] == ref["partitions"] > 1
    assert s["pfi"] == ref["pfi"] == s["partitions"] / s["nodes"]
    assert s["ep_transitions"] >= 2


def test_capture_under_openvino_writes_the_same_pfi_into_ort_config(
        recorded: dict[str, Any], ov_bin: Path, tmp_path: Path) -> None:
    """``aaco-exporter capture --providers OpenVINO…,CPU…`` in .venv-ov over
    3 chunks (3 sessions, whose fused nodes ORT numbers anew): the bundle's
    runtime/ort_config.json has the graph ORT partitioned as its reference,
    one entry per compiled subgraph of one session, every graph node in the
    assignment, and partitions/PFI equal to the reference of each kept profile."""
    model = Path(recorded["model"])
    r = subprocess.run([str(ov_bin / "aaco-exporter"), "capture", "--model", str(model),
                        "--iterations", "25", "--warmup", "1", "--out", str(tmp_path),
                        "--providers", f"{OV},{CPU}", "--quiet"],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    bundle = Path(r.stdout.splitlines()[-1])
    cfg = json.loads((bundle / "runtime/ort_config.json").read_text())
    profiles = sorted((bundle / "profiler").glob("ort_profile_*.json"))
    assert len(profiles) == 3
    refs = [reference_pfi(p, model) for p in profiles]
    assert len({(x["partitions"], x["nodes"], len(x["fused"])) for x in refs}) == 1
    ref = refs[0]
    assert cfg["providers"] == [OV, CPU] and cfg["onnxruntime_version"].startswith("1.24")
    assert cfg["graph_source"].startswith("partitioned (the graph at ORT_ENABLE_BASIC")
    assert set(cfg["assignment"]) == _runnable(model)
    assert len(cfg["compiled_subgraphs"]) == len(ref["fused"])
    assert sorted(n for n, p in cfg["assignment"].items() if p == CPU) == ref["cpu"]
    assert (cfg["nodes"], cfg["partitions"], cfg["pfi"]) == (
        ref["nodes"], ref["partitions"], ref["pfi"])
