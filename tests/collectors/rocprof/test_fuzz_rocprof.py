"""Fuzz: the rocprof readers (rocprofv3 CSV/JSON/rocpd, rocprof v1, rocprof-compute)
never raise on mutated real outputs; bad rows and files are counted by reason token.

Cases: the recorded fixtures of collectors/rocprof/testdata, byte/line mutated and
edited structure-aware (CSV cells, JSON nodes, rocpd SQL rows); see tests/fuzzing."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzzing.strategies import CI, check_parser
from tests.fuzzing.targets import (
    ROCPD,
    ROCPROF_COMPUTE,
    ROCPROF_V1,
    ROCPROFV3_CSV,
    ROCPROFV3_JSON,
)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_rocprof")


@pytest.mark.slow
@CI
@given(data=st.data())
def test_fuzz_rocprofv3_csv_kernel_api_and_marker_traces(work: Path, data: st.DataObject) -> None:
    """load_paths on a run directory (kernel, HIP API, marker CSVs) with one file mutated."""
    check_parser(ROCPROFV3_CSV, work / "csv", data)


@pytest.mark.slow
@CI
@given(data=st.data())
def test_fuzz_rocprofv3_json(work: Path, data: st.DataObject) -> None:
    """load_paths on a mutated rocprofv3 --output-format json file."""
    check_parser(ROCPROFV3_JSON, work / "json", data)


@pytest.mark.slow
@CI
@given(data=st.data())
def test_fuzz_rocpd_database(work: Path, data: st.DataObject) -> None:
    """load_paths on a mutated rocpd SQLite database (bytes or rows)."""
    check_parser(ROCPD, work / "rocpd", data)


@pytest.mark.slow
@CI
@given(data=st.data())
def test_fuzz_rocprof_v1_results_and_stats(work: Path, data: st.DataObject) -> None:
    """load_paths on mutated rocprof v1 results.csv / results.stats.csv."""
    check_parser(ROCPROF_V1, work / "v1", data)


@CI
@given(data=st.data())
def test_fuzz_rocprof_compute_timestamps(work: Path, data: st.DataObject) -> None:
    """load_paths on a mutated rocprof-compute timestamps.csv."""
    check_parser(ROCPROF_COMPUTE, work / "compute", data)
