"""Operator -> kernel attribution (collectors/ort/attribution.py): from a real
magika ORT profile (CPU EP: every node event is its kernel), from a synthetic
GPU-EP profile (Kernel events with and without ``parent_name``), and from roctx
node ranges around real rocprofv3 kernel rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from collectors.ort import ModelRunner, load_graph
from collectors.ort.attribution import (
    GROUPS_SCHEMA,
    MAP_SCHEMA,
    from_ort_profile,
    from_roctx,
    kernel_groups,
)
from collectors.ort.graph import NODES_SCHEMA
from collectors.rocprof.rejects import Rejects
from collectors.rocprof.replay import iter_file_spans

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
GPU_PROFILE = HERE / "testdata/ort_profile_gpu_synthetic.json"


@pytest.fixture(scope="module")
def magika_chunk(tmp_path_factory: pytest.TempPathFactory, magika_model: Path) -> tuple[
        ModelRunner, object]:
    runner = ModelRunner(load_graph(magika_model), providers=["CPUExecutionProvider"],
                         profile_dir=tmp_path_factory.mktemp("prof"))
    prof = runner.run_chunk(4, 1e9, warmup=2)
    return runner, prof


def test_magika_every_measured_node_event_maps_to_its_node_with_score_one(
        magika_chunk: tuple[ModelRunner, object]) -> None:
    """CPU EP: the map has exactly the kernel spans parse_profile publishes
    (same count, same start times), all method ort_node, score 1.0, and the
    ONNX-graph flag is true exactly for node names of the ONNX model."""
    runner, prof = magika_chunk
    (path, start, warm, first), = runner.chunks
    names = runner.graph.nodes["name"].to_pylist()
    m = from_ort_profile(path, start_ns=start, skip_runs=warm, first_iteration=first,
                         onnx_nodes=names)
    k = prof.kernels  # type: ignore[attr-defined]
    assert m.schema == MAP_SCHEMA
    assert m.num_rows == k.num_rows > 0
    assert sorted(m["start_ns"].to_pylist()) == sorted(k["start_ns"].to_pylist())
    assert set(m["iteration"].to_pylist()) == {0, 1, 2, 3}
    assert set(m["method"].to_pylist()) == {"ort_node"}
    assert pc.min(m["score"]).as_py() == 1.0
    assert set(m["provider"].to_pylist()) == {"CPUExecutionProvider"}
    assert m["node_name"].to_pylist() == m["kernel_name"].to_pylist()
    inside = [n in set(names) for n in m["node_name"].to_pylist()]
    assert m["in_onnx_graph"].to_pylist() == inside
    assert 0 < sum(inside) < len(inside)  # ORT's optimizer adds/renames a few nodes


def test_kernel_groups_totals_match_the_map_at_every_level(
        magika_chunk: tuple[ModelRunner, object]) -> None:
    """Each level's calls and total_ns sum to the map's rows and time, time
    shares sum to 1, and node level has one group per distinct node."""
    runner, _ = magika_chunk
    (path, start, warm, first), = runner.chunks
    m = from_ort_profile(path, start_ns=start, skip_runs=warm, first_iteration=first)
    g = kernel_groups(m)
    assert g.schema == GROUPS_SCHEMA
    total = pc.sum(m["duration_ns"]).as_py()
    for level in ("node", "op_type", "family"):
        lv = g.filter(pc.equal(g["level"], level))
        assert pc.sum(lv["calls"]).as_py() == m.num_rows, level
        assert pc.sum(lv["total_ns"]).as_py() == total, level
        assert pc.sum(lv["time_share"]).as_py() == pytest.approx(1.0)
    nodes = g.filter(pc.equal(g["level"], "node"))
    assert nodes.num_rows == len(set(m["node_name"].to_pylist()))
    assert set(nodes["calls_per_iteration"].to_pylist()) == {1.0}  # each node once a run
    assert set(pc.unique(g.filter(pc.equal(g["level"], "family"))["kernel_family"])
               .to_pylist()) <= {"gemm", "conv", "attention", "reduce", "elementwise",
                                 "copy", "other"}


def test_gpu_profile_kernel_events_go_to_their_parent_node_with_method_and_score() -> None:
    """Synthetic GPU-EP profile, warm-up run skipped: a Kernel event with
    parent_name -> that node (1.0); one without -> the preceding Node event
    (0.75); the CPU fallback node is its own kernel (1.0); a device-EP node
    without Kernel events stands in for its kernels (0.5)."""
    m = from_ort_profile(GPU_PROFILE, start_ns=1_000_000, skip_runs=1)
    rows = {r["kernel_name"]: r for r in m.to_pylist()}
    assert m.num_rows == 5
    assert (rows["igemm_fwd_gtcx_nchw"]["node_name"], rows["igemm_fwd_gtcx_nchw"]["method"],
            rows["igemm_fwd_gtcx_nchw"]["score"]) == ("conv1", "ort_kernel_parent", 1.0)
    assert (rows["bias_add_kernel"]["node_name"], rows["bias_add_kernel"]["method"],
            rows["bias_add_kernel"]["score"]) == ("conv1", "ort_kernel_sequence", 0.75)
    assert rows["bias_add_kernel"]["op_type"] == "Conv"
    assert rows["relu_kernel"]["node_name"] == "relu1"
    assert (rows["topk"]["method"], rows["topk"]["score"], rows["topk"]["device_type"]) == (
        "ort_node", 1.0, "cpu")
    assert (rows["out"]["method"], rows["out"]["score"]) == ("ort_node", 0.5)
    assert "conv1" not in rows  # its Node event is replaced by its kernels
    assert rows["igemm_fwd_gtcx_nchw"]["start_ns"] == 1_000_000 + (400 + 12) * 1000
    assert set(m["iteration"].to_pylist()) == {0}


def test_roctx_node_ranges_attribute_real_kernel_rows() -> None:
    """Real rocprofv3 kernel rows (collectors/rocprof/testdata/kernel_trace.csv,
    no launch join there) inside synthetic roctx ranges named after graph
    nodes get that node with score 0.5 (kernel start only); a range not named
    after a node is ignored, and kernels outside every node range are left out."""
    k = pa.Table.from_batches(list(iter_file_spans(
        ROOT / "collectors/rocprof/testdata/kernel_trace.csv", Rejects())))
    base = 1550151853000000
    regions = pa.table({  # synthetic ranges around the real kernels' starts
        "pid": [834304, 834304, 834304], "tid": [1, 1, 1],
        "name": ["add_node", "sub_node", "preprocess"],
        "start_ns": [base + 29000, base + 42000, base + 60000],
        "end_ns": [base + 42000, base + 51000, base + 200000]})
    nodes = pa.table({"node_index": [0, 1], "name": ["add_node", "sub_node"],
                      "op_type": ["Add", "Sub"], "domain": ["ai.onnx"] * 2,
                      "inputs": [[], []], "outputs": [[], []]}, schema=NODES_SCHEMA)
    m = from_roctx(k, regions, nodes)
    assert m.schema == MAP_SCHEMA
    got = sorted(zip(m["node_name"].to_pylist(), m["kernel_name"].to_pylist(), strict=True))
    assert [(n, kn.split("(")[0]) for n, kn in got] == [
        ("add_node", "void addition_kernel<float>"), ("sub_node", "subtract_kernel")]
    assert set(m["score"].to_pylist()) == {0.5}
    assert m["op_type"].to_pylist() == ["Add", "Sub"]
    assert set(m["method"].to_pylist()) == {"roctx"}


def test_a_file_that_is_not_an_ort_profile_is_refused_naming_it(tmp_path: Path) -> None:
    """ProfileError names the file for a JSON object instead of ORT's event array."""
    from collectors.ort.profile import ProfileError

    bad = tmp_path / "not_a_profile.json"
    bad.write_text('{"traceEvents": []}')
    with pytest.raises(ProfileError, match=r"not_a_profile\.json"):
        from_ort_profile(bad, start_ns=0)
