"""Parsers of every rocprof-family format, checked against hand computations."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from collectors.rocprof.formats import UnknownFormat, detect
from collectors.rocprof.rejects import Rejects
from collectors.rocprof.replay import iter_file_spans, load_paths
from collectors.rocprof.tables import read_table
from exporter.schema import KERNEL_SPAN
from stream_analytics.kernel_stats import busy_ns, kernel_stats

TD = Path(__file__).resolve().parents[3] / "collectors" / "rocprof" / "testdata"


def spans(path: Path) -> pa.Table:
    r = Rejects()
    t = pa.Table.from_batches(list(iter_file_spans(path, r)), schema=KERNEL_SPAN)
    assert r.total == 0, r.summary()
    return t


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("kernel_trace.csv", "rocprofv3_kernel_trace"),
        ("kernel_trace_2024_schema.csv", "rocprofv3_kernel_trace"),
        ("api/hip_trace.csv", "rocprofv3_api_trace"),
        ("api/marker_api_trace.csv", "rocprofv3_api_trace"),
        ("memory_copy_trace.csv", "rocprofv3_memory_copy"),
        ("counter_collection.csv", "rocprofv3_counter_collection"),
        ("hip_api_stats.csv", "rocprof_stats"),
        ("finite_difference_results.csv", "rocprof_v1_results"),
        ("finite_difference_results.stats.csv", "rocprof_stats"),
        ("rocprof_compute_MI200/timestamps.csv", "rocprof_compute_timestamps"),
        ("rocprof_compute_MI300X_A1/timestamps.csv", "rocprof_compute_timestamps"),
        ("mi250_minitoy_train_ROCm6_2_kineto.json.gz", "kineto_json"),
        ("rocprofv3_results_synthetic.json", "rocprofv3_json"),
    ],
)
def test_detect_recognises_each_fixture_format(name: str, fmt: str) -> None:
    assert detect(TD / name) == fmt


def test_detect_unknown_file_error_lists_known_formats(tmp_path: Path) -> None:
    p = tmp_path / "weird_synthetic.csv"
    p.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(UnknownFormat) as e:
        detect(p)
    assert str(p) in str(e.value)
    assert "rocprofv3_kernel_trace" in str(e.value) and "kineto_json" in str(e.value)


def test_rocprofv3_current_schema_per_kernel_stats_match_hand_computation() -> None:
    t = spans(TD / "kernel_trace.csv")
    assert t.num_rows == 9
    assert set(t["agent_id"].to_pylist()) == {4}  # "Agent 4"
    assert t["stream_id"].to_pylist() == [1, 1, 1, 1, 2, 2, 4, 3, 3]
    st = {r["kernel_name"].split("(")[0]: r for r in kernel_stats(t).to_pylist()}
    # durations (End - Start, last 6 digits): add 042437-029637=12800,
    # 094357-082957=11400, 174037-164197=9840 -> 34040, avg 34040//3=11346
    add = st["void addition_kernel<float>"]
    got = (add["calls"], add["total_ns"], add["avg_ns"], add["min_ns"], add["max_ns"])
    assert got == (3, 34040, 11346, 9840, 12800)
    # divide: 075237-064037=11200, 160837-148397=12440 -> 23640
    assert (st["divide_kernel"]["total_ns"], st["divide_kernel"]["avg_ns"]) == (23640, 11820)
    # multiply: 064037-052877=11160, 148397-138477=9920 -> 21080
    assert (st["multiply_kernel"]["total_ns"], st["multiply_kernel"]["min_ns"]) == (21080, 9920)
    # subtract: 050677-042437=8240, 103517-094357=9160 -> 17400
    assert (st["subtract_kernel"]["total_ns"], st["subtract_kernel"]["max_ns"]) == (17400, 9160)
    # the 9 kernels never overlap (each starts at or after the previous end): busy = sum
    assert busy_ns(t) == 34040 + 23640 + 21080 + 17400
    assert set(t["kernel_family"].to_pylist()) == {"elementwise"}
    assert set(t["source"].to_pylist()) == {"rocprofv3"}


def test_rocprofv3_2024_schema_busy_time_is_union_of_overlapping_queues() -> None:
    t = spans(TD / "kernel_trace_2024_schema.csv")
    assert t.num_rows == 7
    assert set(t["agent_id"].to_pylist()) == {1}  # integer Agent_Id
    assert t["stream_id"].null_count == 7  # no Stream_Id column in 2024 schema
    # offsets from 8819330200000000: [67564,116308] alone = 48744; the other six
    # overlap into one chain [118678, 369359] = 250681 -> 48744 + 250681
    assert busy_ns(t) == 299425
    # sum of durations 48744+100895+103265+130526+133341+139119+139563
    assert sum(t["duration_ns"].to_pylist()) == 795453


@pytest.mark.parametrize("run", ["finite_difference", "seismic_stencils"])
def test_rocprof_v1_kernel_stats_equal_results_stats_csv(run: str) -> None:
    t = spans(TD / f"{run}_results.csv")
    got = kernel_stats(t)
    want = read_table(TD / f"{run}_results.stats.csv", Rejects())
    g = {r["kernel_name"]: r for r in got.to_pylist()}
    assert len(g) == want.num_rows
    for row in want.to_pylist():
        mine = g[row["name"]]
        assert mine["calls"] == row["calls"]
        assert mine["total_ns"] == row["total_ns"]
        assert mine["avg_ns"] == int(row["avg_ns"])  # AverageNs = floor(total / calls)


def test_rocprof_v1_launch_delay_is_begin_minus_dispatch() -> None:
    t = spans(TD / "finite_difference_results.csv")
    first = t.slice(0, 1).to_pylist()[0]
    # row 0: BeginNs 1915914098849134 - DispatchNs 1915914098823546 = 25588
    assert first["launch_delay_ns"] == 25588
    assert first["launch_api_ns"] is None
    assert first["pid"] == 2046349 and first["source"] == "rocprof"


def test_rocprof_compute_timestamps_both_layouts() -> None:
    mi200 = spans(TD / "rocprof_compute_MI200" / "timestamps.csv")
    # row 0: 1411551767656192 - 1411551767635712 = 20480
    assert mi200["duration_ns"].to_pylist()[0] == 20480
    assert mi200["kernel_family"].to_pylist() == ["copy"] * 3  # vecCopy
    mi300 = spans(TD / "rocprof_compute_MI300X_A1" / "timestamps.csv")
    # exponent notation 8.1097E+14 keeps only 5 significant digits
    assert mi300["start_ns"].to_pylist() == [810970000000000] * 3
    assert set(mi300["source"].to_pylist()) == {"rocprof-compute"}


def test_kineto_launch_join_matches_hand_computation() -> None:
    t = spans(TD / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert t.num_rows == 14
    row = next(r for r in t.to_pylist() if r["correlation_id"] == 118)
    # kernel ts 4203669603771.648 us; hipLaunchKernel ts 4203669603752.847 dur 11.502
    # -> api end 4203669603764.349; delay = 771.648 - 764.349 = 7.299 us
    assert row["launch_api_ns"] == 11502
    assert row["launch_delay_ns"] == 7299
    # baseTimeNanoseconds 1735632360000000000 + 4203669603771648 ns
    assert row["start_ns"] == 1735632360000000000 + 4203669603771648
    assert row["duration_ns"] == 6880 and row["pid"] == 597913
    gemm = next(r for r in t.to_pylist() if r["correlation_id"] == 121)
    assert gemm["kernel_family"] == "gemm"  # Cijk_Alik_Bljk_... (Tensile)


def test_rocprofv3_json_synthetic_sample_join_and_names() -> None:
    t = spans(TD / "rocprofv3_results_synthetic.json").to_pylist()
    assert [r["dispatch_id"] for r in t] == [1, 2]
    # kernel 1: start 4100, hipLaunchKernel corr 2 [3000, 3500] -> api 500, delay 600
    assert (t[0]["launch_api_ns"], t[0]["launch_delay_ns"]) == (500, 600)
    # kernel 2: start 16900, corr 3 [3600, 3900] -> api 300, delay 13000
    assert (t[1]["launch_api_ns"], t[1]["launch_delay_ns"]) == (300, 13000)
    assert t[0]["kernel_name"].startswith("void addition_kernel<float>")  # formatted name
    assert t[0]["agent_id"] == 1 and t[0]["pid"] == 4242  # agent handle 222 = agents[1]


def test_non_kernel_tables_parse_every_row() -> None:
    r = Rejects()
    assert read_table(TD / "memory_copy_trace.csv", r)["dst_agent_id"].to_pylist() == [4, 4, 0, 0]
    cc = read_table(TD / "counter_collection.csv", r)
    assert cc["counter_value"].to_pylist() == [16384.0] * 4
    api = read_table(TD / "api" / "hip_runtime_trace.csv", r)
    assert api.num_rows == 8 and "hipLaunchKernel" in api["function"].to_pylist()
    assert r.total == 0


def test_replay_directory_keys_are_deterministic_and_skip_non_kernel_files() -> None:
    a = [(e.key, e.signal, e.batch.num_rows) for e in load_paths([TD])]
    b = [(e.key, e.signal, e.batch.num_rows) for e in load_paths([TD])]
    assert a == b
    assert all(e_key.startswith("rocprof:") for e_key, _, _ in a)
    assert len({k for k, _, _ in a}) == len(a)  # one JetStream message id each
    # 9 + 7 + 4 (v3) + 1004 + 1024 (v1) + 3 + 3 (compute) + 14 (kineto) + 2 (json)
    assert sum(n for _, s, n in a if s == "kernel_span") == 2070
    # the Kineto trace's ProfilerStep#1 and #2
    assert sum(n for _, s, n in a if s == "iteration_span") == 2
