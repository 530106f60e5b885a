"""Kernel family fingerprint: raw kernel name -> one of a bounded set of labels.

Kernel names are unbounded (templates, 100 KB names); families are safe as a
metric label. :func:`classify` is vectorized: it classifies each *distinct*
name once (the dictionary of a dictionary array) and maps indices with numpy.

Rules, first match wins, case-insensitive, on the raw (mangled or
demangled) name:

=====================  ======================================================
family                 name matches
=====================  ======================================================
``attention``          ``attention``, ``attn``, ``fmha``, ``flash``, ``mha_``,
                       ``paged_attention``, ``sdpa``
``conv``               ``miopen``, ``conv`` (not ``convert``), ``igemm_fwd``/
                       ``igemm_bwd``/``igemm_wrw`` (MIOpen implicit GEMM),
                       ``winograd``, ``im2col``
``gemm``               starts with ``Cijk_`` (Tensile / rocBLAS / hipBLASLt),
                       ``gemm``, ``rocblas``, ``hipblaslt``, ``tensile``,
                       ``matmul``, ``gemv``, ``_mm_``
``triton``             ``triton`` (Triton-compiled kernels)
``composable_kernel``  ``ck::``, ``ck_tile::`` (remaining CK kernels)
``reduce``             ``reduce``, ``reduction``, ``softmax``, ``norm``
                       (layer/batch/rms norm), ``argmax``, ``argmin``,
                       ``scan``, ``_sum_``, ``sum_kernel``, ``topk``
``copy``               ``copy`` (incl. ``vecCopy``, ``direct_copy_kernel``),
                       ``memcpy``, ``memset``, ``fillbuffer``, ``transpose``,
                       ``cat_`` / ``concat``, ``gather``, ``scatter``
``elementwise``        ``elementwise``, ``vectorized``, ``unrolled``,
                       ``pointwise``, and ``<op>_kernel`` with ``op`` an
                       arithmetic/activation word (add, addition, sub,
                       subtract, mul, multiply, div, divide, relu, gelu,
                       silu, sigmoid, tanh, exp, fill, cast, scale, axpy)
``other``              anything else, and null names
=====================  ======================================================

>>> import pyarrow as pa
>>> names = pa.array(["Cijk_Alik_Bljk_SB_MT64x16x32", "divide_kernel(float*, int)",
...                   "vecCopy(double*) [clone .kd]", "laplacian_kernel<double>", None])
>>> classify(names).to_pylist()
['gemm', 'elementwise', 'copy', 'other', 'other']
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

FAMILIES: tuple[str, ...] = (
    "gemm",
    "conv",
    "composable_kernel",
    "triton",
    "elementwise",
    "reduce",
    "copy",
    "attention",
    "other",
)
"""The bounded label set, in a fixed order (dictionary of :func:`classify`)."""

_OTHER = FAMILIES.index("other")

_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (fam, re.compile(rx, re.IGNORECASE))
    for fam, rx in (
        ("attention", r"attention|attn|fmha|flash|mha_|sdpa"),
        ("conv", r"miopen|conv(?!ert)|igemm_(fwd|bwd|wrw)|winograd|im2col"),
        ("gemm", r"^(void\s+)?Cijk_|gemm|rocblas|hipblaslt|tensile|matmul|gemv|_mm_"),
        ("triton", r"triton"),
        ("composable_kernel", r"\bck(_tile)?::"),
        ("reduce", r"reduc|softmax|norm|argmax|argmin|scan|_sum_|sum_kernel|topk"),
        (
            "copy",
            r"copy|memcpy|memset|fillbuffer|transpose|\bcat_|concat|gather|scatter",
        ),
        (
            "elementwise",
            r"elementwise|vectorized|unrolled|pointwise|"
            r"\b(add|addition|sub|subtract|mul|multiply|div|divide|relu|gelu|silu|sigmoid"
            r"|tanh|exp|fill|cast|scale|axpy)\w*_kernel",
        ),
    )
)

_FAMILY_DICT = pa.array(FAMILIES, pa.string())


def family_of(name: str | None) -> str:
    """Family of one kernel name (see the module table); ``None`` -> ``other``.

    >>> family_of("void ck::kernel_gemm_xdl_cshuffle_v3<...>")
    'gemm'
    >>> family_of("triton_poi_fused_add_0")
    'triton'
    """
    if name is None:
        return "other"
    for fam, rx in _RULES:
        if rx.search(name):
            return fam
    return "other"


def classify(names: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Map a string or dictionary<string> array of kernel names to families.

    Returns a ``dictionary<int32, string>`` array of the same length whose
    dictionary is :data:`FAMILIES`; nulls become ``"other"``. Cost: one regex
    pass per *distinct* name plus one numpy ``take`` over the indices.
    """
    if isinstance(names, pa.ChunkedArray):
        names = names.combine_chunks()
    if not pa.types.is_dictionary(names.type):
        names = names.dictionary_encode()
    uniques = names.dictionary.to_pylist()
    codes = np.fromiter(
        (FAMILIES.index(family_of(u)) for u in uniques), dtype=np.int32, count=len(uniques)
    )
    idx = names.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    out = codes[idx] if len(codes) else np.full(len(names), _OTHER, dtype=np.int32)
    if names.null_count:
        mask = names.is_null().to_numpy(zero_copy_only=False)
        out = np.where(mask, _OTHER, out).astype(np.int32)
    return pa.DictionaryArray.from_arrays(pa.array(out, pa.int32()), _FAMILY_DICT)
