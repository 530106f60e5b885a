"""``Analytics.settle`` reduces held kernels in pieces (``in_pieces``,
``SETTLE_ROWS``): the same records and metrics as one reduction of the whole
held table, for time-ordered real traces (zero-copy slices) and for any
arrival order (taken in ``_reduce``'s order first)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.rocprof.rejects import Rejects
from collectors.rocprof.replay import load_paths
from stream_analytics import engine as eng_mod
from stream_analytics.engine import Analytics, in_pieces

TD = Path(__file__).resolve().parents[2] / "collectors" / "rocprof" / "testdata"
# real rocprof v1 (launch delay from DispatchNs) and rocprofv3 kernel traces
REAL = ("seismic_stencils_results.csv", "finite_difference_results.csv", "kernel_trace.csv")


def _kernels(name: str) -> pa.Table:
    """The file's kernel spans as ``replay`` reads them from a ``<pid>/``
    directory (rocprofv3's layout), so every kernel has a pid and is held."""
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "4242").mkdir()
        shutil.copy(TD / name, Path(d) / "4242" / name)
        t = pa.Table.from_batches([e.batch for e in load_paths([Path(d)], Rejects())
                                   if e.signal == "kernel_span"])
    assert t["pid"].null_count == 0
    return t


def _settled(t: pa.Table, pieces: int, monkeypatch: pytest.MonkeyPatch,
             batch: int = 100) -> tuple[list[dict[str, Any]], int]:
    """Every key's evaluate() after ingesting ``t`` in batches and settling with
    ``SETTLE_ROWS = pieces``; and how many reductions the settle made."""
    monkeypatch.setattr(eng_mod, "SETTLE_ROWS", pieces)
    e = Analytics(window_s=None)
    for off in range(0, t.num_rows, batch):
        e.ingest("kernel_span", "h", t.slice(off, batch))
    calls = []
    real = e._reduce
    monkeypatch.setattr(e, "_reduce", lambda host, part: (calls.append(part.num_rows),
                                                          real(host, part)))
    assert e.settle() == t.num_rows  # nothing was resolved before: no spans, under max_held
    return [e.evaluate(k) for k in sorted(e.keys)], len(calls)


@pytest.mark.parametrize("name", REAL)
def test_settling_in_pieces_equals_settling_at_once_on_real_traces(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real traces held whole, settled 37 kernels at a time: the metrics of
    every key (busy time, active ratio, LTS, kernel counts and time per
    family) equal those of one reduction."""
    t = _kernels(name)
    whole, one = _settled(t, 1 << 30, monkeypatch)
    cut, many = _settled(t, 37, monkeypatch)
    assert one == 1 and many == -(-t.num_rows // 37)
    assert cut == whole
    assert whole[0]["kernel_count"] == t.num_rows and whole[0]["busy_ns"] > 0


@settings(max_examples=25, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(min_value=1, max_value=300))
def test_settling_in_pieces_equals_at_once_in_any_arrival_order(
        rnd: Any, rows: int) -> None:
    """The seismic trace's 1,024 real kernels in a random order (overlapping
    queues, groups cut anywhere): pieces of any size give the whole table's
    metrics."""
    t = _kernels("seismic_stencils_results.csv")
    order = list(range(t.num_rows))
    rnd.shuffle(order)
    t = t.take(pa.array(order))
    with pytest.MonkeyPatch.context() as mp:
        whole, _ = _settled(t, 1 << 30, mp)
    with pytest.MonkeyPatch.context() as mp:
        cut, _ = _settled(t, rows, mp)
    assert cut == whole


def test_pieces_of_a_time_ordered_table_are_zero_copy_slices() -> None:
    """Sorted by start: slices of the same buffers, in order, none longer than
    asked; out of order: every row once, each group's starts nondecreasing."""
    t = pa.table({"pid": np.full(10, 3), "start_ns": np.arange(10) * 10,
                  "end_ns": np.arange(10) * 10 + 5})
    got = list(in_pieces(t, 4, 10**9))
    assert [p.num_rows for p in got] == [4, 4, 2]
    mid, src = got[1]["start_ns"].chunk(0), t["start_ns"].chunk(0)
    assert mid.offset == 4 and mid.buffers()[1].address == src.buffers()[1].address
    rev = t.take(pa.array(np.arange(10)[::-1]))
    back = pa.concat_tables(in_pieces(rev, 4, 10**9))
    assert back["start_ns"].to_pylist() == sorted(t["start_ns"].to_pylist())
