"""FLOPs per ONNX node from shape inference (collectors/ort/flops.py)."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from collectors.ort.flops import graph_flops
from collectors.ort.graph import load_graph


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           inits: list[onnx.TensorProto] | None = None) -> onnx.ModelProto:
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, "synthetic", inputs, [out], initializer=inits or [])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _f(name: str, shape: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_matmul_broadcasts_batch_dims_and_symbolic_dims_take_the_fed_shape() -> None:
    """MatMul [B,3,4] x [4,5] with B=2 fed: 2 * 2*3*5*4 = 240 FLOPs; Add after it
    one FLOP per output element (30)."""
    m = _model([helper.make_node("MatMul", ["a", "b"], ["t"], name="mm"),
                helper.make_node("Add", ["t", "t"], ["y"], name="add")],
               [_f("a", ["B", 3, 4]), _f("b", [4, 5])])
    f = graph_flops(m, {"a": [2, 3, 4]})
    assert f.per_node == {"mm": 240, "add": 30}
    assert (f.total, f.matmul_conv, f.unresolved) == (270, 240, [])


def test_gemm_counts_transposes_and_the_bias_add() -> None:
    """Gemm A[4,3]^T x B[5,4]^T + C: M=3, K=4, N=5 -> 2*3*5*4 + 3*5 = 135."""
    m = _model([helper.make_node("Gemm", ["a", "b", "c"], ["y"], name="g", transA=1, transB=1)],
               [_f("a", [4, 3]), _f("b", [5, 4]), _f("c", [5])])
    assert graph_flops(m, {}).per_node == {"g": 135}


def test_grouped_conv_with_bias() -> None:
    """Conv X[1,4,8,8], W[6,2,3,3], group 2, bias: Y[1,6,6,6];
    2*216*(4/2)*9 + 216 = 7992."""
    m = _model([helper.make_node("Conv", ["x", "w", "b"], ["y"], name="c", group=2)],
               [_f("x", [1, 4, 8, 8]), _f("w", [6, 2, 3, 3]), _f("b", [6])])
    assert graph_flops(m, {}).per_node == {"c": 7992}


def test_data_movement_counts_zero_and_unknown_shapes_are_listed() -> None:
    """Reshape/Transpose count 0 and are not listed; a MatMul whose input
    shape cannot be inferred is listed as unresolved with 0 FLOPs."""
    m = _model([helper.make_node("Transpose", ["a"], ["t"], name="tr"),
                helper.make_node("MatMul", ["t", "u"], ["y"], name="mm")],
               [_f("a", [3, 4]), helper.make_tensor_value_info("u", TensorProto.FLOAT, None)])
    f = graph_flops(m, {})
    assert f.per_node == {} and f.unresolved == ["mm"] and f.total == 0


def test_magika_flops_match_hand_arithmetic_of_its_conv_and_dense_layers(
        magika_model: Path) -> None:
    """magika (bytes [1,2048]): Conv Y[1,512,508,1] x Cin 256 x 5x1 kernel:
    2*260096*1280 = 665845760; Dense_0 MatMul [1,2048,257]x[257,64]:
    67371008; Dense_1 [1,512]x[512,214]: 219136; every node resolved."""
    g = load_graph(magika_model)
    f = graph_flops(g.proto, {"bytes": [1, 2048]})
    assert f.unresolved == []
    assert f.by_op["Conv"] == 665_845_760
    assert f.by_op["MatMul"] == 67_371_008 + 219_136
    assert f.matmul_conv == 665_845_760 + 67_371_008 + 219_136
    assert f.matmul_conv < f.total < f.matmul_conv * 1.01  # elementwise adds < 1 %
