"""shift_ci selects pairwise-difference order statistics without the n x m
matrix and returns exactly what the matrix version returned."""

from __future__ import annotations

import numpy as np
import pytest

from exporter.diff import boot_medians, shift_ci
from exporter.pairwise import count_le, kth_diffs
from tests.support import ROOT, load_path

# The previous implementation (n1 x n2 matrix), kept in the benchmark as the reference.
shift_ci_matrix = load_path("aaco_bench_diff", ROOT / "benchmarks/bench_diff.py").shift_ci_matrix


@pytest.mark.parametrize("seed", range(12))
def test_shift_ci_identical_to_matrix_version(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random latencies of a few hundred values (some with heavy ties, some
    negative, odd and even pair counts, several levels): identical triples,
    from the matrix (odd seeds) and from the bisection (even seeds)."""
    from exporter import pairwise

    if seed % 2 == 0:
        monkeypatch.setattr(pairwise, "DIRECT_MAX_PAIRS", 0)
    rng = np.random.default_rng(seed)
    a = rng.lognormal(13, 0.5, int(rng.integers(3, 400)))
    b = rng.lognormal(13.05, 0.5, int(rng.integers(3, 400)))
    if seed % 3 == 1:  # ties
        a, b = np.round(a / 1e5), np.round(b / 1e5)
    if seed % 3 == 2:  # both signs, zeros
        a, b = rng.normal(0, 1, len(a)).round(2), rng.normal(0.1, 1, len(b)).round(2)
    for level in (0.9, 0.95, 0.99):
        assert shift_ci(a, b, level) == shift_ci_matrix(a, b, level)


def test_kth_diffs_every_rank_matches_the_sorted_matrix() -> None:
    """All n*m ranks of a small sample equal the sorted matrix entries, by
    bisection and from the matrix, in any order of the ranks asked for."""
    rng = np.random.default_rng(3)
    x, y = rng.normal(0, 1e-3, 17) + 1.0, rng.normal(0, 1e-3, 13) + 1.0
    ref = np.sort(np.subtract.outer(x, y).ravel())
    ranks = list(range(ref.size))
    assert kth_diffs(x, y, ranks, direct_max_pairs=0) == [float(v) for v in ref]
    assert kth_diffs(x, y, ranks) == [float(v) for v in ref]
    assert kth_diffs(x, y, [5, 0, 5]) == [float(ref[5]), float(ref[0]), float(ref[5])]
    assert kth_diffs(x, y, []) == kth_diffs(x, y, [], direct_max_pairs=0) == []


def test_count_le_counts_pairs_at_or_below() -> None:
    """count_le against the brute-force count, including values in the matrix."""
    x, y = np.array([3.0, 1.0, 2.0]), np.array([0.5, 1.0, 2.5])
    m = np.subtract.outer(x, y)
    for d in (-2.0, 0.0, 0.5, 1.0, 2.5, 10.0):
        assert count_le(x, np.sort(y), d) == int((m <= d).sum())


def test_kth_diffs_rejects_empty_nonfinite_and_bad_rank() -> None:
    """Empty or non-finite samples and out-of-range ranks raise ValueError."""
    with pytest.raises(ValueError):
        kth_diffs([], [1.0], [0])
    with pytest.raises(ValueError):
        kth_diffs([np.nan], [1.0], [0])
    for direct in (0, None):
        with pytest.raises(ValueError):
            kth_diffs([1.0], [1.0], [1], direct_max_pairs=direct)


@pytest.mark.parametrize(("n", "max_values"), [(3001, 64 * 3001), (3001, 7 * 3001 + 5), (17, 1)])
def test_chunked_bootstrap_equals_the_matrix_draw(n: int, max_values: int) -> None:
    """Chunked bootstrap medians equal the one-matrix draw, and leave the RNG
    in the same state (the session's draw after it is unchanged too)."""
    x = np.random.default_rng(5).lognormal(13, 0.3, n)
    r1, r2 = np.random.default_rng(0), np.random.default_rng(0)
    ref = np.median(r1.choice(x, (1000, n)), axis=1)
    got = boot_medians(r2, x, 1000, max_values)
    assert np.array_equal(ref, got)
    assert r1.random() == r2.random()
