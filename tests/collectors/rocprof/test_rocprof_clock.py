"""Tracer clock -> wall clock: identification from the data and the shift itself."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import pyarrow as pa

from collectors.base import CollectorContext
from collectors.rocprof import RocprofCollector
from collectors.rocprof.clock import ClockMapper, detect, shift

TD = Path(__file__).resolve().parents[3] / "collectors" / "rocprof" / "testdata"


def test_a_boot_clock_timestamp_taken_now_maps_to_now_on_the_wall_clock() -> None:
    """CLOCK_BOOTTIME read now is identified as boottime and lands within 1 s of
    time.time_ns(); a wall-clock timestamp is left alone."""
    boot_now = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    real_now = time.time_ns()
    got = detect(boot_now, (real_now - 10**9, real_now + 10**9), slack_ns=0)
    assert got is not None and got[0] == "boottime"
    assert abs(boot_now + got[1] - real_now) < 10**9
    assert detect(real_now, (real_now - 10**9, real_now + 10**9), slack_ns=0) == ("realtime", 0)


def test_shift_moves_points_in_time_not_durations_and_keeps_nulls() -> None:
    """start/end move by the offset; launch_api_ns and launch_delay_ns (durations)
    and nulls do not change."""
    b = pa.record_batch({"start_ns": [10, 20], "end_ns": [15, 25],
                         "launch_api_ns": [5, None], "launch_delay_ns": [5, None]})  # fmt: skip
    s = shift(b, 1000)
    assert s.column("start_ns").to_pylist() == [1010, 1020]
    assert s.column("end_ns").to_pylist() == [1015, 1025]
    assert s.column("launch_api_ns").to_pylist() == [5, None]
    assert s.column("launch_delay_ns").to_pylist() == [5, None]


def test_a_file_from_another_era_is_kept_as_recorded() -> None:
    """Timestamps that fit no local clock (a file recorded on another machine)
    are marked unknown and not moved."""
    m = ClockMapper()
    b = pa.record_batch({"start_ns": [1_550_151_853_029_637], "end_ns": [1_550_151_853_042_437]})
    out = m(b, (time.time_ns() - 10**9, time.time_ns()))
    assert m.clock == "unknown" and out.column("start_ns").to_pylist() == [1_550_151_853_029_637]


def test_live_follow_puts_boot_clock_kernels_on_the_wall_clock(tmp_path: Path) -> None:
    """run --rocprof-dir: a kernel_trace.csv whose rows (the real fixture's) are
    written on this host's boot clock comes out of the collector with wall-clock
    start times, and the clock is logged once."""
    with (TD / "kernel_trace.csv").open(newline="") as f:
        table = list(csv.reader(f))
    i0, i1 = table[0].index("Start_Timestamp"), table[0].index("End_Timestamp")
    off = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - min(int(r[i0]) for r in table[1:])
    for r in table[1:]:
        r[i0], r[i1] = str(int(r[i0]) + off), str(int(r[i1]) + off)
    d = tmp_path / "host" / "4242"
    d.mkdir(parents=True)
    with (d / "run_kernel_trace.csv").open("w", newline="") as f:
        csv.writer(f).writerows(table)
    logs: list[str] = []
    c = RocprofCollector(CollectorContext(options={"dir": str(tmp_path)}, log=logs.append))
    (emit,) = c.collect()
    start = min(emit.batch.column("start_ns").to_pylist())
    assert abs(start - time.time_ns()) < 60 * 10**9
    assert c.clock.clock == "boottime" and logs and "boottime" in logs[0]
