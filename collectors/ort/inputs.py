"""Valid generated inputs for a model's declared input shapes and dtypes.

Symbolic dimensions (``dim_param`` such as ``batch`` or ``unk__214``) and
unknown dimensions take ``dims[name]`` when given, else ``DEFAULT_DIM`` (1).
Values: floats are standard normal, integers uniform in ``[0, INT_HIGH)``
(small, so they are valid indices for embedding-style ``Gather`` inputs),
booleans uniform. ``fill[name]`` replaces an input's values with a constant
(for example ``sr=16000`` for a sample-rate scalar).

Errors: :class:`InputError` naming the input when its type cannot be
generated (strings, sequences, maps, optional types).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

DEFAULT_DIM = 1
INT_HIGH = 2

_ORT_DTYPES: dict[str, Any] = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int8)": np.int8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8,
    "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64,
    "tensor(bool)": np.bool_,
}


class InputError(ValueError):
    """An input of the model cannot be generated."""


def make_inputs(
    inputs: list[Any],
    dims: Mapping[str, int] | None = None,
    fill: Mapping[str, float] | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray[Any, Any]]:
    """Build a feed dict from ``onnxruntime.InferenceSession.get_inputs()``.

    ``inputs`` items need ``.name``, ``.type`` (e.g. ``"tensor(float)"``) and
    ``.shape`` (ints, strings for symbolic dims, or None).
    """
    dims = dims or {}
    fill = fill or {}
    rng = np.random.default_rng(seed)
    feed: dict[str, np.ndarray[Any, Any]] = {}
    for inp in inputs:
        dtype = _ORT_DTYPES.get(inp.type)
        if dtype is None:
            raise InputError(
                f"input {inp.name!r} has type {inp.type}, which cannot be generated "
                f"(supported: {', '.join(sorted(_ORT_DTYPES))})"
            )
        shape: list[int] = []
        for d in inp.shape:
            if isinstance(d, int) and d >= 0:
                shape.append(d)
            elif isinstance(d, str) and d in dims:
                shape.append(int(dims[d]))
            else:
                shape.append(int(dims.get(inp.name, DEFAULT_DIM)))
        if inp.name in fill:
            feed[inp.name] = np.full(shape, fill[inp.name], dtype=dtype)
        elif np.issubdtype(dtype, np.floating):
            feed[inp.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype is np.bool_:
            feed[inp.name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            feed[inp.name] = rng.integers(0, INT_HIGH, shape).astype(dtype)
    return feed
