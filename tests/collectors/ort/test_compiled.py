"""Compiled-subgraph events (collectors/ort/compiled.py) and PFI on a real
OpenVINO + CPU profile recorded here (testdata/PROVENANCE.md): magika
optimized offline by ORT 1.24.1 at ORT_ENABLE_ALL, run with
onnxruntime-openvino 1.24.1; OpenVINO compiled two subgraphs and left the
three NCHWc layout nodes to CPUExecutionProvider."""

from __future__ import annotations

from pathlib import Path

from collectors.ort import load_graph
from collectors.ort.compiled import expand_compiled, is_fused
from collectors.ort.placement import assignment_from_profile, partitions, placement_summary
from tests.collectors.ort.ort_independent import reference_pfi

DATA = Path(__file__).resolve().parent / "testdata"
PROFILE = DATA / "ort_profile_onnxruntime-openvino-1.24.1_magika_ort_all.json"
GRAPH = DATA / "magika_ort_all_graph_only_onnxruntime-1.24.1.onnx"
OV = "OpenVINOExecutionProvider"
CPU = "CPUExecutionProvider"
FUSED = ["OpenVINOExecutionProvider_OpenVINO-EP-subgraph_1_0",
         "OpenVINOExecutionProvider_OpenVINO-EP-subgraph_2_1"]


def test_the_recorded_profile_has_two_fused_openvino_nodes_and_three_cpu_fallbacks() -> None:
    """The profile parser reads fused subgraph events like any node: 5
    profile nodes, the fused ones named <provider>_<meta_def>_<k>, and the
    execution order OV, CPU, CPU, CPU, OV (2 EP transitions)."""
    assign, seq = assignment_from_profile(PROFILE)
    assert sorted(n for n, p in assign.items() if p == OV) == FUSED
    assert sorted(n for n, p in assign.items() if p == CPU) == [
        "ReorderInput", "ReorderOutput",
        "jax2tf_get_logits_/pjit_get_logits_/MagikaV2/Conv_0/Conv2D:0_nchwc"]
    assert seq == [OV, CPU, CPU, CPU, OV]
    assert [n for n in assign if is_fused(n, assign[n])] == [FUSED[0], FUSED[1]]


def test_pfi_on_the_real_openvino_profile_equals_the_independent_reference() -> None:
    """Every one of the graph's 96 nodes gets a provider (93 inside the fused
    nodes, 3 on the CPU); partitions = 2 compiled subgraphs + 1 CPU chain = 3,
    PFI = 3/96, equal to the reference computed from the raw JSON events."""
    assign, seq = assignment_from_profile(PROFILE)
    graph = load_graph(GRAPH)
    s = placement_summary(assign, seq, graph)
    ref = reference_pfi(PROFILE, GRAPH)
    assert set(s["assignment"]) == set(graph.nodes["name"].to_pylist())
    assert s["nodes"] == ref["nodes"] == 96
    assert s["nodes_per_provider"] == {CPU: 3, OV: 93}
    assert s["nodes_in_compiled_subgraphs"] == 93
    assert s["compiled_subgraphs"] == {FUSED[0]: OV, FUSED[1]: OV}
    assert s["partitions"] == ref["partitions"] == 3
    assert s["pfi"] == ref["pfi"] == 3 / 96
    assert s["ep_transitions"] == 2
    assert s["nodes_not_in_graph"] == []
    assert sorted(n for n, p in s["assignment"].items() if p == CPU) == ref["cpu"]


def test_connectivity_alone_undercounts_openvino_partitions() -> None:
    """The 93 OpenVINO nodes are one weakly connected piece, yet ORT handed
    them to OpenVINO as two subgraphs (one feeds the other through the CPU
    nodes): same-EP components give 2 partitions, the fused events 3."""
    assign, _ = assignment_from_profile(PROFILE)
    graph = load_graph(GRAPH)
    ex = expand_compiled(assign, graph.nodes["name"].to_pylist())
    edges = list(zip(graph.edges["src_node"].to_pylist(), graph.edges["dst_node"].to_pylist(),
                     strict=True))
    assert partitions(ex.assign, edges) == 2
    assert len(ex.compiled) == 2 and len(ex.members) == 93


def test_fused_nodes_of_two_providers_or_without_members_stay_unexpanded() -> None:
    """With fused nodes of two EPs the members cannot be told apart, and a
    reference graph whose nodes all have events leaves no members: the map
    keeps the fused nodes, each still one partition."""
    two = {"AExecutionProvider_g_1_0": "AExecutionProvider",
           "BExecutionProvider_g_1_1": "BExecutionProvider", "x": CPU}
    ex = expand_compiled(two, ["x", "y", "z"])
    assert ex.assign == two and ex.members == frozenset() and len(ex.compiled) == 2
    s = placement_summary(two, [], None)
    assert (s["nodes"], s["partitions"]) == (3, 3)
    one = {"AExecutionProvider_g_1_0": "AExecutionProvider", "x": CPU}
    assert expand_compiled(one, ["x"]).assign == one
