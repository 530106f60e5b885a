"""Bounded kernel families for ONNX Runtime ops (CPU and GPU EPs alike).

The family is the only kernel-level label that reaches Prometheus. ORT
kernels are named after graph nodes, so the family comes from the node's
``op_type`` (the ``args.op_name`` field of ORT's profiler events).

>>> import pyarrow as pa
>>> family_of_op_types(pa.array(["MatMul", "Relu", "Reshape", "Foo"])).to_pylist()
['gemm', 'elementwise', 'copy', 'other']
"""

from __future__ import annotations

import numpy as np
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


def family_of_op_types(op_types: pa.Array | pa.ChunkedArray) -> pa.DictionaryArray:
    """Map an array of ONNX op types to :data:`FAMILIES` (unknown or null -> other).

    Returns ``dictionary<int32, string>`` (the bus's type for the column). The
    mapping is applied to the distinct op types only, then taken back through
    the dictionary indices.

    >>> family_of_op_types(pa.array(["Conv", None]).dictionary_encode()).to_pylist()
    ['conv', 'other']
    """
    arr = op_types.combine_chunks() if isinstance(op_types, pa.ChunkedArray) else op_types
    if not pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_encode()
    names = sorted(set(_LOOKUP.values()) | {"other"})
    code = {f: i for i, f in enumerate(names)}
    per_value = np.array([code[_LOOKUP.get(v or "", "other")]
                          for v in arr.dictionary.to_pylist()] + [code["other"]], np.int32)
    idx = pc.fill_null(arr.indices, len(per_value) - 1).to_numpy(zero_copy_only=False)
    return pa.DictionaryArray.from_arrays(pa.array(per_value[idx], pa.int32()),
                                          pa.array(names, pa.string()))
