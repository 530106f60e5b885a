"""The ORT collector on a real model (magika) and on small synthetic models."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from collectors.base import CollectorContext, create
from collectors.ort.graph import ModelError, load_graph
from collectors.ort.profile import parse_profile, read_events
from exporter.schema import conform


def _synthetic_model_with_constant(path: Path) -> Path:
    """Const -> Add -> Relu: 3 nodes, one of them Constant."""
    const = helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
        "v", TensorProto.FLOAT, [1, 4], [1.0, 2.0, 3.0, 4.0]))
    add = helper.make_node("Add", ["x", "c"], ["y"])
    relu = helper.make_node("Relu", ["y"], ["z"])
    g = helper.make_graph([const, add, relu], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def test_node_count_excludes_constant_nodes(tmp_path: Path) -> None:
    g = load_graph(_synthetic_model_with_constant(tmp_path / "const_add_relu_synthetic.onnx"))
    assert g.total_nodes == 3
    assert g.node_count == 2
    assert g.op_histogram == {"Constant": 1, "Add": 1, "Relu": 1}
    assert g.edges.num_rows == 2  # c -> Add, y -> Relu


def test_missing_and_non_onnx_files_raise_model_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no such model file"):
        load_graph(tmp_path / "absent.onnx")
    bad = tmp_path / "not_a_model.onnx"
    bad.write_text("hello, I am text\n")
    with pytest.raises(ModelError, match="not an ONNX model"):
        load_graph(bad)


def test_kernel_spans_match_ort_profile_events_per_run(magika_model: Path,
                                                       tmp_path: Path) -> None:
    """One kernel span per ORT Node event; iterations get exactly their kernels."""
    c = create("ort", CollectorContext(options={
        "model": str(magika_model), "iterations": 6, "warmup": 2, "profile_dir": str(tmp_path)}))
    emits = list(c.collect())
    c.close()
    assert [e.signal for e in emits] == ["graph_info", "kernel_span", "iteration_span"]
    kernels, iters = emits[1].batch, emits[2].batch
    conform("kernel_span", kernels)
    conform("iteration_span", iters)
    assert iters.num_rows == 6
    # Count kernel events per run directly from ORT's own profile file.
    (profile,) = tmp_path.glob("ort_profile_*.json")
    events = json.loads(profile.read_text())
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] == "model_run")
    per_run = [sum(1 for e in events if e.get("cat") == "Node"
                   and e["name"].endswith("_kernel_time") and a <= e["ts"] <= b)
               for a, b in runs]
    assert len(per_run) == 8  # 2 warm-up runs + 6 measured
    assert iters.column("kernel_count").to_pylist() == per_run[2:]
    assert kernels.num_rows == sum(per_run[2:])
    # Every kernel lies inside its own iteration.
    k_it = kernels.column("iteration").to_numpy()
    starts = iters.column("start_ns").to_numpy()
    ends = iters.column("end_ns").to_numpy()
    ks = kernels.column("start_ns").to_numpy()
    assert np.all((ks >= starts[k_it]) & (ks <= ends[k_it]))


def test_symbolic_dims_take_overrides(tmp_path: Path) -> None:
    path = _synthetic_model_with_constant(tmp_path / "const_add_relu_synthetic.onnx")
    c = create("ort", CollectorContext(options={"model": str(path), "iterations": 2,
                                                "dims": {"batch": 3}}))
    assert c.runner.feed["x"].shape == (3, 4)  # type: ignore[attr-defined]
    c.close()


def test_read_events_rejects_a_non_profile(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text('{"not": "an array"}')
    with pytest.raises(ValueError, match="not an ONNX Runtime profile"):
        read_events(p)
    assert parse_profile  # the parser used by the collector
