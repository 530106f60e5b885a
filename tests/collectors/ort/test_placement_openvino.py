"""PFI on a real provider fallback (collectors/ort/placement.py): magika,
optimized offline by ORT at ORT_ENABLE_ALL, run under onnxruntime-openvino
with providers [OpenVINOExecutionProvider, CPUExecutionProvider] in
``.venv-ov`` (``make setup`` creates it; the onnxruntime-openvino wheel
cannot share the project venv). OpenVINO compiles what it supports; the CPU
EP's own NCHWc nodes fall back to CPUExecutionProvider."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

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


@pytest.fixture(scope="module")
def ov_python() -> Path:
    """``.venv-ov``'s python; a failure, never a skip, when it is missing."""
    py = OV_VENV / "bin/python"
    if not py.is_file():
        pytest.fail(f"{py} missing: `make setup` creates {OV_VENV} with onnxruntime-openvino")
    return py


@pytest.mark.slow
@pytest.mark.openvino
def test_openvino_leaves_nodes_to_the_cpu_and_pfi_matches_the_profile_events(
        tmp_path: Path, magika_model: Path, ov_python: Path) -> None:
    """A real run of the recorder in .venv-ov: OpenVINOExecutionProvider is
    available and used; the node -> EP map covers every graph node; some
    nodes are on CPUExecutionProvider and the others on OpenVINO; partitions
    (> 1) and PFI equal the reference computed from the raw profile events
    and the ONNX graph without the collector's code."""
    r = subprocess.run([str(ov_python), str(RECORDER), str(magika_model), str(tmp_path),
                        "--runs", "2"], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads(r.stdout.splitlines()[-1])
    assert rec["providers"] == [OV, CPU] and OV in rec["available_providers"]
    assert rec["onnxruntime_openvino"].startswith("1.24")
    profile, model = Path(rec["profile"]), Path(rec["model"])

    assign, seq = assignment_from_profile(profile)
    graph = load_graph(model)
    s = placement_summary(assign, seq, graph)
    ref = reference_pfi(profile, model)
    runnable = pc.not_equal(graph.nodes["op_type"], "Constant")
    names = set(graph.nodes.filter(runnable)["name"].to_pylist())
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
