"""Bounded kernel families for ONNX Runtime ops (CPU and GPU EPs alike).

The family is the only kernel-level label that reaches Prometheus. ORT
kernels are named after graph nodes, so the family comes from the node's
``op_type`` (the ``args.op_name`` field of ORT's profiler events).

>>> import pyarrow as pa
>>> family_of_op_types(pa.array(["MatMul", "Relu", "Reshape", "Foo"])).to_pylist()
['gemm', 'elementwise', 'copy', 'other']
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

FAMILIES = ("gemm", "conv", "attention", "reduce", "elementwise", "copy", "other")

_OPS: dict[str, tuple[str, ...]] = {
    "gemm": ("MatMul", "Gemm", "MatMulInteger", "FusedMatMul", "QLinearMatMul",
             "MatMulNBits", "FusedGemm", "QGemm", "DynamicQuantizeMatMul", "Einsum"),
    "conv": ("Conv", "ConvTranspose", "FusedConv", "QLinearConv", "ConvInteger", "NhwcConv"),
    "attention": ("Attention", "MultiHeadAttention", "GroupQueryAttention",
                  "PackedAttention", "SparseAttention", "RotaryEmbedding"),
    "reduce": ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
               "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare", "Softmax", "LogSoftmax",
               "LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
               "BatchNormalization", "InstanceNormalization", "GlobalAveragePool",
               "GlobalMaxPool", "AveragePool", "MaxPool", "ArgMax", "ArgMin", "TopK", "CumSum"),
    "copy": ("Reshape", "Transpose", "Concat", "Slice", "Gather", "GatherElements", "GatherND",
             "Expand", "Cast", "Identity", "Shape", "Squeeze", "Unsqueeze", "Split", "Flatten",
             "Tile", "Pad", "ScatterND", "ScatterElements", "MemcpyToHost", "MemcpyFromHost",
             "ConstantOfShape", "Range", "Size", "NonZero", "DepthToSpace", "SpaceToDepth"),
    "elementwise": ("Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Abs", "Neg",
                    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Gelu", "FastGelu", "BiasGelu",
                    "Erf", "Clip", "Min", "Max", "Where", "Equal", "Less", "Greater",
                    "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "Floor",
                    "Ceil", "Round", "Sign", "Reciprocal", "HardSigmoid", "HardSwish",
                    "Softplus", "Elu", "Selu", "PRelu", "QuickGelu", "BiasAdd", "Mod",
                    "Sin", "Cos", "IsNaN", "IsInf", "QuantizeLinear", "DequantizeLinear",
                    "DynamicQuantizeLinear", "Dropout", "BitShift"),
}
_LOOKUP = {op: fam for fam, ops in _OPS.items() for op in ops}


def family_of_op_types(op_types: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Map an array of ONNX op types to :data:`FAMILIES` (unknown -> other).

    The mapping is applied to the unique values only, then taken back.
    """
    arr = op_types.combine_chunks() if isinstance(op_types, pa.ChunkedArray) else op_types
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(pa.string())
    uniq = pc.unique(arr)
    fams = pa.array([_LOOKUP.get(u or "", "other") for u in uniq.to_pylist()], pa.string())
    idx = pc.index_in(arr, value_set=uniq)
    return pc.take(fams, idx)
