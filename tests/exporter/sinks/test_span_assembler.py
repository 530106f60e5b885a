"""SpanAssembler: the one buffering and readiness rule of every OTLP trace output."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from exporter.sinks.span_assembler import SpanAssembler
from tests.support import load_path

data = load_path("aaco_sink_testdata_asm", Path(__file__).parent / "testdata" / "sinkdata.py")


def _rows(out: list[tuple[str, pa.Table, pa.Table]]) -> tuple[int, int]:
    return sum(k.num_rows for _, k, _ in out), sum(i.num_rows for _, _, i in out)


def test_an_iteration_is_released_when_all_its_kernels_arrived_in_any_order() -> None:
    """Iterations first, kernels in pieces: nothing leaves until an iteration's
    kernel_count kernels are there; then it leaves with exactly its kernels."""
    ks, its = data.magika_tables()
    a = SpanAssembler(hold_s=10.0)
    a.add("h", "iteration_span", its, now=0.0)
    per_it = ks.num_rows // its.num_rows
    assert a.take(now=1.0) == []
    a.add("h", "kernel_span", ks.slice(0, per_it + 5), now=1.0)
    (host, k, i), = a.take(now=2.0)
    assert host == "h" and i["iteration"].to_pylist() == [0] and k.num_rows == per_it
    assert set(k["iteration"].to_pylist()) == {0}
    a.add("h", "kernel_span", ks.slice(per_it + 5), now=2.0)
    assert _rows(a.take(now=3.0)) == (ks.num_rows - per_it, its.num_rows - 1)
    assert a.waiting() == (0, 0)


def test_incomplete_iterations_and_orphan_kernels_leave_after_hold_s() -> None:
    """An iteration missing kernels, and kernels whose iteration never came,
    wait hold_s on the caller's clock, then go as they are."""
    ks, its = data.magika_tables()
    a = SpanAssembler(hold_s=5.0)
    a.add("h", "iteration_span", its.slice(0, 1), now=0.0)
    a.add("h", "kernel_span", ks.filter(pc.equal(ks["iteration"], 1)), now=0.0)
    assert a.take(now=4.9) == []
    assert _rows(a.take(now=5.0)) == (ks.num_rows // its.num_rows, 1)
    assert a.waiting() == (0, 0)


def test_raw_gpu_kernels_leave_at_once_and_final_releases_everything() -> None:
    """Kernels without an iteration number are never held; final empties the buffer."""
    ks, _ = data.magika_tables()
    raw = ks.slice(0, 10).set_column(ks.schema.get_field_index("iteration"), "iteration",
                                     pa.nulls(10, pa.int64()))
    a = SpanAssembler(hold_s=60.0)
    a.add("g", "kernel_span", raw, now=0.0)
    a.add("h", "kernel_span", ks.slice(10), now=0.0)
    assert _rows(a.take(now=0.0)) == (10, 0)
    assert _rows(a.take(now=0.0, final=True)) == (ks.num_rows - 10, 0)


def test_the_backlog_bound_releases_the_oldest_rows_early_and_counts_them() -> None:
    """Past max_rows waiting kernels the oldest go early (counted), none is lost."""
    ks, _ = data.magika_tables()
    a = SpanAssembler(hold_s=60.0, max_rows=100)
    a.add("h", "kernel_span", ks.slice(0, 150), now=0.0)
    a.add("h", "kernel_span", ks.slice(150, 100), now=1.0)
    out = a.take(now=2.0)
    assert _rows(out) == (150, 0) and a.released_early == 150
    assert out[0][1]["start_ns"].to_pylist() == ks.slice(0, 150)["start_ns"].to_pylist()
    assert a.waiting() == (100, 0)
