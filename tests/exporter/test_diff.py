"""Regression verdicts between real captures (exporter.diff)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from exporter.diff import diff_sessions, main_diff, parse_threshold
from tests.support import load_path

ROOT = Path(__file__).resolve().parents[2]
WIDTH = 262_144
"""Floats per tensor of the chain model (1 MiB): a run longer than a scheduler slice."""


def _eval_bottleneck() -> ModuleType:
    return load_path("eval_bottleneck", ROOT / "benchmarks" / "eval_bottleneck.py")


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three real captures of the tiny-op chain model: two quiet, one under 3 CPU hogs.

    The two quiet ones are the even and odd runs of one recording made of 4
    ORT sessions (100 runs each), so both saw the same sessions and the same
    host moments. Recorded separately, even interleaved ABAB, they could not
    stand for "the same model twice" here: on this shared VM the model's
    50-run medians move between 1.5 and 3.0 ms within one session, and
    separate captures differed by -30% to +50% in 11 tries (one CI run and
    one local run failed on it).

    Each run lasts many scheduler slices (a chain of 300 ops on tensors of
    WIDTH floats: about 11 ms quiet, 23 ms under the hogs on the 2-core VM),
    so a capture under contention gets about half a core in every run. With
    the default width of 8 (1.4 ms a run, shorter than a slice) most runs
    finished before a hog was switched in: in 8 tries the contended capture
    read +5 % to +14 % slower, and twice -0.9 % and +5.0 %, no regression."""
    eb = _eval_bottleneck()
    d = tmp_path_factory.mktemp("diff")
    model = eb.build_chain_model(d / "synthetic_chain_model.onnx", width=WIDTH)
    quiet = eb.concat_recordings([eb.record(model, 50, warmup=5) for _ in range(4)])
    base, same = eb.split_alternate(quiet)
    out = {"base": eb.write_bundle(base, d / "base"), "same": eb.write_bundle(same, d / "same")}
    out["contended"] = eb.write_bundle(eb.record(model, 100, hogs=3, warmup=5), d / "contended")
    return out


@pytest.mark.slow
def test_same_model_twice_is_not_a_regression(captures: dict[str, Path]) -> None:
    """Two quiet captures of one model: no regression, verdict files written."""
    v = diff_sessions(captures["base"], captures["same"], threshold_pct=5.0)
    assert v["regression"] is False and v["severity"] == "none"
    assert (captures["same"] / "regress" / "verdict.json").is_file()
    diff = json.loads((captures["same"] / "regress" / "diff.json").read_text())
    assert diff["verdict"] == json.loads(json.dumps(v))


@pytest.mark.slow
def test_cpu_contention_is_a_regression_blamed_on_cpu(captures: dict[str, Path]) -> None:
    """Capture under 3 hogs on 2 cores: regression, cause cpu-bound via SII, exit 1."""
    v = diff_sessions(captures["base"], captures["contended"])
    assert v["regression"] is True
    assert v["latency_delta_pct"] > 5.0 and v["confidence"] > 0.99
    assert v["suspected_cause"]["class"] == "cpu-bound"
    assert v["suspected_cause"]["signal"] == "sii"
    assert v["recommendation"]
    assert main_diff(captures["base"], captures["contended"], "5%") == 1


def test_main_diff_unusable_bundle_exit_2(tmp_path: Path) -> None:
    """A directory without iteration latencies is an input error (exit 2)."""
    assert main_diff(tmp_path, tmp_path, 5.0) == 2


def test_parse_threshold_accepts_percent_suffix() -> None:
    """'5%' and 5 parse to 5.0; negative thresholds are rejected."""
    assert parse_threshold("5%") == parse_threshold(5) == 5.0
    with pytest.raises(ValueError):
        parse_threshold("-1")


def test_shift_ci_is_unbounded_when_samples_cannot_reach_95_percent() -> None:
    """The widest Moses interval (smallest to largest pairwise difference)
    covers 1 - 2 / C(n1 + n2, n1) under no shift: 84.6% for 12 values
    against 1, 90% for 3 against 3. Those get (-inf, shift, inf), never a
    finite "95%" interval that excludes 0; 4 against 4 (97.1%) and larger
    samples get a finite interval around the shift."""
    import math

    import numpy as np

    from exporter.diff import ci_json, shift_ci

    one = np.array([5440.0])
    twelve = np.array([427841.0, 425761, 412002, 414721, 421601, 415841, 418401, 417441,
                       419681, 420801, 417922, 416482])  # the fill kernel's dispatches
    lo, hl, hi = shift_ci(twelve, one)
    assert (lo, hi) == (-math.inf, math.inf)
    assert hl == float(np.median(twelve - one[0]))
    assert ci_json(lo, hi) is None
    lo3, hl3, hi3 = shift_ci(np.array([5.0, 6.0, 7.0]), np.array([1.0, 2.0, 3.0]))
    assert (lo3, hl3, hi3) == (-math.inf, 4.0, math.inf)
    lo4, hl4, hi4 = shift_ci(np.array([5.0, 6.0, 7.0, 8.0]), np.array([1.0, 2.0, 3.0, 4.0]))
    assert math.isfinite(lo4) and math.isfinite(hi4) and lo4 <= hl4 == 4.0 <= hi4
    assert ci_json(lo4, hi4) == [round(lo4, 3), round(hi4, 3)]


def _brute_u_counts(n1: int, n2: int) -> list[int]:
    """U = #(session value > baseline value) over every placement of the n1
    session ranks among n1 + n2, counted by enumeration."""
    from itertools import combinations

    counts = [0] * (n1 * n2 + 1)
    for pos in combinations(range(n1 + n2), n1):
        chosen, below, u = set(pos), 0, 0
        for p in range(n1 + n2):
            if p in chosen:
                u += below
            else:
                below += 1
        counts[u] += 1
    return counts


def test_u_counts_equal_an_enumeration_of_every_rank_arrangement() -> None:
    """The Mann-Whitney null distribution from the Gaussian binomial equals
    counting all C(n1 + n2, n1) arrangements, for every size up to 6 x 6 and
    both orders of the sizes."""
    from exporter.diff import u_counts

    for n1 in range(1, 7):
        for n2 in range(1, 7):
            assert u_counts(n1, n2).tolist() == _brute_u_counts(n1, n2), (n1, n2)


def test_moses_interval_uses_the_exact_critical_value_for_small_samples() -> None:
    """The order statistic k is the largest with P(U <= k) <= 2.5%: for 10
    against 10 it is 23, the published two-sided 5% rank-sum critical value
    (W = 78, U = W - 55), where the normal approximation gave 24; for 4
    against 4 it is 0 (97.1%), where the approximation gave 1 (94.3%). For
    every size up to 8 x 8 whose interval exists, its exact coverage is at
    least 95% and one more order statistic would drop below it."""
    import math

    import numpy as np

    from exporter.diff import shift_ci, u_counts

    rng = np.random.default_rng(1)
    x, y = rng.normal(size=10) + 3.0, rng.normal(size=10)
    d = np.sort(np.subtract.outer(x, y).ravel())
    lo, _, hi = shift_ci(x, y)
    assert (lo, hi) == (d[23], d[100 - 1 - 23])
    x4, y4 = x[:4], y[:4]
    d4 = np.sort(np.subtract.outer(x4, y4).ravel())
    assert shift_ci(x4, y4)[0::2] == (d4[0], d4[-1])
    for n1 in range(1, 9):
        for n2 in range(1, 9):
            lo, _, hi = shift_ci(x[:n1], y[:n2])
            cum = np.cumsum(u_counts(n1, n2)) / math.comb(n1 + n2, n1)
            if math.isinf(lo):
                assert 1 - 2 * cum[0] < 0.95, (n1, n2)
                continue
            dd = np.sort(np.subtract.outer(x[:n1], y[:n2]).ravel())
            k = int(np.flatnonzero(dd == lo)[0])
            assert 1 - 2 * cum[k] >= 0.95 and 1 - 2 * cum[k + 1] < 0.95, (n1, n2)


def test_moses_interval_with_tied_values_still_covers_the_true_shift() -> None:
    """Latencies come rounded (ORT's profile is in whole microseconds), so
    samples tie. The closed interval [k-th, (N-1-k)-th difference] with the
    no-ties critical value stays conservative then: with values rounded to a
    grid as coarse as 0.5-2 standard deviations (many ties) and the true
    shift on that grid, it contains the shift in at least 95% of 400 seeded
    trials per case, small samples (the exact critical value) and large
    (the normal one) alike. (Measured once at 2,000 trials: 99.4-100%.)"""
    import numpy as np

    from exporter.diff import shift_ci

    rng = np.random.default_rng(7)
    for n1, n2, grid, shift in [(8, 8, 1.0, 0.0), (20, 20, 1.0, 1.0), (30, 10, 0.5, 0.5),
                                (12, 12, 1.0, 2.0), (70, 70, 2.0, 0.0)]:
        covered = 0
        for _ in range(400):
            b = np.round(rng.normal(10, 1, n2) / grid) * grid
            s = np.round((rng.normal(10, 1, n1) + shift) / grid) * grid
            lo, _, hi = shift_ci(s, b)
            covered += lo <= shift <= hi
        assert covered >= 0.95 * 400, (n1, n2, grid, shift, covered)
