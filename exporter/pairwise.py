"""Order statistics of all pairwise differences without the n x m matrix.

:func:`kth_diffs` returns chosen order statistics of the ``n * m``
differences ``x[i] - y[j]`` (float64, as ``np.subtract.outer(x, y)`` would
compute them) in O((n + m) log m) memory and O(64 (n + m) log m) time per
statistic, identical to sorting the full matrix.

Method: for a probe value ``d``, the pairs with ``fl(x[i] - y[j]) <= d``
are, for each ``i``, a suffix of the sorted ``y`` (correctly rounded
subtraction is monotone), found by a vectorised binary search; summing the
suffix lengths counts them. The k-th smallest difference is the smallest
``d`` with at least ``k + 1`` pairs at or below it; it is found by bisecting
``d`` over the totally ordered integer image of the float64 bit patterns
(at most 64 probes), so the answer is exactly one of the differences.

Up to :data:`DIRECT_MAX_PAIRS` pairs the differences are computed outright
and the statistics taken with ``np.partition``: the same values, without
the probes' thousands of small numpy calls (8 against 8 values: 27 ms
bisecting, 0.2 ms so).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
_SIGN = np.int64(-(2**63))

DIRECT_MAX_PAIRS = 1 << 20
"""Pairs (8 MiB of float64) up to which :func:`kth_diffs` builds the matrix."""


def _key(v: float) -> int:
    """float64 -> int preserving order (-0.0 and 0.0 both map to 0)."""
    b = int(np.array([v], dtype=np.float64).view(np.int64)[0])
    return b if b >= 0 else -(b & 0x7FFF_FFFF_FFFF_FFFF)


def _value(k: int) -> float:
    """Inverse of :func:`_key` (0 -> +0.0)."""
    b = k if k >= 0 else (-k) | int(_SIGN)
    return float(np.array([b], dtype=np.int64).view(np.float64)[0])


def count_le(x: F64, y: F64, d: float) -> int:
    """Number of pairs with ``x[i] - y[j] <= d`` (float64); ``y`` sorted ascending."""
    m = len(y)
    lo = np.zeros(len(x), dtype=np.int64)
    hi = np.full(len(x), m, dtype=np.int64)
    active = lo < hi
    while active.any():
        mid = (lo + hi) // 2
        ok = (x - y[np.minimum(mid, m - 1)]) <= d  # first j with x - y[j] <= d
        hi = np.where(active & ok, mid, hi)
        lo = np.where(active & ~ok, mid + 1, lo)
        active = lo < hi
    return int(m * len(x) - lo.sum())


def kth_diffs(x: npt.ArrayLike, y: npt.ArrayLike, ks: Sequence[int],
              direct_max_pairs: int | None = None) -> list[float]:
    """The ``k``-th smallest (0-based) of all ``x[i] - y[j]``, for each ``k`` in ``ks``.

    Inputs are converted to float64 and must be finite and non-empty;
    ``ValueError`` otherwise, or for ``k`` outside ``[0, n * m)``. Up to
    ``direct_max_pairs`` pairs (default :data:`DIRECT_MAX_PAIRS`) from the
    matrix, else by bisection: the same values either way.

    >>> kth_diffs([1.0, 5.0], [0.0, 2.0], [0, 1, 2, 3])
    [-1.0, 1.0, 3.0, 5.0]
    """
    xs = np.sort(np.asarray(x, dtype=np.float64))
    ys = np.sort(np.asarray(y, dtype=np.float64))
    if not len(xs) or not len(ys):
        raise ValueError("need non-empty samples")
    if not (np.isfinite(xs).all() and np.isfinite(ys).all()):
        raise ValueError("samples must be finite")
    total = len(xs) * len(ys)
    for k in ks:
        if not 0 <= k < total:
            raise ValueError(f"k={k} outside [0, {total})")
    limit = DIRECT_MAX_PAIRS if direct_max_pairs is None else direct_max_pairs
    if not ks:
        return []
    if total <= limit:
        part = np.partition(np.subtract.outer(xs, ys).ravel(), sorted(set(ks)))
        return [float(part[k]) for k in ks]
    lo0, hi0 = _key(float(xs[0] - ys[-1])), _key(float(xs[-1] - ys[0]))
    out = []
    for k in ks:
        lo, hi = lo0, hi0  # invariant: count_le(value(hi)) >= k + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if count_le(xs, ys, _value(mid)) >= k + 1:
                hi = mid
            else:
                lo = mid + 1
        out.append(_value(lo))
    return out
