"""Hardware counters per dispatch from rocprofv3 CSV, rocpd and rocprof-compute
(collectors/rocprof/counters.py), on the real recorded files in testdata/."""

from __future__ import annotations

from pathlib import Path

from collectors.rocprof.counters import counter, read_counters
from collectors.rocprof.formats import detect
from tests.collectors.rocprof.rocpd_synthetic import build_synthetic_rocpd

DATA = Path(__file__).parent / "testdata"


def test_rocprof_compute_pmc_perf_is_a_counter_file_not_a_second_kernel_trace() -> None:
    """pmc_perf.csv (Dispatch_ID, Kernel_Name, timestamps and counters) is told
    apart from timestamps.csv, so a replay does not count its kernels twice."""
    assert detect(DATA / "rocprof_compute_MI200/pmc_perf.csv") == "rocprof_compute_pmc_perf"
    assert detect(DATA / "rocprof_compute_MI200/timestamps.csv") == "rocprof_compute_timestamps"


def test_mi200_pmc_perf_gives_one_row_per_dispatch_with_its_counters() -> None:
    """vcopy on MI200: 3 dispatches, TCC_EA_RDREQ_sum 131086/131086/131087 and
    WRREQ 131072/91072/91113 as recorded; durations from its timestamps."""
    t = read_counters([DATA / "rocprof_compute_MI200"])
    assert t is not None and t.num_rows == 3
    assert t["dispatch_id"].to_pylist() == [0, 1, 2]
    assert set(t["kernel_name"].to_pylist()) == {
        "vecCopy(double*, double*, double*, int, int) [clone .kd]"}
    assert list(counter(t, "TCC_EA_RDREQ_sum")) == [131086, 131086, 131087]  # type: ignore[arg-type]
    assert list(counter(t, "TCC_EA_WRREQ_sum")) == [131072, 91072, 91113]  # type: ignore[arg-type]
    dur = t["end_ns"][0].as_py() - t["start_ns"][0].as_py()
    assert dur == 1411551767656192 - 1411551767635712


def test_mi300_per_instance_columns_are_summed_when_the_file_has_no_sum() -> None:
    """MI300X pmc_perf has TCC_BUBBLE[0..127] but no TCC_BUBBLE_sum: the sum
    over the 128 instances is 65536 for each of the 3 dispatches."""
    t = read_counters([DATA / "rocprof_compute_MI300X_A1"])
    assert t is not None and t.num_rows == 3
    assert list(counter(t, "TCC_BUBBLE_sum")) == [65536, 65536, 65536]  # type: ignore[arg-type]
    assert list(counter(t, "TCC_EA0_RDREQ_sum")) == [65775, 65763, 65758]  # type: ignore[arg-type]


def test_rocprofv3_counter_collection_is_pivoted_per_dispatch() -> None:
    """The real rocprofv3 counter_collection.csv: 4 dispatches, SQ_WAVES
    16384 each; counter() also answers SQ_WAVES_sum; absent counters give None."""
    t = read_counters([DATA / "rocprofv3_counters"])
    assert t is not None and t.num_rows == 4
    assert t["dispatch_id"].to_pylist() == [1, 2, 3, 4]
    assert list(counter(t, "SQ_WAVES_sum")) == [16384.0] * 4  # type: ignore[arg-type]
    assert counter(t, "TCC_EA_RDREQ_sum") is None


def test_rocpd_pmc_tables_are_read_through_the_counters_collection_view(tmp_path: Path) -> None:
    """A synthetic rocpd database (real schema, real counter rows) gives the same
    4 dispatches and SQ_WAVES values as the CSV it was built from."""
    db = build_synthetic_rocpd(tmp_path / "run_results.db", counters=True)
    t = read_counters([db])
    assert t is not None
    waves = dict(zip(t["kernel_name"].to_pylist(), counter(t, "SQ_WAVES"), strict=True))  # type: ignore[arg-type]
    assert len(waves) == 4 and set(waves.values()) == {16384.0}


def test_a_directory_without_counter_files_gives_none() -> None:
    """No counter file among the paths: None (no roofline is written)."""
    assert read_counters([DATA / "rocprofv3_counters/kernel_trace.csv"]) is None
