"""Node -> execution-provider assignment and PFI (collectors/ort/placement.py):
on the real magika model (one EP: PFI = components / nodes, checked against an
independent union-find over ORT's optimized graph) and on a synthetic GPU-EP
profile with a CPU fallback node (PFI > 1/nodes)."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort

from collectors.ort import ModelRunner, load_graph
from collectors.ort.placement import (
    assignment_from_profile,
    optimized_graph,
    ort_config,
    partitions,
    pfi_summary,
)

GPU_PROFILE = Path(__file__).resolve().parent / "testdata/ort_profile_gpu_synthetic.json"


def _components(nodes: list[str], edges: list[tuple[str, str]]) -> int:
    parent = {n: n for n in nodes}

    def find(x: str) -> str:
        while parent[x] != x:
            x = parent[x]
        return x

    for a, b in edges:
        parent[find(a)] = find(b)
    return len({find(n) for n in nodes})


def test_magika_runs_on_one_provider_and_pfi_counts_components_of_the_optimized_graph(
        tmp_path: Path, magika_model: Path) -> None:
    """Every executed magika node is on CPUExecutionProvider; the optimized
    graph ORT saves holds all of them; partitions equal the weakly connected
    components (independent union-find) and PFI = partitions / 96 nodes."""
    runner = ModelRunner(load_graph(magika_model), providers=["CPUExecutionProvider"],
                         profile_dir=tmp_path)
    runner.run_chunk(2, 1e9, warmup=1)
    assign, seq = assignment_from_profile(runner.chunks[0][0])
    assert set(assign.values()) == {"CPUExecutionProvider"}
    assert len(assign) == 96 and len(seq) == 96
    opt, source = optimized_graph(magika_model, ["CPUExecutionProvider"],
                                  runner.session_options())
    assert opt is not None and source == "optimized"
    names = set(opt.nodes["name"].to_pylist())
    assert set(assign) <= names
    edges = list(zip(opt.edges["src_node"].to_pylist(), opt.edges["dst_node"].to_pylist(),
                     strict=True))
    inside = [(a, b) for a, b in edges if a in assign and b in assign]
    k = _components(sorted(assign), inside)
    sess = ort.InferenceSession(str(magika_model), runner.session_options(),
                                providers=["CPUExecutionProvider"])
    cfg = ort_config(sess, assign, seq, opt, source)
    assert cfg["partitions"] == k >= 1
    assert cfg["pfi"] == k / 96
    assert cfg["ep_transitions"] == 0
    assert cfg["nodes_per_provider"] == {"CPUExecutionProvider": 96}
    assert cfg["providers"] == ["CPUExecutionProvider"]
    assert cfg["session_options"]["graph_optimization_level"] == "ORT_ENABLE_ALL"
    assert cfg["nodes_not_in_graph"] == []


def test_a_cpu_fallback_node_splits_the_gpu_partition() -> None:
    """Synthetic profile conv1 -> relu1 -> topk(CPU) -> out: 3 partitions
    ({conv1, relu1}, {topk}, {out}) of 4 nodes, PFI 0.75, 2 EP transitions."""
    assign, seq = assignment_from_profile(GPU_PROFILE)
    assert assign == {"conv1": "ROCMExecutionProvider", "relu1": "ROCMExecutionProvider",
                      "topk": "CPUExecutionProvider", "out": "ROCMExecutionProvider"}
    edges = [("conv1", "relu1"), ("relu1", "topk"), ("topk", "out")]
    s = pfi_summary(assign, edges, seq)
    assert (s["nodes"], s["partitions"], s["pfi"], s["ep_transitions"]) == (4, 3, 0.75, 2)
    assert s["nodes_per_provider"] == {"CPUExecutionProvider": 1, "ROCMExecutionProvider": 3}


def test_partitions_follow_same_provider_edges_only() -> None:
    """Two disconnected pieces on one EP are two partitions; a skip edge
    between same-EP nodes around a fallback keeps them in one partition;
    edges naming unassigned nodes are ignored."""
    assert partitions({"a": "X", "b": "X", "c": "X", "d": "X"},
                      [("a", "b"), ("c", "d")]) == 2
    assert partitions({"a": "X", "b": "CPU", "c": "X"},
                      [("a", "b"), ("b", "c"), ("a", "c")]) == 2
    assert partitions({"a": "X"}, [("a", "zz")]) == 1
    assert partitions({}, []) == 0
