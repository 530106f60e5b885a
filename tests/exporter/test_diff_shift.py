"""diff's Hodges-Lehmann shift and Moses CI without the n x n matrix: equal to
the matrix computation on random inputs (ties included), and bounded memory
at 20k iterations per side."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from scipy.stats import norm

from exporter.diff import kth_pairwise, shift_ci


def _matrix_shift_ci(session: np.ndarray, baseline: np.ndarray,
                     level: float = 0.95) -> tuple[float, float, float]:
    """The previous implementation (sorted outer difference matrix): the reference."""
    d = np.sort(np.subtract.outer(session, baseline).ravel())
    n1, n2 = len(session), len(baseline)
    z = float(norm.ppf(0.5 + level / 2))
    k = int(np.floor(n1 * n2 / 2 - z * np.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)))
    k = max(0, min(k, len(d) - 1))
    return float(d[k]), float(np.median(d)), float(d[len(d) - 1 - k])


@pytest.mark.parametrize("seed", range(40))
def test_shift_ci_equals_the_matrix_computation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.lognormal(0, 0.5, int(rng.integers(3, 250)))
    b = rng.lognormal(0.05, 0.5, int(rng.integers(3, 250)))
    if seed % 2:  # ties and equal values across the samples
        a, b = np.round(a, 1), np.round(b, 1)
    assert shift_ci(a, b) == _matrix_shift_ci(a, b)
    assert shift_ci(a, b, 0.8) == _matrix_shift_ci(a, b, 0.8)


def test_every_order_statistic_matches_on_a_small_case() -> None:
    x, y = np.array([3.0, -1.0, 2.5, 2.5]), np.array([0.5, 0.5, -2.0])
    d = np.sort(np.subtract.outer(x, y).ravel())
    assert [kth_pairwise(x, y, k) for k in range(len(d))] == d.tolist()


def test_twenty_thousand_iterations_need_no_matrix() -> None:
    """20k x 20k pairs (a 3.2 GB float64 matrix before) in a few MB."""
    rng = np.random.default_rng(0)
    a, b = rng.lognormal(0, 0.3, 20_000), rng.lognormal(0, 0.3, 20_000)
    tracemalloc.start()
    try:
        lo, hl, hi = shift_ci(a, b)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lo <= hl <= hi
    assert peak < 64 << 20
