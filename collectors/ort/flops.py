"""FLOPs per ONNX node, from the graph and ONNX shape inference.

The model's inputs are fixed to the shapes actually fed (``input_shapes``)
and ``onnx.shape_inference.infer_shapes(data_prop=True)`` gives every
tensor's shape. One FLOP is one floating-point add or multiply (a
multiply-accumulate is 2):

=====================================  =========================================
op                                     FLOPs
=====================================  =========================================
``MatMul``, ``FusedMatMul``            ``2 * prod(batch) * M * N * K`` (numpy
                                       broadcasting of the batch dims)
``Gemm``                               ``2 * M * N * K``, ``+ M * N`` with ``C``
``Conv``, ``FusedConv``                ``2 * prod(Y.shape) * (C_in / group) *
                                       prod(kernel)``, ``+ prod(Y.shape)``
                                       with a bias
``ConvTranspose``                      ``2 * prod(X.shape) * (C_out / group) *
                                       prod(kernel)``
elementwise arithmetic (``Add``,       1 per output element
``Sub``, ``Mul``, ``Div``, ``Pow``,
``Sqrt``, ``Reciprocal``, ``Tanh``,
``Erf``, ``Exp``, ``Log``, ``Relu``,
``Sigmoid``, ``Max``, ``Min``, ...)
``Reduce{Sum,Mean,Max,Min}``           1 per input element
``Softmax``                            5 per element (max, sub, exp, sum, div)
=====================================  =========================================

Every other op (data movement such as ``Reshape``, ``Transpose``, ``Cast``,
``Gather``, ``Concat``, ``Shape``) counts 0. A counted node whose shapes
inference cannot resolve is listed under ``unresolved`` and counts 0, so the
total is a lower bound then. Only the top-level graph is counted (as in
:mod:`collectors.ort.graph`). ``matmul_conv`` marks the GEMM-like ops
(MatMul, Gemm, Conv and their fused forms): the FLOP-heavy kernels.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import onnx
from onnx import shape_inference

MATMUL_CONV = frozenset({"MatMul", "FusedMatMul", "Gemm", "FusedGemm", "Conv", "FusedConv",
                         "ConvTranspose", "MatMulInteger", "ConvInteger", "QLinearMatMul",
                         "QLinearConv"})
"""Op types (also as ORT's fused kernels) whose FLOPs come from a GEMM or convolution."""
ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Tanh", "Erf",
                         "Exp", "Log", "Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "Max",
                         "Min", "Neg", "Abs", "Gelu", "FastGelu", "BiasGelu", "Clip", "Sum",
                         "Mean", "Sin", "Cos", "Floor", "Ceil", "Round", "Elu", "Selu",
                         "Softplus", "HardSwish", "Mish"})
REDUCE = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                    "ReduceL2", "ReduceSumSquare"})
COUNTED = MATMUL_CONV | ELEMENTWISE | REDUCE | {"Softmax"}


@dataclass
class GraphFlops:
    """FLOPs of one inference of a graph; ``per_node`` name -> FLOPs (counted
    nodes only), ``by_op`` op type -> FLOPs, ``unresolved`` counted nodes
    whose shapes were unknown (their FLOPs are 0)."""

    total: int = 0
    matmul_conv: int = 0
    per_node: dict[str, int] = field(default_factory=dict)
    by_op: dict[str, int] = field(default_factory=dict)
    unresolved: list[str] = field(default_factory=list)


def _shapes(model: onnx.ModelProto,
            input_shapes: Mapping[str, Sequence[int]]) -> dict[str, list[int | None]]:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for inp in m.graph.input:
        if inp.name in input_shapes and inp.type.HasField("tensor_type"):
            dims = inp.type.tensor_type.shape.dim
            want = list(input_shapes[inp.name])
            if len(dims) == len(want):
                for d, v in zip(dims, want, strict=True):
                    d.ClearField("dim_param")
                    d.dim_value = int(v)
    # onnx raises InferenceError and others; then the declared shapes are used
    with contextlib.suppress(Exception):
        m = shape_inference.infer_shapes(m, data_prop=True)
    out: dict[str, list[int | None]] = {}
    infos = [*m.graph.value_info, *m.graph.input, *m.graph.output]
    for vi in infos:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else None
                            for d in vi.type.tensor_type.shape.dim]
    for init in m.graph.initializer:
        out[init.name] = list(init.dims)
    return out


def _known(s: list[int | None] | None) -> list[int] | None:
    if s is None or any(d is None for d in s):
        return None
    return [int(d) for d in s if d is not None]


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def node_flops(node: onnx.NodeProto, shapes: Mapping[str, list[int | None]]) -> int | None:
    """FLOPs of one execution of ``node`` (table in the module doc); 0 for an
    op that is not counted, None when its shapes are unknown."""
    op = node.op_type
    if op not in COUNTED:
        return 0

    def sh(name: str) -> list[int] | None:
        return _known(shapes.get(name)) if name else None

    if op in ("MatMul", "FusedMatMul", "MatMulInteger", "QLinearMatMul"):
        a, b = (sh(node.input[0]), sh(node.input[3 if op == "QLinearMatMul" else 1]))
        if a is None or b is None:
            return None
        a2 = [1, *a] if len(a) == 1 else a
        b2 = [*b, 1] if len(b) == 1 else b
        m, k, n = a2[-2], a2[-1], b2[-1]
        batch = 1
        for da, db in zip(reversed(a2[:-2]), reversed(b2[:-2]), strict=False):
            batch *= max(da, db)
        longer = a2[:-2] if len(a2) > len(b2) else b2[:-2]
        for d in longer[:abs(len(a2) - len(b2))]:
            batch *= d
        return 2 * batch * m * n * k
    if op in ("Gemm", "FusedGemm"):
        a, b = sh(node.input[0]), sh(node.input[1])
        if a is None or b is None or len(a) != 2 or len(b) != 2:
            return None
        m, k = (a[1], a[0]) if _attr(node, "transA", 0) else (a[0], a[1])
        n = b[0] if _attr(node, "transB", 0) else b[1]
        return 2 * m * n * k + (m * n if len(node.input) > 2 and node.input[2] else 0)
    if op in ("Conv", "FusedConv", "ConvInteger", "QLinearConv", "ConvTranspose"):
        wi = 3 if op == "QLinearConv" else 1
        x, w, y = sh(node.input[0]), sh(node.input[wi]), sh(node.output[0])
        if x is None or w is None or y is None:
            return None
        group = _attr(node, "group", 1)
        kernel = math.prod(w[2:])
        if op == "ConvTranspose":
            return 2 * math.prod(x) * w[1] * kernel
        bias = len(node.input) > 2 and bool(node.input[2]) and op in ("Conv", "FusedConv")
        return 2 * math.prod(y) * (x[1] // group) * kernel + (math.prod(y) if bias else 0)
    if op in REDUCE:
        x = sh(node.input[0])
        return None if x is None else math.prod(x)
    y = sh(node.output[0])
    if y is None:
        return None
    return (5 if op == "Softmax" else 1) * math.prod(y)


def graph_flops(model: onnx.ModelProto,
                input_shapes: Mapping[str, Sequence[int]]) -> GraphFlops:
    """FLOPs of one inference with inputs of ``input_shapes`` (name -> shape)."""
    shapes = _shapes(model, input_shapes)
    out = GraphFlops()
    for i, node in enumerate(model.graph.node):
        name = node.name or f"{node.op_type}_{i}"
        f = node_flops(node, shapes)
        if f is None:
            out.unresolved.append(name)
            continue
        if f == 0:
            continue
        out.per_node[name] = f
        out.by_op[node.op_type] = out.by_op.get(node.op_type, 0) + f
        out.total += f
        if node.op_type in MATMUL_CONV:
            out.matmul_conv += f
    return out
