"""Kernel-level `diff` of bundles without iterations (exporter.kernel_diff),
on replay bundles of real rocprof traces (tests/exporter/replayed.py)."""

from __future__ import annotations

import csv
import json
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from exporter import kernel_diff
from exporter.diff import diff_sessions, main_diff
from exporter.kernel_diff import TOP_N, Groups, _codes, _group, compare_kernels, read_groups
from tests.exporter.replayed import FINITE_DIFF, ROOT, SEISMIC, replay, run_cli, slowed_copy

SLOWED = "compute_fd_z_kernel"


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Replays: seismic twice, seismic with compute_fd_z_kernel 1.3x slower
    (synthetic copy), finite difference."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    d = tmp_path_factory.mktemp("kdiff")
    return {
        "seismic": replay([SEISMIC], d / "a", env),
        "seismic2": replay([SEISMIC], d / "b", env),
        "slowed": replay([slowed_copy(SEISMIC, SLOWED, 1.3, d)], d / "c", env),
        "fd": replay([FINITE_DIFF], d / "d", env),
    }


@pytest.mark.slow
def test_the_same_trace_replayed_twice_is_no_regression(bundles: dict[str, Path]) -> None:
    """Two replays of one real trace: kernel mode, 0% delta, no regression,
    every family and the 13 kernel names compared with equal counts."""
    v = diff_sessions(bundles["seismic"], bundles["seismic2"])
    assert v["mode"] == "kernels" and v["regression"] is False and v["severity"] == "none"
    assert v["kernel_time_delta_pct"] == 0.0 and v["latency_delta_pct"] is None
    d = json.loads((bundles["seismic2"] / "regress/diff.json").read_text())
    assert len(d["kernels"]) == 13 and not d["added"] and not d["removed"]
    calls = {r["key"]: r["baseline"]["count"] for r in d["kernels"]}
    assert calls["compute_fd_z_kernel"] == 100 and calls["max_absval_gpu_kernel"] == 10
    assert all(r["baseline"] == r["session"] and not r["slower"] for r in d["kernels"])
    fam_total = sum(r["baseline"]["count"] for r in d["families"])
    assert fam_total == 1024  # every dispatch of the trace, once


@pytest.mark.slow
def test_one_kernel_slowed_by_30pct_is_a_regression_naming_it(
        bundles: dict[str, Path]) -> None:
    """compute_fd_z_kernel 1.3x slower (24% of kernel time): regression whose
    signal names that kernel, +30% median on it, the others unchanged; the
    headline is its share of the re-priced mix (about 0.24 * 30% = 7.2%)."""
    v = diff_sessions(bundles["seismic"], bundles["slowed"], threshold_pct=5.0)
    assert v["regression"] is True and v["mode"] == "kernels"
    assert v["suspected_cause"]["signal"] == f"kernel_median_ns[{SLOWED}]"
    assert 6.5 < v["kernel_time_delta_pct"] < 8.0
    assert v["p_value"] < 1e-6 and v["ci95_delta_pct"][0] > 25.0
    assert main_diff(bundles["seismic"], bundles["slowed"], "5%") == 1
    rows = {r["key"]: r for r in compare_kernels(bundles["seismic"], bundles["slowed"],
                                                 5.0)["kernels"]}
    assert rows[SLOWED]["median_delta_pct"] == pytest.approx(30.0, abs=0.01)
    assert [k for k, r in rows.items() if r["slower"]] == [SLOWED]
    # the threshold above the headline: not a regression
    assert diff_sessions(bundles["seismic"], bundles["slowed"], 10.0)["regression"] is False


@pytest.mark.slow
def test_different_programs_list_added_and_removed_kernels(bundles: dict[str, Path]) -> None:
    """Seismic vs finite difference share one kernel name (the fill kernel);
    the others are listed as removed/added with their counts, bounded by TOP_N.
    The fill kernel ran 12 times against once: too few for a 95% interval,
    so its CI is null (it was a finite [7473, 7764] % before) and it is not
    `slower`."""
    k = compare_kernels(bundles["seismic"], bundles["fd"], 5.0)
    assert [r["key"] for r in k["kernels"]] == ["__amd_rocclr_fillBufferAligned.kd"]
    (fill,) = k["kernels"]
    assert (fill["baseline"]["count"], fill["session"]["count"]) == (12, 1)
    assert fill["ci95_delta_pct"] is None and fill["slower"] is False
    added = {r["key"]: r["count"] for r in k["added"]}
    assert added[next(a for a in added if "laplacian_kernel" in a)] == 1001
    assert len(k["removed"]) == 12 and len(k["added"]) <= TOP_N


@pytest.mark.slow
def test_groups_read_every_dispatch_once(bundles: dict[str, Path]) -> None:
    """read_groups: per-name counts equal the rocprof --stats file's Calls."""
    _, names = read_groups(bundles["seismic"])
    stats = (SEISMIC.parent / "seismic_stencils_results.stats.csv").read_text().splitlines()[1:]
    for line in stats:
        name, calls = line.split(",")[0].strip('"'), int(line.split(",")[1])
        got = names.get(name)
        assert got is not None and len(got) == calls, name


def test_bundle_with_neither_iterations_nor_kernels_exits_2(tmp_path: Path) -> None:
    """An empty directory is refused with exit 2 (no partial regress/ output)."""
    assert main_diff(tmp_path, tmp_path, 5.0) == 2
    assert not (tmp_path / "regress").exists()


@pytest.mark.slow
def test_capture_command_bundles_are_compared_by_kernels(tmp_path: Path) -> None:
    """Two `capture -- CMD` bundles (the command under the rocprofv3 test
    double, which writes the real recorded kernel_trace.csv) have no
    iterations: kernel mode, no regression, each name's count equal to its
    dispatches in the recording."""
    env = {**os.environ, "PATH": f"{ROOT / 'tests/collectors/rocprof/bin'}:{os.environ['PATH']}"}
    cmd = ["--", sys.executable, "-c", "pass"]
    a, b = (Path(run_cli(["capture", "--out", str(tmp_path / d), *cmd], env)
                 .stdout.strip().splitlines()[-1]) for d in "ab")
    v = diff_sessions(a, b)
    assert v["mode"] == "kernels" and v["regression"] is False
    rows = json.loads((b / "regress/diff.json").read_text())["kernels"]
    with (ROOT / "collectors/rocprof/testdata/kernel_trace.csv").open(newline="") as f:
        want = Counter(r["Kernel_Name"] for r in csv.DictReader(f)
                       if r["Kind"] == "KERNEL_DISPATCH")
    assert {r["key"]: r["session"]["count"] for r in rows} == dict(want)


def _by_key(g: Groups) -> dict[str, list[int]]:
    return {k: g.get(k).tolist() for k in g.keys}  # type: ignore[union-attr]


def test_groups_of_a_dictionary_column_equal_those_of_its_strings() -> None:
    """A dictionary column is grouped through its dictionary: chunks with
    different dictionaries, a value no row has and null rows give the same
    keys (nulls as "(none)", no unused value) and the same durations, in row
    order, as the same column read as plain strings."""
    d = pa.dictionary(pa.int32(), pa.string())
    name = pa.chunked_array([
        pa.DictionaryArray.from_arrays(pa.array([0, 1, 0, None], pa.int32()),
                                       pa.array(["a", "b", "unused"])),
        pa.DictionaryArray.from_arrays(pa.array([0, 1, 1], pa.int32()), pa.array(["b", "a"])),
    ], type=d)
    dur = np.array([10, 20, 30, 40, 50, 60, 70], dtype=np.int64)
    as_dict = _group(*_codes(name), dur)
    as_str = _group(*_codes(name.cast(pa.string())), dur)
    assert _by_key(as_dict) == _by_key(as_str) == {
        "a": [10, 30, 60, 70], "b": [20, 50], "(none)": [40]}


@pytest.mark.slow
def test_u_test_on_a_capped_sample_keeps_the_verdicts(bundles: dict[str, Path],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``U_CAP`` = 40 (compute_fd_z_kernel has 100 dispatches a side,
    the gemm family more) the U test takes the same 40 positions of two
    equal sides: the trace against itself still gives p = 0.5 on every row;
    the kernel slowed by 30% is still the one significantly slower."""
    monkeypatch.setattr(kernel_diff, "U_CAP", 40)
    same = compare_kernels(bundles["seismic"], bundles["seismic2"], 5.0)
    capped = [r for r in same["kernels"] + same["families"] if r["baseline"]["count"] > 40]
    assert capped and all(r["p_value"] == pytest.approx(0.5, abs=0.01) for r in capped)
    rows = {r["key"]: r for r in compare_kernels(bundles["seismic"], bundles["slowed"],
                                                 5.0)["kernels"]}
    assert rows[SLOWED]["baseline"]["count"] > 40 and rows[SLOWED]["p_value"] < 1e-6
    assert [k for k, r in rows.items() if r["slower"]] == [SLOWED]
