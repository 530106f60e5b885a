"""``collectors.rocprof.launch``: a launch call matched by correlation id is
the kernel's launch only when their times agree (``MAX_LAUNCH_DELAY_NS``);
a call of another run or clock leaves the kernel's launch fields null and is
counted as the note ``launch_mismatch``, with the file and correlation id."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from collectors.rocprof.launch import MAX_LAUNCH_DELAY_NS, LaunchIndex
from collectors.rocprof.rejects import Rejects
from collectors.rocprof.replay import load_paths

V3 = Path(__file__).resolve().parents[2] / "exporter/sinks/testdata"
DAY_NS = 86_400 * 10**9


def _index() -> LaunchIndex:
    # calls 1-4 end at 1,000 ns after their 100 ns start
    return LaunchIndex(pa.table({"correlation_id": [1, 2, 3, 4], "api_start_ns": [900] * 4,
                                 "api_end_ns": [1_000] * 4}))


def test_plausible_delays_join_and_implausible_ones_are_counted_not_joined() -> None:
    """Delays of -5 us (clock calibration), 9 min and exactly the bound join;
    a kernel starting 4 days after its call (another run) does not, and is
    one launch_mismatch note naming the file and its correlation id."""
    rejects = Rejects()
    starts = [1_000 - 5_000, 1_000 + 540 * 10**9, 1_000 + MAX_LAUNCH_DELAY_NS,
              1_000 + 4 * DAY_NS]
    li = _index()
    out = li.join(pa.table({"start_ns": starts, "correlation_id": [1, 2, 3, 4]}),
                  rejects, "k.csv")
    assert out["launch_delay_ns"].to_pylist() == [-5_000, 540 * 10**9, MAX_LAUNCH_DELAY_NS,
                                                   None]
    assert out["launch_api_ns"].to_pylist() == [100, 100, 100, None]
    assert li.mismatched == 1
    assert rejects.notes == {"launch_mismatch": 1} and rejects.counts == {}
    (example,) = rejects.examples["launch_mismatch"]
    assert example.startswith("k.csv: launch_mismatch: correlation id 4: ")


def test_a_kernel_long_before_its_matched_call_is_not_joined() -> None:
    """The bound holds both ways: a kernel 1 day before the call's end is not
    that call's kernel (counted on the index even without ``rejects``)."""
    li = _index()
    out = li.join(pa.table({"start_ns": [1_000 - DAY_NS], "correlation_id": [2]}))
    assert out["launch_delay_ns"].to_pylist() == [None]
    assert li.mismatched == 1


def test_rocprofiler_sdk_doc_samples_of_two_runs_do_not_join() -> None:
    """rocprofiler-sdk's documentation samples ``kernel_trace.csv`` and
    ``hip_runtime_trace.csv`` (real, from different runs: see the testdata's
    PROVENANCE.md) share correlation id 5, 4.1 days apart: replaying the
    kernel trace beside the API trace joins none of its 9 kernels and notes
    the one mismatch (before, that kernel got a launch delay of 358,235 s,
    and the replay's launch tax was 3.7e9)."""
    rejects = Rejects()
    kernels = pa.Table.from_batches([e.batch for e in load_paths(
        [V3 / "rocprofv3_kernel_trace.csv"], rejects) if e.signal == "kernel_span"])
    assert kernels.num_rows == 9
    assert kernels["launch_delay_ns"].null_count == 9
    assert rejects.notes.get("launch_mismatch") == 1
    (example,) = rejects.examples["launch_mismatch"]
    assert "rocprofv3_kernel_trace.csv" in example and "correlation id 5:" in example
